//! The HTTP `Idempotency-Key` contract of idemkv's tower layer
//! ([`idemkv::http`]) as an actix-web 4 middleware: the same decisions,
//! answers, headers and failure policy, over any [`IdempotencyBackend`]
//! (the embedded [`Store`](idemkv::Store), Redis, PostgreSQL).
//!
//! # Examples
//!
//! ```
//! use actix_web::{test, web, App, HttpResponse};
//! use idemkv::http::LayerConfig;
//! use idemkv::{Config, Durability, Store};
//! use idemkv_actix::Idempotency;
//!
//! # actix_web::rt::System::new().block_on(async {
//! let dir = tempfile::tempdir().expect("tempdir");
//! let store = Store::open(dir.path(), Config::new().durability(Durability::Buffered)).expect("open");
//! // Keys are per account: two accounts may use the same key.
//! let config = LayerConfig::scoped(|request| {
//!     request.headers.get("x-account").map(|account| account.as_bytes().to_vec())
//! });
//! let app = App::new()
//!     .wrap(Idempotency::new(store, config))
//!     .route("/payments", web::post().to(|| async { HttpResponse::Created().body("charged") }));
//! let app = test::init_service(app).await;
//!
//! let charge = || {
//!     test::TestRequest::post()
//!         .uri("/payments")
//!         .insert_header(("x-account", "acme"))
//!         .insert_header(("idempotency-key", "\"order-1\""))
//!         .set_payload("amount=10")
//!         .to_request()
//! };
//! let first = test::call_service(&app, charge()).await;
//! let again = test::call_service(&app, charge()).await;
//! assert_eq!((first.status().as_u16(), again.status().as_u16()), (201, 201));
//! assert_eq!(again.headers().get("idempotency-replay").map(|value| value.as_bytes()), Some(&b"true"[..]));
//! assert_eq!(test::read_body(again).await, "charged");
//! # });
//! ```
//!
//! Everything [`LayerConfig`] sets works here as there: scopes, methods,
//! the key header or a natural key, fingerprints, `Prefer: wait`, the
//! expiry a client asks for, resource holds, conditional writes, long
//! operations and their status resource. A handler reads [`Attempt`],
//! [`Checkpoints`] and [`ResourceHold`](idemkv::http::ResourceHold) from
//! the request's extensions (`HttpMessage::extensions`, or the
//! `ReqData` extractor), and frees its key by marking its response
//! [`NotSpent`] (`response.extensions_mut().insert(NotSpent)`). The
//! scope, resource and fingerprint functions see the request's head in
//! `http` 1 types, as under tower.
//!
//! # Design
//!
//! actix-web does not run tower middleware, and its services are bound
//! to the worker thread they run on (`Rc`, `!Send` requests, payloads and
//! bodies), while the layer wants a `Send` inner service whose future it
//! may move to a task of its own (a handler runs to its end when its
//! client leaves; a long operation runs on after its `202`). The
//! middleware therefore keeps the layer whole, decisions and all, and
//! bridges the two worlds at their boundary instead of copying them:
//!
//! 1. The actix request's head is converted to an `http` 1 request
//!    (actix-web 4 speaks `http` 0.2: method, URI, version and headers
//!    are copied byte for byte). Its payload stays on the worker: a task
//!    of the worker's own pumps it into a channel the layer reads from
//!    any thread, a few chunks at a time (the layer buffers a guarded
//!    body within [`LayerConfig::request_bytes_max`] as under tower, and
//!    a body it never reads is never read to its end).
//! 2. That request goes through an [`IdempotencyLayer`]-wrapped service
//!    whose inner service is a bridge: when the layer lets the request
//!    through, the bridge hands it, over a one-shot channel, to a task on
//!    the actix worker, which moves the layer's extensions onto the actix
//!    request, runs the actix service and sends its answer's head back,
//!    its body pumped by the worker into a channel the layer reads (an
//!    actix body cannot leave its thread; its stated length goes along as
//!    the body's exact size). An error of the actix service goes back as
//!    actix would answer it (its error response), and is kept like any
//!    answer. The
//!    handler runs in that task, not in the middleware's future: a client
//!    that leaves drops the middleware's future, never the handler's run
//!    (the layer keeps awaiting the bridge in a task of its own). The
//!    bridge's future waits from the start, so it takes over telling the
//!    layer when the handler itself first waits
//!    ([`FirstWait`](idemkv::http::FirstWait)): a request that asked to
//!    respond async is answered `202` once the actix handler waits, and at
//!    once when it answered at once (a route that does not exist).
//! 3. The layer's answer is converted back, status and headers (in their
//!    order), its body streamed, with a `Content-Length` when its length
//!    is known (a kept answer, a replay, a refusal, a handler's body of a
//!    stated length), as under hyper.
//!
//! So replays, refusals (`application/problem+json`, the same
//! `urn:idemkv:problem:*` types), `Retry-After`, `Idempotency-Replay`,
//! `Idempotency-Stored` and the failure policy are the tower layer's own,
//! byte for byte, and what the layer does not guard streams through
//! untouched. What differs: when the layer answers while the handler
//! still runs (a `202` of a long operation), the actix request is still
//! the handler's, so the response carries a stand-in request with the
//! same method and URI (what outer middleware may read from
//! `ServiceResponse::request`). The middleware spawns its tasks on the
//! actix worker (`actix_web::rt::spawn`): it runs under actix's runtime
//! (`HttpServer`, `actix_web::test`), not on a bare tokio runtime.
//!
//! A panic in the handler ends the worker's task. For a guarded request
//! the bridge carries it to the layer as the unwind of the handler's
//! future (`resume_unwind`, which runs no panic hook again), so that the
//! layer does what it does for a tower handler that panics: the answer is
//! its 500 `handler-failed` problem, the key stays in progress until its
//! lease ends, and a held resource is left to lapse, so that its next
//! holder runs recovered. A request the layer does not guard gets a bare
//! 500 ([`HandlerFailed`]).

