//! A structured sequence of claims, completions, fails, releases, renews,
//! removes, clock moves, compactions and reopens over a handful of keys,
//! run against the store and a plain model of the state machine; every
//! answer must agree. The store lives on an in-memory disk that can lose
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
use idemkv::{
    Claim, ClaimRequest, Clock, Config, Durability, Error, Fingerprint, LeaseToken, ManualClock, Quota, ReusePolicy,
    State, Store,
};
use libfuzzer_sys::fuzz_target;

#[path = "scratch.rs"]
mod scratch;
use std::collections::HashMap;
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

#[derive(Debug, Clone, PartialEq)]
struct Model {
    state: State,
    fingerprint: bool,
    /// `None` only for the would-be result of a failed claim.
    token: Option<u64>,
    attempt: u32,
    deadline_ms: u64,
    ttl_ms: u64,
    response: Vec<u8>,
    /// While Processing, the last checkpoint (step, payload).
    checkpoint: Option<(String, Vec<u8>)>,
}

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

/// Live records scope `s0` may hold.
const QUOTA_RECORDS: u64 = 2;

struct Run {
    clock: ManualClock,
    models: HashMap<Id, Model>,
    tokens: Vec<(Id, u64)>,
}

impl Run {
    fn live(&mut self, id: Id) -> Option<Model> {
        let now = self.clock.now_ms();
        // Completed / Failed expire at their deadline; a Processing record
        // whose holder never came back at lease end + TTL.
        let expired = |model: &Model| match model.state {
            State::Processing => model.deadline_ms + model.ttl_ms <= now,
            State::Completed | State::Failed => model.deadline_ms <= now,
        };
        if self.models.get(&id).is_some_and(expired) {
            self.models.remove(&id);
        }
        self.models.get(&id).cloned()
    }

