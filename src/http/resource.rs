//! One request at a time per resource, and conditional writes: a route
//! names the resource a request acts on ([`LayerConfig::resource`],
//! [`LayerConfig::versioned_resource`]); the layer holds it — a lease like
//! any other, kept alive while the handler runs, fenced, taken over with
//! `recovered` after its holder died — while the request runs, and, when
//! versioned, checks `If-Match` / `If-None-Match` against the resource's
//! version under the hold and steps the version after a 2xx, so the check,
//! the write and the step are one step: no other request of the resource
//! runs between them.

use super::config::{IfMatch, LayerConfig};
use super::problem;
use super::shared::Shared;
use super::store_answer::release;
use crate::backend::keeper::Kept;
use crate::backend::versions::{Step, Versions};
use crate::backend::{BackendClaim, ClaimOptions, IdempotencyBackend};
use crate::{Fingerprint, Keyspace, LeaseToken};
use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, ETAG, IF_MATCH, IF_NONE_MATCH, RETRY_AFTER};
use http::request::Parts;
use http::{Method, Response, StatusCode};
use http_body_util::Full;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

/// What the handler of a request that holds its resource gets, as a
/// request extension.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResourceHold {
    /// The resource.
    pub resource: Vec<u8>,
    /// The hold's fencing token: greater than every earlier holder's of
    /// this resource — give it to a store that fences writes.
    pub token: u64,
    /// Whether an earlier holder died holding it (its write may have
    /// happened).
    pub recovered: bool,
    /// A versioned resource's version as checked (`None`: it has none
    /// yet); `None` too for a resource that is not versioned.
    pub version: Option<u64>,
}

/// A resource held for one request.
pub(super) struct Held {
    token: LeaseToken,
    _kept: Kept,
    scope: Vec<u8>,
    resource: Vec<u8>,
    versioned: bool,
    version: Option<u64>,
}

/// The strong entity tag of `resource` at `version`, quoted: the resource
/// itself when it is plain visible ASCII, else a digest of it.
pub(super) fn etag(resource: &[u8], version: u64) -> String {
    let plain = !resource.is_empty() && resource.iter().all(|byte| byte.is_ascii_graphic() && !b"\"\\".contains(byte));
    let mut tag = String::from("\"");
    if plain {
        tag.push_str(std::str::from_utf8(resource).unwrap_or_default());
    } else {
        for byte in Sha256::digest(resource).iter().take(12) {
            let _ = write!(tag, "{byte:02x}");
        }
    }
    let _ = write!(tag, "-v{version}\"");
    tag
}

/// Whether the entity tags of a precondition header list `current`:
/// `*` for any current version; weak tags never match (the strong
/// comparison of RFC 9110 §13.1.1).
fn listed(values: &str, current: Option<&str>) -> bool {
    values.split(',').map(str::trim).any(|tag| match (tag, current) {
        ("*", Some(_)) => true,
        (tag, Some(current)) => !tag.starts_with("W/") && tag == current,
        (_, None) => false,
    })
}

/// Why a request on a versioned resource does not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// 428: no `If-Match` where it is required.
    Required,
    /// 412: `If-Match` does not name the current version, or
    /// `If-None-Match` does on a write.
    Failed,
    /// 304: `If-None-Match` names the current version on a `GET` or
    /// `HEAD`.
    NotModified,
}

/// Whether `method` changes a versioned resource only with `If-Match`
/// under [`IfMatch::Required`]: every unsafe method (RFC 9110 §9.2.1)
/// but `POST`, which may create it (`If-None-Match: *` guards that).
fn needs_if_match(method: &Method) -> bool {
    !method.is_safe() && method != Method::POST
}

