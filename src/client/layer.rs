//! The `tower` layer and its service: buffer the body, attach the key,
//! then attempt, classify and back off until an answer is final or the
//! attempts, the deadline, the budget or the breaker say stop.

use super::classify::{classify_status, transport_reason, RetryReason, Verdict};
use super::concurrency::LoadSignal;
use super::error::{BoxError, ClientError};
use super::key::{self, Replay};
use super::limiter::{Limiter, Slot};
use super::metrics;
use super::policy::RetryPolicy;
use super::rate_limit::rate_limit_wait;
use super::retry_after::retry_after;
use super::span::{CallSpan, Ending};
use super::state::{Permit, Shared};
use bytes::Bytes;
use http::header::{HeaderValue, RETRY_AFTER};
use http::request::Parts;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Full, Limited};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;
use tower::ServiceExt;

/// What the layer tells the caller about a response, in its extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryInfo {
    /// Attempts made, the first included.
    pub attempts: u32,
    /// The `Idempotency-Key` every attempt carried, if any.
    pub idempotency_key: Option<HeaderValue>,
    /// Whether the server marked the answer as the replay of one it gave
    /// before ([`RetryPolicy::replay_header`], `Idempotency-Replay` by
    /// default): the request had run already, perhaps on an attempt
    /// whose answer was lost.
    pub replayed: bool,
}

/// A `tower::Layer` that retries outgoing HTTP requests under a
/// [`RetryPolicy`]. The services of one layer (and of its clones) share
/// their budgets and breakers.
///
/// # Examples
///
/// ```no_run
/// use bytes::Bytes;
/// use http_body_util::Full;
/// use hyper_util::client::legacy::Client;
/// use hyper_util::rt::TokioExecutor;
/// use idemkv::client::{RetryInfo, RetryLayer, RetryPolicy};
/// use tower::{Layer, ServiceExt};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let http = Client::builder(TokioExecutor::new()).build_http::<Full<bytes::Bytes>>();
/// let client = RetryLayer::new(RetryPolicy::new()).layer(http);
/// let request = http::Request::post("http://127.0.0.1:3000/payments").body(Full::new(Bytes::from_static(b"amount=10")))?;
/// let response = client.oneshot(request).await?; // one key, reused by every retry
/// let info = response.extensions().get::<RetryInfo>().unwrap();
/// println!("{} after {} attempt(s) with key {:?}", response.status(), info.attempts, info.idempotency_key);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RetryLayer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RetryLayer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("RetryLayer").field("policy", &self.shared.policy).finish_non_exhaustive()
    }
}

impl RetryLayer {
    /// A layer with `policy`, and fresh budgets and breakers.
    #[must_use]
    pub fn new(policy: RetryPolicy) -> Self {
        metrics::describe();
        RetryLayer { shared: Arc::new(Shared::new(policy)) }
    }

    /// The adaptive concurrency limit of `destination` (a URI's
    /// authority, such as `"api.example.com:443"`) as it stands: `None`
    /// when the policy sets no [`concurrency`](RetryPolicy::concurrency)
    /// or no request has gone there yet. Shared by the layer's services.
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::client::{ConcurrencyConfig, RetryLayer, RetryPolicy};
    ///
    /// let layer = RetryLayer::new(RetryPolicy::new().concurrency(Some(ConcurrencyConfig::default())));
    /// assert_eq!(layer.concurrency_limit("api.example.com"), None, "no request yet");
    /// ```
    #[must_use]
    pub fn concurrency_limit(&self, destination: &str) -> Option<u32> {
        self.shared.concurrency_limit(destination)
    }
}

impl<S> tower::Layer<S> for RetryLayer {
    type Service = RetryService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RetryService { inner, shared: Arc::clone(&self.shared) }
    }
}

/// The service of a [`RetryLayer`] around an HTTP client service `S`,
/// which receives each attempt as a `Request<Full<Bytes>>`.
#[derive(Clone)]
pub struct RetryService<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> std::fmt::Debug for RetryService<S> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("RetryService").field("policy", &self.shared.policy).finish_non_exhaustive()
    }
}

impl<S> RetryService<S> {
    /// The adaptive concurrency limit of `destination`, as
    /// [`RetryLayer::concurrency_limit`] tells it.
    #[must_use]
    pub fn concurrency_limit(&self, destination: &str) -> Option<u32> {
        self.shared.concurrency_limit(destination)
    }
}

