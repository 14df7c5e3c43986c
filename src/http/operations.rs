//! Long operations: `202 Accepted` and a status resource. With
//! [`LayerConfig::operations`], a guarded request that asks
//! `Prefer: respond-async` (RFC 7240), or whose handler runs past
//! [`LayerConfig::respond_async_after`], is answered `202 Accepted` with
//! `Location:` of its status resource (and `Preference-Applied:
//! respond-async` when it asked) while the handler runs on, detached, its
//! lease kept alive and its answer kept as any other. A handler that
//! answers at once — without waiting on anything, as a router's 404 does
//! — is answered at once whatever the request prefers: a 202 is for a run
//! still running. `GET` of the status resource answers 202 with
//! `Retry-After` while it runs and the kept answer once it is done; a
//! retry of the request gets the same 202 while it runs and the replay
//! after. The status resource lives in the request's scope: a `GET` from
//! another scope finds nothing (404).
//!
//! An operation always ends, for its status resource too:
//!
//! | the operation | its status resource |
//! |---|---|
//! | running, its lease held | 202 with `Retry-After` (and, with [`LayerConfig::expiry_max`], the expiry in force in `Idempotency-Key-Expiry`, as its request's 202 and its kept answer state it) |
//! | answered, the answer kept | the answer, with `Idempotency-Replay: true` |
//! | answered after its 202, the answer not kept (the failure policy or [`NotSpent`](super::NotSpent) freed the key) | the answer, with `Idempotency-Stored: false`, for as long as a kept one would be told (the store's TTL) or until the key runs again |
//! | its run ended without an answer (a panic, a killed process) and its lease lapsed | 500 `operation-abandoned`: send the request again with its key, to run it again as a recovered attempt |
//! | unknown in this scope | 404 `operation-unknown` |

use super::config::{LayerConfig, Operations};
use super::key::state_expiry;
use super::problem;
use super::response::{decode_response, replay, Stored, NOT_STORED_HEADER};
use crate::backend::{BackendClaim, ClaimOptions, IdempotencyBackend};
use crate::{Fingerprint, Keyspace, Record, State};
use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, CONTENT_TYPE, LOCATION, RETRY_AFTER};
use http::request::Parts;
use http::{Method, Response, StatusCode};
use http_body_util::Full;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

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

    /// 202 with `Location` of the request with `key`, `Retry-After`,
    /// `Preference-Applied: respond-async` when it was asked for, and
    /// `Idempotency-Key-Expiry` with `expiry`, the expiry in force, when
    /// clients may choose one (as its final answer will).
    pub(super) fn accepted(
        &self,
        key: &[u8],
        retry_after: Duration,
        preferred: bool,
        expiry: Option<Duration>,
    ) -> Response<Full<Bytes>> {
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
        state_expiry(headers, expiry);
        response
    }
}

/// The expiry in force of the key of `record`, to state on a 202 of its
/// operation, when the layer lets clients choose one: the TTL its first
/// request's claim set, not what a retry asks.
fn expiry_of_record(config: &LayerConfig, record: &Record) -> Option<Duration> {
    config.expiry_max.map(|_| Duration::from_millis(record.ttl_ms))
}

/// The expiry in force of `key` in `scope`, held by a running operation,
/// when the layer lets clients choose one (see [`expiry_of_record`]): read
/// from its record, for the 202 a retry of the operation gets. `None`
/// when the record is gone or cannot be read (the 202 then goes without).
pub(super) async fn expiry_in_force<K: IdempotencyBackend>(
    backend: &K,
    config: &LayerConfig,
    scope: &[u8],
    key: &[u8],
) -> Option<Duration> {
    // Nothing to read when clients may not choose.
    config.expiry_max?;
    match backend.get(scope, key).await {
        Ok(record) => expiry_of_record(config, &record?),
        Err(error) => {
            tracing::debug!(%error, "reading a running operation's expiry failed; its 202 goes without");
            None
        }
    }
}

/// Who gets a long operation's answer: its caller, or — once it was
/// answered 202 — its status resource. Decided once, by whichever comes
/// first: the 202 ([`accept`](Answering::accept)) or the answer
/// ([`answer`](Answering::answer)).
#[derive(Debug, Default)]
pub(super) struct Answering(AtomicU8);

const RUNNING: u8 = 0;
const ACCEPTED: u8 = 1;
const ANSWERED: u8 = 2;

