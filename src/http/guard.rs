//! One guarded request: key, scope and body read, the claim, and the
//! handler's run to its end, with its lease kept alive.

use super::body::{buffered, read_request, read_within, resumed, Within};
use super::checkpoints::Checkpoints;
use super::config::{Attempt, LayerConfig, NotSpent};
use super::counted::{count, counted};
use super::detached::{watched, Detached, Panicked};
use super::first_wait::FirstWait;
use super::key::{
    check_natural_key, expiry_text, prefer_wait, read_expiry, read_key, state_expiry, ExpiryInvalid, KeyError,
};
use super::operations::{expiry_in_force, prefers_async, tell, Answering};
use super::problem::{expiry_too_long, in_progress, quota_exceeded, store_unavailable, Problem};
use super::resource::{self, Held};
use super::response::{encode_response, encoded_head_bytes, replay, Kept as StoredPart, NOT_STORED_HEADER};
use super::shared::Shared;
use super::store_answer::{keep_answer, release, Answer};
use super::{BoxError, LayerBody};
use crate::backend::keeper::Kept;
use crate::backend::{BackendClaim, IdempotencyBackend};
use crate::{Error, Fingerprint, LeaseToken};
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Request, Response};
use http_body::Body;
use http_body_util::{Either, Full};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

fn answer<R>(problem: Problem) -> Response<LayerBody<R>> {
    problem.response().map(buffered)
}

/// A request refused before its claim (key, scope or body unusable).
fn refused(problem: Problem) -> Response<Full<Bytes>> {
    counted("refused", problem.response())
}

/// The response header that says a `Prefer` was honoured (RFC 7240 §3).
const PREFERENCE_APPLIED: HeaderName = HeaderName::from_static("preference-applied");

/// What a guarded request brings to its claim, read from it.
struct Admitted {
    parts: http::request::Parts,
    body: Bytes,
    scope: Vec<u8>,
    key: Vec<u8>,
    fingerprint: Fingerprint,
    wait: Option<Duration>,
    respond_async: bool,
    /// The expiry the client asked for (within the layer's maximum).
    ttl: Option<Duration>,
    /// The expiry in force, stated on the answer, when clients may choose.
    expiry: Option<Duration>,
}

/// A claim that acquired its key.
struct Acquired {
    token: Arc<LeaseToken>,
    attempt: u32,
    recovered: bool,
    checkpoint: Option<crate::Checkpoint>,
}

/// The span a guarded request runs in (see [`LayerConfig::span_scope`]):
/// its fields are recorded as the request goes.
pub(super) fn request_span() -> tracing::Span {
    use tracing::field::Empty;
    tracing::info_span!(
        "idempotent_request",
        key = Empty,
        scope = Empty,
        outcome = Empty,
        attempt = Empty,
        recovered = Empty
    )
}

/// Guards one request of a guarded method, run in a [`request_span`].
pub(super) async fn guard<S, K, B, R>(
    inner: S,
    shared: Arc<Shared<K>>,
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
    let config = &shared.config;
    let key = match config.natural_key {
        // A natural key is read with the body; the header is not read.
        Some(_) => None,
        None => match read_key(request.headers(), &config.key_header, shared.backend.limits().key_bytes_max) {
            Ok(Some(key)) => Some(key),
            // Boxed here and below: a path few requests take keeps its state
            // out of every request's future.
            Ok(None) if !config.require_key => return Box::pin(unkeyed(inner, shared, request)).await,
            Ok(None) => return Ok(refused(Problem::KeyMissing).map(buffered)),
            Err(KeyError::Repeated) => return Ok(refused(Problem::KeyRepeated).map(buffered)),
            Err(KeyError::Invalid(detail)) => return Ok(refused(Problem::KeyInvalid(detail)).map(buffered)),
        },
    };
    let mut admitted = match admit(&shared, request, key).await {
        Ok(admitted) => admitted,
        Err(refusal) => return Ok(refusal.map(buffered)),
    };
    let span = tracing::Span::current();
    if !span.is_disabled() {
        span.record("key", String::from_utf8_lossy(&admitted.key).as_ref());
        if config.span_scope {
            span.record("scope", String::from_utf8_lossy(&admitted.scope).as_ref());
        }
    }
    let acquired = match claim(&shared, &admitted).await {
        Ok(acquired) => acquired,
        Err(answer) => return Ok(answer.map(buffered)),
    };
    span.record("attempt", acquired.attempt);
    span.record("recovered", acquired.recovered);
    let held = match shared.config.resource {
        None => None,
        Some(_) => match Box::pin(resource::hold(&shared, &admitted.scope, &mut admitted.parts, admitted.wait)).await {
            Ok(held) => held,
            Err(resource::Refused(outcome, response)) => {
                Box::pin(release(&*shared.backend, &acquired.token)).await;
                return Ok(counted(outcome, response.map(buffered)));
            }
        },
    };
    execute(inner, shared, admitted, acquired, held).await
}

