//! Random sequences of claim / complete / fail / release / renew / remove /
//! get / clock moves / compaction / reopen, run against the store and against the
//! reference model of DESIGN §3 (`idemkv::testing::Model`, shared with the
//! fuzz target and the crash tests). Every answer and every record must agree.
//! Scope 0 has a quota (records and bytes): the model predicts each refusal,
//! and after every step the store's running quota counts must equal a
//! recount of its index.

#![cfg(feature = "testing")]

use crate::common::START_MS;
use idemkv::testing::{Expected, Model, ModelRecord, Refusal};
use idemkv::{
    store::Quota, Checkpoint, Claim, ClaimRequest, Clock, Config, Durability, Error, Fingerprint, LeaseToken,
    ManualClock, Record, ReusePolicy, State, Store,
};
use proptest::prelude::*;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
enum Op {
    Claim { scope: u8, key: u8, fingerprint: u8, lease_ms: u64, ttl_ms: u64, retry_failed: bool },
    Checkpoint { slot: usize, step: u8, payload: Vec<u8> },
    Complete { slot: usize, response: Vec<u8> },
    Fail { slot: usize, response: Vec<u8> },
    Release { slot: usize },
    Renew { slot: usize, extend_ms: u64 },
    Remove { scope: u8, key: u8 },
    Get { scope: u8, key: u8 },
    Advance { ms: u64 },
    Compact,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let name = 0u8..3;
    // Times are multiples of 250 ms so that lease ends and expiries fall
    // exactly on "now" often: the boundaries are where bugs hide.
    let lease = (1u64..12).prop_map(|quarter| quarter * 250);
    let ttl = (1u64..24).prop_map(|quarter| quarter * 250);
    prop_oneof![
        4 => (0u8..2, name.clone(), 0u8..2, lease.clone(), ttl, proptest::bool::weighted(0.3))
            .prop_map(|(scope, key, fingerprint, lease_ms, ttl_ms, retry_failed)| Op::Claim { scope, key, fingerprint, lease_ms, ttl_ms, retry_failed }),
        // Payloads past the 512-byte limit are refused and change nothing.
        2 => (any::<usize>(), 0u8..3, proptest::collection::vec(any::<u8>(), 0..520))
            .prop_map(|(slot, step, payload)| Op::Checkpoint { slot, step, payload }),
        2 => (any::<usize>(), proptest::collection::vec(any::<u8>(), 0..300)).prop_map(|(slot, response)| Op::Complete { slot, response }),
        1 => (any::<usize>(), proptest::collection::vec(any::<u8>(), 0..300)).prop_map(|(slot, response)| Op::Fail { slot, response }),
        1 => any::<usize>().prop_map(|slot| Op::Release { slot }),
        1 => (any::<usize>(), lease).prop_map(|(slot, extend_ms)| Op::Renew { slot, extend_ms }),
        1 => (0u8..2, name.clone()).prop_map(|(scope, key)| Op::Remove { scope, key }),
        1 => (0u8..2, name).prop_map(|(scope, key)| Op::Get { scope, key }),
        2 => (0u64..16).prop_map(|quarter| Op::Advance { ms: quarter * 250 }),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

/// The step names the model uses.
fn step_name(step: u8) -> String {
    ["charged", "reserved", "s"][usize::from(step % 3)].to_string()
}

/// Scope 0's quota: two live records, and bytes for one large response.
const QUOTA_RECORDS: u64 = 2;
const QUOTA_BYTES: u64 = 450;

/// Bytes a record of `response` takes in the log under `names(0, _)`:
/// the 104-byte prefix, "scope-0", "key-N" and the response.
fn frame_bytes(stored_len: usize) -> u64 {
    104 + 7 + 5 + stored_len as u64
}

fn names(scope: u8, key: u8) -> (String, String) {
    (format!("scope-{scope}"), format!("key-{key}"))
}

fn fingerprint(value: u8) -> Fingerprint {
    Fingerprint::of(&[value])
}

fn config(clock: &ManualClock) -> Config {
    // Small segments, so that compaction has sealed segments to work on.
    Config::new()
        .shards(1)
        .durability(Durability::Buffered)
        .segment_bytes(4096)
        .response_bytes_max(512)
        .compaction_interval(None)
        .compaction_bytes_per_second(0)
        .clock(Arc::new(clock.clone()))
        .scope_quota("scope-0", Quota::new().records(QUOTA_RECORDS).bytes(QUOTA_BYTES))
}

fn open(dir: &Path, clock: &ManualClock) -> Store {
    Store::open(dir, config(clock)).expect("open")
}

/// The attempt, whether recovered, and the checkpoint seen of a claim
/// that acquired over `previous` (the model's record of the key at `now`):
/// a first attempt, a failure run again (only under `RetryFailed`), or an
/// expired lease taken over, whose last checkpoint the new holder sees.
fn acquired_over(
    previous: Option<ModelRecord>,
    fp: u8,
    reuse: ReusePolicy,
    now: u64,
) -> (u32, bool, Option<Checkpoint>) {
    match previous {
        None => (1, false, None),
        Some(record) if record.state == State::Failed => {
            assert_eq!(record.fingerprint, fingerprint(fp), "Acquired despite another fingerprint");
            assert_eq!(reuse, ReusePolicy::RetryFailed, "a failure run again by default");
            (record.attempt + 1, false, None)
        }
        Some(record) => {
            assert_eq!(record.fingerprint, fingerprint(fp), "Acquired despite another fingerprint");
            assert_eq!(record.state, State::Processing, "Acquired over a finished record");
            assert!(record.deadline_ms <= now, "Acquired while the lease is valid");
            (record.attempt + 1, true, record.checkpoint)
        }
    }
}

fn check_record(actual: &Record, expected: &ModelRecord) {
    assert_eq!(actual.state, expected.state);
    assert_eq!(actual.fingerprint, expected.fingerprint);
    assert_eq!(Some(actual.token), expected.token);
    assert_eq!(actual.attempt, expected.attempt);
    assert_eq!(actual.recovered, expected.recovered);
    assert_eq!(actual.deadline_ms, expected.deadline_ms);
    assert_eq!(actual.response, expected.response);
    assert_eq!(actual.checkpoint, expected.checkpoint);
}

struct Harness {
    dir: tempfile::TempDir,
    clock: ManualClock,
    store: Option<Store>,
    /// The reference model, shared with the fuzz target and the crash tests.
    model: Model,
    /// Every lease handed out, as (scope, key, token); stale ones included.
    tokens: Vec<(u8, u8, LeaseToken)>,
}

impl Harness {
    fn store(&self) -> &Store {
        self.store.as_ref().expect("open")
    }

    fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The model's live record of `(scope, key)` now.
    fn live(&mut self, scope: u8, key: u8) -> Option<ModelRecord> {
        let (scope_name, key_name) = names(scope, key);
        let now = self.now();
        self.model.get(scope_name.as_bytes(), key_name.as_bytes(), now).cloned()
    }

    fn run(&mut self, op: &Op) {
        match op {
            Op::Claim { scope, key, fingerprint: fp, lease_ms, ttl_ms, retry_failed } => {
                let reuse = if *retry_failed { ReusePolicy::RetryFailed } else { ReusePolicy::ReplayFailure };
                self.claim((*scope, *key), *fp, (*lease_ms, *ttl_ms), reuse);
            }
            Op::Checkpoint { slot, step, payload } => self.checkpoint(*slot, &step_name(*step), payload),
            Op::Complete { slot, response } => self.finish(*slot, Some((State::Completed, response))),
            Op::Fail { slot, response } => self.finish(*slot, Some((State::Failed, response))),
            Op::Release { slot } => self.finish(*slot, None),
            Op::Renew { slot, extend_ms } => self.renew(*slot, *extend_ms),
            Op::Remove { scope, key } => {
                let (scope_name, key_name) = names(*scope, *key);
                let now = self.now();
                let expected = self.model.remove(scope_name.as_bytes(), key_name.as_bytes(), now);
                let removed = self.store().remove(scope_name.as_bytes(), key_name.as_bytes()).expect("remove");
                assert_eq!(removed, expected);
            }
            Op::Get { scope, key } => {
                let (scope_name, key_name) = names(*scope, *key);
                let expected = self.live(*scope, *key);
                let actual = self.store().get(scope_name.as_bytes(), key_name.as_bytes()).expect("get");
                match (actual, expected) {
                    (None, None) => {}
                    (Some(actual), Some(expected)) => check_record(&actual, &expected),
                    (actual, expected) => panic!("get: store {actual:?}, model {expected:?}"),
                }
            }
            Op::Advance { ms } => self.clock.advance(Duration::from_millis(*ms)),
            Op::Compact => {
                self.store().compact().expect("compact");
            }
            Op::Reopen => {
                self.store.take().expect("open").close().expect("close");
                self.store = Some(open(self.dir.path(), &self.clock));
            }
        }
        assert_eq!(self.store().quota_audit().expect("audit"), None, "after {op:?}");
    }

    fn claim(&mut self, (scope, key): (u8, u8), fp: u8, (lease_ms, ttl_ms): (u64, u64), reuse: ReusePolicy) {
        let (scope_name, key_name) = names(scope, key);
        let request = ClaimRequest::new(&key_name, fingerprint(fp))
            .scope(&scope_name)
            .lease(Duration::from_millis(lease_ms))
            .ttl(Duration::from_millis(ttl_ms))
            .reuse(reuse);
        let now = self.now();
        let usage = self.model.usage(b"scope-0", now);
        let (records, bytes) = (usage.records, usage.bytes);
        let previous = self.live(scope, key);
        let new_record = previous.is_none();
        let refused = scope == 0 && new_record && (records >= QUOTA_RECORDS || bytes + frame_bytes(0) > QUOTA_BYTES);
        let expected = self.model.claim(&request, now);
        assert_eq!(refused, matches!(expected, Err(Refusal::QuotaExceeded { .. })), "the model's quota: {expected:?}");
        let answer = match self.store().claim(&request) {
            Err(error @ Error::QuotaExceeded { .. }) => {
                assert!(refused, "refused at {records} records, {bytes} bytes");
                assert!(expected.as_ref().is_err_and(|refusal| refusal.matches(&error)), "{error:?}, {expected:?}");
                // A refusal first swept out what had expired: exact counts.
                let usage = self.store().scope_usage("scope-0").expect("a full scope");
                assert_eq!((usage.records, usage.bytes), (records, bytes));
                return;
            }
            answer => answer.expect("claim"),
        };
        assert!(!refused || !matches!(answer, Claim::Acquired(_)), "admitted at {records} records, {bytes} bytes");
        let expected = expected.expect("the model refused a claim the store answered");
        match (answer, previous) {
            (Claim::Acquired(lease), previous) => {
                let (attempt, recovered, checkpoint) = acquired_over(previous, fp, reuse, now);
                assert_eq!((lease.attempt(), lease.recovered()), (attempt, recovered));
                assert_eq!(lease.last_checkpoint(), checkpoint.as_ref(), "the takeover sees the last checkpoint");
                assert_eq!(lease.deadline_ms(), now + lease_ms);
                let deadline_ms = now + lease_ms;
                assert_eq!(expected, Expected::Acquired { attempt, recovered, checkpoint, deadline_ms }, "the model");
                assert!(
                    self.model.grant(scope_name.as_bytes(), key_name.as_bytes(), lease.token()),
                    "token did not grow"
                );
                self.tokens.push((scope, key, lease.into_token()));
            }
            (Claim::Mismatch, Some(record)) => {
                assert_ne!(record.fingerprint, fingerprint(fp));
                assert_eq!(expected, Expected::Mismatch, "the model");
            }
            (Claim::InProgress { retry_after, attempt }, Some(record)) => {
                assert_eq!(record.fingerprint, fingerprint(fp));
                assert_eq!(record.state, State::Processing);
                assert!(record.deadline_ms > now);
                assert_eq!(retry_after, Duration::from_millis(record.deadline_ms - now));
                assert_eq!(attempt, record.attempt);
                assert_eq!(expected, Expected::InProgress { retry_after, attempt }, "the model");
            }
            (Claim::Replay(actual), Some(record)) => {
                assert_eq!(record.fingerprint, fingerprint(fp));
                assert_ne!(record.state, State::Processing);
                assert!(record.state == State::Completed || reuse == ReusePolicy::ReplayFailure);
                check_record(&actual, &record);
                assert_eq!(expected, Expected::Replay(record), "the model");
            }
            (answer, expected) => panic!("claim: store {answer:?}, model {expected:?}"),
        }
    }

    fn finish(&mut self, slot: usize, terminal: Option<(State, &Vec<u8>)>) {
        if self.tokens.is_empty() {
            return;
        }
        let (scope, key, token) = self.tokens[slot % self.tokens.len()].clone();
        let now = self.now();
        let holds = self
            .live(scope, key)
            .is_some_and(|record| record.state == State::Processing && record.token == Some(token.token));
        let predicted = match terminal {
            Some((State::Completed, response)) => self.model.complete(&token, response, now),
            Some((_, response)) => self.model.fail(&token, response, now),
            None => self.model.release(&token, now),
        };
        assert_eq!(predicted.is_ok(), holds, "the model: {predicted:?}");
        let outcome = match terminal {
            Some((State::Completed, response)) => self.store().complete(&token, response),
            Some((_, response)) => self.store().fail(&token, response),
            None => self.store().release(&token),
        };
        if !holds {
            assert!(matches!(outcome, Err(Error::LeaseLost { .. })), "stale token accepted: {outcome:?}");
            return;
        }
        outcome.expect("finish by the holder");
    }

    fn checkpoint(&mut self, slot: usize, step: &str, payload: &[u8]) {
        if self.tokens.is_empty() {
            return;
        }
        let (scope, key, token) = self.tokens[slot % self.tokens.len()].clone();
        let now = self.now();
        let holder = self
            .live(scope, key)
            .is_some_and(|record| record.state == State::Processing && record.token == Some(token.token));
        let predicted = self.model.checkpoint(&token, step, payload, now);
        let outcome = self.store().checkpoint(&token, step, payload);
        if holder {
            if 1 + step.len() + payload.len() > 512 {
                assert!(matches!(outcome, Err(Error::CheckpointTooLarge { .. })), "{outcome:?}");
                assert!(matches!(predicted, Err(Refusal::CheckpointTooLarge { .. })), "the model: {predicted:?}");
                return;
            }
            outcome.expect("checkpoint by the holder");
            // The lease end stays; a holder whose lease ended but was
            // not taken over moves its written end to now (the model
            // does so).
            assert_eq!(predicted, Ok(()), "the model");
        } else {
            assert!(matches!(outcome, Err(Error::LeaseLost { .. } | Error::CheckpointTooLarge { .. })));
            assert!(predicted.is_err_and(|refusal| refusal.matches(&outcome.expect_err("refused"))), "the model");
        }
    }

    fn renew(&mut self, slot: usize, extend_ms: u64) {
        if self.tokens.is_empty() {
            return;
        }
        let (_, _, token) = self.tokens[slot % self.tokens.len()].clone();
        let now = self.now();
        let predicted = self.model.renew(&token, Duration::from_millis(extend_ms), now);
        let outcome = self.store().renew(&token, Duration::from_millis(extend_ms));
        match predicted {
            Ok(deadline_ms) => assert_eq!(outcome.expect("renew by the holder"), deadline_ms),
            Err(_) => assert!(matches!(outcome, Err(Error::LeaseLost { .. })), "stale renew accepted: {outcome:?}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn store_agrees_with_the_model(ops in proptest::collection::vec(op(), 1..250)) {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = ManualClock::new(START_MS);
        let store = Some(open(dir.path(), &clock));
        let model = Model::new(&config(&clock));
        let mut harness = Harness { dir, clock, store, model, tokens: Vec::new() };
        for op in &ops {
            harness.run(op);
        }
        // Finally every key agrees after one more reopen.
        harness.run(&Op::Reopen);
        for scope in 0..2 {
            for key in 0..3 {
                harness.run(&Op::Get { scope, key });
            }
        }
    }
}
