//! A `tower` layer for the HTTP `Idempotency-Key` contract (IETF httpapi
//! draft, Stripe-style APIs), over any [`IdempotencyBackend`] — the
//! embedded [`Store`](crate::Store) or, later, a networked one.
//!
//! For the configured methods (POST and PATCH by default) the layer reads
//! the key header, buffers the request body (within a limit), fingerprints
//! method, path, query and body, and claims `(scope, key)`:
//!
//! | claim answer | response |
//! |---|---|
//! | acquired | the inner service runs; its status, chosen headers and body are stored (see [`FailurePolicy`]) |
//! | replay | the stored status, headers and body, plus `Idempotency-Replay: true`; the inner service is not called |
//! | in progress | 409 with `Retry-After`; with `Prefer: wait=N` the layer first waits up to N seconds for the first request to finish, then replays |
//! | mismatch | 422 |
//! | key missing (when required), malformed or too long | 400 |
//!
//! Errors are `application/problem+json`. Store calls run on tokio's
//! blocking pool, so a `Sync` store's fsyncs never block the reactor.
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
//! let app: Router = Router::new()
//!     .route("/payments", post(|| async { "charged" }))
//!     .layer(IdempotencyLayer::new(store, LayerConfig::default()));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```

mod config;
mod key;
mod problem;
mod response;

pub use crate::backend::{BackendClaim, IdempotencyBackend};
pub use config::{FailurePolicy, LayerConfig};

use crate::{Error, Fingerprint, LeaseToken};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Full, Limited};
use key::{parse_key, prefer_wait};
use problem::{in_progress, problem};
use response::{encode_response, replay};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The `tower::Layer`.
#[derive(Clone)]
pub struct IdempotencyLayer<K> {
    backend: Arc<K>,
    config: Arc<LayerConfig>,
}

impl<K> std::fmt::Debug for IdempotencyLayer<K> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("IdempotencyLayer").field("config", &self.config).finish_non_exhaustive()
    }
}

impl<K: IdempotencyBackend> IdempotencyLayer<K> {
    /// A layer over `backend`.
    pub fn new(backend: K, config: LayerConfig) -> Self {
        IdempotencyLayer { backend: Arc::new(backend), config: Arc::new(config) }
    }
}

impl<S, K> tower::Layer<S> for IdempotencyLayer<K> {
    type Service = IdempotencyService<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyService { inner, backend: Arc::clone(&self.backend), config: Arc::clone(&self.config) }
    }
}

/// The service the layer wraps around an inner service.
#[derive(Clone)]
pub struct IdempotencyService<S, K> {
    inner: S,
    backend: Arc<K>,
    config: Arc<LayerConfig>,
}

impl<S, K> std::fmt::Debug for IdempotencyService<S, K> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("IdempotencyService").finish_non_exhaustive()
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ResponseFuture<E> = Pin<Box<dyn Future<Output = Result<Response<Full<Bytes>>, E>> + Send>>;

impl<S, K, B, R> tower::Service<Request<B>> for IdempotencyService<S, K>
where
    S: tower::Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    K: IdempotencyBackend,
    B: Body<Data = Bytes> + From<Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    R: Body<Data = Bytes> + Send + 'static,
    R::Error: Into<BoxError>,
{
    type Response = Response<Full<Bytes>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Error>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The ready inner service goes to this call; a clone stays for the next.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let (backend, config) = (Arc::clone(&self.backend), Arc::clone(&self.config));
        Box::pin(guard(inner, backend, config, request))
    }
}

