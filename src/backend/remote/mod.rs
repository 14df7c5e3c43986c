//! What every networked backend (Redis, PostgreSQL) shares, written once:
//! the settings it honours, validated at connect ([`Settings`]); the checks
//! before any call goes out (the claim prologue, the finish, renewal and
//! checkpoint checks); a waiting claim's side of the claim-and-wait loop
//! ([`crate::claim::wait`]); the dispatch of the finishing calls and of fencing
//! answers; the limits. A backend writes only its [`Transport`] — how a
//! call reaches its server (a Lua script, a SQL function) and how its
//! wake-ups arrive — and `remote_backend!` makes that an
//! [`IdempotencyBackend`](crate::backend::IdempotencyBackend).

pub(crate) mod counters;
pub(crate) mod runtime;
#[cfg(feature = "tls")]
pub(crate) mod tls;
pub(crate) mod wake;

use crate::backend::remote::counters::{Call, Counters};
use crate::backend::{BackendClaim, BackendLimits, ClaimOptions};
use crate::checkpoint;
use crate::claim::wait::{self, KeyWait, Poll};
use crate::config::{Backend, Config};
use crate::error::{Error, Result};
use crate::record::Record;
use crate::{Fingerprint, Keyspace, LeaseToken, ReusePolicy};
use event_listener::{Event, EventListener};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// How long a waiting claim parks without a wake-up at first and at most
/// (the pause doubles): a wake-up lost with a connection costs at most
/// that.
const POLL: Poll = Poll { first: Duration::from_millis(100), max: Duration::from_secs(1) };

/// The settings a networked backend honours: a [`Config`] that passed
/// [`Config::validate_for_backend`], so every value in it is in force.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    config: Arc<Config>,
    counters: Counters,
}

impl Settings {
    /// Checks `config` for `backend` exactly as `Store::open` checks its
    /// values, and refuses the settings of the embedded store alone.
    pub(crate) fn new(config: Config, backend: Backend) -> Result<Settings> {
        config.validate_for_backend(backend)?;
        Ok(Settings { config: Arc::new(config), counters: Counters::new(backend.name) })
    }

    /// The sizes the backend accepts.
    pub(crate) fn limits(&self) -> BackendLimits {
        BackendLimits {
            key_bytes_max: self.config.key_bytes_max,
            scope_bytes_max: self.config.scope_bytes_max,
            response_bytes_max: self.config.response_bytes_max,
            duration_max: Duration::from_millis(self.config.duration_ms_max),
            ttl_default: Duration::from_millis(self.config.ttl_ms),
        }
    }

    /// The claim prologue: the key checked, the lease and TTL checked or
    /// defaulted.
    fn claim_args<'a>(
        &self,
        address: Address<'a>,
        fingerprint: Fingerprint,
        options: ClaimOptions,
    ) -> Result<ClaimArgs<'a>> {
        self.config.check_key(address.scope, address.key)?;
        let lease_ms = self.config.check_duration("lease", options.lease, self.config.lease_ms)?;
        let ttl_ms = self.config.check_duration("ttl", options.ttl, self.config.ttl_ms)?;
        let Address { keyspace, scope, key } = address;
        Ok(ClaimArgs { keyspace, scope, key, fingerprint, lease_ms, ttl_ms, reuse: options.reuse })
    }
}

impl Settings {
    /// The checks before a finishing call: the key and the response's size.
    pub(crate) fn check_finish(&self, token: &LeaseToken, response: &[u8]) -> Result<()> {
        self.config.check_key(&token.scope, &token.key)?;
        self.config.check_response(response)
    }
}

/// A record's `(scope, key)` and its keyspace, as a transport names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Address<'a> {
    pub(crate) keyspace: Keyspace,
    pub(crate) scope: &'a [u8],
    pub(crate) key: &'a [u8],
}

/// Redis names a finished record's indexes by its address.
#[cfg(feature = "redis")]
impl<'a> Address<'a> {
    /// The record `token` holds.
    pub(crate) fn of(token: &'a LeaseToken) -> Address<'a> {
        Address { keyspace: token.keyspace, scope: &token.scope, key: &token.key }
    }
}

/// One claim as it goes to the server.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimArgs<'a> {
    pub(crate) keyspace: Keyspace,
    pub(crate) scope: &'a [u8],
    pub(crate) key: &'a [u8],
    pub(crate) fingerprint: Fingerprint,
    pub(crate) lease_ms: u64,
    pub(crate) ttl_ms: u64,
    pub(crate) reuse: ReusePolicy,
}

