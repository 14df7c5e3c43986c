//! The span of one logical request (feature `tracing`): every line
//! logged while the layer handles it, the inner service's included, sits
//! in a span `idempotent_call`, the client's side of the server layer's
//! `idempotent_request`, with the same `key`, `outcome` and `attempt`
//! fields:
//!
//! | field | value |
//! |---|---|
//! | `key` | the `Idempotency-Key` every attempt carries, the caller's or the one attached to a POST or PATCH without one, as the server reads it (an sf-string's content, without its quotes); absent for a request sent without a key |
//! | `method` | the request's method |
//! | `authority` | the URI's authority (host and port) |
//! | `path` | the URI's path, never its query |
//! | `attempt` | the attempt under way, from 1 |
//! | `outcome` | how the call ended: `success`, `replayed`, `rejected`, `retried_out`, `circuit_open`, `concurrency_limited`, `deadline_exceeded` or `body_refused` |
//! | `status` | the status of the answer handed back, if there is one |
//!
//! Without the feature this is a no-op.

#![cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "the values are for the subscriber"))]

use super::error::ClientError;
use http::header::HeaderValue;
use http::request::Parts;
use http::Response;
use std::future::Future;

/// The span's name.
#[cfg(feature = "tracing")]
const NAME: &str = "idempotent_call";

/// How a call ended, as the span's `outcome` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    /// The answer was final: no retry could change it.
    Final,
    /// The answer was final, and the server marked it as the replay of
    /// one it gave before.
    Replayed,
    /// The answer, or the transport error, could have been retried, but
    /// the attempts, the budget, the deadline, a server's wait, the
    /// method, the breaker or the concurrency limit said no more.
    Stopped,
}

/// The span of one logical request, or nothing without `tracing`.
#[derive(Clone)]
pub(super) struct CallSpan {
    #[cfg(feature = "tracing")]
    span: tracing::Span,
}

#[cfg(feature = "tracing")]
impl CallSpan {
    /// A span for the request of `parts`, carrying `key`.
    pub(super) fn new(parts: &Parts, key: Option<&HeaderValue>) -> Self {
        use tracing::field::Empty;
        let span = tracing::info_span!(
            NAME,
            key = Empty,
            method = parts.method.as_str(),
            authority = Empty,
            path = parts.uri.path(),
            attempt = Empty,
            outcome = Empty,
            status = Empty
        );
        if !span.is_disabled() {
            if let Some(key) = key {
                span.record("key", key_text(key).as_str());
            }
            if let Some(authority) = parts.uri.authority() {
                span.record("authority", authority.as_str());
            }
        }
        CallSpan { span }
    }

    /// `future`, run inside the span.
    pub(super) fn instrument<F: Future>(self, future: F) -> tracing::instrument::Instrumented<F> {
        tracing::Instrument::instrument(future, self.span)
    }

    /// Attempt `attempt` is under way.
    pub(super) fn attempt(&self, attempt: u32) {
        self.span.record("attempt", attempt);
    }

    /// The call ended with `result`, `ending` as said.
    pub(super) fn finish<R>(&self, result: &Result<Response<R>, ClientError>, ending: Ending) {
        if let Ok(response) = result {
            self.span.record("status", response.status().as_u16());
        }
        self.span.record("outcome", outcome(result, ending));
    }
}

#[cfg(not(feature = "tracing"))]
#[expect(clippy::unused_self, reason = "the same calls as with tracing, doing nothing")]
impl CallSpan {
    pub(super) fn new(parts: &Parts, key: Option<&HeaderValue>) -> Self {
        CallSpan {}
    }

    pub(super) fn instrument<F: Future>(self, future: F) -> F {
        future
    }

    pub(super) fn attempt(&self, attempt: u32) {}

    pub(super) fn finish<R>(&self, result: &Result<Response<R>, ClientError>, ending: Ending) {}
}

/// The span's `outcome` for `result`.
#[cfg(feature = "tracing")]
fn outcome<R>(result: &Result<Response<R>, ClientError>, ending: Ending) -> &'static str {
    match result {
        Ok(_) if ending == Ending::Stopped => "retried_out",
        Ok(_) if ending == Ending::Replayed => "replayed",
        Ok(response) if response.status().as_u16() < 400 => "success",
        Ok(_) => "rejected",
        Err(ClientError::Transport { .. }) => "retried_out",
        Err(ClientError::CircuitOpen { .. }) => "circuit_open",
        Err(ClientError::ConcurrencyLimited { .. }) => "concurrency_limited",
        Err(ClientError::DeadlineExceeded { .. }) => "deadline_exceeded",
        Err(ClientError::Body { .. }) => "body_refused",
    }
}

/// A key field's value as the server reads it: an sf-string's content
/// without its quotes and escapes, as the `sfv` crate parses it; any
/// other value (a bare key, or one the server refuses) as it was sent,
/// without the spaces around it.
#[cfg(feature = "tracing")]
fn key_text(value: &HeaderValue) -> String {
    match sfv::Parser::new(value.as_bytes()).parse_item::<sfv::Item>() {
        Ok(sfv::Item { bare_item: sfv::BareItem::String(key), params }) if params.is_empty() => key.into(),
        _ => String::from_utf8_lossy(value.as_bytes()).trim_matches(' ').to_owned(),
    }
}

#[cfg(all(test, feature = "tracing"))]
mod tests {
    use super::*;

    #[test]
    fn keys_read_as_the_server_reads_them() {
        assert_eq!(key_text(&HeaderValue::from_static("\"0193-ab\"")), "0193-ab");
        assert_eq!(key_text(&HeaderValue::from_static(" order-1 ")), "order-1");
        assert_eq!(key_text(&HeaderValue::from_static(r#""a\"b\\c""#)), r#"a"b\c"#);
        assert_eq!(key_text(&HeaderValue::from_static("\"")), "\"");
        // A value the server refuses is shown as it was sent.
        assert_eq!(key_text(&HeaderValue::from_static(r#""a"b""#)), r#""a"b""#);
        assert_eq!(key_text(&HeaderValue::from_static(r#""a";p=1"#)), r#""a";p=1"#);
        assert_eq!(key_text(&HeaderValue::from_bytes(b"\"caf\xc3\xa9\"").expect("obs-text")), "\"caf\u{e9}\"");
    }

    #[test]
    fn outcomes() {
        let answer = |status: u16| Ok(Response::builder().status(status).body(()).expect("response"));
        assert_eq!(outcome(&answer(201), Ending::Final), "success");
        assert_eq!(outcome(&answer(201), Ending::Replayed), "replayed");
        assert_eq!(outcome(&answer(422), Ending::Final), "rejected");
        assert_eq!(outcome(&answer(503), Ending::Stopped), "retried_out");
        let open: Result<Response<()>, _> =
            Err(ClientError::CircuitOpen { destination: String::new(), retry_in: std::time::Duration::ZERO });
        assert_eq!(outcome(&open, Ending::Final), "circuit_open");
    }
}
