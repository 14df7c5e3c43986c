//! A waiting claim through the `metrics` names, with a real recorder
//! installed before the store opens: one `claim_wait` (blocking or async)
//! adds one to `idempo_claims_total` and is counted by its one answer —
//! a replay, or an in-progress answer when it times out — in the outcome
//! counters, `duplicate_detected_total` and one latency sample, while its
//! looks again go to `idempo_wait_looks_total` only.

#![cfg(all(feature = "metrics", feature = "tokio"))]

use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, ManualClock, Store};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longer than the test runs: only an event of the key can end a wait.
const FOREVER: Duration = Duration::from_secs(600);

/// The counters summed over their labels, and the number of latency
/// samples by outcome.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Seen {
    counters: HashMap<String, u64>,
    samples: HashMap<String, usize>,
}

impl Seen {
    fn of(snapshotter: &Snapshotter) -> Seen {
        let mut seen = Seen::default();
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let key = key.key();
            match value {
                DebugValue::Counter(count) => *seen.counters.entry(key.name().to_string()).or_default() += count,
                DebugValue::Histogram(samples) if key.name() == "idempo_claim_seconds" => {
                    let outcome = key.labels().find(|label| label.key() == "outcome").expect("an outcome label");
                    *seen.samples.entry(outcome.value().to_string()).or_default() += samples.len();
                }
                DebugValue::Histogram(_) | DebugValue::Gauge(_) => {}
            }
        }
        seen
    }

    fn counter(&self, name: &str) -> u64 {
        self.counters.get(name).copied().unwrap_or(0)
    }
}

/// What one step added to the counters this test watches, and to the
/// latency samples of each outcome.
#[derive(Debug, PartialEq, Eq)]
struct Added {
    claims: u64,
    conflicts: u64,
    replays: u64,
    acquired: u64,
    duplicates: u64,
    wait_looks: u64,
    samples: Vec<(&'static str, usize)>,
}

/// The snapshotter hands each histogram sample out once, so `after` holds
/// only the samples recorded since `before` was taken.
fn added(before: &Seen, after: &Seen) -> Added {
    let delta = |name: &str| after.counter(name) - before.counter(name);
    let samples = ["acquired", "replay", "in_progress"]
        .into_iter()
        .map(|outcome| (outcome, after.samples.get(outcome).copied().unwrap_or(0)))
        .filter(|(_, count)| *count > 0)
        .collect();
    Added {
        claims: delta("idempo_claims_total"),
        conflicts: delta("idempo_conflict_total"),
        replays: delta("idempo_replay_total"),
        acquired: delta("idempo_acquired_total"),
        duplicates: delta("duplicate_detected_total"),
        wait_looks: delta("idempo_wait_looks_total"),
        samples,
    }
}

/// Waits on `request` for `timeout`, blocking or on a runtime.
fn wait(store: &Store, request: &ClaimRequest<'_>, timeout: Duration, blocking: bool) -> Claim {
    if blocking {
        return store.claim_wait(request, timeout).expect("claim_wait");
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
    runtime.block_on(store.claim_wait_async(request, timeout)).expect("claim_wait_async")
}

/// One wait on a key whose holder completes while it waits.
fn wait_for_a_replay(store: &Store, snapshotter: &Snapshotter, key: &'static str, blocking: bool) -> Added {
    let request = ClaimRequest::new(key, Fingerprint::of(b"r")).lease(FOREVER);
    let Claim::Acquired(lease) = store.claim(&request).expect("claim") else { panic!("not acquired") };
    let before = Seen::of(snapshotter);
    let looks = store.stats().wait_looks;
    let finisher = std::thread::spawn({
        let store = store.clone();
        move || {
            // Once the waiter listens and has looked again, complete.
            let deadline = Instant::now() + Duration::from_secs(60);
            while store.stats().wait_looks == looks {
                assert!(Instant::now() < deadline, "the waiter never listened");
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(300));
            lease.complete(b"done").expect("complete");
        }
    });
    let claim = wait(store, &request, FOREVER, blocking);
    assert!(matches!(claim, Claim::Replay(_)), "{claim:?}");
    finisher.join().expect("finisher");
    added(&before, &Seen::of(snapshotter))
}

/// One wait that times out on a key whose holder never finishes.
fn wait_until_the_timeout(store: &Store, snapshotter: &Snapshotter, key: &'static str, blocking: bool) -> Added {
    let request = ClaimRequest::new(key, Fingerprint::of(b"r")).lease(FOREVER);
    let Claim::Acquired(lease) = store.claim(&request).expect("claim") else { panic!("not acquired") };
    let before = Seen::of(snapshotter);
    let claim = wait(store, &request, Duration::from_millis(700), blocking);
    assert!(matches!(claim, Claim::InProgress { .. }), "{claim:?}");
    drop(lease.into_token());
    added(&before, &Seen::of(snapshotter))
}

#[test]
fn a_waiting_claim_counts_one_claim_and_its_one_answer() {
    // The recorder is installed for the whole process: a process of its own.
    crate::common::own_process(module_path!(), "a_waiting_claim_counts_one_claim_and_its_one_answer", || {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("the only recorder of this process");
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let config = Config::new().shards(2).durability(Durability::Buffered).clock(clock).compaction_interval(None);
        let store = Store::open(dir.path(), config).expect("open");

        for blocking in [true, false] {
            let replayed =
                wait_for_a_replay(&store, &snapshotter, if blocking { "replay-1" } else { "replay-2" }, blocking);
            let expected = Added {
                claims: 1,
                conflicts: 0,
                replays: 1,
                acquired: 0,
                duplicates: 1,
                wait_looks: 2,
                samples: vec![("replay", 1)],
            };
            assert_eq!(replayed, expected, "a wait ending in a replay (blocking: {blocking})");

            let timed_out =
                wait_until_the_timeout(&store, &snapshotter, if blocking { "late-1" } else { "late-2" }, blocking);
            let expected = Added {
                claims: 1,
                conflicts: 1,
                replays: 0,
                acquired: 0,
                duplicates: 1,
                wait_looks: 2,
                samples: vec![("in_progress", 1)],
            };
            assert_eq!(timed_out, expected, "a wait that timed out (blocking: {blocking})");
        }

        // Every exported counter still equals the store's own.
        let seen = Seen::of(&snapshotter);
        let stats = store.stats();
        for (name, expected) in [
            ("idempo_claims_total", stats.claims),
            ("idempo_conflict_total", stats.in_progress),
            ("idempo_replay_total", stats.replays),
            ("idempo_acquired_total", stats.acquired),
            ("idempo_wait_looks_total", stats.wait_looks),
        ] {
            assert_eq!(seen.counter(name), expected, "{name}");
        }
        store.close().expect("close");
    });
}
