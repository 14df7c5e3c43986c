//! Every refusal and failure of the layer as RFC 9457 problem details: a
//! stable `type` URI, a stable `code`, a fixed title and detail per kind,
//! and never the text of an internal error (that goes to `tracing`).

use crate::fingerprint::{FingerprintError, JsonErrorKind, NaturalKeyError};
use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};
use http_body_util::Full;
use std::fmt::Write as _;
use std::time::Duration;

/// The kinds of answer the layer gives on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Problem {
    KeyMissing,
    KeyInvalid(&'static str),
    KeyRepeated,
    NaturalKeyMissing(&'static str),
    NaturalKeyInvalid(&'static str),
    ScopeMissing,
    ScopeTooLong,
    BodyTooLarge,
    BodyNotJson(JsonErrorKind),
    FingerprintRefused(&'static str),
    ExpiryInvalid,
    InProgress,
    QuotaExceeded,
    KeyReused,
    StoreUnavailable,
    HandlerFailed,
    ResponseUnreadable,
    StoredUnreadable,
}

impl Problem {
    /// Status, the `type` slug and the title.
    fn parts(self) -> (StatusCode, &'static str, &'static str) {
        match self {
            Problem::KeyMissing => (StatusCode::BAD_REQUEST, "key-missing", "Idempotency-Key missing"),
            Problem::KeyInvalid(_) => (StatusCode::BAD_REQUEST, "key-invalid", "Idempotency-Key invalid"),
            Problem::KeyRepeated => (StatusCode::BAD_REQUEST, "key-repeated", "more than one Idempotency-Key"),
            Problem::NaturalKeyMissing(_) => {
                (StatusCode::BAD_REQUEST, "natural-key-missing", "the request lacks its idempotency key")
            }
            Problem::NaturalKeyInvalid(_) => {
                (StatusCode::BAD_REQUEST, "natural-key-invalid", "the request's idempotency key is invalid")
            }
            Problem::ScopeMissing => (StatusCode::BAD_REQUEST, "scope-missing", "no idempotency scope"),
            Problem::ScopeTooLong => (StatusCode::BAD_REQUEST, "scope-too-long", "idempotency scope too long"),
            Problem::BodyTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "body-too-large", "request body too large"),
            Problem::BodyNotJson(_) => (StatusCode::BAD_REQUEST, "body-not-json", "request body is not JSON"),
            Problem::FingerprintRefused(_) => {
                (StatusCode::BAD_REQUEST, "fingerprint-refused", "request refused by its fingerprint")
            }
            Problem::ExpiryInvalid => (StatusCode::BAD_REQUEST, "expiry-invalid", "Idempotency-Key-Expiry invalid"),
            Problem::InProgress => (StatusCode::CONFLICT, "in-progress", "request in progress"),
            Problem::QuotaExceeded => (StatusCode::TOO_MANY_REQUESTS, "quota-exceeded", "idempotency quota exceeded"),
            Problem::KeyReused => (StatusCode::UNPROCESSABLE_ENTITY, "key-reused", "Idempotency-Key reused"),
            Problem::StoreUnavailable => {
                (StatusCode::SERVICE_UNAVAILABLE, "store-unavailable", "idempotency store unavailable")
            }
            Problem::HandlerFailed => (StatusCode::INTERNAL_SERVER_ERROR, "handler-failed", "request failed"),
            Problem::ResponseUnreadable => {
                (StatusCode::INTERNAL_SERVER_ERROR, "response-unreadable", "response body failed")
            }
            Problem::StoredUnreadable => {
                (StatusCode::INTERNAL_SERVER_ERROR, "stored-unreadable", "stored response unreadable")
            }
        }
    }

    fn detail(self) -> &'static str {
        match self {
            Problem::KeyMissing => "This endpoint requires an Idempotency-Key header.",
            Problem::KeyInvalid(detail)
            | Problem::FingerprintRefused(detail)
            | Problem::NaturalKeyMissing(detail)
            | Problem::NaturalKeyInvalid(detail) => detail,
            Problem::KeyRepeated => "Send exactly one Idempotency-Key field with one key.",
            Problem::ScopeMissing => "The request carries nothing that names its idempotency scope.",
            Problem::ScopeTooLong => "The request's idempotency scope is longer than the store accepts.",
            Problem::BodyTooLarge => "The request body is over the limit or could not be read.",
            Problem::BodyNotJson(kind) => kind.detail(),
            Problem::ExpiryInvalid => {
                "Send one Idempotency-Key-Expiry of a whole number of seconds, minutes, hours or days, such as 24h."
            }
            Problem::InProgress => "A request with this key is being processed; retry after Retry-After seconds.",
            Problem::QuotaExceeded => {
                "This scope holds as many idempotency records as its quota allows; nothing was run. Retry after \
                 Retry-After seconds."
            }
            Problem::KeyReused => "This key was used for a different request.",
            Problem::StoreUnavailable => "The idempotency store did not answer; nothing was run. Retry later.",
            Problem::HandlerFailed => {
                "The request failed while it ran. Its key stays in progress until its lease ends; a retry then \
                 runs as a recovered attempt."
            }
            Problem::ResponseUnreadable => {
                "The request ran, but its response body failed. Its key stays in progress until its lease ends."
            }
            Problem::StoredUnreadable => "The stored response could not be decoded.",
        }
    }

    /// The stable `type` URI.
    #[cfg(test)]
    fn type_uri(self) -> String {
        format!("urn:idemkv:problem:{}", self.parts().1)
    }

    /// The status of the answer.
    #[cfg(test)]
    fn status(self) -> StatusCode {
        self.parts().0
    }

    /// The `application/problem+json` body.
    pub(super) fn body(self) -> String {
        let (status, slug, title) = self.parts();
        body(status, slug, title, self.detail())
    }

    /// The whole response.
    pub(super) fn response(self) -> Response<Full<Bytes>> {
        let (status, slug, title) = self.parts();
        response(status, slug, title, self.detail())
    }
}

impl From<&FingerprintError> for Problem {
    fn from(error: &FingerprintError) -> Self {
        match error {
            FingerprintError::BodyNotJson(json) => Problem::BodyNotJson(json.kind()),
            FingerprintError::Refused(detail) => Problem::FingerprintRefused(detail),
        }
    }
}

impl From<&NaturalKeyError> for Problem {
    fn from(error: &NaturalKeyError) -> Self {
        match error {
            NaturalKeyError::Missing(detail) => Problem::NaturalKeyMissing(detail),
            NaturalKeyError::Invalid(detail) => Problem::NaturalKeyInvalid(detail),
            NaturalKeyError::BodyNotJson(json) => Problem::BodyNotJson(json.kind()),
        }
    }
}

/// The `application/problem+json` body of type `urn:idemkv:problem:<slug>`
/// and its [`code`] (the fixed texts given carry no quote or backslash;
/// a detail a service wrote is escaped).
fn body(status: StatusCode, slug: &str, title: &str, detail: &str) -> String {
    format!(
        r#"{{"type":"urn:idemkv:problem:{slug}","code":"{}","title":"{title}","status":{},"detail":"{}"}}"#,
        code(slug),
        status.as_u16(),
        escaped(detail),
    )
}

/// `text` as the inside of a JSON string: `"`, `\` and control
/// characters escaped.
fn escaped(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains(|char: char| char == '"' || char == '\\' || char.is_control()) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for char in text.chars() {
        match char {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            control if control.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(control));
            }
            other => out.push(other),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The `code` member of the problem `slug`: a short name a client may
/// switch on. The draft names no codes; where a problem is one of the
/// draft's own cases, its code is the name the public conformance profile
/// for the draft (anyonce) grades, so that a client of several
/// implementations reads one code for one case; every other problem's
/// code is its type's name.
fn code(slug: &str) -> &str {
    match slug {
        "key-missing" => "missing-key",
        "key-invalid" => "invalid-key",
        "in-progress" => "conflict",
        "key-reused" => "fingerprint-mismatch",
        "body-too-large" => "payload-too-large",
        other => other,
    }
}

/// A problem answer of the layers' own: `status`, type
/// `urn:idemkv:problem:<slug>`, a fixed title and detail.
pub(super) fn response(status: StatusCode, slug: &str, title: &str, detail: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body(status, slug, title, detail))));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    response
}

