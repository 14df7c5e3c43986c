//! One guarded request: key, scope and body read, the claim, and the
//! handler's run to its end, with its lease kept alive.

use super::config::{Attempt, LayerConfig, NotSpent, ScopeRule};
use super::detached::Detached;
use super::key::{prefer_wait, read_key, KeyError};
use super::problem::{in_progress, quota_exceeded, Problem};
use super::recovery::RecoveryPoints;
use super::response::{encode_response, encoded_head_bytes, replay};
use super::{BoxError, LayerBody};
use crate::backend::{BackendClaim, ClaimOptions, IdempotencyBackend};
use crate::{Error, Fingerprint, LeaseToken};
use bytes::Bytes;
use http::header::HeaderValue;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Either, Full, LengthLimitError, Limited};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

/// A response header set when the handler's answer could not be kept (its
/// lease was lost, or the store failed): the answer is true, but a retry
/// will not replay it.
pub(super) const NOT_STORED_HEADER: &str = "idempotency-stored";

fn answer<R>(problem: Problem) -> Response<LayerBody<R>> {
    problem.response().map(Either::Right)
}

/// A request refused before its claim (key, scope or body unusable).
fn refused<R>(problem: Problem) -> Response<LayerBody<R>> {
    counted("refused", answer(problem))
}

/// Name of the counter of the layer's answers, by `outcome` and `status`.
pub(super) const RESPONSES_TOTAL: &str = "idempo_http_responses_total";

/// Counts one answer of the layer under `outcome` (what the layer decided)
/// and its status.
fn counted<T>(outcome: &'static str, response: Response<T>) -> Response<T> {
    count(outcome, response.status().as_str());
    response
}

#[cfg_attr(not(feature = "metrics"), expect(unused_variables, reason = "the labels are for the exporter"))]
fn count(outcome: &'static str, status: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(RESPONSES_TOTAL, "outcome" => outcome, "status" => status.to_owned()).increment(1);
}

/// Guards one request of a guarded method.
pub(super) async fn guard<S, K, B, R>(
    mut inner: S,
    backend: Arc<K>,
    config: Arc<LayerConfig>,
    request: Request<B>,
) -> Result<Response<LayerBody<R>>, S::Error>
where
    S: tower::Service<Request<B>, Response = Response<R>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    K: IdempotencyBackend,
    B: Body<Data = Bytes> + From<Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    R: Body<Data = Bytes> + Send + 'static,
    R::Error: Into<BoxError>,
{
    let limits = backend.limits();
    let key = match read_key(request.headers(), &config.key_header, limits.key_bytes_max) {
        Ok(Some(key)) => key,
        Ok(None) if !config.require_key => {
            return inner.call(request).await.map(|response| counted("unkeyed", response.map(Either::Left)));
        }
        Ok(None) => return Ok(refused(Problem::KeyMissing)),
        Err(KeyError::Repeated) => return Ok(refused(Problem::KeyRepeated)),
        Err(KeyError::Invalid(detail)) => return Ok(refused(Problem::KeyInvalid(detail))),
    };
    let (mut parts, body) = request.into_parts();
    let scope = match &config.scope {
        ScopeRule::Global => Vec::new(),
        ScopeRule::PerRequest(scope_of) => match scope_of(&parts) {
            Some(scope) => scope,
            None => return Ok(refused(Problem::ScopeMissing)),
        },
    };
    if scope.len() > limits.scope_bytes_max {
        return Ok(refused(Problem::ScopeTooLong));
    }
    let Ok(body) =
        Limited::new(body, config.request_bytes_max).collect().await.map(http_body_util::Collected::to_bytes)
    else {
        return Ok(refused(Problem::BodyTooLarge));
    };
    let fingerprint = Fingerprint::builder()
        .part(parts.method.as_str().as_bytes())
        .part(parts.uri.path().as_bytes())
        .part(parts.uri.query().unwrap_or("").as_bytes())
        .part(&body)
        .finish();
    let wait = prefer_wait(&parts.headers).map(|wait| wait.min(config.wait_max));
    let options = ClaimOptions::new().lease(config.lease).wait(wait);
    let (token, attempt, recovered, checkpoint) = match backend.claim(&scope, &key, fingerprint, options).await {
        Ok(BackendClaim::Acquired { token, attempt, recovered, checkpoint }) => (token, attempt, recovered, checkpoint),
        Ok(BackendClaim::Replay(stored)) => {
            return Ok(counted("replay", replay(&stored, &config.replay_header).map(Either::Right)));
        }
        Ok(BackendClaim::InProgress { retry_after }) => {
            return Ok(counted("in_progress", in_progress(retry_after).map(Either::Right)));
        }
        Ok(BackendClaim::Mismatch) => return Ok(counted("mismatch", answer(Problem::KeyReused))),
        Err(Error::QuotaExceeded { retry_after, .. }) => {
            return Ok(counted("quota_exceeded", quota_exceeded(retry_after).map(Either::Right)));
        }
        Err(error) => {
            tracing::warn!(%error, "idempotency store unavailable; request refused before it ran");
            return Ok(counted("store_unavailable", answer(Problem::StoreUnavailable)));
        }
    };
    let points = RecoveryPoints::new(Arc::clone(&backend), token.clone(), (attempt, recovered), checkpoint.clone());
    parts.extensions.insert(points);
    parts.extensions.insert(Attempt { scope, key, attempt, recovered, checkpoint });
    let request = Request::from_parts(parts, B::from(body));
    // The handler runs to its end whatever the client does: a client that
    // goes away drops this future, and the handler's run moves to a task of
    // its own, whose answer is then kept for the retry.
    let run = Detached::new(run(inner, Arc::clone(&backend), Arc::clone(&config), request, token.clone()));
    let Ok(outcome) = run.await else {
        tracing::error!("handler panicked");
        if config.policy.releases_on_error() {
            release(&*backend, &token).await;
        }
        return Ok(counted("handler_failed", answer(Problem::HandlerFailed)));
    };
    outcome
}

