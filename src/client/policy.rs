//! The retry layer's settings, as a builder.

use super::backoff::Backoff;
use super::breaker::BreakerConfig;
use super::budget::BudgetConfig;
use super::concurrency::ConcurrencyConfig;
use http::header::HeaderName;
use http::request::Parts;
use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Which UUID the layer puts in the `Idempotency-Key` it attaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyKind {
    /// UUID v7: time-ordered, so keys of one client sort by creation.
    #[default]
    V7,
    /// UUID v4: random only.
    V4,
}

type RouteFn = Arc<dyn Fn(&Parts) -> String + Send + Sync>;
type ErrorFilter = Arc<dyn Fn(&(dyn StdError + 'static)) -> bool + Send + Sync>;

/// How the retry layer retries.
///
/// # Examples
///
/// ```
/// use idemkv::client::{Backoff, BudgetConfig, Jitter, RetryPolicy};
/// use std::time::Duration;
///
/// let policy = RetryPolicy::new()
///     .max_attempts(4)
///     .deadline(Duration::from_secs(10))
///     .backoff(Backoff::new(Duration::from_millis(50), Duration::from_secs(2)).jitter(Jitter::Decorrelated))
///     .budget(Some(BudgetConfig { ratio: 0.1, ..BudgetConfig::default() }));
/// assert_eq!(policy.attempts_max(), 4);
/// ```
#[derive(Clone)]
pub struct RetryPolicy {
    pub(super) max_attempts: u32,
    pub(super) deadline: Duration,
    pub(super) attempt_timeout: Option<Duration>,
    pub(super) backoff: Backoff,
    pub(super) budget: Option<BudgetConfig>,
    pub(super) breaker: Option<BreakerConfig>,
    pub(super) concurrency: Option<ConcurrencyConfig>,
    pub(super) rate_limit_wait_max: Duration,
    pub(super) replay_header: HeaderName,
    pub(super) prefer_wait: Option<Duration>,
    pub(super) keys: KeyKind,
    pub(super) body_bytes_max: usize,
    pub(super) seed: Option<u64>,
    pub(super) route: Option<RouteFn>,
    pub(super) retry_error_if: Option<ErrorFilter>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::new()
    }
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("RetryPolicy")
            .field("max_attempts", &self.max_attempts)
            .field("deadline", &self.deadline)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("backoff", &self.backoff)
            .field("budget", &self.budget)
            .field("breaker", &self.breaker)
            .field("concurrency", &self.concurrency)
            .field("rate_limit_wait_max", &self.rate_limit_wait_max)
            .field("replay_header", &self.replay_header)
            .field("prefer_wait", &self.prefer_wait)
            .field("keys", &self.keys)
            .field("body_bytes_max", &self.body_bytes_max)
            .finish_non_exhaustive()
    }
}

impl RetryPolicy {
    /// The defaults, each given with its setter.
    #[must_use]
    pub fn new() -> Self {
        RetryPolicy {
            max_attempts: 5,
            deadline: Duration::from_secs(30),
            attempt_timeout: Some(Duration::from_secs(10)),
            backoff: Backoff::default(),
            budget: Some(BudgetConfig::default()),
            breaker: Some(BreakerConfig::default()),
            concurrency: None,
            rate_limit_wait_max: Duration::from_secs(60),
            replay_header: HeaderName::from_static("idempotency-replay"),
            prefer_wait: Some(Duration::from_secs(30)),
            keys: KeyKind::V7,
            body_bytes_max: 1 << 20,
            seed: None,
            route: None,
            retry_error_if: None,
        }
    }

    /// Attempts per logical request, the first included (default 5; at
    /// least 1).
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// The attempts allowed, as set.
    #[must_use]
    pub fn attempts_max(&self) -> u32 {
        self.max_attempts
    }