/// 400 `expiry-too-long`: a client asked for its answer to be kept
/// longer than `max`, the longest the service honours (`max_text`, as
/// the answers state expiries).
pub(super) fn expiry_too_long(max_text: &str) -> Response<Full<Bytes>> {
    let detail = format!("The longest Idempotency-Key-Expiry this service honours is {max_text}; nothing was run.");
    response(StatusCode::BAD_REQUEST, "expiry-too-long", "Idempotency-Key-Expiry too long", &detail)
}

/// 409 with `Retry-After` in whole seconds, at least 1.
pub(super) fn in_progress(retry_after: Duration) -> Response<Full<Bytes>> {
    with_retry_after(Problem::InProgress, retry_after)
}

/// 429 for a claim refused by the scope's quota, with `Retry-After` as
/// [`crate::store::Quota::retry_after`] says.
pub(super) fn quota_exceeded(retry_after: Duration) -> Response<Full<Bytes>> {
    with_retry_after(Problem::QuotaExceeded, retry_after)
}

/// How long a client is told to wait after the store did not answer.
pub(super) const STORE_UNAVAILABLE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// 503 for a claim the store did not answer, with `Retry-After`: nothing
/// ran, so the retry is safe.
pub(super) fn store_unavailable() -> Response<Full<Bytes>> {
    with_retry_after(Problem::StoreUnavailable, STORE_UNAVAILABLE_RETRY_AFTER)
}

