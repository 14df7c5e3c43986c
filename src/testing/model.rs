//! The reference model: the claim contract of DESIGN §3 over a plain map,
//! written apart from the engine so that a test of the engine against it
//! can fail. It knows nothing of files, shards or logs; it keeps, per
//! `(scope, key)`, what a [`Record`] says about the key (state, fingerprint,
//! token, attempt, lease end or expiry, response, checkpoint) and the
//! highest token the key was ever handed, and answers every call as the
//! contract says the store must.
//!
//! Time is passed in by the caller (`now_ms`, on the store's clock), so one
//! model serves a test on a [`ManualClock`](crate::ManualClock) and a crash
//! test alike. Fencing tokens are the store's to choose: a claim that the
//! model predicts to acquire leaves a Processing record whose token is not
//! yet known ([`ModelRecord::token`] is `None`), and [`Model::grant`] then
//! records the token the store handed out, checking that it grew.
//!
//! A call that the store may or may not have carried out (it failed on an
//! I/O error, or the power went) is modelled on a clone: apply the call to
//! `model.clone()` and read what it would have left with [`Model::get`].

use crate::quota::Quotas;
use crate::{
    store::{QuotaLimit, ScopeUsage, STEP_BYTES_MAX},
    Checkpoint, ClaimRequest, Config, Error, Fingerprint, LeaseToken, Record, ReusePolicy, State,
};
use std::collections::HashMap;
use std::time::Duration;

/// Bytes a record's frame takes besides its scope, key and stored bytes:
/// the frame header and the fixed fields (`docs/format.md`). A quota's
/// byte limit counts whole frames.
const FRAME_PREFIX_BYTES: u64 = 104;
const _: () = assert!(FRAME_PREFIX_BYTES == crate::engine::frame::PREFIX_BYTES as u64);

/// What the model holds for one live key: the parts of a [`Record`] that
/// the contract decides.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelRecord {
    /// Processing, Completed or Failed.
    pub state: State,
    /// The fingerprint of the request that claimed the key.
    pub fingerprint: Fingerprint,
    /// The fencing token of the holder; `None` while the store has not
    /// said which token it handed out (see [`Model::grant`]), and for a
    /// record that a call which failed may have left.
    pub token: Option<u64>,
    /// 1 for the first holder, one more for each takeover or new attempt.
    pub attempt: u32,
    /// Whether the holder took over an ended lease.
    pub recovered: bool,
    /// Lease end while Processing, expiry once finished (ms, store clock).
    pub deadline_ms: u64,
    /// The TTL the claim asked for: a finished record lives this long, an
    /// abandoned Processing record this long past its lease end.
    pub ttl_ms: u64,
    /// The stored response; empty while Processing.
    pub response: Vec<u8>,
    /// While Processing, the last checkpoint.
    pub checkpoint: Option<Checkpoint>,
}

impl ModelRecord {
    /// The model's view of `record`, a record read from a store, with the
    /// TTL `ttl_ms` the caller expects of it (its own
    /// [`Record::ttl_ms`] where the caller has nothing else to go by). A
    /// crash test adopts what the store holds after a cut this way.
    #[must_use]
    pub fn from_record(record: &Record, ttl_ms: u64) -> Self {
        ModelRecord {
            state: record.state,
            fingerprint: record.fingerprint,
            token: Some(record.token),
            attempt: record.attempt,
            recovered: record.recovered,
            deadline_ms: record.deadline_ms,
            ttl_ms,
            response: record.response.clone(),
            checkpoint: record.checkpoint.clone(),
        }
    }

    /// Whether `record` is this record as far as a caller can tell: same
    /// state, fingerprint, token (any token when the model does not know
    /// it), response and checkpoint. Times and attempts are left to
    /// the tests that track them exactly.
    #[must_use]
    pub fn agrees_with(&self, record: &Record) -> bool {
        self.state == record.state
            && self.fingerprint == record.fingerprint
            && self.token.is_none_or(|token| token == record.token)
            && self.response == record.response
            && self.checkpoint == record.checkpoint
    }

    /// The bytes the record keeps after its scope and key: its response,
    /// or while Processing its encoded checkpoint (a length byte, the
    /// step, the payload).
    #[must_use]
    pub fn stored_len(&self) -> usize {
        match &self.checkpoint {
            Some(point) => 1 + point.step.len() + point.payload.len(),
            None => self.response.len(),
        }
    }