impl ClaimArgs<'_> {
    /// The record the claim names.
    pub(crate) fn address(&self) -> Address<'_> {
        Address { keyspace: self.keyspace, scope: self.scope, key: self.key }
    }

    /// The reuse policy as the server-side code spells it.
    pub(crate) fn reuse_arg(&self) -> &'static str {
        match self.reuse {
            ReusePolicy::RetryFailed => "retry",
            ReusePolicy::ReplayFailure => "replay",
        }
    }
}

/// Which finishing call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finish {
    Complete,
    Fail,
    Release,
}

impl Finish {
    /// The code the server-side code takes (`C`, `F`, `D`).
    pub(crate) fn code(self) -> &'static str {
        match self {
            Finish::Complete => "C",
            Finish::Fail => "F",
            Finish::Release => "D",
        }
    }
}

/// A waiter's membership in its key's wake-ups: the event a finish of the
/// key fires, and whatever leaves the key's waiters when dropped.
pub(crate) struct Subscription<'a> {
    pub(crate) event: Arc<Event>,
    pub(crate) _leave: Box<dyn Send + 'a>,
}

/// How a networked backend talks to its server. Every call has passed the
/// shared checks; a fenced call answers whether the token still held the
/// key (`false` becomes [`Error::LeaseLost`]).
pub(crate) trait Transport: Send + Sync + 'static {
    /// The backend's validated settings.
    fn settings(&self) -> &Settings;

    /// One claim; `waiting` is set for the claims of a waiting caller.
    fn claim_once(&self, args: &ClaimArgs<'_>, waiting: bool) -> impl Future<Output = Result<BackendClaim>> + Send;

    /// Joins the wake-ups of `address` (subscribing, listening, ...) for
    /// a caller that waits up to `wait`. Without them a wait still ends,
    /// by polling.
    fn listen<'a>(&'a self, address: Address<'a>, wait: Duration) -> impl Future<Output = Subscription<'a>> + Send;

    /// Completes, fails or releases the lease (`response` empty for a
    /// release), waking the key's waiters.
    fn finish(&self, token: &LeaseToken, finish: Finish, response: &[u8]) -> impl Future<Output = Result<bool>> + Send;

    /// Extends the lease to at least `extend_ms` from the server's now.
    fn renew(&self, token: &LeaseToken, extend_ms: u64) -> impl Future<Output = Result<bool>> + Send;

    /// Stores an encoded checkpoint in the Processing record.
    fn checkpoint(&self, token: &LeaseToken, point: &[u8]) -> impl Future<Output = Result<bool>> + Send;

    /// The live record, if any.
    fn get(&self, address: Address<'_>) -> impl Future<Output = Result<Option<Record>>> + Send;

    /// Removes the record whatever its state, waking its waiters.
    fn remove(&self, address: Address<'_>) -> impl Future<Output = Result<bool>> + Send;

    /// Replaces the answer of the live Completed record when it is
    /// `expected`; `Err(KeyHashCollision)` when the record names another
    /// `(scope, key)`.
    fn replace(
        &self,
        address: Address<'_>,
        expected: &[u8],
        answer: &[u8],
    ) -> impl Future<Output = Result<bool>> + Send;

    /// The server's time now, in ms since the epoch: the clock its
    /// records' times are in.
    fn now_ms(&self) -> impl Future<Output = Result<u64>> + Send;

    /// A page of the live records of `scope` of `keyspace` after `after`,
    /// in key order.
    fn scan(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Record>>> + Send;

    /// A page of the caller's Completed records of `scope` whose answer
    /// carries staged messages, after `after`, in key order.
    fn scan_staged(
        &self,
        scope: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Record>>> + Send;
}

/// [`IdempotencyBackend::claim_in`](crate::backend::IdempotencyBackend::claim_in) on a transport.
pub(crate) async fn claim<T: Transport>(
    transport: &T,
    address: Address<'_>,
    fingerprint: Fingerprint,
    options: ClaimOptions,
) -> Result<BackendClaim> {
    let settings = transport.settings();
    let args = settings.claim_args(address, fingerprint, options)?;
    let started = std::time::Instant::now();
    let answer = match options.wait {
        Some(timeout) if !timeout.is_zero() => {
            let mut waiting = RemoteWait { transport, args: &args, timeout, subscription: None };
            wait::claim_wait(&mut waiting, timeout).await
        }
        _ => transport.claim_once(&args, false).await,
    };
    settings.counters.claimed(&answer, started.elapsed());
    answer
}

/// A waiting claim on a transport: every look is a claim marked as a
/// waiting caller's; the first registration joins the key's wake-ups
/// (subscribing, listening), which the caller keeps until its claim ends.
struct RemoteWait<'a, T> {
    transport: &'a T,
    args: &'a ClaimArgs<'a>,
    timeout: Duration,
    subscription: Option<Subscription<'a>>,
}

impl<T: Transport> KeyWait for RemoteWait<'_, T> {
    type Answer = BackendClaim;
    type Armed = EventListener;
    const POLL: Option<Poll> = Some(POLL);

    async fn look(&mut self, again: bool) -> Result<BackendClaim> {
        if again {
            self.transport.settings().counters.looked_again();
        }
        self.transport.claim_once(self.args, true).await
    }

    async fn arm(&mut self) -> Option<EventListener> {
        if self.subscription.is_none() {
            self.subscription = Some(self.transport.listen(self.args.address(), self.timeout).await);
        }
        self.subscription.as_ref().map(|subscription| subscription.event.listen())
    }

    async fn park(&mut self, armed: EventListener, pause: Duration) {
        let _woken_or_polled = tokio::time::timeout(pause, armed).await;
    }
}

/// Complete, fail or release on a transport.
pub(crate) async fn finish<T: Transport>(
    transport: &T,
    token: &LeaseToken,
    finish: Finish,
    response: &[u8],
) -> Result<()> {
    transport.settings().check_finish(token, response)?;
    let answer = transport.finish(token, finish, response).await.and_then(|held| fenced(held, token));
    let call = match finish {
        Finish::Complete => Call::Complete,
        Finish::Fail => Call::Fail,
        Finish::Release => Call::Release,
    };
    transport.settings().counters.called(call, &answer);
    answer
}

/// [`IdempotencyBackend::renew`](crate::backend::IdempotencyBackend::renew) on a transport.
pub(crate) async fn renew<T: Transport>(transport: &T, token: &LeaseToken, extend: Duration) -> Result<()> {
    let config = &transport.settings().config;
    config.check_key(&token.scope, &token.key)?;
    let extend_ms = config.check_duration("renewal", Some(extend), 0)?;
    let answer = transport.renew(token, extend_ms).await.and_then(|held| fenced(held, token));
    transport.settings().counters.called(Call::Renew, &answer);
    answer
}

/// [`IdempotencyBackend::checkpoint`](crate::backend::IdempotencyBackend::checkpoint) on a transport.
pub(crate) async fn store_checkpoint<T: Transport>(
    transport: &T,
    token: &LeaseToken,
    step: &str,
    payload: &[u8],
) -> Result<()> {
    let config = &transport.settings().config;
    config.check_key(&token.scope, &token.key)?;
    let point = checkpoint::encode(step, payload, config.response_bytes_max)?;
    let answer = transport.checkpoint(token, &point).await.and_then(|held| fenced(held, token));
    transport.settings().counters.called(Call::Checkpoint, &answer);
    answer
}

/// [`IdempotencyBackend::get_in`](crate::backend::IdempotencyBackend::get_in) on a transport.
pub(crate) async fn get<T: Transport>(transport: &T, address: Address<'_>) -> Result<Option<Record>> {
    transport.settings().config.check_key(address.scope, address.key)?;
    transport.get(address).await
}

/// [`IdempotencyBackend::remove_in`](crate::backend::IdempotencyBackend::remove_in) on a transport.
pub(crate) async fn remove<T: Transport>(transport: &T, address: Address<'_>) -> Result<bool> {
    transport.settings().config.check_key(address.scope, address.key)?;
    let answer = transport.remove(address).await;
    transport.settings().counters.removed(&answer);
    answer
}

/// [`IdempotencyBackend::replace_in`](crate::backend::IdempotencyBackend::replace_in) on a transport.
pub(crate) async fn replace<T: Transport>(
    transport: &T,
    address: Address<'_>,
    expected: &[u8],
    answer: &[u8],
) -> Result<bool> {
    let config = &transport.settings().config;
    config.check_key(address.scope, address.key)?;
    config.check_response(answer)?;
    let answered = transport.replace(address, expected, answer).await;
    transport.settings().counters.replaced(&answered);
    answered
}

/// Which records a page lists.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Listing {
    /// Every live record of the scope of this keyspace
    /// ([`IdempotencyBackend::scan_in`](crate::backend::IdempotencyBackend::scan_in)).
    Every(Keyspace),
    /// The caller's completions with staged messages
    /// ([`IdempotencyBackend::scan_staged`](crate::backend::IdempotencyBackend::scan_staged)).
    Staged,
}

/// A page of `listing` on a transport.
pub(crate) async fn scan<T: Transport>(
    transport: &T,
    listing: Listing,
    scope: &[u8],
    after: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<Record>> {
    transport.settings().config.check_scope(scope)?;
    if limit == 0 {
        return Ok(Vec::new());
    }
    match listing {
        Listing::Every(keyspace) => transport.scan(keyspace, scope, after, limit).await,
        Listing::Staged => transport.scan_staged(scope, after, limit).await,
    }
}

/// The answer of a fenced call.
pub(crate) fn fenced(held: bool, token: &LeaseToken) -> Result<()> {
    if held {
        Ok(())
    } else {
        Err(Error::LeaseLost { token: token.token })
    }
}

/// A duration in whole milliseconds, saturated.
#[cfg(feature = "redis")]
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Implements [`IdempotencyBackend`](crate::backend::IdempotencyBackend) for a
/// [`Transport`] through the shared functions above.
macro_rules! remote_backend {
    ($backend:ty) => {
        impl $crate::backend::IdempotencyBackend for $backend {
            async fn claim_in(
                &self,
                keyspace: $crate::Keyspace,
                scope: &[u8],
                key: &[u8],
                fingerprint: $crate::Fingerprint,
                options: $crate::backend::ClaimOptions,
            ) -> $crate::error::Result<$crate::backend::BackendClaim> {
                let address = $crate::backend::remote::Address { keyspace, scope, key };
                $crate::backend::remote::claim(self, address, fingerprint, options).await
            }

            async fn complete(&self, token: &$crate::LeaseToken, response: &[u8]) -> $crate::error::Result<()> {
                $crate::backend::remote::finish(self, token, $crate::backend::remote::Finish::Complete, response).await
            }

            async fn fail(&self, token: &$crate::LeaseToken, response: &[u8]) -> $crate::error::Result<()> {
                $crate::backend::remote::finish(self, token, $crate::backend::remote::Finish::Fail, response).await
            }

            async fn release(&self, token: &$crate::LeaseToken) -> $crate::error::Result<()> {
                $crate::backend::remote::finish(self, token, $crate::backend::remote::Finish::Release, &[]).await
            }

            async fn checkpoint(
                &self,
                token: &$crate::LeaseToken,
                step: &str,
                payload: &[u8],
            ) -> $crate::error::Result<()> {
                $crate::backend::remote::store_checkpoint(self, token, step, payload).await
            }

            async fn renew(
                &self,
                token: &$crate::LeaseToken,
                extend: std::time::Duration,
            ) -> $crate::error::Result<()> {
                $crate::backend::remote::renew(self, token, extend).await
            }

            async fn get_in(
                &self,
                keyspace: $crate::Keyspace,
                scope: &[u8],
                key: &[u8],
            ) -> $crate::error::Result<Option<$crate::Record>> {
                $crate::backend::remote::get(self, $crate::backend::remote::Address { keyspace, scope, key }).await
            }

            async fn remove_in(
                &self,
                keyspace: $crate::Keyspace,
                scope: &[u8],
                key: &[u8],
            ) -> $crate::error::Result<bool> {
                $crate::backend::remote::remove(self, $crate::backend::remote::Address { keyspace, scope, key }).await
            }

            async fn replace_in(
                &self,
                keyspace: $crate::Keyspace,
                scope: &[u8],
                key: &[u8],
                expected: &[u8],
                answer: &[u8],
            ) -> $crate::error::Result<bool> {
                let address = $crate::backend::remote::Address { keyspace, scope, key };
                $crate::backend::remote::replace(self, address, expected, answer).await
            }

            async fn scan_in(
                &self,
                keyspace: $crate::Keyspace,
                scope: &[u8],
                after: Option<&[u8]>,
                limit: usize,
            ) -> $crate::error::Result<Vec<$crate::Record>> {
                let listing = $crate::backend::remote::Listing::Every(keyspace);
                $crate::backend::remote::scan(self, listing, scope, after, limit).await
            }

            async fn scan_staged(
                &self,
                scope: &[u8],
                after: Option<&[u8]>,
                limit: usize,
            ) -> $crate::error::Result<Vec<$crate::Record>> {
                $crate::backend::remote::scan(self, $crate::backend::remote::Listing::Staged, scope, after, limit).await
            }

            fn limits(&self) -> $crate::backend::BackendLimits {
                $crate::backend::remote::Transport::settings(self).limits()
            }

            async fn now_ms(&self) -> $crate::error::Result<u64> {
                $crate::backend::remote::Transport::now_ms(self).await
            }
        }
    };
}
pub(crate) use remote_backend;
