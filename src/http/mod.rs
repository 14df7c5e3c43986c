//! A `tower` layer for the HTTP `Idempotency-Key` contract (IETF httpapi
//! draft, Stripe-style APIs), over any [`IdempotencyBackend`] — the
//! embedded [`Store`](crate::Store) or a networked one.
//!
//! # Examples
//!
//! ```no_run
//! use axum::{routing::post, Router};
//! use idemkv::http::{IdempotencyLayer, LayerConfig};
//! use idemkv::{Config, Store};
//!
//! # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Store::open("/var/lib/payments/idempotency", Config::new())?;
//! // Keys are per account: two accounts may use the same key.
//! let config = LayerConfig::scoped(|request| {
//!     request.headers.get("x-account").map(|account| account.as_bytes().to_vec())
//! });
//! let app: Router = Router::new()
//!     .route("/payments", post(|| async { "charged" }))
//!     .layer(IdempotencyLayer::new(store, config));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
//!
//! For the configured methods (POST and PATCH by default) the layer reads
//! the key header, finds the request's scope (see [`LayerConfig::scoped`]),
//! buffers the request body (within a limit), fingerprints it (method,
//! path, query and body's bytes by default; canonical JSON, chosen fields,
//! headers or a function of the service's own with
//! [`LayerConfig::fingerprint`]), and claims `(scope, key)`:
//!
//! | claim answer | response |
//! |---|---|
//! | acquired | the handler runs to its end (a client that leaves does not cancel it), with [`Attempt`] and [`Checkpoints`] extensions; what it answered is kept (see [`FailurePolicy`]) |
//! | replay | the stored status, headers and body, plus `Idempotency-Replay: true`; the handler is not called |
//! | in progress | 409 with `Retry-After` (at most [`LayerConfig::in_progress_retry_after`]); with `Prefer: wait=N` the layer first waits up to N seconds for the first request to finish, then replays with `Preference-Applied: wait=N` |
//! | mismatch (another request under the key, by its fingerprint) | 422 `key-reused` |
//! | a body that is not JSON under a JSON fingerprint ([`RequestFingerprint::json`]), or a request a fingerprint of the service's own refuses | 400 `body-not-json`, `fingerprint-refused`; nothing is claimed |
//! | a new key in a scope at its quota ([`Error::QuotaExceeded`](crate::Error::QuotaExceeded), embedded store) | 429 with `Retry-After`; the handler is not called |
//! | no key (when required), a malformed, repeated or too long key, no scope | 400 |
//! | an `Idempotency-Key-Expiry` over [`LayerConfig::expiry_max`], or malformed | 400 `expiry-too-long`, `expiry-invalid`; nothing is claimed (a kept answer, its replays and a long operation's 202s state the expiry in force in their own `Idempotency-Key-Expiry`) |
//! | the store fails the claim | 503 with `Retry-After: 1`; the handler is not called |
//! | the resource the request names ([`LayerConfig::resource`]) held by another request | 409 `resource-locked` with `Retry-After`, or a wait under `Prefer: wait`; the key is not spent |
//! | a versioned resource ([`LayerConfig::versioned_resource`]) not at the `If-Match` version, or no `If-Match` where required | 412, 428 (decided before anything is held); the key is not spent |
//! | a `GET` or `HEAD` of a versioned resource with `If-None-Match` naming its current tag | 304 with the `ETag`; the handler is not called |
//! | `Prefer: respond-async` and a handler that waits on something, or a run past [`LayerConfig::respond_async_after`] ([`LayerConfig::operations`]) | 202 with `Location` of a status resource, which tells the answer (kept or not), or `operation-abandoned` once a run that died has lost its lease; the handler runs on |
//!
//! **Never twice.** Once the handler has started, the key is spent: the
//! handler runs to its end even when the client disconnects (its run then
//! moves to a task of its own) and its answer is kept for the retry; from
//! the claim until its answer is stored, a keeper thread of the layer's own
//! renews its lease about every third of [`LayerConfig::lease`], so neither a
//! handler that blocks its thread nor a body that streams for longer than
//! the lease lets it lapse (a networked backend's connection still needs
//! one free worker of the service's runtime); its 5xx is kept
//! like any answer; its error or panic leaves the key in progress until the
//! lease ends, after which the next attempt runs with
//! [`Attempt::recovered`] set and, in [`Checkpoints::last`], the last
//! checkpoint the earlier run stored, to resume after that step instead
//! of running it again. Only the handler's word — the [`NotSpent`]
//! response extension — frees the key for a retry (and validation
//! statuses, see [`FailurePolicy`]). A 404 or 405 is kept like any answer
//! (a handler that did its work may answer 404); the router's own, given
//! when no handler ran, free the key when its fallbacks mark them
//! [`NotSpent`] (axum's `fallback` and `method_not_allowed_fallback`). A
//! response too large to keep, whichever part of it is too large, goes to
//! its caller whole and is kept without its body (its status and headers;
//! its status alone when the headers are too large already), replayed
//! with `Idempotency-Replay: omitted`. An answer the store fails to keep
//! is tried again while the lease is held; the key stays in progress
//! meanwhile:
//!
//! | the answer's write | the client's answer |
//! |---|---|
//! | stored | the handler's answer |
//! | refused for its size | the handler's answer, whole; what is stored is it without its body |
//! | the lease was lost (taken over, removed) | the handler's answer with `Idempotency-Stored: false` |
//! | failed (I/O, a full disk, the network, a closed store) | the handler's answer, after a few quick tries (with `Idempotency-Stored: false` if they all failed); then tried in the background while the lease is held, for at most one lease; if it never succeeds, the lease lapses and the next attempt runs with [`Attempt::recovered`] |
//!
//! Waiting (`Prefer: wait`) is async and capped by the store; no thread is
//! parked. Requests the layer does not guard pass through untouched, their
//! bodies streamed. Errors are `application/problem+json` with a stable
//! `urn:idemkv:problem:*` type and no internal detail (that goes to
//! `tracing`).
//!
//! With the `metrics` feature the layer counts every answer it gives in
//! `idempo_http_responses_total{outcome, status}`, `outcome` being one of
//! `executed` (the handler ran and its answer is kept), `executed_not_kept`
//! ([`NotSpent`] or the failure policy freed the key), `executed_not_stored`
//! (kept failed: `Idempotency-Stored: false`), `replay`, `in_progress`,
//! `mismatch`, `quota_exceeded`, `refused` (key, scope or body unusable), `store_unavailable`,
//! `handler_failed`, `response_too_large` (the handler's answer, kept
//! without its body), `unkeyed` (no key, not
//! required: passed through), `resource_locked`, `precondition_failed` and
//! `accepted` (a 202 of a long operation).
//!