async fn guard<S, K, B, R>(
    mut inner: S,
    backend: Arc<K>,
    config: Arc<LayerConfig>,
    request: Request<B>,
) -> Result<Response<Full<Bytes>>, S::Error>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    K: IdempotencyBackend,
    B: Body<Data = Bytes> + From<Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    R: Body<Data = Bytes>,
    R::Error: Into<BoxError>,
{
    if !config.methods.contains(request.method()) {
        return pass_through(inner, request).await;
    }
    let key = match parse_key(request.headers().get(&config.key_header), config.key_bytes_max) {
        Ok(Some(key)) => key,
        Ok(None) if !config.require_key => return pass_through(inner, request).await,
        Ok(None) => {
            return Ok(problem(
                StatusCode::BAD_REQUEST,
                "missing idempotency key",
                "This endpoint requires an Idempotency-Key header.",
            ))
        }
        Err(detail) => return Ok(problem(StatusCode::BAD_REQUEST, "invalid idempotency key", detail)),
    };
    let (parts, body) = request.into_parts();
    let Ok(body) =
        Limited::new(body, config.request_bytes_max).collect().await.map(http_body_util::Collected::to_bytes)
    else {
        return Ok(problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request body too large",
            "The request body is over the limit or could not be read.",
        ));
    };
    let scope = config.scope.as_ref().map_or_else(Vec::new, |scope| scope(&parts));
    let fingerprint = Fingerprint::builder()
        .part(parts.method.as_str().as_bytes())
        .part(parts.uri.path().as_bytes())
        .part(parts.uri.query().unwrap_or("").as_bytes())
        .part(&body)
        .finish();
    let wait = prefer_wait(&parts.headers).map(|wait| wait.min(config.wait_max));
    let claim = {
        let (backend, scope, key) = (Arc::clone(&backend), scope.clone(), key.clone());
        blocking(move || backend.claim(&scope, &key, fingerprint, wait)).await
    };
    let token = match claim {
        Ok(BackendClaim::Acquired(token)) => token,
        Ok(BackendClaim::Replay(stored)) => return Ok(replay(&stored, &config)),
        Ok(BackendClaim::InProgress { retry_after }) => return Ok(in_progress(retry_after)),
        Ok(BackendClaim::Mismatch) => {
            return Ok(problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency key reused",
                "This key was used for a different request.",
            ));
        }
        Err(error) => {
            return Ok(problem(StatusCode::SERVICE_UNAVAILABLE, "idempotency store unavailable", &error.to_string()))
        }
    };
    // Until disarmed, dropping this (the client went away, the future was
    // cancelled) releases the key so that a retry may run.
    let mut release = ReleaseOnDrop { backend: Some(Arc::clone(&backend)), token: token.clone() };
    // An error of the inner service drops `release`, freeing the key.
    let response = inner.call(Request::from_parts(parts, B::from(body))).await?;
    let (parts, body) = response.into_parts();
    let Ok(body) =
        Limited::new(body, config.response_bytes_max).collect().await.map(http_body_util::Collected::to_bytes)
    else {
        return Ok(problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            "response not stored",
            "The response was over the limit or failed; the key was released.",
        ));
    };
    let backend = release.disarm();
    if config.policy.keeps(parts.status) {
        let encoded = encode_response(parts.status, &parts.headers, &config.stored_headers, &body);
        let stored = blocking(move || backend.complete(&token, &encoded)).await;
        if let Err(error) = stored {
            return Ok(problem(StatusCode::INTERNAL_SERVER_ERROR, "response not stored", &error.to_string()));
        }
    } else {
        // Freed before the answer goes out, so a retry that follows it runs.
        // LeaseLost means the key moved on already; nothing to undo.
        let _released = blocking(move || backend.release(&token)).await;
    }
    Ok(Response::from_parts(parts, Full::new(body)))
}

async fn pass_through<S, B, R>(mut inner: S, request: Request<B>) -> Result<Response<Full<Bytes>>, S::Error>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    R: Body<Data = Bytes>,
    R::Error: Into<BoxError>,
{
    let (parts, body) = inner.call(request).await?.into_parts();
    match body.collect().await {
        Ok(collected) => Ok(Response::from_parts(parts, Full::new(collected.to_bytes()))),
        Err(_) => Ok(problem(
            StatusCode::BAD_GATEWAY,
            "response body failed",
            "The handler's response body could not be read.",
        )),
    }
}

/// Releases the key unless disarmed.
struct ReleaseOnDrop<K: IdempotencyBackend> {
    backend: Option<Arc<K>>,
    token: LeaseToken,
}

impl<K: IdempotencyBackend> ReleaseOnDrop<K> {
    fn disarm(&mut self) -> Arc<K> {
        self.backend.take().expect("disarmed once")
    }
}

impl<K: IdempotencyBackend> Drop for ReleaseOnDrop<K> {
    fn drop(&mut self) {
        if let Some(backend) = self.backend.take() {
            let token = self.token.clone();
            let release = move || {
                // LeaseLost means someone else already moved on; nothing to undo.
                let _released = backend.release(&token);
            };
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(release)),
                Err(_) => release(),
            }
        }
    }
}

/// Runs a store call on tokio's blocking pool.
async fn blocking<T: Send + 'static>(call: impl FnOnce() -> Result<T, Error> + Send + 'static) -> Result<T, Error> {
    match tokio::task::spawn_blocking(call).await {
        Ok(result) => result,
        Err(join) => Err(Error::Io {
            operation: "blocking task",
            path: std::path::PathBuf::new(),
            source: std::io::Error::other(join.to_string()),
        }),
    }
}
