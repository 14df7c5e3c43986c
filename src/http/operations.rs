//! Long operations: `202 Accepted` and a status resource. With
//! [`LayerConfig::operations`], a guarded request that asks
//! `Prefer: respond-async` (RFC 7240), or whose handler runs past
//! [`LayerConfig::respond_async_after`], is answered `202 Accepted` with
//! `Location:` of its status resource (and `Preference-Applied:
//! respond-async` when it asked) while the handler runs on, detached, its
//! lease kept alive and its answer kept as any other. `GET` of the status
//! resource answers 202 with `Retry-After` while it runs and the kept
//! answer once it is done; a retry of the request gets the same 202 while
//! it runs and the replay after. The status resource lives in the
//! request's scope: a `GET` from another scope finds nothing (404).

use super::config::LayerConfig;
use super::problem;
use super::response::replay;
use crate::backend::IdempotencyBackend;
use crate::State;
use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, CONTENT_TYPE, LOCATION, RETRY_AFTER};
use http::request::Parts;
use http::{Method, Response, StatusCode};
use http_body_util::Full;
use std::fmt::Write as _;
use std::time::Duration;

/// Where status resources live, and when a request is answered 202.
#[derive(Debug, Clone)]
pub(super) struct Operations {
    /// The path the status resources live under, without a trailing `/`.
    path: String,
    /// Past this long a running handler is answered 202; `None`: only on
    /// `Prefer: respond-async`.
    pub(super) after: Option<Duration>,
}

impl LayerConfig {
    /// Long operations (see the module docs of `operations`): status
    /// resources under `path` (`/operations`: `/operations/<id>`), and a
    /// request with `Prefer: respond-async` answered 202 at once while its
    /// handler runs on. The layer answers `GET <path>/<id>` itself; put it
    /// on a router that routes that path to the layer (router-wide, as the
    /// examples do).
    #[must_use]
    pub fn operations(mut self, path: &str) -> Self {
        let path = path.trim_end_matches('/').to_owned();
        let after = self.operations.as_ref().and_then(|operations| operations.after);
        self.operations = Some(Operations { path, after });
        self
    }

    /// With [`operations`](LayerConfig::operations): a handler still
    /// running after `after` is answered 202 too, without the preference.
    #[must_use]
    pub fn respond_async_after(mut self, after: Duration) -> Self {
        if let Some(operations) = self.operations.as_mut() {
            operations.after = Some(after);
        }
        self
    }
}

/// Whether `Prefer` asks `respond-async`.
pub(super) fn prefers_async(headers: &HeaderMap) -> bool {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|preference| preference.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("respond-async"))
}

fn hex(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(text, "{byte:02x}");
    }
    text
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.is_empty() || !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok()).collect()
}

impl Operations {
    /// The status resource of the request with `key`.
    fn location(&self, key: &[u8]) -> String {
        format!("{}/{}", self.path, hex(key))
    }

    /// The key of a `GET` of a status resource (empty for a malformed
    /// id: no key is), `None` for any other request.
    pub(super) fn key_of(&self, method: &Method, path: &str) -> Option<Vec<u8>> {
        if method != Method::GET {
            return None;
        }
        let id = path.strip_prefix(&self.path)?.strip_prefix('/')?;
        Some(unhex(id).unwrap_or_default())
    }

    /// 202 with `Location` of the request with `key`, `Retry-After`, and
    /// `Preference-Applied: respond-async` when it was asked for.
    pub(super) fn accepted(&self, key: &[u8], retry_after: Duration, preferred: bool) -> Response<Full<Bytes>> {
        let location = self.location(key);
        let body = format!(r#"{{"status":"running","location":"{location}"}}"#);
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = StatusCode::ACCEPTED;
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Ok(location) = HeaderValue::from_str(&location) {
            headers.insert(LOCATION, location);
        }
        headers.insert(RETRY_AFTER, problem::retry_after_value(retry_after));
        if preferred {
            headers.insert("preference-applied", HeaderValue::from_static("respond-async"));
        }
        response
    }
}

fn unknown() -> Response<Full<Bytes>> {
    problem::response(
        StatusCode::NOT_FOUND,
        "operation-unknown",
        "no such operation",
        "No request with this id is running or kept in this scope.",
    )
}

/// The answer of `GET` of the status resource of `key` (empty: not an
/// id): 202 while it runs, the kept answer once done, 404 otherwise.
pub(super) async fn status<K: IdempotencyBackend>(
    backend: &K,
    config: &LayerConfig,
    operations: &Operations,
    parts: &Parts,
    key: Vec<u8>,
) -> Response<Full<Bytes>> {
    let Some(scope) = config.scope_of(parts) else { return unknown() };
    let limits = backend.limits();
    if key.is_empty() || scope.len() > limits.scope_bytes_max || key.len() > limits.key_bytes_max {
        return unknown();
    }
    match backend.get(&scope, &key).await {
        Ok(Some(record)) if record.state == State::Processing => {
            operations.accepted(&key, config.in_progress_retry_after, false)
        }
        Ok(Some(record)) => replay(&record.response, &config.replay_header),
        Ok(None) => unknown(),
        Err(error) => {
            tracing::warn!(%error, "reading an operation's status failed");
            problem::store_unavailable()
        }
    }
}