mod body;
mod checkpoints;
mod config;
mod counted;
mod detached;
mod first_wait;
mod guard;
mod key;
mod operations;
mod problem;
mod resource;
mod response;
mod shared;
mod store_answer;
#[cfg(feature = "webhooks")]
mod webhook;

pub use crate::backend::{BackendClaim, BackendLimits, ClaimOptions, IdempotencyBackend};
pub use crate::fingerprint::{FingerprintError, RequestFingerprint};
pub use body::{Buffered, LayerBody};
pub use checkpoints::Checkpoints;
pub use config::IfMatch;
pub use config::{Attempt, FailurePolicy, LayerConfig, NotSpent};
pub use first_wait::FirstWait;
pub use resource::ResourceHold;
#[cfg(feature = "webhooks")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhooks")))]
pub use webhook::{WebhookAttempt, WebhookLayer, WebhookService, WEBHOOK_BODY_BYTES_MAX};

use crate::backend::keeper::Keeper;
use body::buffered;
use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::Either;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The `tower::Layer`.
pub struct IdempotencyLayer<K> {
    shared: Arc<shared::Shared<K>>,
}

// By hand: the backend is shared, so it need not be `Clone` itself.
impl<K> Clone for IdempotencyLayer<K> {
    fn clone(&self) -> Self {
        IdempotencyLayer { shared: Arc::clone(&self.shared) }
    }
}

impl<K> std::fmt::Debug for IdempotencyLayer<K> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("IdempotencyLayer").field("config", &self.shared.config).finish_non_exhaustive()
    }
}

impl<K: IdempotencyBackend> IdempotencyLayer<K> {
    /// A layer over `backend`.
    pub fn new(backend: K, config: LayerConfig) -> Self {
        #[cfg(feature = "metrics")]
        metrics::describe_counter!(
            counted::RESPONSES_TOTAL,
            "Answers of the idempotency layer by outcome (executed, executed_not_kept, executed_not_stored, \
             replay, in_progress, mismatch, quota_exceeded, refused, store_unavailable, handler_failed, \
             response_too_large, unkeyed, resource_locked, precondition_failed, accepted) and status"
        );
        let shared =
            shared::Shared { backend: Arc::new(backend), config: Arc::new(config), keeper: Arc::new(Keeper::new()) };
        IdempotencyLayer { shared: Arc::new(shared) }
    }
}