/// Reads what the claim of a request with `key` (its natural key when
/// `None`) needs: its scope (and a 428 when it can never run), its body
/// (within the limit), its natural key and its fingerprint; the layer's
/// refusal otherwise, counted.
async fn admit<K, B>(
    shared: &Shared<K>,
    request: Request<B>,
    key: Option<Vec<u8>>,
) -> Result<Admitted, Response<Full<Bytes>>>
where
    K: IdempotencyBackend,
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let config = &shared.config;
    let (parts, body) = request.into_parts();
    let Some(scope) = config.scope_of(&parts) else { return Err(refused(Problem::ScopeMissing)) };
    if scope.len() > shared.backend.limits().scope_bytes_max {
        return Err(refused(Problem::ScopeTooLong));
    }
    if let Some(resource::Refused(outcome, response)) = resource::unconditional(config, &parts) {
        return Err(counted(outcome, response));
    }
    let Expiry { asked: ttl, in_force: expiry } = expiry_of(shared, &parts.headers).map_err(expiry_refused)?;
    let Some(body) = read_request(body, config.request_bytes_max).await else {
        return Err(refused(Problem::BodyTooLarge));
    };
    let key = match key {
        Some(key) => key,
        None => natural_key(shared, &parts, &body).map_err(refused)?,
    };
    let fingerprint = match config.fingerprint.of(&parts, &body) {
        Ok(fingerprint) => fingerprint,
        Err(error) => {
            tracing::debug!(%error, "request refused: no fingerprint");
            return Err(refused(Problem::from(&error)));
        }
    };
    let wait = waits(config, &parts.headers);
    let respond_async = config.operations.is_some() && prefers_async(&parts.headers);
    Ok(Admitted { parts, body, scope, key, fingerprint, wait, respond_async, ttl, expiry })
}

/// The natural key of the request `parts` with `body`, held to a header
/// key's rules; the 400 that refuses it otherwise.
fn natural_key<K: IdempotencyBackend>(
    shared: &Shared<K>,
    parts: &http::request::Parts,
    body: &[u8],
) -> Result<Vec<u8>, Problem> {
    let Some(natural) = &shared.config.natural_key else { return Err(Problem::KeyMissing) };
    let key = natural.of(parts, body).map_err(|error| {
        tracing::debug!(%error, "request refused: no natural key");
        Problem::from(&error)
    })?;
    check_natural_key(&key, shared.backend.limits().key_bytes_max).map_err(Problem::NaturalKeyInvalid)?;
    Ok(key)
}

/// What a request's `Idempotency-Key-Expiry` says, when the layer lets
/// clients choose.
#[derive(Default)]
struct Expiry {
    /// The expiry the client asked for (within the layer's maximum).
    asked: Option<Duration>,
    /// The expiry in force, stated on the answer.
    in_force: Option<Duration>,
}

/// Why a request's expiry is refused.
#[derive(Clone, Copy)]
enum ExpiryRefused {
    /// It is not an expiry.
    Invalid,
    /// It is longer than the layer's maximum, `max`.
    TooLong { max: Duration },
}

/// The expiry a request asks for and the one in force: none unless the
/// layer lets clients choose.
fn expiry_of<K: IdempotencyBackend>(shared: &Shared<K>, headers: &http::HeaderMap) -> Result<Expiry, ExpiryRefused> {
    let Some(max) = shared.config.expiry_max else { return Ok(Expiry::default()) };
    // Never past what the backend keeps: a longer ask is this 400, not
    // the backend's refusal of the claim.
    let max = max.min(shared.backend.limits().duration_max);
    let asked = read_expiry(headers).map_err(|ExpiryInvalid| ExpiryRefused::Invalid)?;
    if asked.is_some_and(|asked| asked > max) {
        return Err(ExpiryRefused::TooLong { max });
    }
    let in_force = asked.or(shared.config.ttl).unwrap_or(shared.backend.limits().ttl_default);
    Ok(Expiry { asked, in_force: Some(in_force) })
}

