//! Error answers as problem details (`application/problem+json`, RFC 9457).

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};
use http_body_util::Full;
use std::time::Duration;

pub(super) fn problem(status: StatusCode, title: &str, detail: &str) -> Response<Full<Bytes>> {
    let escape = |text: &str| text.replace('\\', "\\\\").replace('"', "\\\"");
    let body = format!(
        r#"{{"type":"about:blank","title":"{}","status":{},"detail":"{}"}}"#,
        escape(title),
        status.as_u16(),
        escape(detail)
    );
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    response
}

pub(super) fn in_progress(retry_after: Duration) -> Response<Full<Bytes>> {
    let mut response = problem(
        StatusCode::CONFLICT,
        "request in progress",
        "A request with this key is being processed; retry later.",
    );
    let seconds = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
    response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(seconds.max(1)));
    response
}