    /// The time a logical request may take from its first attempt, delays
    /// included (default 30 s). No delay, `Retry-After` included, sleeps
    /// past it; an attempt in flight when it passes is cut short.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The time one attempt may take before it is dropped and counts as a
    /// `timeout` (default 10 s; `None`: only the deadline bounds it).
    #[must_use]
    pub fn attempt_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// The backoff between attempts (default base 100 ms, max 10 s, full
    /// jitter).
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The retry budget per route (default [`BudgetConfig::default`]:
    /// 20 % of the requests over 10 s, plus 10; `None`: no budget).
    #[must_use]
    pub fn budget(mut self, budget: Option<BudgetConfig>) -> Self {
        self.budget = budget;
        self
    }

    /// The circuit breaker per destination (default
    /// [`BreakerConfig::default`]; `None`: no breaker).
    #[must_use]
    pub fn breaker(mut self, breaker: Option<BreakerConfig>) -> Self {
        self.breaker = breaker;
        self
    }

    /// An adaptive limit on the attempts in flight to each destination
    /// (the URI's authority), which falls as timeouts and overload answers
    /// (5xx, 408, 429) come back and rises again as they stop; an attempt
    /// over the limit waits for a place, never past the deadline (default
    /// `None`: no limit, nothing waits). Off by default because it makes
    /// callers wait, which only the service can judge worth it, and
    /// because its right size depends on the destination.
    /// See [`ConcurrencyLimit`](super::ConcurrencyLimit) for how it moves,
    /// and [`RetryLayer::concurrency_limit`](super::RetryLayer::concurrency_limit)
    /// to read it.
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::client::{ConcurrencyConfig, RetryPolicy};
    ///
    /// let policy = RetryPolicy::new().concurrency(Some(ConcurrencyConfig { max_limit: 64, ..ConcurrencyConfig::default() }));
    /// ```
    #[must_use]
    pub fn concurrency(mut self, concurrency: Option<ConcurrencyConfig>) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// The longest wait a rate-limit field may ask for before a retry
    /// (default 60 s; the deadline bounds it too). A 429 or 503 whose
    /// spent quota resets sooner is retried after the reset at the
    /// earliest; a reset further off is ignored (counted in
    /// `rate_limit_ignored_total{reason="too_long"}`) and the retry goes
    /// on with its backoff. See [`rate_limit_wait`](super::rate_limit_wait)
    /// for the fields and their rules.
    #[must_use]
    pub fn rate_limit_wait_max(mut self, wait: Duration) -> Self {
        self.rate_limit_wait_max = wait;
        self
    }

    /// The field by which a server marks an answer as the replay of one
    /// it gave before (default `Idempotency-Replay`, the name the server
    /// layer `idemkv::http::IdempotencyLayer` uses unless told another):
    /// [`RetryInfo::replayed`](super::RetryInfo::replayed) and the call's
    /// span say so.
    #[must_use]
    pub fn replay_header(mut self, name: HeaderName) -> Self {
        self.replay_header = name;
        self
    }

    /// After a 409 "in progress", send the retry at once with
    /// `Prefer: wait=N` (N: this, in whole seconds, cut to the time left
    /// of the deadline) so that the server answers the moment the first
    /// request finishes, instead of sleeping for its `Retry-After`
    /// (default 30 s; `None`: sleep for `Retry-After`, and give up if it
    /// is past the deadline). A server that does not know `Prefer: wait`
    /// ignores it (RFC 7240) and answers 409 again, and the retries go on
    /// with backoff.
    #[must_use]
    pub fn prefer_wait(mut self, wait: Option<Duration>) -> Self {
        self.prefer_wait = wait;
        self
    }

    /// The UUID version of attached keys (default [`KeyKind::V7`]).
    #[must_use]
    pub fn keys(mut self, keys: KeyKind) -> Self {
        self.keys = keys;
        self
    }

    /// The largest request body the layer buffers for replay (default
    /// 1 MiB); a larger one is refused with
    /// [`ClientError::Body`](super::ClientError::Body).
    #[must_use]
    pub fn body_bytes_max(mut self, bytes: usize) -> Self {
        self.body_bytes_max = bytes;
        self
    }

    /// Seeds the jitter, so that delays replay exactly (default: from the
    /// operating system's entropy).
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Names the route whose budget a request spends (default: its
    /// destination, the URI's authority). Keep the names few: each has its
    /// account and its `route` label.
    #[must_use]
    pub fn route(mut self, route: impl Fn(&Parts) -> String + Send + Sync + 'static) -> Self {
        self.route = Some(Arc::new(route));
        self
    }

    /// Which transport errors are retried (default: all of them, since an
    /// attempt that failed in transport brought no answer back, and the
    /// request's key makes sending it again safe).
    #[must_use]
    pub fn retry_error_if(mut self, retry: impl Fn(&(dyn StdError + 'static)) -> bool + Send + Sync + 'static) -> Self {
        self.retry_error_if = Some(Arc::new(retry));
        self
    }
}