/// The 400 of a refused expiry, counted.
fn expiry_refused(refusal: ExpiryRefused) -> Response<Full<Bytes>> {
    match refusal {
        ExpiryRefused::TooLong { max } => counted("refused", expiry_too_long(&expiry_text(max))),
        ExpiryRefused::Invalid => refused(Problem::ExpiryInvalid),
    }
}

/// Claims the request's key: acquired, or the answer the claim gives
/// instead (a replay, 409, 422, 429, 503; a long operation's 202),
/// counted.
async fn claim<K: IdempotencyBackend>(
    shared: &Shared<K>,
    admitted: &Admitted,
) -> Result<Acquired, Response<Full<Bytes>>> {
    let (config, wait) = (&shared.config, admitted.wait);
    let options = match admitted.ttl {
        Some(ttl) => config.claim_options(wait).ttl(ttl),
        None => config.claim_options(wait),
    };
    let claimed = shared.backend.claim(&admitted.scope, &admitted.key, admitted.fingerprint, options).await;
    match claimed {
        Ok(BackendClaim::Acquired { token, attempt, recovered, checkpoint }) => {
            Ok(Acquired { token: Arc::new(token), attempt, recovered, checkpoint })
        }
        Ok(BackendClaim::Replay(stored)) => {
            Err(counted("replay", waited(replay(&Bytes::from(stored), &config.replay_header), wait)))
        }
        Ok(BackendClaim::InProgress { retry_after }) => {
            let retry_after = retry_after.min(config.in_progress_retry_after);
            let respond_async = admitted.respond_async;
            // A long operation's retry: the same 202 as its first answer.
            if let Some(operations) = config.operations.as_ref().filter(|ops| respond_async || ops.after.is_some()) {
                // Boxed: a path few requests take keeps its state out of
                // every request's future.
                let expiry = Box::pin(expiry_in_force(&*shared.backend, config, &admitted.scope, &admitted.key)).await;
                let accepted = operations.accepted(&admitted.key, retry_after, respond_async, expiry);
                return Err(counted("accepted", accepted));
            }
            Err(counted("in_progress", waited(in_progress(retry_after), wait)))
        }
        Ok(BackendClaim::Mismatch) => Err(counted("mismatch", Problem::KeyReused.response())),
        Err(Error::QuotaExceeded { retry_after, .. }) => Err(counted("quota_exceeded", quota_exceeded(retry_after))),
        Err(error) => {
            tracing::warn!(%error, "idempotency store unavailable; request refused before it ran");
            Err(counted("store_unavailable", store_unavailable()))
        }
    }
}

/// Runs the handler of a request that holds its key (and resource): to
/// its end whatever the client does — a client that goes away drops this
/// future, and the handler's run moves to a task of its own, whose answer
/// is then kept for the retry — answered when it ends, or 202 for a long
/// operation. What the run needs is moved into its own future here, so
/// that no copy of it stays in the request's.
fn execute<S, K, B, R>(
    inner: S,
    shared: Arc<Shared<K>>,
    admitted: Admitted,
    acquired: Acquired,
    held: Option<Held>,
) -> impl Future<Output = Result<Response<LayerBody<R>>, S::Error>> + Send
where
    S: tower::Service<Request<B>, Response = Response<R>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    K: IdempotencyBackend,
    B: Body<Data = Bytes> + From<Bytes> + Send + 'static,
    R: Body<Data = Bytes> + Send + 'static,
    R::Error: Into<BoxError>,
{
    // Not an `async fn`: its arguments would stay in the future.
    let expiry = admitted.expiry;
    let (started, waited) = start(inner, Arc::clone(&shared), admitted, acquired, held);
    let Started { inner, shared: its, request, run: state, token } = started;
    let mut run = Detached::new(run(inner, its, request, state));
    async move {
        if let (Some(operations), Some(answering)) = (&shared.config.operations, waited.answering) {
            // A long run — under respond-async one whose handler waits on
            // something, or one past the configured time — is answered 202
            // unless its handler answered first; it goes on, detached, and
            // its answer is for the status resource.
            tokio::select! {
                biased;
                outcome = &mut run => return finished(outcome, &shared.config, &*shared.backend, &token).await,
                preferred = Box::pin(long(waited.started, operations.after)) => {
                    if answering.accept() {
                        drop(run);
                        let retry_after = shared.config.in_progress_retry_after;
                        let accepted = operations.accepted(&token.key, retry_after, preferred, expiry);
                        return Ok(counted("accepted", accepted.map(buffered)));
                    }
                }
            }
        }
        finished(run.await, &shared.config, &*shared.backend, &token).await
    }
}

