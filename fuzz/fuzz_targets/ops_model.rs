//! A structured sequence of claims, completions, fails, releases, renews,
//! removes, clock moves, compactions and reopens over a handful of keys,
//! run against the store and the reference model of the state machine
//! (`idemkv::testing::Model`, shared with the property test and the crash
//! tests); every answer must agree. The store lives on an in-memory disk that can lose
//! its power ([`idemkv::io::PowerCutStorage`]). A planned I/O fault (the
//! N-th call fails) or a power failure at a chosen storage call ends the
//! sequence; a planned power cut then drops and tears what was not synced.
//! The store is reopened on the healthy disk and must open; every key must
//! be as the model says (every call is acknowledged under `Sync`), or as
//! the one failed call would have left it; and a claim after the reopen
//! gets a fencing token above every token handed out before. Scope `s0`
//! has a quota of two records: the model predicts every refusal, and after
//! every step the store's running quota counts equal a recount. Holders
//! store checkpoints, which takeovers must see and carry over, and
//! some claims run a Failed key again (`ReusePolicy::RetryFailed`).
#![no_main]

use arbitrary::Arbitrary;
use idemkv::io::{Fault, FaultyStorage, PowerCutStorage};
use idemkv::testing::{Model, ModelRecord};
use idemkv::{Claim, ClaimRequest, Clock, Config, Durability, Error, Fingerprint, LeaseToken, ManualClock, ReusePolicy, State, Store, store::Quota};
use libfuzzer_sys::fuzz_target;

#[path = "scratch.rs"]
mod scratch;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Op {
    Claim { scope: u8, key: u8, fingerprint: bool, lease_quarters: u8, ttl_quarters: u8, retry_failed: bool },
    Checkpoint { slot: u8, step: bool, length: u8 },
    Complete { slot: u8, length: u8 },
    Fail { slot: u8, length: u8 },
    Release { slot: u8 },
    Renew { slot: u8, quarters: u8 },
    Remove { scope: u8, key: u8 },
    Advance { quarters: u8 },
    Compact,
    Reopen,
}

/// A power cut at the end of the sequence.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct PowerCutPlan {
    /// The power fails at the storage call after this many, counted from
    /// the store's first open (between the last op and the reopen when
    /// `None`).
    after_calls: Option<u16>,
    /// Chooses what the disk keeps of what was not synced.
    seed: u64,
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// Fail the call after this many (none when `None`).
    fault_after: Option<u16>,
    fault_kind: u8,
    power_cut: Option<PowerCutPlan>,
    ops: Vec<Op>,
}

type Id = (u8, u8);

/// What a failed call touched and what it would have left there: the key,
/// and its record had the call been carried out.
type Pending = (Option<Id>, Option<ModelRecord>);

fn names(id: Id) -> (String, String) {
    (format!("s{}", id.0 % 2), format!("k{}", id.1 % 3))
}

fn fingerprint(variant: bool) -> Fingerprint {
    Fingerprint::of(&[u8::from(variant)])
}

fn quarters(value: u8) -> u64 {
    250 * (1 + u64::from(value % 16))
}

fn config(clock: &ManualClock, storage: Arc<dyn idemkv::io::Storage>) -> Config {
    Config::new()
        .shards(1)
        .durability(Durability::Sync)
        .segment_bytes(4096)
        .response_bytes_max(300)
        .compaction_interval(None)
        .compaction_bytes_per_second(0)
        .clock(Arc::new(clock.clone()))
        .storage(storage)
        .scope_quota("s0", Quota::new().records(QUOTA_RECORDS))
}

/// A claim as asked: its key, its fingerprint's variant, whether it runs a
/// failure again, and when.
#[derive(Clone, Copy)]
struct Asked {
    id: Id,
    variant: bool,
    retry_failed: bool,
    now: u64,
}

/// Live records scope `s0` may hold.
const QUOTA_RECORDS: u64 = 2;

struct Run {
    clock: ManualClock,
    /// The reference model: what every acknowledged call left.
    model: Model,
    tokens: Vec<(Id, u64)>,
}

impl Run {
    fn live(&mut self, id: Id) -> Option<ModelRecord> {
        let now = self.clock.now_ms();
        let (scope, key) = names(id);
        self.model.get(scope.as_bytes(), key.as_bytes(), now).cloned()
    }

    /// The record of `id` in `model` now: what a call applied to it left.
    fn in_model(&self, model: &mut Model, id: Id) -> Option<ModelRecord> {
        let (scope, key) = names(id);
        model.get(scope.as_bytes(), key.as_bytes(), self.clock.now_ms()).cloned()
    }