mod body;
mod bridge;
mod convert;

// The README's example, compiled with the doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{forward_ready, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::HttpRequest;
use futures_util::future::LocalBoxFuture;
pub use idemkv::http::{Attempt, Checkpoints, IdempotencyBackend, IdempotencyLayer, LayerConfig, NotSpent};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;
use tower::{Layer, Service as _};

/// A handler that failed to answer (it panicked, its worker stopped):
/// what the layer sees, and what the middleware answers with a bare 500.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the handler failed to answer: {reason}")]
pub struct HandlerFailed {
    reason: String,
}

impl HandlerFailed {
    fn new(reason: impl Into<String>) -> Self {
        HandlerFailed { reason: reason.into() }
    }
}

impl actix_web::ResponseError for HandlerFailed {}

/// The middleware (an actix [`Transform`]): wrap an `App`, a scope or a
/// resource with it. Its clones share one layer (one backend, one keeper
/// thread): make it once, clone it into each worker's `App`.
#[derive(Debug)]
pub struct Idempotency<K> {
    layer: IdempotencyLayer<K>,
}

// By hand: the backend is shared, so it need not be `Clone` itself.
impl<K> Clone for Idempotency<K> {
    fn clone(&self) -> Self {
        Idempotency { layer: self.layer.clone() }
    }
}

impl<K: IdempotencyBackend> Idempotency<K> {
    /// The middleware over `backend`, with `config` (see [`LayerConfig`]).
    pub fn new(backend: K, config: LayerConfig) -> Self {
        Idempotency { layer: IdempotencyLayer::new(backend, config) }
    }

    /// The middleware around a tower `layer` of the service's own: one
    /// layer (one backend, one keeper thread) may serve an axum router
    /// and an actix app of the same service.
    #[must_use]
    pub fn from_layer(layer: IdempotencyLayer<K>) -> Self {
        Idempotency { layer }
    }
}

impl<S, B, K> Transform<S, ServiceRequest> for Idempotency<K>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
    K: IdempotencyBackend,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = actix_web::Error;
    type Transform = IdempotencyMiddleware<S, K>;
    type InitError = ();
    type Future = std::future::Ready<Result<Self::Transform, ()>>;

    fn new_transform(&self, service: S) -> Self::Future {
        std::future::ready(Ok(IdempotencyMiddleware { service: Rc::new(service), layer: self.layer.clone() }))
    }
}

/// The service [`Idempotency`] wraps around an actix service.
pub struct IdempotencyMiddleware<S, K> {
    service: Rc<S>,
    layer: IdempotencyLayer<K>,
}

impl<S, K> std::fmt::Debug for IdempotencyMiddleware<S, K> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("IdempotencyMiddleware").field("layer", &self.layer).finish_non_exhaustive()
    }
}

impl<S, B, K> Service<ServiceRequest> for IdempotencyMiddleware<S, K>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
    K: IdempotencyBackend,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<ServiceResponse<BoxBody>, actix_web::Error>>;

    forward_ready!(service);

    fn call(&self, request: ServiceRequest) -> Self::Future {
        Box::pin(guarded(Rc::clone(&self.service), self.layer.clone(), request))
    }
}

/// A stand-in for the actix request while the handler still holds it.
fn stand_in(method: actix_web::http::Method, uri: &actix_web::http::Uri) -> HttpRequest {
    actix_web::test::TestRequest::default().method(method).uri(&uri.to_string()).to_http_request()
}

/// One request through the layer (see the crate's docs, "Design").
async fn guarded<S, B, K>(
    service: Rc<S>,
    layer: IdempotencyLayer<K>,
    request: ServiceRequest,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
    K: IdempotencyBackend,
{
    let (request, payload) = request.into_parts();
    let (method, uri) = (request.method().clone(), request.uri().clone());
    let head = convert::request_of(&request, body::pumped(payload)).map_err(actix_web::error::ErrorBadRequest)?;
    let (handoff, handed) = oneshot::channel();
    let (back, returned) = oneshot::channel();
    let slot: bridge::Slot = Arc::new(Mutex::new(Some(handoff)));
    drop(actix_web::rt::spawn(bridge::handle(service, request, handed, back)));
    let mut layered = layer.layer(bridge::Bridge { slot: Arc::clone(&slot) });
    std::future::poll_fn(|context| layered.poll_ready(context)).await?;
    let answer = layered.call(head);
    drop(layered);
    let answer = answer.await;
    // Not handed over: the worker's task gives the request back at once.
    let handed_over = bridge::take(&slot).is_none();
    let request = if handed_over { returned_now(returned) } else { returned.await.ok() };
    let response = convert::answer_of(answer?);
    Ok(ServiceResponse::new(request.unwrap_or_else(|| stand_in(method, &uri)), response))
}

/// The actix request, if the handler has given it back already.
fn returned_now(mut returned: oneshot::Receiver<HttpRequest>) -> Option<HttpRequest> {
    returned.try_recv().ok()
}