/// What a run starts with: its handler, the request (with its extensions)
/// and its state.
struct Started<S, K, B> {
    inner: S,
    shared: Arc<Shared<K>>,
    request: Request<B>,
    run: Run,
    token: Arc<LeaseToken>,
}

/// How a long operation's run is watched: told when its handler first
/// waits (under respond-async), and who answers.
struct Watched {
    started: Option<tokio::sync::oneshot::Receiver<()>>,
    answering: Option<Arc<Answering>>,
}

/// The request of an acquired key, with its `Attempt` and `Checkpoints`,
/// and the run's state.
fn start<S, K: IdempotencyBackend, B: From<Bytes>>(
    inner: S,
    shared: Arc<Shared<K>>,
    admitted: Admitted,
    acquired: Acquired,
    held: Option<Held>,
) -> (Started<S, K, B>, Watched) {
    let Admitted { mut parts, body, scope, key, respond_async, expiry, .. } = admitted;
    let Acquired { token, attempt, recovered, checkpoint } = acquired;
    let points =
        Checkpoints::new(Arc::clone(&shared.backend), Arc::clone(&token), (attempt, recovered), checkpoint.clone());
    parts.extensions.insert(points);
    parts.extensions.insert(Attempt { scope, key, attempt, recovered, checkpoint });
    let (started, waited) = respond_async.then(tokio::sync::oneshot::channel).unzip();
    let started = started.map(FirstWait::new);
    if let Some(first_wait) = &started {
        parts.extensions.insert(first_wait.clone());
    }
    let request = Request::from_parts(parts, B::from(body));
    let answering = shared.config.operations.as_ref().map(|_| Arc::new(Answering::default()));
    let run = Run { token: Arc::clone(&token), held, answering: answering.clone(), started, panicked: false, expiry };
    (Started { inner, shared, request, run, token }, Watched { started: waited, answering })
}

/// Resolves once a run is long: when its handler first waits on
/// something (it was asked to respond async: `true`, the preference
/// applied), or `after` it started (`false`); never otherwise.
async fn long(started: Option<tokio::sync::oneshot::Receiver<()>>, after: Option<Duration>) -> bool {
    let waits = async {
        if let Some(started) = started {
            if started.await.is_ok() {
                return true;
            }
        }
        std::future::pending().await
    };
    let runs_on = async {
        match after {
            Some(after) => tokio::time::sleep(after).await,
            None => std::future::pending().await,
        }
        false
    };
    tokio::select! {
        preferred = waits => preferred,
        preferred = runs_on => preferred,
    }
}

/// The answer of a run that ended.
async fn finished<K: IdempotencyBackend, R, E>(
    outcome: Result<Result<Response<LayerBody<R>>, E>, super::detached::Panicked>,
    config: &LayerConfig,
    backend: &K,
    token: &LeaseToken,
) -> Result<Response<LayerBody<R>>, E> {
    let policy = config.policy;
    let Ok(outcome) = outcome else {
        tracing::error!("handler panicked");
        if policy.releases_on_error() {
            Box::pin(release(backend, token)).await;
        }
        return Ok(counted("handler_failed", answer(Problem::HandlerFailed)));
    };
    outcome
}