    /// Whether the record still reads as present at `now_ms`: a finished
    /// one until its expiry, a Processing one until its lease end + TTL
    /// (its holder never came back).
    fn is_live(&self, now_ms: u64) -> bool {
        match self.state {
            State::Processing => self.deadline_ms.saturating_add(self.ttl_ms) > now_ms,
            State::Completed | State::Failed => self.deadline_ms > now_ms,
        }
    }
}

/// What the model predicts a claim answers (besides a [`Refusal`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Expected {
    /// A new lease: the model now holds a Processing record for it whose
    /// token the caller passes to [`Model::grant`].
    Acquired {
        /// 1 for a fresh key, one more for a takeover or a new attempt.
        attempt: u32,
        /// Whether the lease takes over one that ended.
        recovered: bool,
        /// The checkpoint handed over (a takeover's only).
        checkpoint: Option<Checkpoint>,
        /// The lease end (ms, store clock).
        deadline_ms: u64,
    },
    /// The holder's lease runs this much longer.
    InProgress {
        /// Until the holder's lease ends.
        retry_after: Duration,
        /// The holder's attempt.
        attempt: u32,
    },
    /// The stored record is replayed.
    Replay(ModelRecord),
    /// The key is present with another fingerprint.
    Mismatch,
}

/// A call the model predicts the store refuses, and with which
/// [`Error`]; the model's state is unchanged by it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The token does not hold the key: [`Error::LeaseLost`].
    LeaseLost,
    /// The scope is at its quota: [`Error::QuotaExceeded`].
    QuotaExceeded {
        /// The limit that refuses.
        limit: QuotaLimit,
        /// Its value.
        max: u64,
        /// What the scope holds of it.
        used: u64,
        /// The quota's `retry_after`.
        retry_after: Duration,
    },
    /// An empty key: [`Error::KeyEmpty`].
    KeyEmpty,
    /// A key over the limit: [`Error::KeyTooLong`].
    KeyTooLong,
    /// A scope over the limit: [`Error::ScopeTooLong`].
    ScopeTooLong,
    /// A zero or too long duration: [`Error::InvalidDuration`].
    InvalidDuration,
    /// A response over the limit: [`Error::ResponseTooLarge`].
    ResponseTooLarge {
        /// The response's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A checkpoint over the limit: [`Error::CheckpointTooLarge`].
    CheckpointTooLarge {
        /// Its stored length (a length byte, the step, the payload).
        len: usize,
        /// The limit.
        max: usize,
    },
    /// An empty or too long step: [`Error::InvalidCheckpoint`].
    InvalidCheckpoint,
}

impl Refusal {
    /// Whether `error` is this refusal (with the same sizes and limits,
    /// where the refusal names them).
    #[must_use]
    pub fn matches(&self, error: &Error) -> bool {
        match (self, error) {
            (Refusal::QuotaExceeded { limit, max, used, retry_after }, Error::QuotaExceeded { .. }) => {
                matches!(error, Error::QuotaExceeded { limit: l, max: m, used: u, retry_after: r }
                    if l == limit && m == max && u == used && r == retry_after)
            }
            (Refusal::ResponseTooLarge { len, max }, Error::ResponseTooLarge { len: l, max: m })
            | (Refusal::CheckpointTooLarge { len, max }, Error::CheckpointTooLarge { len: l, max: m }) => {
                len == l && max == m
            }
            (Refusal::LeaseLost, Error::LeaseLost { .. })
            | (Refusal::KeyEmpty, Error::KeyEmpty)
            | (Refusal::KeyTooLong, Error::KeyTooLong { .. })
            | (Refusal::ScopeTooLong, Error::ScopeTooLong { .. })
            | (Refusal::InvalidDuration, Error::InvalidDuration { .. })
            | (Refusal::InvalidCheckpoint, Error::InvalidCheckpoint { .. }) => true,
            _ => false,
        }
    }
}

/// A `(scope, key)` of the model.
type Id = (Vec<u8>, Vec<u8>);

/// The limits the model checks input against, from a [`Config`].
#[derive(Debug, Clone)]
struct Limits {
    lease_ms: u64,
    ttl_ms: u64,
    key_bytes_max: usize,
    scope_bytes_max: usize,
    response_bytes_max: usize,
    duration_ms_max: u64,
    quotas: Quotas,
}

