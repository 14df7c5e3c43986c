//! A `tower` layer for the HTTP `Idempotency-Key` contract (IETF httpapi
//! draft, Stripe-style APIs), over any [`IdempotencyBackend`] — the
//! embedded [`Store`] or, later, a networked one.
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
//! use idemkv::http_layer::{IdempotencyLayer, LayerConfig};
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

use crate::{Claim, ClaimRequest, Error, Fingerprint, LeaseToken, Store};
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Full, Limited};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// The answer of a backend's claim, in owned parts.
#[derive(Debug)]
pub enum BackendClaim {
    /// Run the request, then finish this token.
    Acquired(LeaseToken),
    /// The stored response of the first request.
    Replay(Vec<u8>),
    /// Another request with this key is running.
    InProgress {
        /// Until its lease ends.
        retry_after: Duration,
    },
    /// The key was used for a different request.
    Mismatch,
}

/// What the layer needs of an idempotency store. Calls may block (fsync);
/// the layer makes them on tokio's blocking pool.
pub trait IdempotencyBackend: Send + Sync + 'static {
    /// Claims `(scope, key)`; with `wait`, waits up to that long while the
    /// key is in progress.
    ///
    /// # Errors
    /// The store's error.
    fn claim(
        &self,
        scope: &[u8],
        key: &[u8],
        fingerprint: Fingerprint,
        wait: Option<Duration>,
    ) -> Result<BackendClaim, Error>;

    /// Stores `response` as the replayed answer.
    ///
    /// # Errors
    /// The store's error ([`Error::LeaseLost`] for a stale token).
    fn complete(&self, token: &LeaseToken, response: &[u8]) -> Result<(), Error>;

    /// Stores `response` as a replayed terminal failure.
    ///
    /// # Errors
    /// As [`IdempotencyBackend::complete`].
    fn fail(&self, token: &LeaseToken, response: &[u8]) -> Result<(), Error>;

    /// Frees the key so that a retry may run.
    ///
    /// # Errors
    /// As [`IdempotencyBackend::complete`].
    fn release(&self, token: &LeaseToken) -> Result<(), Error>;
}

impl IdempotencyBackend for Store {
    fn claim(
        &self,
        scope: &[u8],
        key: &[u8],
        fingerprint: Fingerprint,
        wait: Option<Duration>,
    ) -> Result<BackendClaim, Error> {
        let request = ClaimRequest::new(key, fingerprint).scope(scope);
        let claim = match wait {
            Some(timeout) => self.claim_wait(&request, timeout)?,
            None => Store::claim(self, &request)?,
        };
        Ok(match claim {
            Claim::Acquired(lease) => BackendClaim::Acquired(lease.into_token()),
            Claim::Replay(record) => BackendClaim::Replay(record.response),
            Claim::InProgress { retry_after, .. } => BackendClaim::InProgress { retry_after },
            Claim::Mismatch => BackendClaim::Mismatch,
        })
    }

    fn complete(&self, token: &LeaseToken, response: &[u8]) -> Result<(), Error> {
        Store::complete(self, token, response)
    }

    fn fail(&self, token: &LeaseToken, response: &[u8]) -> Result<(), Error> {
        Store::fail(self, token, response)
    }

    fn release(&self, token: &LeaseToken) -> Result<(), Error> {
        Store::release(self, token)
    }
}

/// What the layer keeps after the inner service answered.
///
/// The default keeps 2xx and the 4xx that a retry would only repeat, and
/// releases the key on 5xx (and on 408, 409, 425, 429), on an error of the
/// inner service and on a dropped request, so that a retry may run: a
/// server-side failure says nothing happened that a retry could not fix,
/// while replaying a 503 forever would turn a blip into a permanent error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// As described above.
    Default,
    /// Keep every response, 5xx included (the inner service's side effects
    /// may have run even when it failed).
    KeepAll,
}

impl FailurePolicy {
    fn keeps(self, status: StatusCode) -> bool {
        match self {
            FailurePolicy::KeepAll => true,
            FailurePolicy::Default => {
                status.is_success()
                    || status.is_redirection()
                    || (status.is_client_error() && !matches!(status.as_u16(), 408 | 409 | 425 | 429))
            }
        }
    }
}

type ScopeFn = dyn Fn(&http::request::Parts) -> Vec<u8> + Send + Sync;

/// Settings of the layer, each with its default.
#[derive(Clone)]
pub struct LayerConfig {
    methods: Vec<Method>,
    key_header: HeaderName,
    replay_header: HeaderName,
    require_key: bool,
    key_bytes_max: usize,
    request_bytes_max: usize,
    response_bytes_max: usize,
    wait_max: Duration,
    stored_headers: Vec<HeaderName>,
    policy: FailurePolicy,
    scope: Option<Arc<ScopeFn>>,
}