/// A request without a key where keys are optional, or a write with a
/// method the layer does not guard with keys: run as it is, but on a
/// resource the route names, held (and versioned) as a keyed one is.
pub(super) async fn unkeyed<S, K, B, R>(
    mut inner: S,
    shared: Arc<Shared<K>>,
    request: Request<B>,
) -> Result<Response<LayerBody<R>>, S::Error>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    K: IdempotencyBackend,
{
    if shared.config.resource.is_none() {
        return inner.call(request).await.map(|response| counted("unkeyed", response.map(Either::Left)));
    }
    let (mut parts, body) = request.into_parts();
    let Some(scope) = shared.config.scope_of(&parts) else {
        return Ok(refused(Problem::ScopeMissing).map(buffered));
    };
    if let Some(resource::Refused(outcome, response)) = resource::unconditional(&shared.config, &parts) {
        return Ok(counted(outcome, response.map(buffered)));
    }
    let wait = waits(&shared.config, &parts.headers);
    let held = match resource::hold(&shared, &scope, &mut parts, wait).await {
        Ok(held) => held,
        Err(resource::Refused(outcome, response)) => return Ok(counted(outcome, response.map(buffered))),
    };
    let method = parts.method.clone();
    let answer = inner.call(Request::from_parts(parts, body)).await;
    let Some(held) = held else {
        return answer.map(|response| counted("unkeyed", response.map(Either::Left)));
    };
    let answer = match answer {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            held.answered(&shared.backend, &method, parts.status, &mut parts.headers).await;
            Ok(counted("unkeyed", Response::from_parts(parts, Either::Left(body))))
        }
        Err(error) => Err(error),
    };
    held.release(&*shared.backend).await;
    answer
}

/// How long a request's `Prefer: wait` asks to wait, capped at the
/// layer's `wait_max`; `None` for no wait.
fn waits(config: &LayerConfig, headers: &http::HeaderMap) -> Option<Duration> {
    prefer_wait(headers).map(|wait| wait.min(config.wait_max)).filter(|wait| !wait.is_zero())
}

/// `response` with `Preference-Applied: wait=N` when the claim waited up
/// to N seconds for the key's holder (RFC 7240).
fn waited(mut response: Response<Full<Bytes>>, wait: Option<Duration>) -> Response<Full<Bytes>> {
    if let Some(value) = wait.and_then(|wait| HeaderValue::from_str(&format!("wait={}", wait.as_secs())).ok()) {
        response.headers_mut().insert(PREFERENCE_APPLIED, value);
    }
    response
}

/// One run of a handler under its key's lease.
struct Run {
    token: Arc<LeaseToken>,
    /// The resource it holds, if any.
    held: Option<Held>,
    /// For a long operation: who gets the answer, its caller or its status
    /// resource.
    answering: Option<Arc<Answering>>,
    /// Told when the handler first waits on something, when the request
    /// asked to respond async.
    started: Option<FirstWait>,
    /// Whether the handler panicked.
    panicked: bool,
    /// The expiry in force, stated on the answer kept.
    expiry: Option<Duration>,
}

impl Run {
    /// Whether the answer goes to the status resource rather than to the
    /// caller (who was answered 202); decided from now on.
    fn told_at_location(&self) -> bool {
        self.answering.as_ref().is_some_and(|answering| !answering.answer())
    }
}

/// Runs the handler under its lease and keeps (or releases) what it
/// answered. The keeper renews the lease from its own thread from here
/// until the answer is stored, the key released, or the run given up.
async fn run<S, K, B, R>(
    inner: S,
    shared: Arc<Shared<K>>,
    request: Request<B>,
    mut run: Run,
) -> Result<Response<LayerBody<R>>, S::Error>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    K: IdempotencyBackend,
    R: Body<Data = Bytes>,
    R::Error: Into<BoxError>,
{
    let answer = run_held(inner, &shared, request, &mut run).await;
    // The resource goes once the answer is kept (or refused); a handler
    // that panicked, or a process that died, leaves it to lapse, so that
    // its next holder learns that it may have been half-written.
    if let (Some(held), false) = (run.held, run.panicked) {
        Box::pin(held.release(&*shared.backend)).await;
    }
    answer
}