impl<S, B, R> tower::Service<Request<B>> for RetryService<S>
where
    S: tower::Service<Request<Full<Bytes>>, Response = Response<R>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    R: Send + 'static,
{
    type Response = Response<R>;
    type Error = ClientError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<R>, ClientError>> + Send>>;

    /// Always ready: each attempt waits for a clone of the inner service to
    /// be ready.
    fn poll_ready(&mut self, _context: &mut Context<'_>) -> Poll<Result<(), ClientError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        let shared = Arc::clone(&self.shared);
        let (mut parts, body) = request.into_parts();
        let replay = key::prepare(&mut parts, shared.policy.keys);
        let span = CallSpan::new(&parts, replay.key());
        let future = span.clone().instrument(async move {
            let bytes_max = shared.policy.body_bytes_max;
            let body = match Limited::new(body, bytes_max).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(source) => {
                    let refused: Result<Response<R>, ClientError> = Err(ClientError::Body { bytes_max, source });
                    span.finish(&refused, Ending::Final);
                    return refused;
                }
            };
            Attempts::new(shared, parts, body, replay, span).run(inner).await
        });
        Box::pin(future)
    }
}

/// The outcome of one attempt.
enum Outcome<R> {
    Answer(Response<R>),
    Failed(BoxError),
}

/// A call's concurrency limiter, as far as it has looked it up.
enum CallLimiter {
    /// Not yet: no attempt was admitted so far.
    NotLookedUp,
    /// The destination has none.
    Unlimited,
    /// The destination's limiter.
    Limited(Arc<Limiter>),
}

/// One logical request and its attempts.
struct Attempts {
    shared: Arc<Shared>,
    parts: Parts,
    body: Bytes,
    replay: Replay,
    destination: String,
    /// The destination's concurrency limiter, looked up at the first
    /// attempt the breaker admits and kept for the call's later ones.
    limiter: CallLimiter,
    route: String,
    deadline: Instant,
    made: u32,
    previous_delay: Duration,
    /// `Prefer: wait` for the next attempt, after an in-progress 409.
    wait: Option<Duration>,
    span: CallSpan,
    /// How the call ended, once it has.
    ending: Ending,
}

impl Attempts {
    fn new(shared: Arc<Shared>, parts: Parts, body: Bytes, replay: Replay, span: CallSpan) -> Self {
        let destination = parts.uri.authority().map(ToString::to_string).unwrap_or_default();
        let route = shared.policy.route.as_ref().map_or_else(|| destination.clone(), |route| route(&parts));
        let now = Instant::now();
        let deadline = now.checked_add(shared.policy.deadline).unwrap_or(now + Duration::from_secs(86_400 * 365));
        Attempts {
            shared,
            parts,
            body,
            replay,
            destination,
            limiter: CallLimiter::NotLookedUp,
            route,
            deadline,
            made: 0,
            previous_delay: Duration::ZERO,
            wait: None,
            span,
            ending: Ending::Final,
        }
    }

    async fn run<S, R>(mut self, inner: S) -> Result<Response<R>, ClientError>
    where
        S: tower::Service<Request<Full<Bytes>>, Response = Response<R>> + Clone,
        S::Error: Into<BoxError>,
    {
        let result = self.attempts(inner).await;
        self.span.finish(&result, self.ending);
        result
    }

    /// Attempts until an answer is final or something says stop.
    async fn attempts<S, R>(&mut self, inner: S) -> Result<Response<R>, ClientError>
    where
        S: tower::Service<Request<Full<Bytes>>, Response = Response<R>> + Clone,
        S::Error: Into<BoxError>,
    {
        if self.replay.retryable() {
            self.shared.deposit(&self.route);
        }
        let mut last = None;
        loop {
            let permit = match self.shared.admit(&self.destination) {
                Ok(permit) => permit,
                Err(refused) => {
                    let destination = self.destination.clone();
                    return self.refused(last, ClientError::CircuitOpen { destination, retry_in: refused.retry_in });
                }
            };
            let slot = match self.slot().await {
                Ok(slot) => slot,
                Err(error) => return self.refused(last, error),
            };
            let (outcome, reason) = self.attempt(inner.clone(), permit, slot).await?;
            let Some(reason) = self.verdict(&outcome, reason) else { return self.give_up(outcome, Ending::Final) };
            let Some(delay) = self.next_delay(&outcome, reason) else { return self.give_up(outcome, Ending::Stopped) };
            metrics::retry(reason, delay);
            #[cfg(feature = "tracing")]
            tracing::debug!(reason = reason.as_str(), attempt = self.made, ?delay, "retrying request");
            last = Some(outcome);
            tokio::time::sleep(delay).await;
        }
    }