    /// The lease of the `slot`-th token handed out, and its key.
    fn lease(&self, slot: u8) -> Option<(Id, LeaseToken)> {
        let &(id, token) = self.tokens.get(usize::from(slot) % self.tokens.len().max(1))?;
        Some((id, LeaseToken { keyspace: idemkv::Keyspace::Caller, scope: names(id).0.into_bytes(), key: names(id).1.into_bytes(), token }))
    }

    /// Whether the lease `token` holds `id` in the model.
    fn holds(&mut self, id: Id, token: u64) -> Option<ModelRecord> {
        self.live(id).filter(|model| model.state == State::Processing && model.token == Some(token))
    }

    /// Runs one op. `Err` carries the key the failed call touched and what
    /// it would have left there.
    fn step(&mut self, slot: &mut Option<Store>, dir: &Path, storage: &FaultyStorage, op: Op) -> Result<(), Pending> {
        let store = slot.as_ref().expect("open");
        match op {
            Op::Claim { scope, key, fingerprint: variant, lease_quarters, ttl_quarters, retry_failed } => {
                let id = (scope % 2, key % 3);
                let reuse = if retry_failed { ReusePolicy::RetryFailed } else { ReusePolicy::ReplayFailure };
                self.claim(store, id, variant, (quarters(lease_quarters), quarters(ttl_quarters)), reuse)?;
            }
            Op::Complete { slot, length } | Op::Fail { slot, length } => {
                let Some((id, lease)) = self.lease(slot) else {
                    return Ok(());
                };
                let response = vec![slot; usize::from(length)];
                let held = self.holds(id, lease.token);
                let mut next = self.model.clone();
                let outcome = if matches!(op, Op::Complete { .. }) {
                    let _ = next.complete(&lease, &response, self.clock.now_ms());
                    store.complete(&lease, &response)
                } else {
                    let _ = next.fail(&lease, &response, self.clock.now_ms());
                    store.fail(&lease, &response)
                };
                self.finished(id, held.is_some(), outcome, next)?;
            }
            Op::Release { slot } => {
                let Some((id, lease)) = self.lease(slot) else {
                    return Ok(());
                };
                let held = self.holds(id, lease.token);
                let mut next = self.model.clone();
                let _ = next.release(&lease, self.clock.now_ms());
                let outcome = store.release(&lease);
                self.finished(id, held.is_some(), outcome, next)?;
            }
            Op::Renew { slot, quarters: extend } => self.renew(store, slot, extend)?,
            Op::Checkpoint { slot, step, length } => self.checkpoint(store, slot, step, length)?,
            Op::Remove { scope, key } => {
                let id = (scope % 2, key % 3);
                let (scope_name, key_name) = names(id);
                let present = self.live(id).is_some();
                let removed = store.remove(scope_name.as_bytes(), key_name.as_bytes()).map_err(|_| (Some(id), None))?;
                assert_eq!(removed, present);
                self.model.remove(scope_name.as_bytes(), key_name.as_bytes(), self.clock.now_ms());
            }
            Op::Advance { quarters: amount } => self.clock.advance(Duration::from_millis(quarters(amount))),
            Op::Compact => {
                store.compact().map_err(|_| (None, None))?;
            }
            Op::Reopen => {
                store.sync().map_err(|_| (None, None))?;
                drop(slot.take());
                let reopened = Store::open(dir, config(&self.clock, Arc::new(storage.clone())));
                *slot = Some(reopened.map_err(|_| (None, None))?);
            }
        }
        let audit = slot.as_ref().expect("open").quota_audit().map_err(|_| (None, None))?;
        assert_eq!(audit, None, "quota counts after {op:?}");
        Ok(())
    }

    fn claim(
        &mut self,
        store: &Store,
        id: Id,
        variant: bool,
        (lease_ms, ttl_ms): (u64, u64),
        reuse: ReusePolicy,
    ) -> Result<(), Pending> {
        let now = self.clock.now_ms();
        let (scope_name, key_name) = names(id);
        let retry_failed = reuse == ReusePolicy::RetryFailed;
        let request = ClaimRequest::new(&key_name, fingerprint(variant))
            .scope(&scope_name)
            .lease(Duration::from_millis(lease_ms))
            .ttl(Duration::from_millis(ttl_ms))
            .reuse(reuse);
        let before = self.live(id);
        let full = (0..3).filter(|key| self.live((0, *key)).is_some()).count() as u64 >= QUOTA_RECORDS;
        let refused = id.0 == 0 && before.is_none() && full;
        // The model applies the claim to a copy: what it would leave.
        let mut next = self.model.clone();
        let expected = next.claim(&request, now);
        assert_eq!(refused, expected.is_err(), "the model's quota: {expected:?}");
        let would = self.in_model(&mut next, id);
        let answer = match store.claim(&request) {
            Err(Error::QuotaExceeded { .. }) => {
                assert!(refused, "a claim refused by a quota that has room");
                return Ok(());
            }
            answer => answer.map_err(|_| (Some(id), would.clone()))?,
        };
        assert!(!refused || !matches!(answer, Claim::Acquired(_)), "a claim over the quota");
        self.answered(answer, before, next, Asked { id, variant, retry_failed, now });
        Ok(())
    }