/// `problem` with `Retry-After` in whole seconds, at least 1.
fn with_retry_after(problem: Problem, retry_after: Duration) -> Response<Full<Bytes>> {
    let mut response = problem.response();
    response.headers_mut().insert(RETRY_AFTER, retry_after_value(retry_after));
    response
}

/// A `Retry-After` value: `retry_after` rounded up to whole seconds, at
/// least 1.
pub(super) fn retry_after_value(retry_after: Duration) -> HeaderValue {
    let seconds = retry_after.as_secs().saturating_add(u64::from(retry_after.subsec_nanos() > 0));
    HeaderValue::from(seconds.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_is_valid_json_with_a_stable_type() {
        let all = [
            Problem::KeyMissing,
            Problem::KeyInvalid("The key is empty."),
            Problem::KeyRepeated,
            Problem::NaturalKeyMissing("The request body lacks the field its idempotency key is taken from."),
            Problem::NaturalKeyInvalid("The key must be visible ASCII."),
            Problem::ScopeMissing,
            Problem::ScopeTooLong,
            Problem::BodyTooLarge,
            Problem::BodyNotJson(JsonErrorKind::Syntax),
            Problem::BodyNotJson(JsonErrorKind::DuplicateName),
            Problem::FingerprintRefused("Send X-Api-Version."),
            Problem::ExpiryInvalid,
            Problem::InProgress,
            Problem::QuotaExceeded,
            Problem::KeyReused,
            Problem::StoreUnavailable,
            Problem::HandlerFailed,
            Problem::ResponseUnreadable,
            Problem::StoredUnreadable,
        ];
        for problem in all {
            let body = problem.body();
            // Fixed texts only: no quote or backslash that would need escaping.
            let inner = body.trim_start_matches('{').trim_end_matches('}');
            assert!(!inner.contains('\\'), "{body}");
            assert_eq!(body.matches('"').count(), 18, "{body}");
            assert!(body.contains(&format!(r#""status":{}"#, problem.status().as_u16())));
            assert!(problem.type_uri().starts_with("urn:idemkv:problem:"));
        }
    }

    /// Guards the `code` member: the draft's cases under the names the
    /// anyonce profile grades, every other problem under its type's name.
    #[test]
    fn every_problem_carries_a_stable_code() {
        let codes = [
            (Problem::KeyMissing, "missing-key"),
            (Problem::KeyInvalid("The key is empty."), "invalid-key"),
            (Problem::InProgress, "conflict"),
            (Problem::KeyReused, "fingerprint-mismatch"),
            (Problem::BodyTooLarge, "payload-too-large"),
            (Problem::StoreUnavailable, "store-unavailable"),
            (Problem::KeyRepeated, "key-repeated"),
            (Problem::BodyNotJson(JsonErrorKind::UnexpectedEnd), "body-not-json"),
            (Problem::FingerprintRefused("No."), "fingerprint-refused"),
            (Problem::ExpiryInvalid, "expiry-invalid"),
            (Problem::NaturalKeyMissing("No id."), "natural-key-missing"),
            (Problem::NaturalKeyInvalid("Not ASCII."), "natural-key-invalid"),
            (Problem::HandlerFailed, "handler-failed"),
        ];
        for (problem, code) in codes {
            assert!(problem.body().contains(&format!(r#""code":"{code}","#)), "{}", problem.body());
        }
        let other = body(StatusCode::CONFLICT, "resource-locked", "resource locked", "Held.");
        assert!(other.contains(r#""code":"resource-locked","#), "{other}");
    }

    /// Guards the problem body against a detail a service wrote: its
    /// quotes, backslashes and control characters are escaped, so the
    /// body stays JSON.
    #[test]
    fn a_services_detail_is_escaped() {
        let body = Problem::FingerprintRefused("Send \"X-Api-Version\" \\ v1\n.").body();
        assert!(body.ends_with(r#""detail":"Send \"X-Api-Version\" \\ v1\u000a."}"#), "{body}");
        assert_eq!(escaped("plain"), std::borrow::Cow::Borrowed("plain"));
    }

    #[test]
    fn retry_after_rounds_up_to_a_whole_second() {
        let seconds = |duration| in_progress(duration).headers()[RETRY_AFTER].to_str().expect("ascii").to_string();
        assert_eq!(seconds(Duration::from_millis(1)), "1");
        assert_eq!(seconds(Duration::from_millis(1500)), "2");
        assert_eq!(seconds(Duration::ZERO), "1");
        assert_eq!(seconds(Duration::MAX), u64::MAX.to_string());
        let quota = quota_exceeded(Duration::from_secs(30));
        assert_eq!((quota.status().as_u16(), &quota.headers()[RETRY_AFTER]), (429, &HeaderValue::from(30u64)));
        let unavailable = store_unavailable();
        assert_eq!(
            (unavailable.status().as_u16(), &unavailable.headers()[RETRY_AFTER]),
            (503, &HeaderValue::from(1u64))
        );
    }
}
