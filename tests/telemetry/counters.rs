//! The store's counters and histograms reach a real `metrics` recorder
//! (metrics-util's debugging recorder, installed for this process before
//! any store opens), under the names the README lists, labelled by shard.

#![cfg(feature = "metrics")]

use idemkv::{store::Stats, Claim, ClaimRequest, Config, Durability, Error, Fingerprint, ManualClock, Store};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Every counter summed over its labels, and every histogram's samples by
/// name and `outcome` label (empty when it has none).
struct Seen {
    counters: HashMap<String, u64>,
    histograms: HashMap<(String, String), Vec<f64>>,
}

fn seen(snapshotter: &Snapshotter) -> Seen {
    let mut counters = HashMap::new();
    let mut histograms: HashMap<(String, String), Vec<f64>> = HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let name = key.name().to_string();
        match value {
            DebugValue::Counter(count) => *counters.entry(name).or_default() += count,
            DebugValue::Histogram(samples) => {
                let outcome =
                    key.labels().find(|label| label.key() == "outcome").map(|label| label.value().to_string());
                histograms
                    .entry((name, outcome.unwrap_or_default()))
                    .or_default()
                    .extend(samples.iter().map(|sample| sample.into_inner()));
            }
            DebugValue::Gauge(_) => {}
        }
    }
    Seen { counters, histograms }
}

impl Seen {
    fn counter(&self, name: &str) -> u64 {
        self.counters.get(name).copied().unwrap_or(0)
    }

    fn samples(&self, name: &str, outcome: &str) -> &[f64] {
        self.histograms.get(&(name.to_string(), outcome.to_string())).map_or(&[], Vec::as_slice)
    }
}

fn request(key: &str, body: &[u8]) -> ClaimRequest<'static> {
    let key: &'static str = Box::leak(key.to_string().into_boxed_str());
    ClaimRequest::new(key, Fingerprint::of(body)).lease(Duration::from_secs(5)).ttl(Duration::from_secs(60))
}

#[test]
fn every_outcome_moves_its_counter_and_claims_are_timed() {
    // The recorder is installed for the whole process: a process of its own.
    crate::common::own_process(module_path!(), "every_outcome_moves_its_counter_and_claims_are_timed", || {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("the only recorder of this process");

        let dir = tempfile::tempdir().expect("tempdir");
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let config = Config::new()
            .shards(2)
            .durability(Durability::Sync)
            .clock(clock.clone())
            .compaction_interval(None)
            .segment_bytes(4096)
            .response_bytes_max(512)
            .compaction_bytes_per_second(0);
        let store = Store::open(dir.path(), config).expect("open");
        every_outcome_once(&store, &clock);
        seal_expire_and_compact(&store, &clock);

        let seen = seen(&snapshotter);
        let stats = store.stats();
        counters_are_the_stores_own(&seen, &stats);
        counters_are_what_this_test_did(&seen);
        claims_and_fsync_batches_are_timed(&seen, &stats);
        store.close().expect("close");
    });
}

/// Every claim outcome and every way a lease ends, once: acquired,
/// completed, replayed, in progress, mismatched, taken over (its first
/// holder's finish refused with `LeaseLost`), failed, released, dropped.
fn every_outcome_once(store: &Store, clock: &ManualClock) {
    // Acquired, completed, then replayed, in progress and mismatched.
    let Claim::Acquired(lease) = store.claim(&request("a", b"1")).expect("claim") else { panic!("not acquired") };
    let Claim::Acquired(mut other) = store.claim(&request("b", b"1")).expect("claim") else { panic!("not acquired") };
    other.checkpoint("charged", b"ch_1").expect("a checkpoint");
    assert!(matches!(store.claim(&request("b", b"1")).expect("claim"), Claim::InProgress { .. }));
    lease.complete(b"done").expect("complete");
    assert!(matches!(store.claim(&request("a", b"1")).expect("claim"), Claim::Replay(_)));
    assert!(matches!(store.claim(&request("a", b"2")).expect("claim"), Claim::Mismatch));

    // The lease on "b" ends; a retry takes it over; the first holder's
    // finish is refused with LeaseLost.
    clock.advance(Duration::from_secs(6));
    let Claim::Acquired(taken) = store.claim(&request("b", b"1")).expect("claim") else { panic!("not recovered") };
    assert!(taken.recovered());
    let lost = other.complete(b"late").expect_err("stale holder");
    assert!(matches!(lost.error, Error::LeaseLost { .. }));
    taken.fail(b"declined").expect("fail");

    // Released, and dropped unfinished.
    let Claim::Acquired(released) = store.claim(&request("c", b"1")).expect("claim") else { panic!() };
    released.release().expect("release");
    let Claim::Acquired(dropped) = store.claim(&request("d", b"1")).expect("claim") else { panic!() };
    drop(dropped);
}