impl<S, K> tower::Layer<S> for IdempotencyLayer<K> {
    type Service = IdempotencyService<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyService { inner, shared: Arc::clone(&self.shared) }
    }
}

/// The service the layer wraps around an inner service.
pub struct IdempotencyService<S, K> {
    inner: S,
    /// Backend, settings and keeper: one count to move per request.
    shared: Arc<shared::Shared<K>>,
}

impl<S: Clone, K> Clone for IdempotencyService<S, K> {
    fn clone(&self) -> Self {
        IdempotencyService { inner: self.inner.clone(), shared: Arc::clone(&self.shared) }
    }
}

impl<S, K> std::fmt::Debug for IdempotencyService<S, K> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("IdempotencyService").finish_non_exhaustive()
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, K> IdempotencyService<S, K> {
    /// A read on a route that names resources: a `GET` or `HEAD` of a
    /// versioned one gets its `ETag`, read before the handler runs (a
    /// write meanwhile leaves the tag older than the body, so an
    /// `If-Match` with it fails rather than overwrites), or 304 / 412 when
    /// its preconditions say so, without the handler; the rest stream
    /// untouched.
    fn read<B, R>(&mut self, request: Request<B>) -> ResponseFuture<R, S::Error>
    where
        S: tower::Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Send + 'static,
        K: IdempotencyBackend,
        B: Send + 'static,
        R: Send + 'static,
    {
        let (parts, body) = request.into_parts();
        let Some((scope, resource)) = resource::read_of(&self.shared.config, &parts) else {
            let answer = self.inner.call(Request::from_parts(parts, body));
            return Box::pin(async move { answer.await.map(|response| response.map(Either::Left)) });
        };
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let backend = Arc::clone(&self.shared.backend);
        Box::pin(async move {
            let tag = match resource::tag_read(&backend, &scope, &resource, &parts).await {
                Ok(tag) => tag,
                Err(answer) => return Ok(answer.map(buffered)),
            };
            let response = inner.call(Request::from_parts(parts, body)).await?;
            let (mut parts, body) = response.into_parts();
            if let (true, Some(tag)) = (parts.status.is_success(), tag) {
                parts.headers.insert(http::header::ETAG, tag);
            }
            Ok(Response::from_parts(parts, Either::Left(body)))
        })
    }
}
type ResponseFuture<R, E> = Pin<Box<dyn Future<Output = Result<Response<LayerBody<R>>, E>> + Send>>;

impl<S, K, B, R> tower::Service<Request<B>> for IdempotencyService<S, K>
where
    S: tower::Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    K: IdempotencyBackend,
    B: Body<Data = Bytes> + From<Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    R: Body<Data = Bytes> + Send + 'static,
    R::Error: Into<BoxError>,
{
    type Response = Response<LayerBody<R>>;
    type Error = S::Error;
    type Future = ResponseFuture<R, S::Error>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let config = &self.shared.config;
        let operation = config.operations.as_ref().and_then(|operations| {
            Some((operations.clone(), operations.key_of(request.method(), request.uri().path())?))
        });
        if let Some((operations, key)) = operation {
            // A status resource: the layer answers it.
            let shared = Arc::clone(&self.shared);
            let (parts, _) = request.into_parts();
            return Box::pin(async move {
                let response = operations::status(&*shared.backend, &shared.config, &operations, &parts, key).await;
                Ok(response.map(buffered))
            });
        }
        let guarded = config.methods.contains(request.method());
        if !guarded && config.resource.is_some() && request.method().is_safe() {
            return self.read(request);
        }
        let (parts, body) = request.into_parts();
        let written = !guarded && resource::written(config, &parts);
        let request = Request::from_parts(parts, body);
        if !guarded && !written {
            // Unguarded: the request and the response stream untouched.
            let answer = self.inner.call(request);
            return Box::pin(async move { answer.await.map(|response| response.map(Either::Left)) });
        }
        // The ready inner service goes to this call; a clone stays for the next.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let shared = Arc::clone(&self.shared);
        if written {
            // A write to a resource with a method not guarded by keys:
            // held and checked all the same, its answer not kept; in a
            // request span of its own, as a guarded request, so that its
            // outcome is recorded there and never in the caller's span.
            return Box::pin(tracing::Instrument::instrument(
                guard::unkeyed(inner, shared, request),
                guard::request_span(),
            ));
        }
        Box::pin(tracing::Instrument::instrument(guard::guard(inner, shared, request), guard::request_span()))
    }
}