    /// A place among the attempts in flight to the destination, waited
    /// for until the deadline; `None` when it has no concurrency limit.
    async fn slot(&mut self) -> Result<Option<Slot>, ClientError> {
        if matches!(self.limiter, CallLimiter::NotLookedUp) {
            let found = self.shared.limiter(&self.destination);
            self.limiter = found.map_or(CallLimiter::Unlimited, CallLimiter::Limited);
        }
        let CallLimiter::Limited(limiter) = &self.limiter else { return Ok(None) };
        match tokio::time::timeout_at(self.deadline, limiter.acquire()).await {
            Ok(slot) => Ok(slot),
            Err(_) => {
                Err(ClientError::ConcurrencyLimited { destination: self.destination.clone(), limit: limiter.limit() })
            }
        }
    }

    /// Sends one attempt and tells the breaker and the concurrency limit
    /// how it went; returns its outcome with the outcome's retry reason
    /// (`None` for a final answer), found once for both and for
    /// [`verdict`](Self::verdict).
    async fn attempt<S, R>(
        &mut self,
        inner: S,
        permit: Permit,
        slot: Option<Slot>,
    ) -> Result<(Outcome<R>, Option<RetryReason>), ClientError>
    where
        S: tower::Service<Request<Full<Bytes>>, Response = Response<R>>,
        S::Error: Into<BoxError>,
    {
        self.made += 1;
        self.span.attempt(self.made);
        let request = self.request();
        let mut until = self.deadline;
        if let Some(timeout) = self.shared.policy.attempt_timeout {
            let timeout = timeout.saturating_add(self.wait.take().unwrap_or_default());
            until = until.min(Instant::now().checked_add(timeout).unwrap_or(until));
        }
        let outcome = match tokio::time::timeout_at(until, inner.oneshot(request)).await {
            Ok(Ok(response)) => Outcome::Answer(response),
            Ok(Err(error)) => Outcome::Failed(error.into()),
            Err(elapsed) if until < self.deadline => Outcome::Failed(Box::new(elapsed)),
            Err(_) => {
                permit.record(false);
                if let Some(slot) = slot {
                    slot.record(LoadSignal::Overload);
                }
                let deadline = self.shared.policy.deadline;
                return Err(ClientError::DeadlineExceeded { attempts: self.made, deadline });
            }
        };
        let reason = match &outcome {
            Outcome::Answer(response) => {
                let has_retry_after = response.headers().contains_key(RETRY_AFTER);
                match classify_status(response.status(), has_retry_after) {
                    Verdict::Retry(reason) => Some(reason),
                    Verdict::Done => None,
                }
            }
            Outcome::Failed(error) => Some(transport_reason(error.as_ref())),
        };
        // An in-progress 409 is neither a failure of the destination nor
        // a sign of overload: the breaker and the limit see it as the
        // final 409 they would see without `Retry-After`.
        permit.record(!reason.is_some_and(RetryReason::is_destination_failure));
        if let Some(slot) = slot {
            slot.record(load_signal(reason));
        }
        Ok((outcome, reason))
    }