/// The reference model of a store: every live key as the contract leaves
/// it, and the highest token each key was handed.
///
/// # Examples
///
/// ```
/// use idemkv::testing::{Expected, Model};
/// use idemkv::{Claim, ClaimRequest, Clock, Config, Fingerprint, ManualClock, Store};
/// use std::sync::Arc;
/// # fn main() -> Result<(), idemkv::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let clock = ManualClock::new(1_767_225_600_000);
/// let config = Config::new().clock(Arc::new(clock.clone()));
/// let mut model = Model::new(&config);
/// let store = Store::open(dir.path(), config)?;
///
/// let request = ClaimRequest::new("order-1", Fingerprint::of(b"body"));
/// let expected = model.claim(&request, clock.now_ms());
/// let Claim::Acquired(lease) = store.claim(&request)? else { panic!("not acquired") };
/// assert!(matches!(expected, Ok(Expected::Acquired { attempt: 1, recovered: false, .. })));
/// assert!(model.grant(b"", b"order-1", lease.token()), "a token of the key only grows");
///
/// let token = lease.into_token();
/// assert_eq!(model.complete(&token, b"201", clock.now_ms()), Ok(()));
/// store.complete(&token, b"201")?;
/// let record = store.get(b"", b"order-1")?.expect("present");
/// assert!(model.get(b"", b"order-1", clock.now_ms()).expect("present").agrees_with(&record));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Model {
    limits: Limits,
    records: HashMap<Id, ModelRecord>,
    tokens: HashMap<Id, u64>,
}

impl Model {
    /// An empty model of a store opened with `config`: its default lease
    /// and TTL, its limits and its quotas.
    #[must_use]
    pub fn new(config: &Config) -> Self {
        let limits = Limits {
            lease_ms: config.lease_ms,
            ttl_ms: config.ttl_ms,
            key_bytes_max: config.key_bytes_max,
            scope_bytes_max: config.scope_bytes_max,
            response_bytes_max: config.response_bytes_max,
            duration_ms_max: config.duration_ms_max,
            quotas: config.quotas.clone(),
        };
        Model { limits, records: HashMap::new(), tokens: HashMap::new() }
    }

    /// The live record of `(scope, key)` at `now_ms`; an expired one is
    /// dropped first.
    pub fn get(&mut self, scope: &[u8], key: &[u8], now_ms: u64) -> Option<&ModelRecord> {
        self.live(&(scope.to_vec(), key.to_vec()), now_ms).map(|record| &*record)
    }

    /// Puts what the store was found to hold for `(scope, key)` in place of
    /// what the model had (`None`: absent). A crash test that accepts one
    /// of several outcomes goes on from the one it found.
    pub fn set(&mut self, scope: &[u8], key: &[u8], record: Option<ModelRecord>) {
        let id = (scope.to_vec(), key.to_vec());
        match record {
            Some(record) => {
                if let Some(token) = record.token {
                    let highest = self.tokens.entry(id.clone()).or_insert(0);
                    *highest = (*highest).max(token);
                }
                self.records.insert(id, record);
            }
            None => {
                self.records.remove(&id);
            }
        }
    }

    /// What `scope` holds against its quota at `now_ms`: its live records
    /// and the bytes their frames take.
    #[must_use]
    pub fn usage(&self, scope: &[u8], now_ms: u64) -> ScopeUsage {
        let mut usage = ScopeUsage::default();
        for ((record_scope, key), record) in &self.records {
            if record_scope.as_slice() == scope && record.is_live(now_ms) {
                usage.records += 1;
                usage.bytes += frame_bytes(scope, key, record.stored_len());
            }
        }
        usage
    }

    /// The highest token `(scope, key)` was ever handed (0 if none).
    #[must_use]
    pub fn highest_token(&self, scope: &[u8], key: &[u8]) -> u64 {
        self.tokens.get(&(scope.to_vec(), key.to_vec())).copied().unwrap_or(0)
    }

    /// Claims `request` at `now_ms`, as the contract's table says. An
    /// [`Expected::Acquired`] leaves a Processing record whose token is
    /// unknown until [`Model::grant`].
    ///
    /// # Errors
    /// The refusal the store must answer: the key, scope or a duration
    /// refused, or the scope's quota.
    pub fn claim(&mut self, request: &ClaimRequest<'_>, now_ms: u64) -> Result<Expected, Refusal> {
        let (lease_ms, ttl_ms) = self.check_claim(request)?;
        let id = (request.scope.to_vec(), request.key.to_vec());
        let Some(stored) = self.live(&id, now_ms).cloned() else {
            self.check_quota(&id, now_ms)?;
            return Ok(self.acquire(id, request.fingerprint, (lease_ms, ttl_ms), (1, false, None), now_ms));
        };
        if stored.fingerprint != request.fingerprint {
            return Ok(Expected::Mismatch);
        }
        let attempt = stored.attempt.saturating_add(1);
        Ok(match stored.state {
            State::Processing if stored.deadline_ms > now_ms => Expected::InProgress {
                retry_after: Duration::from_millis(stored.deadline_ms - now_ms),
                attempt: stored.attempt,
            },
            State::Processing => {
                self.acquire(id, request.fingerprint, (lease_ms, ttl_ms), (attempt, true, stored.checkpoint), now_ms)
            }
            State::Failed if request.reuse == ReusePolicy::RetryFailed => {
                self.acquire(id, request.fingerprint, (lease_ms, ttl_ms), (attempt, false, None), now_ms)
            }
            State::Completed | State::Failed => Expected::Replay(stored),
        })
    }

