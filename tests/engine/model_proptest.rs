//! Random sequences of claim / complete / fail / release / renew / remove /
//! get / clock moves / compaction / reopen, run against the store and against a plain
//! in-memory model of DESIGN §3. Every answer and every record must agree.
//! Scope 0 has a quota (records and bytes): the model predicts each refusal,
//! and after every step the store's running quota counts must equal a
//! recount of its index.

use crate::common::START_MS;
use idemkv::{
    Claim, ClaimRequest, Clock, Config, Durability, Error, Fingerprint, LeaseToken, ManualClock, Quota, Record,
    ReusePolicy, State, Store,
};
use proptest::prelude::*;
use std::collections::HashMap;
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

#[derive(Debug, Clone, PartialEq)]
struct ModelRecord {
    state: State,
    fingerprint: u8,
    token: u64,
    attempt: u32,
    recovered: bool,
    deadline_ms: u64,
    ttl_ms: u64,
    response: Vec<u8>,
    /// While Processing, the last checkpoint (step, payload).
    checkpoint: Option<(String, Vec<u8>)>,
}

impl ModelRecord {
    /// The bytes the record keeps after scope and key: the response, or
    /// while Processing the encoded checkpoint.
    fn stored_len(&self) -> usize {
        match &self.checkpoint {
            Some((step, payload)) => 1 + step.len() + payload.len(),
            None => self.response.len(),
        }
    }
}

/// The step names the model uses.
fn step_name(step: u8) -> String {
    ["charged", "reserved", "s"][usize::from(step % 3)].to_string()
}

/// DESIGN §3 as a plain map.
#[derive(Default)]
struct Model {
    records: HashMap<(u8, u8), ModelRecord>,
    max_token: HashMap<(u8, u8), u64>,
}

/// Scope 0's quota: two live records, and bytes for one large response.
const QUOTA_RECORDS: u64 = 2;
const QUOTA_BYTES: u64 = 450;

/// Bytes a record of `response` takes in the log under `names(0, _)`:
/// the 104-byte prefix, "scope-0", "key-N" and the response.
fn frame_bytes(stored_len: usize) -> u64 {
    104 + 7 + 5 + stored_len as u64
}

impl Model {
    /// Scope 0's live records and their bytes.
    fn quota_usage(&mut self, now: u64) -> (u64, u64) {
        let mut usage = (0, 0);
        for key in 0..3 {
            if let Some(record) = self.live((0, key), now) {
                usage = (usage.0 + 1, usage.1 + frame_bytes(record.stored_len()));
            }
        }
        usage
    }

    fn live(&mut self, id: (u8, u8), now: u64) -> Option<&mut ModelRecord> {
        // Completed / Failed expire at their deadline; a Processing record
        // whose holder never came back at lease end + TTL.
        let expired = |record: &ModelRecord| match record.state {
            State::Processing => record.deadline_ms + record.ttl_ms <= now,
            State::Completed | State::Failed => record.deadline_ms <= now,
        };
        if self.records.get(&id).is_some_and(expired) {
            self.records.remove(&id);
        }
        self.records.get_mut(&id)
    }
}

fn names(scope: u8, key: u8) -> (String, String) {
    (format!("scope-{scope}"), format!("key-{key}"))
}

fn fingerprint(value: u8) -> Fingerprint {
    Fingerprint::of(&[value])
}

fn open(dir: &Path, clock: &ManualClock) -> Store {
    // Small segments, so that compaction has sealed segments to work on.
    let config = Config::new()
        .shards(1)
        .durability(Durability::Buffered)
        .segment_bytes(4096)
        .response_bytes_max(512)
        .compaction_interval(None)
        .compaction_bytes_per_second(0)
        .clock(Arc::new(clock.clone()))
        .scope_quota("scope-0", Quota::new().records(QUOTA_RECORDS).bytes(QUOTA_BYTES));
    Store::open(dir, config).expect("open")
}

fn check_record(actual: &Record, expected: &ModelRecord) {
    assert_eq!(actual.state, expected.state);
    assert_eq!(actual.fingerprint, fingerprint(expected.fingerprint));
    assert_eq!(actual.token, expected.token);
    assert_eq!(actual.attempt, expected.attempt);
    assert_eq!(actual.recovered, expected.recovered);
    assert_eq!(actual.deadline_ms, expected.deadline_ms);
    assert_eq!(actual.response, expected.response);
    let checkpoint = actual.checkpoint.as_ref().map(|point| (point.step.clone(), point.payload.clone()));
    assert_eq!(checkpoint, expected.checkpoint);
}