    /// This attempt's request: the same parts and body every time, plus
    /// `Prefer: wait` after an in-progress answer.
    fn request(&self) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(self.body.clone()));
        *request.method_mut() = self.parts.method.clone();
        *request.uri_mut() = self.parts.uri.clone();
        *request.version_mut() = self.parts.version;
        *request.headers_mut() = self.parts.headers.clone();
        if let Some(wait) = self.wait {
            let value = HeaderValue::from_str(&format!("wait={}", wait.as_secs().max(1)));
            if let Ok(value) = value {
                request.headers_mut().insert("prefer", value);
            }
        }
        request
    }

    /// Why `outcome`, whose retry reason [`attempt`](Self::attempt)
    /// found, may be retried, or `None` when it is final.
    fn verdict<R>(&self, outcome: &Outcome<R>, reason: Option<RetryReason>) -> Option<RetryReason> {
        let reason = reason?;
        match outcome {
            Outcome::Answer(_) if reason == RetryReason::InProgress && !self.replay.keyed() => None,
            Outcome::Answer(_) => Some(reason),
            Outcome::Failed(error) => {
                let retry = self.shared.policy.retry_error_if.as_ref().is_none_or(|retry| retry(error.as_ref()));
                retry.then_some(reason)
            }
        }
    }

    /// The delay before the next attempt, or `None` if there is none: the
    /// method is not safe to repeat, or the attempts, the budget or the
    /// deadline are spent.
    fn next_delay<R>(&mut self, outcome: &Outcome<R>, reason: RetryReason) -> Option<Duration> {
        if !self.replay.retryable() || self.made >= self.shared.policy.max_attempts {
            return None;
        }
        let retry = self.made - 1;
        let mut delay = self.shared.policy.backoff.delay(retry, self.previous_delay, self.shared.unit());
        let asked = match outcome {
            Outcome::Answer(response) => self.server_wait(response),
            Outcome::Failed(_) => None,
        };
        let left = self.deadline.saturating_duration_since(Instant::now());
        match (reason, self.shared.policy.prefer_wait) {
            (RetryReason::InProgress, Some(wait)) => self.wait = Some(wait.min(left.saturating_sub(delay))),
            _ => delay = delay.max(asked.unwrap_or_default()),
        }
        if delay >= left || !self.shared.withdraw(&self.route) {
            return None;
        }
        self.previous_delay = delay;
        Some(delay)
    }

    /// The wait the answer asks for: its `Retry-After`, which takes
    /// precedence, or on a 429 or 503 the reset of its spent rate-limit
    /// quota, up to [`RetryPolicy::rate_limit_wait_max`].
    fn server_wait<R>(&self, response: &Response<R>) -> Option<Duration> {
        let now = SystemTime::now();
        if let Some(wait) = retry_after(response.headers(), now) {
            return Some(wait);
        }
        if !matches!(response.status().as_u16(), 429 | 503) {
            return None;
        }
        let found = rate_limit_wait(response.headers(), now, self.shared.policy.rate_limit_wait_max);
        for (field, reason) in found.ignored {
            metrics::rate_limit_ignored(field, reason);
        }
        found.wait
    }

    /// The caller's answer, or `error`, when something refused the next
    /// attempt: the last attempt's outcome if there was one.
    fn refused<R>(&mut self, last: Option<Outcome<R>>, error: ClientError) -> Result<Response<R>, ClientError> {
        match last {
            Some(outcome) => self.give_up(outcome, Ending::Stopped),
            None => Err(error),
        }
    }

    /// The caller's answer when no more attempts follow `outcome`, which
    /// is final or was `Stopped`.
    fn give_up<R>(&mut self, outcome: Outcome<R>, ending: Ending) -> Result<Response<R>, ClientError> {
        self.ending = ending;
        match outcome {
            Outcome::Answer(mut response) => {
                let replayed = response.headers().contains_key(&self.shared.policy.replay_header);
                if replayed && ending == Ending::Final {
                    self.ending = Ending::Replayed;
                }
                let info = RetryInfo { attempts: self.made, idempotency_key: self.replay.key().cloned(), replayed };
                response.extensions_mut().insert(info);
                Ok(response)
            }
            Outcome::Failed(source) => Err(ClientError::Transport { attempts: self.made, source }),
        }
    }
}

/// What an attempt's outcome (its retry reason, `None` for a final
/// answer) says of the destination's load.
fn load_signal(reason: Option<RetryReason>) -> LoadSignal {
    match reason {
        Some(reason) if reason.is_overload() => LoadSignal::Overload,
        Some(RetryReason::Connect | RetryReason::Reset | RetryReason::Transport) => LoadSignal::Ignore,
        _ => LoadSignal::Success,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_signals_of_the_outcomes() {
        let overload = [
            RetryReason::Timeout,
            RetryReason::RequestTimeout,
            RetryReason::Throttled,
            RetryReason::Unavailable,
            RetryReason::Gateway,
            RetryReason::ServerError,
        ];
        for reason in overload {
            assert_eq!(load_signal(Some(reason)), LoadSignal::Overload, "{reason:?}");
        }
        // A connection that failed says nothing of the load.
        for reason in [RetryReason::Connect, RetryReason::Reset, RetryReason::Transport] {
            assert_eq!(load_signal(Some(reason)), LoadSignal::Ignore, "{reason:?}");
        }
        // A final answer, 425 and an in-progress 409 come from a server
        // that is coping.
        for reason in [None, Some(RetryReason::TooEarly), Some(RetryReason::InProgress)] {
            assert_eq!(load_signal(reason), LoadSignal::Success, "{reason:?}");
        }
    }
}