impl Answering {
    /// Whether the caller may be answered 202: the handler has not
    /// answered yet, and from now on its answer is told at the status
    /// resource.
    pub(super) fn accept(&self) -> bool {
        self.0.compare_exchange(RUNNING, ACCEPTED, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Whether the caller gets the handler's answer itself (`false`: it
    /// was answered 202, and the answer is for the status resource).
    pub(super) fn answer(&self) -> bool {
        match self.0.compare_exchange(RUNNING, ANSWERED, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(now) => now == ANSWERED,
        }
    }
}

/// The fingerprint of a told answer's record: one part, where the
/// fingerprint of every request the layer claims hashes four (method,
/// path, query, body; length-prefixed), so no request of a tenant can
/// write a record that reads back as a told answer.
fn told_fingerprint() -> Fingerprint {
    Fingerprint::of(b"idemkv.operation")
}

/// Keeps `encoded`, the answer of the operation of `key` in `scope` that
/// its key does not keep (the key is freed next), so that its status
/// resource tells it for the store's TTL. An earlier told answer of the
/// key is replaced. Logged, not returned, when it fails: the key is freed
/// all the same, and the status resource then finds nothing.
pub(super) async fn tell<K: IdempotencyBackend>(
    backend: &K,
    config: &LayerConfig,
    scope: &[u8],
    key: &[u8],
    encoded: &[u8],
) {
    let options = ClaimOptions::new().lease(config.lease);
    let written = match backend.claim_in(Keyspace::Operation, scope, key, told_fingerprint(), options).await {
        Ok(BackendClaim::Acquired { token, .. }) => backend.complete(&token, encoded).await.map(|()| true),
        Ok(BackendClaim::Replay(earlier)) => {
            backend.replace_in(Keyspace::Operation, scope, key, &earlier, encoded).await
        }
        Ok(BackendClaim::InProgress { .. } | BackendClaim::Mismatch) => Ok(false),
        Err(error) => Err(error),
    };
    match written {
        Ok(true) => {}
        Ok(false) => tracing::warn!("an operation's answer is not told: its record is held or is not the layer's"),
        Err(error) => tracing::warn!(%error, "an operation's answer is not told"),
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

fn abandoned() -> Response<Full<Bytes>> {
    problem::response(
        StatusCode::INTERNAL_SERVER_ERROR,
        "operation-abandoned",
        "operation abandoned",
        "The operation stopped before it answered and nothing runs it any more; it may have half-run. Send the \
         request again with its Idempotency-Key: it runs again as a recovered attempt.",
    )
}

/// The answer of `GET` of the status resource of `key` (empty: not an
/// id): see the module docs.
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
    let answer = match backend.get(&scope, &key).await {
        Ok(Some(record)) => of_record(backend, config, operations, &key, &record).await,
        Ok(None) => told(backend, &scope, &key).await,
        Err(error) => Err(error),
    };
    answer.unwrap_or_else(|error| {
        tracing::warn!(%error, "reading an operation's status failed");
        problem::store_unavailable()
    })
}

/// The status of the operation whose key's record is `record`.
async fn of_record<K: IdempotencyBackend>(
    backend: &K,
    config: &LayerConfig,
    operations: &Operations,
    key: &[u8],
    record: &Record,
) -> Result<Response<Full<Bytes>>, crate::Error> {
    if record.state != State::Processing {
        return Ok(replay(&Bytes::copy_from_slice(&record.response), &config.replay_header));
    }
    let now_ms = backend.now_ms().await?;
    let Some(left_ms) = record.deadline_ms.checked_sub(now_ms).filter(|left| *left > 0) else {
        return Ok(abandoned());
    };
    let retry_after = config.in_progress_retry_after.min(Duration::from_millis(left_ms));
    Ok(operations.accepted(key, retry_after, false, expiry_of_record(config, record)))
}

/// The told answer of the operation of `key` in `scope` (see [`tell`]),
/// with `Idempotency-Stored: false`; 404 without one.
async fn told<K: IdempotencyBackend>(
    backend: &K,
    scope: &[u8],
    key: &[u8],
) -> Result<Response<Full<Bytes>>, crate::Error> {
    let Some(record) = backend.get_in(Keyspace::Operation, scope, key).await? else { return Ok(unknown()) };
    if record.state != State::Completed || record.fingerprint != told_fingerprint() {
        return Ok(unknown());
    }
    Ok(match decode_response(&Bytes::from(record.response)) {
        Ok(Stored { mut response, .. }) => {
            response.headers_mut().insert(NOT_STORED_HEADER, HeaderValue::from_static("false"));
            response
        }
        Err(error) => {
            tracing::error!(%error, "an operation's told answer is not readable");
            problem::Problem::StoredUnreadable.response()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_goes_to_whichever_comes_first_the_202_or_the_answer() {
        let accepted = Answering::default();
        assert!(accepted.accept(), "no answer yet: 202");
        assert!(!accepted.answer(), "the answer is for the status resource");
        assert!(!accepted.accept());
        let answered = Answering::default();
        assert!(answered.answer(), "the caller gets it");
        assert!(!answered.accept(), "no 202 after the answer");
        assert!(answered.answer());
    }

    #[test]
    fn ids_are_the_keys_in_hex() {
        let operations = Operations { path: "/operations".into(), after: None };
        assert_eq!(operations.location(b"k\x01"), "/operations/6b01");
        assert_eq!(operations.key_of(&Method::GET, "/operations/6b01"), Some(b"k\x01".to_vec()));
        assert_eq!(operations.key_of(&Method::GET, "/operations/6b0"), Some(Vec::new()), "not an id");
        assert_eq!(operations.key_of(&Method::POST, "/operations/6b01"), None);
    }
}