impl std::fmt::Debug for LayerConfig {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("LayerConfig")
            .field("methods", &self.methods)
            .field("key_header", &self.key_header)
            .field("require_key", &self.require_key)
            .finish_non_exhaustive()
    }
}

impl Default for LayerConfig {
    fn default() -> Self {
        LayerConfig {
            methods: vec![Method::POST, Method::PATCH],
            key_header: HeaderName::from_static("idempotency-key"),
            replay_header: HeaderName::from_static("idempotency-replay"),
            require_key: true,
            key_bytes_max: 255,
            request_bytes_max: 1 << 20,
            response_bytes_max: 1 << 20,
            wait_max: Duration::from_secs(30),
            stored_headers: vec![CONTENT_TYPE, http::header::LOCATION],
            policy: FailurePolicy::Default,
            scope: None,
        }
    }
}

impl LayerConfig {
    /// Methods the layer guards. Default POST and PATCH.
    #[must_use]
    pub fn methods(mut self, methods: Vec<Method>) -> Self {
        self.methods = methods;
        self
    }

    /// The request header with the key. Default `Idempotency-Key`.
    #[must_use]
    pub fn key_header(mut self, name: HeaderName) -> Self {
        self.key_header = name;
        self
    }

    /// The response header marking a replay. Default `Idempotency-Replay`
    /// (Stripe uses `Idempotent-Replayed`).
    #[must_use]
    pub fn replay_header(mut self, name: HeaderName) -> Self {
        self.replay_header = name;
        self
    }

    /// Whether a guarded request without a key is refused (400) or passed
    /// through unguarded. Default refused.
    #[must_use]
    pub fn require_key(mut self, required: bool) -> Self {
        self.require_key = required;
        self
    }

    /// Largest request body buffered (413 above). Default 1 MiB.
    #[must_use]
    pub fn request_bytes_max(mut self, max: usize) -> Self {
        self.request_bytes_max = max;
        self
    }

    /// Largest response body stored (the key is released and 500 returned
    /// above). Default 1 MiB; keep it within the store's
    /// `response_bytes_max`.
    #[must_use]
    pub fn response_bytes_max(mut self, max: usize) -> Self {
        self.response_bytes_max = max;
        self
    }

    /// Longest `Prefer: wait=N` honoured. Default 30 s.
    #[must_use]
    pub fn wait_max(mut self, max: Duration) -> Self {
        self.wait_max = max;
        self
    }

    /// Response headers stored and replayed besides status and body.
    /// Default `Content-Type` and `Location`.
    #[must_use]
    pub fn stored_headers(mut self, names: Vec<HeaderName>) -> Self {
        self.stored_headers = names;
        self
    }

    /// What is kept and what releases the key. Default
    /// [`FailurePolicy::Default`].
    #[must_use]
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The scope of a request, e.g. the authenticated account. Default:
    /// every request in the empty scope.
    #[must_use]
    pub fn scope(mut self, scope: impl Fn(&http::request::Parts) -> Vec<u8> + Send + Sync + 'static) -> Self {
        self.scope = Some(Arc::new(scope));
        self
    }
}

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

/// The key from the header: a structured-field string (`"..."`, RFC 8941)
/// or the bare token most clients send. `Ok(None)` when absent.
fn parse_key(value: Option<&HeaderValue>, max: usize) -> Result<Option<Vec<u8>>, &'static str> {
    let Some(value) = value else { return Ok(None) };
    let text = value.to_str().map_err(|_| "The key must be visible ASCII.")?.trim();
    let key = match text.strip_prefix('"') {
        Some(rest) => {
            let inner = rest.strip_suffix('"').ok_or("The quoted key is not closed.")?;
            if inner.contains(['"', '\\']) {
                return Err("Escapes are not allowed in the key.");
            }
            inner
        }
        None => text,
    };
    if key.is_empty() {
        return Err("The key is empty.");
    }
    if key.len() > max {
        return Err("The key is too long.");
    }
    if !key.bytes().all(|byte| (0x20..0x7f).contains(&byte)) {
        return Err("The key must be visible ASCII.");
    }
    Ok(Some(key.as_bytes().to_vec()))
}

/// `Prefer: wait=N` (RFC 7240), in seconds.
fn prefer_wait(headers: &http::HeaderMap) -> Option<Duration> {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .find_map(|preference| {
            let seconds = preference.trim().strip_prefix("wait=")?;
            seconds.trim().parse::<u64>().ok().map(Duration::from_secs)
        })
}

fn problem(status: StatusCode, title: &str, detail: &str) -> Response<Full<Bytes>> {
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

fn in_progress(retry_after: Duration) -> Response<Full<Bytes>> {
    let mut response = problem(
        StatusCode::CONFLICT,
        "request in progress",
        "A request with this key is being processed; retry later.",
    );
    let seconds = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
    response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(seconds.max(1)));
    response
}