struct Harness {
    dir: tempfile::TempDir,
    clock: ManualClock,
    store: Option<Store>,
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
                let expected = self.model.live((*scope, *key), now).is_some();
                self.model.records.remove(&(*scope, *key));
                let removed = self.store().remove(scope_name.as_bytes(), key_name.as_bytes()).expect("remove");
                assert_eq!(removed, expected);
            }
            Op::Get { scope, key } => {
                let (scope_name, key_name) = names(*scope, *key);
                let now = self.now();
                let expected = self.model.live((*scope, *key), now).cloned();
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
        let (records, bytes) = self.model.quota_usage(now);
        let new_record = self.model.live((scope, key), now).is_none();
        let refused = scope == 0 && new_record && (records >= QUOTA_RECORDS || bytes + frame_bytes(0) > QUOTA_BYTES);
        let answer = match self.store().claim(&request) {
            Err(Error::QuotaExceeded { .. }) => {
                assert!(refused, "refused at {records} records, {bytes} bytes");
                // A refusal first swept out what had expired: exact counts.
                let usage = self.store().scope_usage("scope-0").expect("a full scope");
                assert_eq!((usage.records, usage.bytes), (records, bytes));
                return;
            }
            answer => answer.expect("claim"),
        };
        assert!(!refused || !matches!(answer, Claim::Acquired(_)), "admitted at {records} records, {bytes} bytes");
        let expected = self.model.live((scope, key), now).cloned();
        match (answer, expected) {
            (Claim::Acquired(lease), previous) => {
                let (attempt, recovered, checkpoint) = match previous {
                    None => (1, false, None),
                    Some(record) if record.state == State::Failed => {
                        assert_eq!(record.fingerprint, fp, "Acquired despite another fingerprint");
                        assert_eq!(reuse, ReusePolicy::RetryFailed, "a failure run again by default");
                        (record.attempt + 1, false, None)
                    }
                    Some(record) => {
                        assert_eq!(record.fingerprint, fp, "Acquired despite another fingerprint");
                        assert_eq!(record.state, State::Processing, "Acquired over a finished record");
                        assert!(record.deadline_ms <= now, "Acquired while the lease is valid");
                        (record.attempt + 1, true, record.checkpoint)
                    }
                };
                assert_eq!((lease.attempt(), lease.recovered()), (attempt, recovered));
                let seen = lease.last_checkpoint().map(|point| (point.step.clone(), point.payload.clone()));
                assert_eq!(seen, checkpoint, "the takeover sees the last checkpoint");
                assert_eq!(lease.deadline_ms(), now + lease_ms);
                let max_token = self.model.max_token.entry((scope, key)).or_insert(0);
                assert!(lease.token() > *max_token, "token did not grow");
                *max_token = lease.token();
                let record = ModelRecord {
                    state: State::Processing,
                    fingerprint: fp,
                    token: lease.token(),
                    attempt,
                    recovered,
                    deadline_ms: now + lease_ms,
                    ttl_ms,
                    response: Vec::new(),
                    checkpoint,
                };
                self.model.records.insert((scope, key), record);
                self.tokens.push((scope, key, lease.into_token()));
            }
            (Claim::Mismatch, Some(record)) => assert_ne!(record.fingerprint, fp),
            (Claim::InProgress { retry_after, attempt }, Some(record)) => {
                assert_eq!(record.fingerprint, fp);
                assert_eq!(record.state, State::Processing);
                assert!(record.deadline_ms > now);
                assert_eq!(retry_after, Duration::from_millis(record.deadline_ms - now));
                assert_eq!(attempt, record.attempt);
            }
            (Claim::Replay(actual), Some(record)) => {
                assert_eq!(record.fingerprint, fp);
                assert_ne!(record.state, State::Processing);
                assert!(record.state == State::Completed || reuse == ReusePolicy::ReplayFailure);
                check_record(&actual, &record);
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
            .model
            .live((scope, key), now)
            .is_some_and(|record| record.state == State::Processing && record.token == token.token);
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
        match terminal {
            Some((state, response)) => {
                let record = self.model.records.get_mut(&(scope, key)).expect("held");
                record.state = state;
                record.deadline_ms = now + record.ttl_ms;
                record.response.clone_from(response);
                record.checkpoint = None;
            }
            None => {
                self.model.records.remove(&(scope, key));
            }
        }
    }

    fn checkpoint(&mut self, slot: usize, step: &str, payload: &[u8]) {
        if self.tokens.is_empty() {
            return;
        }
        let (scope, key, token) = self.tokens[slot % self.tokens.len()].clone();
        let now = self.now();
        let outcome = self.store().checkpoint(&token, step, payload);
        match self.model.live((scope, key), now) {
            Some(record) if record.state == State::Processing && record.token == token.token => {
                if 1 + step.len() + payload.len() > 512 {
                    assert!(matches!(outcome, Err(Error::CheckpointTooLarge { .. })), "{outcome:?}");
                    return;
                }
                outcome.expect("checkpoint by the holder");
                // The lease end stays; a holder whose lease ended but was
                // not taken over moves its written end to now.
                record.deadline_ms = record.deadline_ms.max(now);
                record.checkpoint = Some((step.to_string(), payload.to_vec()));
            }
            _ => assert!(matches!(outcome, Err(Error::LeaseLost { .. } | Error::CheckpointTooLarge { .. }))),
        }
    }

    fn renew(&mut self, slot: usize, extend_ms: u64) {
        if self.tokens.is_empty() {
            return;
        }
        let (scope, key, token) = self.tokens[slot % self.tokens.len()].clone();
        let now = self.now();
        let outcome = self.store().renew(&token, Duration::from_millis(extend_ms));
        match self.model.live((scope, key), now) {
            Some(record) if record.state == State::Processing && record.token == token.token => {
                record.deadline_ms = record.deadline_ms.max(now + extend_ms);
                assert_eq!(outcome.expect("renew by the holder"), record.deadline_ms);
            }
            _ => assert!(matches!(outcome, Err(Error::LeaseLost { .. })), "stale renew accepted: {outcome:?}"),
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
        let mut harness = Harness { dir, clock, store, model: Model::default(), tokens: Vec::new() };
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