/// Enough records to seal segments, then everything expires and a
/// compaction pass reclaims it.
fn seal_expire_and_compact(store: &Store, clock: &ManualClock) {
    for n in 0..60 {
        let Claim::Acquired(lease) = store.claim(&request(&format!("bulk-{n}"), b"1")).expect("claim") else {
            panic!()
        };
        lease.complete(&[7; 100]).expect("complete");
    }
    clock.advance(Duration::from_secs(3600));
    assert_eq!(store.get(b"", b"a").expect("get"), None, "expired");
    let report = store.compact().expect("compact");
    assert!(report.bytes_reclaimed > 0, "{report:?}");
}

/// Each exported counter equals the store's own count of the same thing.
fn counters_are_the_stores_own(seen: &Seen, stats: &Stats) {
    for (name, expected) in [
        ("idempo_claims_total", stats.claims),
        ("idempo_acquired_total", stats.acquired),
        ("idempo_replay_total", stats.replays),
        ("idempo_conflict_total", stats.in_progress),
        ("idempo_wait_looks_total", stats.wait_looks),
        ("idempo_mismatch_total", stats.mismatches),
        ("idempo_recovered_total", stats.recovered),
        ("idempo_lease_lost_total", stats.lease_lost),
        ("idempo_completed_total", stats.completions),
        ("idempo_failed_total", stats.failures),
        ("idempo_released_total", stats.releases),
        ("idempo_checkpoints_total", stats.checkpoints),
        ("idempo_abandoned_total", stats.abandoned_leases),
        ("idempo_expired_total", stats.expirations),
        ("idempo_compaction_runs_total", stats.compaction_runs),
        ("idempo_compaction_reclaimed_bytes_total", stats.compaction_bytes_reclaimed),
        ("idempo_records_written_total", stats.records_written),
        ("idempo_fsync_total", stats.fsyncs),
        ("idempo_fsync_records_total", stats.records_synced),
    ] {
        assert_eq!(seen.counter(name), expected, "{name}");
    }
}

/// The counters' figures are the ones this test made happen.
fn counters_are_what_this_test_did(seen: &Seen) {
    assert_eq!(seen.counter("idempo_replay_total"), 1);
    assert_eq!(seen.counter("idempo_conflict_total"), 1);
    assert_eq!(seen.counter("idempo_mismatch_total"), 1);
    assert_eq!(seen.counter("duplicate_detected_total"), 3, "replays + in-progress + mismatches");
    assert_eq!(seen.counter("idempo_recovered_total"), 1);
    assert_eq!(seen.counter("idempo_checkpoints_total"), 1);
    assert_eq!(seen.counter("idempo_lease_lost_total"), 1);
    assert_eq!(seen.counter("idempo_released_total"), 1);
    assert_eq!(seen.counter("idempo_abandoned_total"), 1);
    assert_eq!(seen.counter("idempo_failed_total"), 1);
    assert_eq!(seen.counter("idempo_compaction_runs_total"), 1);
    // Expired records are counted when found (a read, compaction), not
    // when their TTL passes: "a" was read, compaction found most others.
    assert!(seen.counter("idempo_expired_total") >= 1);
    assert!(seen.counter("idempo_fsync_total") > 0);
}

/// Claim latencies by outcome, one sample per claim of that outcome; and
/// group-commit batches, one sample per fsync, summing to the records made
/// durable.
fn claims_and_fsync_batches_are_timed(seen: &Seen, stats: &Stats) {
    assert_eq!(seen.samples("idempo_claim_seconds", "acquired").len(), 64);
    assert_eq!(seen.samples("idempo_claim_seconds", "recovered").len(), 1);
    assert_eq!(seen.samples("idempo_claim_seconds", "replay").len(), 1);
    assert_eq!(seen.samples("idempo_claim_seconds", "in_progress").len(), 1);
    assert_eq!(seen.samples("idempo_claim_seconds", "mismatch").len(), 1);
    let acquired = seen.samples("idempo_claim_seconds", "acquired");
    assert!(acquired.iter().all(|seconds| *seconds > 0.0 && *seconds < 60.0), "{acquired:?}");
    let batches = seen.samples("idempo_fsync_batch_records", "");
    assert_eq!(batches.len() as u64, stats.fsyncs);
    #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "whole record counts")]
    let records_in_batches: u64 = batches.iter().map(|records| *records as u64).sum();
    assert_eq!(records_in_batches, stats.records_synced);
}