    /// Checks a claim's answer against `before`, the model's record of the
    /// key before it; an acquired lease is granted in `next`, the model
    /// with the claim applied.
    fn answered(&mut self, answer: Claim, before: Option<ModelRecord>, next: Model, asked: Asked) {
        let Asked { id, variant, retry_failed, now } = asked;
        // A takeover carries the last checkpoint over.
        let carried =
            before.as_ref().filter(|model| model.state == State::Processing).and_then(|model| model.checkpoint.clone());
        match (answer, before) {
            (Claim::Acquired(lease), None) => {
                assert_eq!((lease.attempt(), lease.recovered()), (1, false));
                self.acquired(next, id, lease.into_token().token);
            }
            (Claim::Acquired(lease), Some(model)) if model.state == State::Failed => {
                assert!(retry_failed && model.fingerprint == fingerprint(variant), "a failure run again");
                assert_eq!((lease.attempt(), lease.recovered()), (model.attempt + 1, false));
                assert!(lease.last_checkpoint().is_none(), "a new attempt starts without a point");
                self.acquired(next, id, lease.into_token().token);
            }
            (Claim::Acquired(lease), Some(model)) => {
                assert!(
                    model.state == State::Processing
                        && model.deadline_ms <= now
                        && model.fingerprint == fingerprint(variant)
                );
                assert_eq!((lease.attempt(), lease.recovered()), (model.attempt + 1, true));
                assert_eq!(lease.last_checkpoint(), carried.as_ref(), "the takeover sees the last checkpoint");
                self.acquired(next, id, lease.into_token().token);
            }
            (Claim::Mismatch, Some(model)) => assert_ne!(model.fingerprint, fingerprint(variant)),
            (Claim::InProgress { retry_after, attempt }, Some(model)) => {
                assert!(
                    model.state == State::Processing
                        && model.fingerprint == fingerprint(variant)
                        && model.deadline_ms > now
                );
                assert_eq!((retry_after, attempt), (Duration::from_millis(model.deadline_ms - now), model.attempt));
            }
            (Claim::Replay(record), Some(model)) => {
                assert!(model.state != State::Processing && model.fingerprint == fingerprint(variant));
                assert!(model.state == State::Completed || !retry_failed, "a failure replayed under RetryFailed");
                assert_eq!(
                    (record.state, Some(record.token), &record.response),
                    (model.state, model.token, &model.response)
                );
            }
            (answer, model) => panic!("claim answered {answer:?}, model has {model:?}"),
        }
    }

    fn renew(&mut self, store: &Store, slot: u8, extend: u8) -> Result<(), Pending> {
        let Some((id, lease)) = self.lease(slot) else {
            return Ok(());
        };
        let held = self.holds(id, lease.token);
        let mut next = self.model.clone();
        let predicted = next.renew(&lease, Duration::from_millis(quarters(extend)), self.clock.now_ms());
        let would = self.in_model(&mut next, id);
        match store.renew(&lease, Duration::from_millis(quarters(extend))) {
            Ok(deadline_ms) => {
                let expected = predicted.expect("renew accepted a stale token");
                assert_eq!(deadline_ms, expected);
                self.model = next;
            }
            Err(Error::LeaseLost { .. }) => assert!(held.is_none(), "renew refused the holder"),
            Err(_) => return Err((Some(id), would)),
        }
        Ok(())
    }

    fn checkpoint(&mut self, store: &Store, slot: u8, step: bool, length: u8) -> Result<(), Pending> {
        let Some((id, lease)) = self.lease(slot) else {
            return Ok(());
        };
        let step = if step { "charged" } else { "s" };
        let payload = vec![slot; usize::from(length)];
        let held = self.holds(id, lease.token);
        // The lease end stays (a holder past it moves it to now).
        let mut next = self.model.clone();
        let predicted = next.checkpoint(&lease, step, &payload, self.clock.now_ms());
        let would = self.in_model(&mut next, id);
        match store.checkpoint(&lease, step, &payload) {
            Ok(()) => {
                assert!(predicted.is_ok(), "a checkpoint accepted from a stale token");
                self.model = next;
            }
            Err(Error::LeaseLost { .. }) => assert!(held.is_none(), "a checkpoint refused the holder"),
            Err(_) => return Err((Some(id), would)),
        }
        Ok(())
    }