    /// Records that the store handed out `token` for the lease on
    /// `(scope, key)` that [`Model::claim`] predicted. Returns whether the
    /// token is above every token the key was handed before (it must be).
    #[must_use]
    pub fn grant(&mut self, scope: &[u8], key: &[u8], token: u64) -> bool {
        let id = (scope.to_vec(), key.to_vec());
        let highest = self.tokens.entry(id.clone()).or_insert(0);
        let grew = token > *highest;
        *highest = (*highest).max(token);
        if let Some(record) = self.records.get_mut(&id).filter(|record| record.state == State::Processing) {
            record.token = Some(token);
        }
        grew
    }

    /// Completes the lease `token` with `response` at `now_ms`.
    ///
    /// # Errors
    /// [`Refusal::ResponseTooLarge`], then [`Refusal::LeaseLost`] when the
    /// token does not hold the key.
    pub fn complete(&mut self, token: &LeaseToken, response: &[u8], now_ms: u64) -> Result<(), Refusal> {
        self.finish(token, Some((State::Completed, response)), now_ms)
    }

    /// Fails the lease `token` with `response` at `now_ms` (a replayed
    /// terminal failure).
    ///
    /// # Errors
    /// As [`Model::complete`].
    pub fn fail(&mut self, token: &LeaseToken, response: &[u8], now_ms: u64) -> Result<(), Refusal> {
        self.finish(token, Some((State::Failed, response)), now_ms)
    }

    /// Releases the lease `token` at `now_ms`: the key is absent again.
    ///
    /// # Errors
    /// [`Refusal::LeaseLost`] when the token does not hold the key.
    pub fn release(&mut self, token: &LeaseToken, now_ms: u64) -> Result<(), Refusal> {
        self.finish(token, None, now_ms)
    }

    /// Renews the lease `token` so that it ends at least `extend` after
    /// `now_ms` (never sooner than it did); the new lease end.
    ///
    /// # Errors
    /// [`Refusal::InvalidDuration`], then [`Refusal::LeaseLost`].
    pub fn renew(&mut self, token: &LeaseToken, extend: Duration, now_ms: u64) -> Result<u64, Refusal> {
        let extend_ms = self.check_duration(Some(extend), 0)?;
        let record = self.held(token, now_ms)?;
        record.deadline_ms = record.deadline_ms.max(now_ms.saturating_add(extend_ms));
        Ok(record.deadline_ms)
    }

    /// Stores the checkpoint `(step, payload)` for the lease `token`
    /// at `now_ms`. The lease end stays; a holder whose lease ended but was
    /// not taken over writes `now_ms` as its end.
    ///
    /// # Errors
    /// [`Refusal::InvalidCheckpoint`], [`Refusal::CheckpointTooLarge`],
    /// then [`Refusal::LeaseLost`].
    pub fn checkpoint(&mut self, token: &LeaseToken, step: &str, payload: &[u8], now_ms: u64) -> Result<(), Refusal> {
        if step.is_empty() || step.len() > STEP_BYTES_MAX {
            return Err(Refusal::InvalidCheckpoint);
        }
        let (len, max) = (1 + step.len() + payload.len(), self.limits.response_bytes_max);
        if len > max {
            return Err(Refusal::CheckpointTooLarge { len, max });
        }
        let record = self.held(token, now_ms)?;
        record.deadline_ms = record.deadline_ms.max(now_ms);
        record.checkpoint = Some(Checkpoint::new(step, payload));
        Ok(())
    }

    /// Removes `(scope, key)` whatever its state; whether a live record
    /// was removed.
    pub fn remove(&mut self, scope: &[u8], key: &[u8], now_ms: u64) -> bool {
        let id = (scope.to_vec(), key.to_vec());
        let present = self.live(&id, now_ms).is_some();
        self.records.remove(&id);
        present
    }