/// The preconditions of `headers` for `method` on a resource whose
/// current tag is `current`, in the order of RFC 9110 §13.2.2:
/// `If-Match`, then `If-None-Match`; `None` when the request may run.
fn precondition(method: &Method, headers: &HeaderMap, current: Option<&str>) -> Option<Verdict> {
    let text = |name| {
        headers.get_all(name).iter().filter_map(|value: &HeaderValue| value.to_str().ok()).collect::<Vec<_>>().join(",")
    };
    if headers.contains_key(IF_MATCH) && !listed(&text(IF_MATCH), current) {
        return Some(Verdict::Failed);
    }
    // If-None-Match compares weakly (RFC 9110 §13.1.2).
    if headers.contains_key(IF_NONE_MATCH) {
        let matched = text(IF_NONE_MATCH)
            .split(',')
            .map(str::trim)
            .any(|tag| current.is_some_and(|current| tag == "*" || tag.trim_start_matches("W/") == current));
        if matched {
            let read = [Method::GET, Method::HEAD].contains(method);
            return Some(if read { Verdict::NotModified } else { Verdict::Failed });
        }
    }
    None
}

/// The answer of `verdict`; a 304 carries the current tag.
fn precondition_answer(verdict: Verdict, current: Option<&str>) -> Response<Full<Bytes>> {
    match verdict {
        Verdict::Required => problem::response(
            StatusCode::PRECONDITION_REQUIRED,
            "precondition-required",
            "If-Match required",
            "This resource is changed only with If-Match naming its current ETag; nothing was run.",
        ),
        Verdict::Failed => problem::response(
            StatusCode::PRECONDITION_FAILED,
            "precondition-failed",
            "precondition failed",
            "The resource is not at the version the request names; nothing was run. Fetch it again.",
        ),
        Verdict::NotModified => {
            let mut response = Response::new(Full::new(Bytes::new()));
            *response.status_mut() = StatusCode::NOT_MODIFIED;
            if let Some(value) = current.and_then(|tag| HeaderValue::from_str(tag).ok()) {
                response.headers_mut().insert(ETAG, value);
            }
            response
        }
    }
}

/// A write that can never run, decided before anything is held or
/// claimed: a request that names a resource versioned with
/// [`IfMatch::Required`] and sends no `If-Match` where it needs one is
/// 428 at once, so that such requests never hold the resource against
/// the writers that can run.
pub(super) fn unconditional(config: &LayerConfig, parts: &Parts) -> Option<Refused> {
    let rule = config.resource.as_ref()?;
    if rule.versioned != Some(IfMatch::Required)
        || !needs_if_match(&parts.method)
        || parts.headers.contains_key(IF_MATCH)
    {
        return None;
    }
    (rule.name)(parts)?;
    Some(Refused("precondition_failed", precondition_answer(Verdict::Required, None)))
}

/// Whether a request of a method the layer does not guard with keys
/// writes to a resource the layer holds: every unsafe method on a
/// resource is held (and checked when versioned), whatever
/// [`LayerConfig::methods`] says.
pub(super) fn written(config: &LayerConfig, parts: &Parts) -> bool {
    config.resource.as_ref().is_some_and(|rule| !parts.method.is_safe() && (rule.name)(parts).is_some())
}

/// 409 `resource-locked` with `Retry-After` in whole seconds, at least 1.
fn locked(retry_after: Duration) -> Response<Full<Bytes>> {
    let mut response = problem::response(
        StatusCode::CONFLICT,
        "resource-locked",
        "resource busy",
        "Another request on this resource is running; nothing was run. Retry after Retry-After seconds.",
    );
    response.headers_mut().insert(RETRY_AFTER, problem::retry_after_value(retry_after));
    response
}