/// Runs the handler under its lease and keeps (or releases) what it
/// answered.
async fn run<S, K, B, R>(
    mut inner: S,
    backend: Arc<K>,
    config: Arc<LayerConfig>,
    request: Request<B>,
    token: LeaseToken,
) -> Result<Response<LayerBody<R>>, S::Error>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    K: IdempotencyBackend,
    R: Body<Data = Bytes>,
    R::Error: Into<BoxError>,
{
    // The handler and its lease's keep-alive run side by side in this task.
    let answered = tokio::select! {
        biased;
        answered = inner.call(request) => answered,
        never = keep_alive(&*backend, &token, config.lease) => match never {},
    };
    let response = match answered {
        Ok(response) => response,
        Err(error) => {
            handler_failed(&*backend, &config, &token, "the handler returned an error").await;
            count("handler_failed", "error");
            return Err(error);
        }
    };
    let (parts, body) = response.into_parts();
    if parts.extensions.get::<NotSpent>().is_some()
        || !config.policy.keeps(parts.status, config.keep_validation_failures)
    {
        // Not kept: freed before the answer goes out, so that a retry that
        // follows it runs.
        release(&*backend, &token).await;
        return Ok(counted("executed_not_kept", Response::from_parts(parts, Either::Left(body))));
    }
    let budget =
        backend.limits().response_bytes_max.saturating_sub(encoded_head_bytes(&parts.headers, &config.replay_deny));
    let body = match Limited::new(body, budget).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) if error.downcast_ref::<LengthLimitError>().is_some() => {
            return Ok(counted("response_too_large", keep_too_large(&*backend, &token).await));
        }
        Err(error) => {
            tracing::warn!(%error, "the handler's response body failed");
            handler_failed(&*backend, &config, &token, "the handler's response body failed").await;
            return Ok(counted("handler_failed", answer(Problem::ResponseUnreadable)));
        }
    };
    let encoded = encode_response(parts.status, &parts.headers, &config.replay_deny, &body);
    let mut response = Response::from_parts(parts, Either::Right(Full::new(body)));
    if let Err(error) = backend.complete(&token, &encoded).await {
        tracing::error!(%error, "the handler's answer could not be kept; a retry will not replay it");
        response.headers_mut().insert(NOT_STORED_HEADER, HeaderValue::from_static("false"));
        return Ok(counted("executed_not_stored", response));
    }
    Ok(counted("executed", response))
}

/// After the handler's error or panic: by default the key stays in
/// progress until its lease ends (a retry then runs as a recovered
/// attempt); [`FailurePolicy::ReleaseOnServerError`](super::FailurePolicy::ReleaseOnServerError)
/// releases it.
async fn handler_failed<K: IdempotencyBackend>(backend: &K, config: &LayerConfig, token: &LeaseToken, what: &str) {
    if config.policy.releases_on_error() {
        release(backend, token).await;
    } else {
        tracing::warn!(what, "the key stays in progress until its lease ends; the next attempt runs recovered");
    }
}

/// A response too large to keep: a 500 problem is kept as a terminal
/// failure instead, so the retry gets an answer and never runs again.
async fn keep_too_large<K: IdempotencyBackend, R>(backend: &K, token: &LeaseToken) -> Response<LayerBody<R>> {
    let problem = Problem::ResponseTooLarge.response();
    let body = Problem::ResponseTooLarge.body();
    let encoded = encode_response(problem.status(), problem.headers(), &[], body.as_bytes());
    let mut response = problem.map(Either::Right);
    if let Err(error) = backend.fail(token, &encoded).await {
        tracing::error!(%error, "a too-large response could not be kept as a failure");
        response.headers_mut().insert(NOT_STORED_HEADER, HeaderValue::from_static("false"));
    }
    response
}

/// Frees the key; a lost lease means the key moved on already.
async fn release<K: IdempotencyBackend>(backend: &K, token: &LeaseToken) {
    match backend.release(token).await {
        Ok(()) | Err(Error::LeaseLost { .. }) => {}
        Err(error) => tracing::warn!(%error, "releasing a key failed; it stays in progress until its lease ends"),
    }
}

/// Renews a running handler's lease every third of the lease, for as long
/// as it is polled; after a lost lease it only waits.
async fn keep_alive<K: IdempotencyBackend>(backend: &K, token: &LeaseToken, lease: Duration) -> Infallible {
    let period = (lease / 3).max(Duration::from_millis(1));
    loop {
        tokio::time::sleep(period).await;
        match backend.renew(token, lease).await {
            Ok(()) => {}
            Err(error @ Error::LeaseLost { .. }) => {
                tracing::warn!(%error, "lease lost while the handler runs; its answer will not be kept");
                return std::future::pending().await;
            }
            Err(error) => tracing::warn!(%error, "renewing a running handler's lease failed; retrying"),
        }
    }
}