/// Stored response layout: status (u16 LE), header count (u16 LE), then per
/// header name length (u16 LE), name, value length (u32 LE), value; then
/// the body.
fn encode_response(status: StatusCode, headers: &http::HeaderMap, kept: &[HeaderName], body: &[u8]) -> Vec<u8> {
    let chosen: Vec<(&HeaderName, &HeaderValue)> =
        headers.iter().filter(|(name, _)| kept.contains(name)).take(usize::from(u16::MAX)).collect();
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&status.as_u16().to_le_bytes());
    out.extend_from_slice(&u16::try_from(chosen.len()).unwrap_or(u16::MAX).to_le_bytes());
    for (name, value) in chosen {
        out.extend_from_slice(&u16::try_from(name.as_str().len()).unwrap_or(u16::MAX).to_le_bytes());
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(&u32::try_from(value.len()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(value.as_bytes());
    }
    out.extend_from_slice(body);
    out
}

fn decode_response(stored: &[u8]) -> Option<Response<Full<Bytes>>> {
    let take = |at: &mut usize, len: usize| -> Option<&[u8]> {
        let part = stored.get(*at..*at + len)?;
        *at += len;
        Some(part)
    };
    let mut at = 0;
    let status = StatusCode::from_u16(u16::from_le_bytes(take(&mut at, 2)?.try_into().ok()?)).ok()?;
    let count = u16::from_le_bytes(take(&mut at, 2)?.try_into().ok()?);
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    for _ in 0..count {
        let name_len = usize::from(u16::from_le_bytes(take(&mut at, 2)?.try_into().ok()?));
        let name = HeaderName::from_bytes(take(&mut at, name_len)?).ok()?;
        let value_len = usize::try_from(u32::from_le_bytes(take(&mut at, 4)?.try_into().ok()?)).ok()?;
        let value = HeaderValue::from_bytes(take(&mut at, value_len)?).ok()?;
        response.headers_mut().append(name, value);
    }
    *response.body_mut() = Full::new(Bytes::copy_from_slice(&stored[at..]));
    Some(response)
}

fn replay(stored: &[u8], config: &LayerConfig) -> Response<Full<Bytes>> {
    let Some(mut response) = decode_response(stored) else {
        return problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            "stored response unreadable",
            "The stored response could not be decoded.",
        );
    };
    response.headers_mut().insert(config.replay_header.clone(), HeaderValue::from_static("true"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_in_both_forms() {
        let parse = |text: &str| parse_key(Some(&HeaderValue::from_str(text).expect("header")), 255);
        assert_eq!(parse("8e03978e-40d5"), Ok(Some(b"8e03978e-40d5".to_vec())));
        assert_eq!(parse("\"8e03978e-40d5\""), Ok(Some(b"8e03978e-40d5".to_vec())));
        assert!(parse("\"open").is_err());
        assert!(parse("\"\"").is_err());
        assert!(parse("\"a\\\"b\"").is_err());
        assert!(parse_key(Some(&HeaderValue::from_static("abcd")), 3).is_err());
        assert_eq!(parse_key(None, 255), Ok(None));
    }

    #[test]
    fn responses_round_trip() {
        let mut headers = http::HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert("x-internal", HeaderValue::from_static("not kept"));
        let encoded = encode_response(StatusCode::CREATED, &headers, &[CONTENT_TYPE], b"{\"id\":1}");
        let response = decode_response(&encoded).expect("decodes");
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(response.headers().get(CONTENT_TYPE), Some(&HeaderValue::from_static("application/json")));
        assert!(response.headers().get("x-internal").is_none());
        assert!(decode_response(&encoded[..3]).is_none());
    }

    #[test]
    fn prefer_wait_is_read() {
        let mut headers = http::HeaderMap::new();
        headers.insert("prefer", HeaderValue::from_static("respond-async, wait=5"));
        assert_eq!(prefer_wait(&headers), Some(Duration::from_secs(5)));
        assert_eq!(prefer_wait(&http::HeaderMap::new()), None);
    }

    #[test]
    fn default_policy_keeps_what_a_retry_would_repeat() {
        let policy = FailurePolicy::Default;
        assert!(policy.keeps(StatusCode::CREATED));
        assert!(policy.keeps(StatusCode::PAYMENT_REQUIRED));
        assert!(!policy.keeps(StatusCode::TOO_MANY_REQUESTS));
        assert!(!policy.keeps(StatusCode::SERVICE_UNAVAILABLE));
        assert!(FailurePolicy::KeepAll.keeps(StatusCode::SERVICE_UNAVAILABLE));
    }
}