async fn run_held<S, K, B, R>(
    mut inner: S,
    shared: &Shared<K>,
    request: Request<B>,
    run: &mut Run,
) -> Result<Response<LayerBody<R>>, S::Error>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    K: IdempotencyBackend,
    R: Body<Data = Bytes>,
    R::Error: Into<BoxError>,
{
    let config = &*shared.config;
    let kept = shared.keeper.keep(Arc::clone(&shared.backend), Arc::clone(&run.token), config.lease);
    let method = request.method().clone();
    let response = match watched(inner.call(request), run.started.take()).await {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => {
            Box::pin(handler_failed(shared, run, Problem::HandlerFailed, "the handler returned an error")).await;
            count("handler_failed", None);
            return Err(error);
        }
        Err(Panicked) => {
            run.panicked = true;
            Box::pin(handler_failed(shared, run, Problem::HandlerFailed, "the handler panicked")).await;
            return Ok(counted("handler_failed", answer(Problem::HandlerFailed)));
        }
    };
    let (mut parts, body) = response.into_parts();
    if parts.extensions.get::<NotSpent>().is_some()
        || !config.policy.keeps(parts.status, config.keep_validation_failures)
    {
        return Ok(Box::pin(not_kept(shared, run, parts, body)).await);
    }
    if let Some(held) = &run.held {
        Box::pin(held.answered(&shared.backend, &method, parts.status, &mut parts.headers)).await;
    }
    // Kept with the answer, so that its replays state it too.
    state_expiry(&mut parts.headers, run.expiry);
    Ok(keep_handlers_answer(shared, kept, run, parts, body).await)
}

/// An answer that is not kept: the key is freed before the answer goes
/// out, so that a retry that follows it runs. A long operation's caller,
/// answered 202, is told it at the status resource, written first.
async fn not_kept<K, R>(shared: &Shared<K>, run: &Run, parts: http::response::Parts, body: R) -> Response<LayerBody<R>>
where
    K: IdempotencyBackend,
    R: Body<Data = Bytes>,
    R::Error: Into<BoxError>,
{
    let (backend, config) = (&*shared.backend, &*shared.config);
    if !run.told_at_location() {
        release(backend, &run.token).await;
        return counted("executed_not_kept", Response::from_parts(parts, Either::Left(body)));
    }
    let encoded = told_form(backend, config, &parts, body).await;
    tell(backend, config, &run.token.scope, &run.token.key, &encoded).await;
    release(backend, &run.token).await;
    // Nobody waits for it: its caller was answered 202.
    counted("executed_not_kept", Response::from_parts(parts, buffered(Full::default())))
}

/// The stored form of an answer told at a status resource: whole within
/// the budget, else without its body, else its status alone (its caller
/// has gone: its body is read only for this).
async fn told_form<K, R>(backend: &K, config: &LayerConfig, parts: &http::response::Parts, body: R) -> Vec<u8>
where
    K: IdempotencyBackend,
    R: Body<Data = Bytes>,
    R::Error: Into<BoxError>,
{
    let deny = &config.replay_deny;
    let Some(budget) = backend.limits().response_bytes_max.checked_sub(encoded_head_bytes(&parts.headers, deny)) else {
        return encode_response(parts.status, &parts.headers, deny, StoredPart::StatusOnly);
    };
    match read_within(body, budget).await.map_err(Into::<BoxError>::into) {
        Ok(Within::Whole(body)) => encode_response(parts.status, &parts.headers, deny, StoredPart::Whole(&body)),
        Ok(Within::Over(..)) => encode_response(parts.status, &parts.headers, deny, StoredPart::WithoutBody),
        Err(error) => {
            tracing::warn!(%error, "the handler's response body failed");
            encode_problem(Problem::ResponseUnreadable)
        }
    }
}

