//! Which outcomes of an attempt are worth another attempt: a pure table
//! from a status (with whether it carries `Retry-After`) or a transport
//! error to a [`Verdict`].

use http::StatusCode;
use std::error::Error as StdError;
use std::io;

/// What to do after one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The answer is final: hand it to the caller (2xx, 3xx, and the 4xx
    /// that a retry cannot change).
    Done,
    /// Another attempt may succeed, for this reason.
    Retry(RetryReason),
}

/// Why an attempt is retried: the `reason` label of `retries_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RetryReason {
    /// The connection could not be opened (refused, unreachable).
    Connect,
    /// The connection broke before a whole answer came back (reset,
    /// closed, end of stream).
    Reset,
    /// The attempt timed out, in the client or the transport.
    Timeout,
    /// Another transport error.
    Transport,
    /// 408 Request Timeout.
    RequestTimeout,
    /// 409 with `Retry-After`: an idempotency server is still running the
    /// first request with this key.
    InProgress,
    /// 425 Too Early.
    TooEarly,
    /// 429 Too Many Requests.
    Throttled,
    /// 503 Service Unavailable.
    Unavailable,
    /// 502 Bad Gateway or 504 Gateway Timeout.
    Gateway,
    /// 500 and any other 5xx.
    ServerError,
}

impl RetryReason {
    /// The label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            RetryReason::Connect => "connect",
            RetryReason::Reset => "reset",
            RetryReason::Timeout => "timeout",
            RetryReason::Transport => "transport",
            RetryReason::RequestTimeout => "request_timeout",
            RetryReason::InProgress => "in_progress",
            RetryReason::TooEarly => "too_early",
            RetryReason::Throttled => "throttled",
            RetryReason::Unavailable => "unavailable",
            RetryReason::Gateway => "gateway",
            RetryReason::ServerError => "server_error",
        }
    }

    /// Whether this outcome counts as a failure of the destination for its
    /// circuit breaker: transport errors, 408 and 5xx. Throttling (429),
    /// 425 and an in-progress 409 are answers of a healthy server.
    #[must_use]
    pub fn is_destination_failure(self) -> bool {
        !matches!(self, RetryReason::InProgress | RetryReason::TooEarly | RetryReason::Throttled)
    }

    /// Whether this outcome is a sign of overload, which lowers the
    /// destination's concurrency limit: a timeout, 408, 429 and 5xx. A
    /// refused, reset or otherwise failed connection says nothing of the
    /// load; 425 and an in-progress 409 are answers of a server coping.
    #[must_use]
    pub fn is_overload(self) -> bool {
        matches!(
            self,
            RetryReason::Timeout
                | RetryReason::RequestTimeout
                | RetryReason::Throttled
                | RetryReason::Unavailable
                | RetryReason::Gateway
                | RetryReason::ServerError
        )
    }
}

/// The verdict on an answer with `status`. `retry_after` says whether it
/// carries a `Retry-After` field, which tells an idempotency server's
/// "in progress" 409 from a real conflict.
///
/// | status | verdict |
/// |---|---|
/// | 1xx, 2xx, 3xx | done |
/// | 408, 425, 429 | retry |
/// | 409 with `Retry-After` | retry (wait for the first request) |
/// | 409 without, 400, 401, 403, 404, 422 and every other 4xx | done |
/// | 5xx (500, 502, 503, 504, ...) | retry |
///
/// # Examples
///
/// ```
/// use http::StatusCode;
/// use idemkv::client::{classify_status, RetryReason, Verdict};
///
/// assert_eq!(classify_status(StatusCode::SERVICE_UNAVAILABLE, false), Verdict::Retry(RetryReason::Unavailable));
/// assert_eq!(classify_status(StatusCode::UNPROCESSABLE_ENTITY, false), Verdict::Done);
/// assert_eq!(classify_status(StatusCode::CONFLICT, true), Verdict::Retry(RetryReason::InProgress));
/// ```
#[must_use]
pub fn classify_status(status: StatusCode, retry_after: bool) -> Verdict {
    let reason = match status.as_u16() {
        408 => RetryReason::RequestTimeout,
        409 if retry_after => RetryReason::InProgress,
        425 => RetryReason::TooEarly,
        429 => RetryReason::Throttled,
        503 => RetryReason::Unavailable,
        502 | 504 => RetryReason::Gateway,
        500..=599 => RetryReason::ServerError,
        _ => return Verdict::Done,
    };
    Verdict::Retry(reason)
}