    fn acquired(&mut self, mut next: Model, id: Id, token: u64) {
        let (scope, key) = names(id);
        assert!(next.grant(scope.as_bytes(), key.as_bytes(), token), "token {token} of {id:?} did not grow");
        self.model = next;
        self.tokens.push((id, token));
    }

    /// A finishing call returned `outcome`; `next` is the model with the
    /// call applied.
    fn finished(&mut self, id: Id, holds: bool, outcome: Result<(), Error>, mut next: Model) -> Result<(), Pending> {
        match outcome {
            Ok(()) => {
                assert!(holds, "a stale token was accepted");
                self.model = next;
                Ok(())
            }
            Err(Error::LeaseLost { .. }) => {
                assert!(!holds, "the holder's token was refused");
                Ok(())
            }
            Err(_) => Err((Some(id), self.in_model(&mut next, id))),
        }
    }
}

fuzz_target!(|input: Input| {
    let dir = scratch::directory();
    let clock = ManualClock::new(1_767_225_600_000);
    let disk = scratch::disk(dir);
    let storage = FaultyStorage::new(Arc::new(disk.clone()));
    if let Some(after) = input.power_cut.and_then(|plan| plan.after_calls) {
        disk.power_off_after(u64::from(after));
    }
    // The power may fail while the store is first created.
    let mut slot = match Store::open(dir, config(&clock, Arc::new(storage.clone()))) {
        Ok(store) => Some(store),
        Err(_) if disk.powered_off() => None,
        Err(error) => panic!("first open: {error}"),
    };
    if let Some(after) = input.fault_after {
        let kind = match input.fault_kind % 3 {
            0 => Fault::Io,
            1 => Fault::ShortWrite,
            _ => Fault::NoSpace,
        };
        storage.fail_after(u64::from(after), kind);
    }
    let model = Model::new(&config(&clock, Arc::new(storage.clone())));
    let mut run = Run { clock, model, tokens: Vec::new() };
    let mut pending: Option<Pending> = None;
    let ops = if slot.is_some() { input.ops.as_slice() } else { &[] };
    for op in ops.iter().take(64) {
        if let Err(failed) = run.step(&mut slot, dir, &storage, *op) {
            pending = Some(failed);
            break;
        }
    }
    drop(slot);
    if let Some(plan) = input.power_cut {
        disk.power_cut(plan.seed);
    }
    // Reopen on a healthy disk (after the cut, if any): every key as the
    // model says, or as the one failed call would have left it.
    let store = reopen(dir, &run.clock, &disk, &input);
    for scope in 0..2 {
        for key in 0..3 {
            let id = (scope, key);
            let (scope_name, key_name) = names(id);
            let actual = store.get(scope_name.as_bytes(), key_name.as_bytes()).expect("get");
            let expected = run.live(id);
            let matches = |model: &Option<ModelRecord>| match (&actual, model) {
                (None, None) => true,
                (Some(record), Some(model)) => model.agrees_with(record),
                _ => false,
            };
            let failed_here = pending.as_ref().filter(|(failed_id, _)| *failed_id == Some(id));
            let allowed = matches(&expected) || failed_here.is_some_and(|(_, would)| matches(would));
            assert!(allowed, "{id:?}: store {actual:?}, model {expected:?}, failed call {failed_here:?}");
        }
    }
    // No fencing token is handed out twice.
    let handed_max = run.tokens.iter().map(|(_, token)| *token).max().unwrap_or(0);
    let fresh = ClaimRequest::new("fresh", fingerprint(false)).scope("s9");
    match store.claim(&fresh) {
        Ok(Claim::Acquired(lease)) => {
            assert!(lease.token() > handed_max, "token {} handed out again (up to {handed_max} before)", lease.token());
        }
        other => panic!("a fresh key after the reopen: {other:?}"),
    }
});

/// Reopens the store on the disk after the run (and the cut, if any): it
/// must open, since the disk lost nothing that was synced.
fn reopen(dir: &Path, clock: &ManualClock, disk: &PowerCutStorage, input: &Input) -> Store {
    match Store::open(dir, config(clock, Arc::new(disk.clone()))) {
        Ok(store) => store,
        Err(error) => panic!("reopen after a fault or power cut {:?}: {error}", input.power_cut),
    }
}