/// Keeps the handler's answer `parts` and `body` and gives it to its
/// caller. One budget serves the stored form, head and body together. An
/// answer over it goes out whole all the same — its body streamed on from
/// where the layer stopped reading — and is kept without its body (its
/// headers alone over it: its status alone), so that a retry learns the
/// truth, never runs it again, and is told that the body was omitted.
async fn keep_handlers_answer<K, R>(
    shared: &Shared<K>,
    kept: Kept,
    run: &Run,
    parts: http::response::Parts,
    body: R,
) -> Response<LayerBody<R>>
where
    K: IdempotencyBackend,
    R: Body<Data = Bytes>,
    R::Error: Into<BoxError>,
{
    let (backend, config, token) = (&*shared.backend, &*shared.config, &run.token);
    let deny = &config.replay_deny;
    let limit = backend.limits().response_bytes_max;
    let Some(budget) = limit.checked_sub(encoded_head_bytes(&parts.headers, deny)) else {
        let status_only = encode_response(parts.status, &parts.headers, deny, StoredPart::StatusOnly);
        let response = Response::from_parts(parts, Either::Left(body));
        return Box::pin(keep_omitted(shared, kept, token, status_only, response)).await;
    };
    // The body's error, made `Send` before anything else is awaited.
    let read = read_within(body, budget).await.map_err(Into::<BoxError>::into);
    let body = match read {
        Ok(Within::Whole(body)) => body,
        Ok(Within::Over(read, rest)) => {
            let head = encode_response(parts.status, &parts.headers, deny, StoredPart::WithoutBody);
            let response = Response::from_parts(parts, resumed(read, rest));
            return Box::pin(keep_omitted(shared, kept, token, head, response)).await;
        }
        Err(error) => {
            tracing::warn!(%error, "the handler's response body failed");
            let problem = Problem::ResponseUnreadable;
            Box::pin(handler_failed(shared, run, problem, "the handler's response body failed")).await;
            return counted("handler_failed", answer(Problem::ResponseUnreadable));
        }
    };
    let encoded = encode_response(parts.status, &parts.headers, deny, StoredPart::Whole(&body));
    let response = Response::from_parts(parts, buffered(Full::new(body)));
    match keep_answer(shared, kept, token, encoded).await {
        Answer::Stored => counted("executed", response),
        // The backend counts what it stores otherwise than the layer.
        Answer::TooLarge(kept) => {
            let head = encode_response(response.status(), response.headers(), deny, StoredPart::WithoutBody);
            Box::pin(keep_omitted(shared, kept, token, head, response)).await
        }
        Answer::NotStored => not_stored(response),
    }
}

/// Keeps `encoded`, the handler's answer without its body (or without
/// its headers too), and, if even that is refused for its size, its
/// status alone, then nothing (a budget under 8 bytes: a retry gets a 500
/// `stored-unreadable`, never a second run); `response` goes out whole.
async fn keep_omitted<K: IdempotencyBackend, R>(
    shared: &Shared<K>,
    kept: Kept,
    token: &LeaseToken,
    encoded: Vec<u8>,
    response: Response<LayerBody<R>>,
) -> Response<LayerBody<R>> {
    let status_only = encode_response(response.status(), &http::HeaderMap::new(), &[], StoredPart::StatusOnly);
    let mut answer = keep_answer(shared, kept, token, encoded).await;
    for smaller in [status_only, Vec::new()] {
        let Answer::TooLarge(kept) = answer else { break };
        answer = keep_answer(shared, kept, token, smaller).await;
    }
    match answer {
        Answer::Stored => counted("response_too_large", response),
        Answer::TooLarge(_) | Answer::NotStored => not_stored(response),
    }
}

/// `response`, the handler's answer, with `Idempotency-Stored: false`.
fn not_stored<R>(mut response: Response<LayerBody<R>>) -> Response<LayerBody<R>> {
    response.headers_mut().insert(NOT_STORED_HEADER, HeaderValue::from_static("false"));
    counted("executed_not_stored", response)
}

/// After the handler's error or panic (or its body's error): by default
/// the key stays in progress until its lease ends (a retry then runs as a
/// recovered attempt; a long operation's status resource then says it was
/// abandoned); [`FailurePolicy::ReleaseOnServerError`](super::FailurePolicy::ReleaseOnServerError)
/// releases it, and a long operation's caller, answered 202, is told
/// `problem` at the status resource.
async fn handler_failed<K: IdempotencyBackend>(shared: &Shared<K>, run: &Run, problem: Problem, what: &str) {
    let (backend, config) = (&*shared.backend, &*shared.config);
    if !config.policy.releases_on_error() {
        tracing::warn!(what, "the key stays in progress until its lease ends; the next attempt runs recovered");
        return;
    }
    if run.told_at_location() {
        tell(backend, config, &run.token.scope, &run.token.key, &encode_problem(problem)).await;
    }
    release(backend, &run.token).await;
}

/// The stored form of `problem`'s answer.
fn encode_problem(problem: Problem) -> Vec<u8> {
    let response = problem.response();
    encode_response(response.status(), response.headers(), &[], StoredPart::Whole(problem.body().as_bytes()))
}