/// Why a request did not get its resource: the answer and the outcome it
/// is counted under.
pub(super) struct Refused(pub(super) &'static str, pub(super) Response<Full<Bytes>>);

/// Holds the resource `parts` names, if any, and checks its
/// preconditions; the [`ResourceHold`] extension goes into `parts`.
pub(super) async fn hold<K: IdempotencyBackend>(
    shared: &Shared<K>,
    scope: &[u8],
    parts: &mut Parts,
    wait: Option<Duration>,
) -> Result<Option<Held>, Refused> {
    let (backend, config) = (&shared.backend, &shared.config);
    let Some(rule) = &config.resource else { return Ok(None) };
    let Some(resource) = (rule.name)(parts) else { return Ok(None) };
    let limits = backend.limits();
    if scope.len() > limits.scope_bytes_max || resource.is_empty() || resource.len() > limits.key_bytes_max {
        let unusable = problem::response(
            StatusCode::BAD_REQUEST,
            "resource-invalid",
            "resource name unusable",
            "The resource this request names is empty, or longer than the store keeps; nothing was run.",
        );
        return Err(Refused("refused", unusable));
    }
    let options = ClaimOptions::new().lease(config.lease).ttl(config.lease).wait(wait);
    let hold = backend.claim_in(Keyspace::Hold, scope, &resource, Fingerprint::of(b"idemkv.hold"), options);
    let (token, recovered) = match hold.await {
        Ok(BackendClaim::Acquired { token, recovered, .. }) => (token, recovered),
        Ok(BackendClaim::InProgress { retry_after }) => {
            return Err(Refused("resource_locked", locked(retry_after.min(config.in_progress_retry_after))));
        }
        // Holds are released, never finished: neither comes back.
        Ok(BackendClaim::Replay(_) | BackendClaim::Mismatch) => {
            return Err(Refused("resource_locked", locked(config.in_progress_retry_after)));
        }
        Err(error) => {
            tracing::warn!(%error, "holding a resource failed; request refused before it ran");
            return Err(Refused("store_unavailable", problem::store_unavailable()));
        }
    };
    let kept = shared.keeper.keep(Arc::clone(backend), token.clone(), config.lease);
    let mut version = None;
    if rule.versioned.is_some() {
        version = match Versions::shared(Arc::clone(backend)).current(scope, &resource).await {
            Ok(version) => version,
            Err(error) => {
                tracing::warn!(%error, "reading a resource's version failed; request refused before it ran");
                release(&**backend, &token).await;
                return Err(Refused("store_unavailable", problem::store_unavailable()));
            }
        };
        let current = version.map(|version| etag(&resource, version));
        if let Some(verdict) = precondition(&parts.method, &parts.headers, current.as_deref()) {
            release(&**backend, &token).await;
            return Err(Refused("precondition_failed", precondition_answer(verdict, current.as_deref())));
        }
    }
    parts.extensions.insert(ResourceHold { resource: resource.clone(), token: token.token, recovered, version });
    let versioned = rule.versioned.is_some();
    Ok(Some(Held { token, _kept: kept, scope: scope.to_vec(), resource, versioned, version }))
}

impl Held {
    /// After the handler answered `status` to a request of `method`: a
    /// versioned resource's version stepped on a 2xx, and its new `ETag`
    /// put in `headers` (not for a `DELETE`).
    pub(super) async fn answered<K: IdempotencyBackend>(
        &self,
        backend: &Arc<K>,
        method: &Method,
        status: StatusCode,
        headers: &mut HeaderMap,
    ) {
        if !self.versioned || !status.is_success() {
            return;
        }
        match Versions::shared(Arc::clone(backend)).step(&self.scope, &self.resource, self.version).await {
            Ok(Step::Stepped(version)) if method != Method::DELETE => {
                if let Ok(value) = HeaderValue::from_str(&etag(&self.resource, version)) {
                    headers.insert(ETAG, value);
                }
            }
            Ok(Step::Stepped(_)) => {}
            // Only when the hold was lost (its lease lapsed): the answer
            // goes out without an ETag; the next If-Match fails.
            Ok(Step::Conflict(_)) => tracing::error!("a resource's version moved while it was held"),
            Err(error) => tracing::error!(%error, "stepping a resource's version failed"),
        }
    }

    /// Lets the resource go.
    pub(super) async fn release<K: IdempotencyBackend>(self, backend: &K) {
        release(backend, &self.token).await;
    }
}

/// The `(scope, resource)` of a read (`GET`, `HEAD`) of a versioned
/// resource, whose answer gets the current `ETag`.
pub(super) fn read_of(config: &LayerConfig, parts: &Parts) -> Option<(Vec<u8>, Vec<u8>)> {
    let rule = config.resource.as_ref().filter(|rule| rule.versioned.is_some())?;
    if ![Method::GET, Method::HEAD].contains(&parts.method) {
        return None;
    }
    Some((config.scope_of(parts)?, (rule.name)(parts)?))
}

/// A read of `resource` in `scope` (a `GET` or `HEAD`, see [`read_of`]):
/// `Ok` with its current `ETag` (`None`: it has no version, or the
/// store did not answer — the read runs without one), or the answer its
/// preconditions give instead of running the handler: 304 with the
/// `ETag` when `If-None-Match` names the current version, 412 when
/// `If-Match` does not.
pub(super) async fn tag_read<K: IdempotencyBackend>(
    backend: &Arc<K>,
    scope: &[u8],
    resource: &[u8],
    parts: &Parts,
) -> Result<Option<HeaderValue>, Response<Full<Bytes>>> {
    let current = match Versions::shared(Arc::clone(backend)).current(scope, resource).await {
        Ok(version) => version.map(|version| etag(resource, version)),
        Err(error) => {
            tracing::warn!(%error, "reading a resource's version failed; the read runs without its ETag");
            return Ok(None);
        }
    };
    if let Some(verdict) = precondition(&parts.method, &parts.headers, current.as_deref()) {
        return Err(precondition_answer(verdict, current.as_deref()));
    }
    Ok(current.and_then(|tag| HeaderValue::from_str(&tag).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_tags_compare_strongly_and_star_needs_a_version() {
        let current = etag(b"p", 1);
        assert_eq!(current, "\"p-v1\"");
        assert!(listed("\"p-v1\"", Some(&current)));
        assert!(listed("\"x\", \"p-v1\"", Some(&current)));
        assert!(!listed("W/\"p-v1\"", Some(&current)), "a weak tag never matches If-Match");
        assert!(!listed("\"p-v2\"", Some(&current)));
        assert!(listed("*", Some(&current)));
        assert!(!listed("*", None), "no version: * does not match");
        assert!(!listed("\"p-v1\"", None));
        assert!(etag(b"a b\"c", 3).ends_with("-v3\"") && !etag(b"a b\"c", 3).contains(' '));
    }

    #[test]
    fn preconditions_answer_412_or_304() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.append(*name, HeaderValue::from_static(value));
            }
            map
        };
        let current = Some("\"p-v2\"");
        let failed = Some(Verdict::Failed);
        assert_eq!(precondition(&Method::PATCH, &headers(&[("if-match", "\"p-v2\"")]), current), None);
        assert_eq!(precondition(&Method::PATCH, &headers(&[("if-match", "\"p-v1\"")]), current), failed);
        assert_eq!(precondition(&Method::DELETE, &headers(&[("if-match", "\"p-v1\"")]), current), failed);
        assert_eq!(precondition(&Method::PATCH, &headers(&[]), current), None, "428 is decided before");
        assert_eq!(precondition(&Method::PUT, &headers(&[("if-none-match", "*")]), None), None);
        assert_eq!(precondition(&Method::PUT, &headers(&[("if-none-match", "*")]), current), failed);
        let two = headers(&[("if-match", "\"p-v1\""), ("if-match", "\"p-v2\"")]);
        assert_eq!(precondition(&Method::PUT, &two, current), None);
        // Reads: the current tag in If-None-Match is 304, weakly compared.
        for method in [Method::GET, Method::HEAD] {
            let not_modified = Some(Verdict::NotModified);
            assert_eq!(precondition(&method, &headers(&[("if-none-match", "W/\"p-v2\"")]), current), not_modified);
            assert_eq!(precondition(&method, &headers(&[("if-none-match", "\"p-v1\"")]), current), None);
            assert_eq!(precondition(&method, &headers(&[("if-match", "\"p-v1\"")]), current), failed);
        }
        let answer = precondition_answer(Verdict::NotModified, current);
        assert_eq!((answer.status(), answer.headers()[ETAG].to_str().ok()), (StatusCode::NOT_MODIFIED, current));
    }

    #[test]
    fn every_unsafe_method_but_post_needs_if_match() {
        for method in [Method::PUT, Method::PATCH, Method::DELETE, Method::from_bytes(b"MERGE").expect("a method")] {
            assert!(needs_if_match(&method), "{method}");
        }
        for method in [Method::POST, Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE] {
            assert!(!needs_if_match(&method), "{method}");
        }
    }
}