    /// Runs one op. `Err` carries the key the failed call touched and what
    /// it would have left there.
    fn step(
        &mut self,
        slot: &mut Option<Store>,
        dir: &Path,
        storage: &FaultyStorage,
        op: Op,
    ) -> Result<(), (Option<Id>, Option<Model>)> {
        let now = self.clock.now_ms();
        let store = slot.as_ref().expect("open");
        match op {
            Op::Claim { scope, key, fingerprint: variant, lease_quarters, ttl_quarters, retry_failed } => {
                let id = (scope % 2, key % 3);
                let (scope_name, key_name) = names(id);
                let (lease_ms, ttl_ms) = (quarters(lease_quarters), quarters(ttl_quarters));
                let request = ClaimRequest::new(&key_name, fingerprint(variant))
                    .scope(&scope_name)
                    .lease(Duration::from_millis(lease_ms))
                    .ttl(Duration::from_millis(ttl_ms))
                    .reuse(if retry_failed { ReusePolicy::RetryFailed } else { ReusePolicy::ReplayFailure });
                let before = self.live(id);
                // A takeover carries the last checkpoint over.
                let carried = before.as_ref().filter(|model| model.state == State::Processing).and_then(|model| model.checkpoint.clone());
                let full = (0..3).filter(|key| self.live((0, *key)).is_some()).count() as u64 >= QUOTA_RECORDS;
                let refused = id.0 == 0 && before.is_none() && full;
                let attempt = before.as_ref().map_or(1, |model| model.attempt + 1);
                let would = Model {
                    state: State::Processing,
                    fingerprint: variant,
                    token: None,
                    attempt,
                    deadline_ms: now + lease_ms,
                    ttl_ms,
                    response: Vec::new(),
                    checkpoint: carried.clone(),
                };
                let answer = match store.claim(&request) {
                    Err(Error::QuotaExceeded { .. }) => {
                        assert!(refused, "a claim refused by a quota that has room");
                        return Ok(());
                    }
                    answer => answer.map_err(|_| (Some(id), Some(would.clone())))?,
                };
                assert!(!refused || !matches!(answer, Claim::Acquired(_)), "a claim over the quota");
                match (answer, before) {
                    (Claim::Acquired(lease), None) => {
                        assert_eq!((lease.attempt(), lease.recovered()), (1, false));
                        self.acquired(
                            id,
                            Model { token: Some(lease.token()), attempt: 1, ..would },
                            lease.into_token().token,
                        );
                    }
                    (Claim::Acquired(lease), Some(model)) if model.state == State::Failed => {
                        assert!(retry_failed && model.fingerprint == variant, "a failure run again");
                        assert_eq!((lease.attempt(), lease.recovered()), (model.attempt + 1, false));
                        assert!(lease.last_checkpoint().is_none(), "a new attempt starts without a point");
                        self.acquired(id, Model { token: Some(lease.token()), ..would }, lease.into_token().token);
                    }
                    (Claim::Acquired(lease), Some(model)) => {
                        assert!(
                            model.state == State::Processing
                                && model.deadline_ms <= now
                                && model.fingerprint == variant
                        );
                        assert_eq!((lease.attempt(), lease.recovered()), (model.attempt + 1, true));
                        let seen = lease.last_checkpoint().map(|point| (point.step.clone(), point.payload.clone()));
                        assert_eq!(seen, carried, "the takeover sees the last checkpoint");
                        self.acquired(id, Model { token: Some(lease.token()), ..would }, lease.into_token().token);
                    }
                    (Claim::Mismatch, Some(model)) => assert_ne!(model.fingerprint, variant),
                    (Claim::InProgress { retry_after, attempt }, Some(model)) => {
                        assert!(
                            model.state == State::Processing && model.fingerprint == variant && model.deadline_ms > now
                        );
                        assert_eq!(
                            (retry_after, attempt),
                            (Duration::from_millis(model.deadline_ms - now), model.attempt)
                        );
                    }
                    (Claim::Replay(record), Some(model)) => {
                        assert!(model.state != State::Processing && model.fingerprint == variant);
                        assert!(model.state == State::Completed || !retry_failed, "a failure replayed under RetryFailed");
                        assert_eq!(
                            (record.state, Some(record.token), &record.response),
                            (model.state, model.token, &model.response)
                        );
                    }
                    (answer, model) => panic!("claim answered {answer:?}, model has {model:?}"),
                }
            }
            Op::Complete { slot, length } | Op::Fail { slot, length } => {
                let Some(&(id, token)) = self.tokens.get(usize::from(slot) % self.tokens.len().max(1)) else {
                    return Ok(());
                };
                let terminal = if matches!(op, Op::Complete { .. }) { State::Completed } else { State::Failed };
                let response = vec![slot; usize::from(length)];
                let lease = LeaseToken { scope: names(id).0.into_bytes(), key: names(id).1.into_bytes(), token };
                let held = self.live(id).filter(|model| model.state == State::Processing && model.token == Some(token));
                let would = held.clone().map(|model| Model {
                    state: terminal,
                    deadline_ms: now + model.ttl_ms,
                    response: response.clone(),
                    checkpoint: None,
                    ..model
                });
                let outcome = if terminal == State::Completed {
                    store.complete(&lease, &response)
                } else {
                    store.fail(&lease, &response)
                };
                self.finished(id, held.is_some(), outcome, would)?;
            }
            Op::Release { slot } => {
                let Some(&(id, token)) = self.tokens.get(usize::from(slot) % self.tokens.len().max(1)) else {
                    return Ok(());
                };
                let lease = LeaseToken { scope: names(id).0.into_bytes(), key: names(id).1.into_bytes(), token };
                let held = self.live(id).filter(|model| model.state == State::Processing && model.token == Some(token));
                let outcome = store.release(&lease);
                self.finished(id, held.is_some(), outcome, None)?;
            }
            Op::Renew { slot, quarters: extend } => {
                let Some(&(id, token)) = self.tokens.get(usize::from(slot) % self.tokens.len().max(1)) else {
                    return Ok(());
                };
                let lease = LeaseToken { scope: names(id).0.into_bytes(), key: names(id).1.into_bytes(), token };
                let held = self.live(id).filter(|model| model.state == State::Processing && model.token == Some(token));
                let would = held
                    .clone()
                    .map(|model| Model { deadline_ms: model.deadline_ms.max(now + quarters(extend)), ..model });
                match store.renew(&lease, Duration::from_millis(quarters(extend))) {
                    Ok(deadline_ms) => {
                        let model = would.expect("renew accepted a stale token");
                        assert_eq!(deadline_ms, model.deadline_ms);
                        self.models.insert(id, model);
                    }
                    Err(Error::LeaseLost { .. }) => assert!(held.is_none(), "renew refused the holder"),
                    Err(_) => return Err((Some(id), would.or(held))),
                }
            }
            Op::Checkpoint { slot, step, length } => {
                let Some(&(id, token)) = self.tokens.get(usize::from(slot) % self.tokens.len().max(1)) else {
                    return Ok(());
                };
                let step = if step { "charged" } else { "s" };
                let payload = vec![slot; usize::from(length)];
                let lease = LeaseToken { scope: names(id).0.into_bytes(), key: names(id).1.into_bytes(), token };
                let held = self.live(id).filter(|model| model.state == State::Processing && model.token == Some(token));
                // The lease end stays (a holder past it moves it to now).
                let would = held.clone().map(|model| Model {
                    deadline_ms: model.deadline_ms.max(now),
                    checkpoint: Some((step.to_string(), payload.clone())),
                    ..model
                });
                match store.checkpoint(&lease, step, &payload) {
                    Ok(()) => {
                        let model = would.expect("a checkpoint accepted from a stale token");
                        self.models.insert(id, model);
                    }
                    Err(Error::LeaseLost { .. }) => assert!(held.is_none(), "a checkpoint refused the holder"),
                    Err(_) => return Err((Some(id), would.or(held))),
                }
            }
            Op::Remove { scope, key } => {
                let id = (scope % 2, key % 3);
                let (scope_name, key_name) = names(id);
                let present = self.live(id).is_some();
                let removed = store.remove(scope_name.as_bytes(), key_name.as_bytes()).map_err(|_| (Some(id), None))?;
                assert_eq!(removed, present);
                self.models.remove(&id);
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

    fn acquired(&mut self, id: Id, model: Model, token: u64) {
        self.models.insert(id, model);
        self.tokens.push((id, token));
    }

    fn finished(
        &mut self,
        id: Id,
        holds: bool,
        outcome: Result<(), Error>,
        would: Option<Model>,
    ) -> Result<(), (Option<Id>, Option<Model>)> {
        match outcome {
            Ok(()) => {
                assert!(holds, "a stale token was accepted");
                match would {
                    Some(model) => self.models.insert(id, model),
                    None => self.models.remove(&id),
                };
                Ok(())
            }
            Err(Error::LeaseLost { .. }) => {
                assert!(!holds, "the holder's token was refused");
                Ok(())
            }
            Err(_) => Err((Some(id), would)),
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
    let mut run = Run { clock, models: HashMap::new(), tokens: Vec::new() };
    let mut pending: Option<(Option<Id>, Option<Model>)> = None;
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
            let matches = |model: &Option<Model>| match (&actual, model) {
                (None, None) => true,
                (Some(record), Some(model)) => {
                    record.state == model.state
                        && record.fingerprint == fingerprint(model.fingerprint)
                        && model.token.is_none_or(|token| token == record.token)
                        && record.response == model.response
                        && record.checkpoint.as_ref().map(|point| (point.step.clone(), point.payload.clone()))
                            == model.checkpoint
                }
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