    /// The live record of `id`, after dropping it if it expired.
    fn live(&mut self, id: &Id, now_ms: u64) -> Option<&mut ModelRecord> {
        if self.records.get(id).is_some_and(|record| !record.is_live(now_ms)) {
            self.records.remove(id);
        }
        self.records.get_mut(id)
    }

    /// The Processing record that `token` holds.
    fn held(&mut self, token: &LeaseToken, now_ms: u64) -> Result<&mut ModelRecord, Refusal> {
        let id = (token.scope.clone(), token.key.clone());
        self.live(&id, now_ms)
            .filter(|record| record.state == State::Processing && record.token == Some(token.token))
            .ok_or(Refusal::LeaseLost)
    }

    fn finish(&mut self, token: &LeaseToken, terminal: Option<(State, &[u8])>, now_ms: u64) -> Result<(), Refusal> {
        let max = self.limits.response_bytes_max;
        if let Some((_, response)) = terminal.filter(|(_, response)| response.len() > max) {
            return Err(Refusal::ResponseTooLarge { len: response.len(), max });
        }
        let record = self.held(token, now_ms)?;
        let Some((state, response)) = terminal else {
            self.records.remove(&(token.scope.clone(), token.key.clone()));
            return Ok(());
        };
        record.state = state;
        record.deadline_ms = now_ms.saturating_add(record.ttl_ms);
        record.response = response.to_vec();
        record.checkpoint = None;
        Ok(())
    }

    /// Writes the Processing record of a new lease; its answer.
    fn acquire(
        &mut self,
        id: Id,
        fingerprint: Fingerprint,
        (lease_ms, ttl_ms): (u64, u64),
        (attempt, recovered, checkpoint): (u32, bool, Option<Checkpoint>),
        now_ms: u64,
    ) -> Expected {
        let deadline_ms = now_ms.saturating_add(lease_ms);
        let record = ModelRecord {
            state: State::Processing,
            fingerprint,
            token: None,
            attempt,
            recovered,
            deadline_ms,
            ttl_ms,
            response: Vec::new(),
            checkpoint: checkpoint.clone(),
        };
        self.records.insert(id, record);
        Expected::Acquired { attempt, recovered, checkpoint, deadline_ms }
    }

    /// The claim's input checks; its lease and TTL.
    fn check_claim(&self, request: &ClaimRequest<'_>) -> Result<(u64, u64), Refusal> {
        if request.key.is_empty() {
            return Err(Refusal::KeyEmpty);
        }
        if request.key.len() > self.limits.key_bytes_max {
            return Err(Refusal::KeyTooLong);
        }
        if request.scope.len() > self.limits.scope_bytes_max {
            return Err(Refusal::ScopeTooLong);
        }
        let lease_ms = self.check_duration(request.lease, self.limits.lease_ms)?;
        let ttl_ms = self.check_duration(request.ttl, self.limits.ttl_ms)?;
        Ok((lease_ms, ttl_ms))
    }

    fn check_duration(&self, duration: Option<Duration>, default_ms: u64) -> Result<u64, Refusal> {
        let Some(duration) = duration else {
            return Ok(default_ms);
        };
        let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        if duration.is_zero() || ms > self.limits.duration_ms_max {
            return Err(Refusal::InvalidDuration);
        }
        Ok(ms)
    }

    /// The quota's refusal of a new record `id`, if its scope is full.
    fn check_quota(&self, id: &Id, now_ms: u64) -> Result<(), Refusal> {
        let (scope, key) = id;
        let Some(quota) = self.limits.quotas.of(scope) else {
            return Ok(());
        };
        let used = self.usage(scope, now_ms);
        let refused =
            |limit, max, used| Refusal::QuotaExceeded { limit, max, used, retry_after: quota.retry_after_duration() };
        if let Some(max) = quota.records_max().filter(|max| used.records >= *max) {
            return Err(refused(QuotaLimit::Records, max, used.records));
        }
        let bytes = frame_bytes(scope, key, 0);
        if let Some(max) = quota.bytes_max().filter(|max| used.bytes.saturating_add(bytes) > *max) {
            return Err(refused(QuotaLimit::Bytes, max, used.bytes));
        }
        Ok(())
    }
}

/// The bytes a record of `scope`, `key` and `stored` bytes takes in the log.
fn frame_bytes(scope: &[u8], key: &[u8], stored: usize) -> u64 {
    FRAME_PREFIX_BYTES + (scope.len() + key.len() + stored) as u64
}
