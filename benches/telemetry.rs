//! What exporting metrics costs: the same calls on a store opened before a
//! Prometheus recorder was installed (its metric handles do nothing) and on
//! one opened after (every counter and claim-latency histogram is live), in
//! one run, alternating slices so both see the same machine. Two threads,
//! Buffered, 36-byte keys, 200-byte responses.
//!
//! ```text
//! cargo bench -p idemkv-bench --bench telemetry                          # 1 s slices, 5 rounds
//! IDEMKV_BENCH_SECONDS=0.1 cargo bench -p idemkv-bench --bench telemetry
//! ```
//!
//! Against a build without the `metrics` feature (no handles, claims not
//! timed), run the `engines` bench of a copy of this crate whose `idemkv`
//! dependency has `default-features = false`.

mod support;

use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, Store};
use metrics_exporter_prometheus::PrometheusBuilder;
use std::sync::atomic::{AtomicU64, Ordering};
use support::{drive, ratio, seconds};

const THREADS: usize = 2;
const ROUNDS: usize = 5;
const REPLAY_KEYS: u64 = 10_000;

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = Config::new().durability(Durability::Buffered).compaction_interval(None);
    let store = Store::open(dir.path(), config).expect("open");
    (dir, store)
}

fn key(n: u64) -> String {
    format!("{n:036}")
}

fn claim_complete(store: &Store, key: &str) {
    let request = ClaimRequest::new(key, Fingerprint::of(b"body"));
    match store.claim(&request).expect("claim") {
        Claim::Acquired(lease) => lease.complete(&[7; 200]).expect("complete"),
        Claim::Replay(_) => {}
        other => panic!("unexpected {other:?}"),
    }
}

/// Fresh claim+complete per call, then replays of preloaded keys.
fn slice(store: &Store, next: &AtomicU64, slice_seconds: f64) -> (f64, f64) {
    let fresh = drive(THREADS, slice_seconds, |_, _| {
        let n = next.fetch_add(1, Ordering::Relaxed);
        claim_complete(store, &key(REPLAY_KEYS + n));
    });
    let replay = drive(THREADS, slice_seconds, |thread, n| {
        claim_complete(store, &key((n * THREADS as u64 + thread as u64) % REPLAY_KEYS));
    });
    (fresh.ops_per_second, replay.ops_per_second)
}

fn main() {
    let slice_seconds = seconds(1.0);
    let (_quiet_dir, quiet) = open();
    let handle = PrometheusBuilder::new().install_recorder().expect("recorder");
    let (_live_dir, live) = open();
    for store in [&quiet, &live] {
        for n in 0..REPLAY_KEYS {
            claim_complete(store, &key(n));
        }
    }
    let (quiet_next, live_next) = (AtomicU64::new(0), AtomicU64::new(0));
    let mut sums = [[0.0; 2]; 2];
    for _ in 0..ROUNDS {
        for (index, (store, next)) in [(&quiet, &quiet_next), (&live, &live_next)].into_iter().enumerate() {
            let (fresh, replay) = slice(store, next, slice_seconds);
            sums[index][0] += fresh;
            sums[index][1] += replay;
        }
    }
    let rounds = support::as_f64(ROUNDS as u64);
    println!("calls/s, {THREADS} threads, Buffered, {ROUNDS} alternating slices of {slice_seconds} s each");
    println!("{:<34} {:>14} {:>14} {:>8}", "", "no recorder", "Prometheus", "ratio");
    for (row, name) in ["fresh claim+complete", "replay"].into_iter().enumerate() {
        let (without, with) = (sums[0][row] / rounds, sums[1][row] / rounds);
        println!("{name:<34} {without:>14.0} {with:>14.0} {:>8.2}", ratio(with, without));
    }
    let scrape = handle.render();
    let replays: u64 = scrape
        .lines()
        .filter(|line| line.starts_with("idempo_replay_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    println!("replays the live store exported: {replays}");
    assert!(replays > 0, "the live store's counters reach the recorder");
}