/// The reason label of a transport error, from the first cause in its
/// chain that says more than "it failed": an I/O error's kind or a
/// timer's `Elapsed`.
///
/// Every transport error is retried: the attempt brought no answer back,
/// and the request carries the key that makes sending it again safe. A
/// caller that knows of errors no attempt can fix (a malformed URI, a
/// TLS configuration) says so with
/// [`RetryPolicy::retry_error_if`](super::RetryPolicy::retry_error_if).
///
/// # Examples
///
/// ```
/// use idemkv::client::{transport_reason, RetryReason};
///
/// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
/// assert_eq!(transport_reason(&refused), RetryReason::Connect);
/// ```
#[must_use]
pub fn transport_reason(error: &(dyn StdError + 'static)) -> RetryReason {
    let mut cause: Option<&(dyn StdError + 'static)> = Some(error);
    // Chains are short; the limit guards against a cyclic `source`.
    for _ in 0..32 {
        let Some(current) = cause else { break };
        if current.is::<tokio::time::error::Elapsed>() {
            return RetryReason::Timeout;
        }
        if let Some(io_error) = current.downcast_ref::<io::Error>() {
            if let Some(reason) = io_reason(io_error.kind()) {
                return reason;
            }
        }
        cause = current.source();
    }
    RetryReason::Transport
}

fn io_reason(kind: io::ErrorKind) -> Option<RetryReason> {
    match kind {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Some(RetryReason::Timeout),
        io::ErrorKind::ConnectionRefused
        | io::ErrorKind::AddrNotAvailable
        | io::ErrorKind::HostUnreachable
        | io::ErrorKind::NetworkUnreachable
        | io::ErrorKind::NetworkDown => Some(RetryReason::Connect),
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::NotConnected
        | io::ErrorKind::UnexpectedEof => Some(RetryReason::Reset),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(code: u16, retry_after: bool) -> Verdict {
        classify_status(StatusCode::from_u16(code).expect("valid status"), retry_after)
    }

    #[test]
    fn retryable_statuses() {
        let table = [
            (408, RetryReason::RequestTimeout),
            (425, RetryReason::TooEarly),
            (429, RetryReason::Throttled),
            (500, RetryReason::ServerError),
            (501, RetryReason::ServerError),
            (502, RetryReason::Gateway),
            (503, RetryReason::Unavailable),
            (504, RetryReason::Gateway),
            (507, RetryReason::ServerError),
            (599, RetryReason::ServerError),
        ];
        for (code, reason) in table {
            for retry_after in [false, true] {
                assert_eq!(verdict(code, retry_after), Verdict::Retry(reason), "{code}");
            }
        }
    }

    #[test]
    fn final_statuses() {
        for code in [100, 200, 201, 204, 301, 304, 400, 401, 403, 404, 405, 410, 413, 422, 451, 499] {
            for retry_after in [false, true] {
                assert_eq!(verdict(code, retry_after), Verdict::Done, "{code}");
            }
        }
    }

    #[test]
    fn conflict_is_retried_only_when_in_progress() {
        assert_eq!(verdict(409, true), Verdict::Retry(RetryReason::InProgress));
        assert_eq!(verdict(409, false), Verdict::Done);
    }

    #[test]
    fn transport_errors_by_cause() {
        let table = [
            (io::ErrorKind::ConnectionRefused, RetryReason::Connect),
            (io::ErrorKind::ConnectionReset, RetryReason::Reset),
            (io::ErrorKind::ConnectionAborted, RetryReason::Reset),
            (io::ErrorKind::BrokenPipe, RetryReason::Reset),
            (io::ErrorKind::UnexpectedEof, RetryReason::Reset),
            (io::ErrorKind::TimedOut, RetryReason::Timeout),
            (io::ErrorKind::Other, RetryReason::Transport),
        ];
        for (kind, reason) in table {
            assert_eq!(transport_reason(&io::Error::from(kind)), reason, "{kind:?}");
        }
    }

    #[test]
    fn transport_reason_looks_through_wrappers() {
        #[derive(Debug, thiserror::Error)]
        #[error("client error")]
        struct Wrapper(#[source] io::Error);
        let wrapped = Wrapper(io::Error::from(io::ErrorKind::ConnectionReset));
        assert_eq!(transport_reason(&wrapped), RetryReason::Reset);
        let plain = Wrapper(io::Error::other("no kind"));
        assert_eq!(transport_reason(&plain), RetryReason::Transport);
    }

    #[tokio::test(start_paused = true)]
    async fn elapsed_timer_is_a_timeout() {
        let elapsed = tokio::time::timeout(std::time::Duration::from_millis(1), std::future::pending::<()>())
            .await
            .expect_err("pending never finishes");
        assert_eq!(transport_reason(&elapsed), RetryReason::Timeout);
    }

    #[test]
    fn breaker_failures() {
        assert!(RetryReason::ServerError.is_destination_failure());
        assert!(RetryReason::Connect.is_destination_failure());
        assert!(RetryReason::RequestTimeout.is_destination_failure());
        assert!(!RetryReason::Throttled.is_destination_failure());
        assert!(!RetryReason::InProgress.is_destination_failure());
        assert!(!RetryReason::TooEarly.is_destination_failure());
    }

    #[test]
    fn overload_signs() {
        for reason in [
            RetryReason::Timeout,
            RetryReason::RequestTimeout,
            RetryReason::Throttled,
            RetryReason::Unavailable,
            RetryReason::Gateway,
            RetryReason::ServerError,
        ] {
            assert!(reason.is_overload(), "{reason:?}");
        }
        for reason in [
            RetryReason::Connect,
            RetryReason::Reset,
            RetryReason::Transport,
            RetryReason::InProgress,
            RetryReason::TooEarly,
        ] {
            assert!(!reason.is_overload(), "{reason:?}");
        }
    }
}
