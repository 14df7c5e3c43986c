//! What per-scope quotas cost, in one run:
//!
//! 1. calls per second on a store without quotas, on a second one without
//!    (the control: the ratio of two identical stores shows the machine's
//!    noise) and on one with a quota on every scope (never reached), in
//!    slices that take turns, so all see the same machine: fresh
//!    claim+complete over 1000 tenants, and replays; calls/s and ratios are
//!    medians of the rounds (on a shared machine one round can be far off
//!    either way);
//! 2. memory and open time per tracked scope: a store of N records, each
//!    in a scope of its own, opened alternately without and with quotas,
//!    each open in a fresh process (this binary run again) so that no
//!    memory freed by an earlier open is reused: the anonymous RSS the open
//!    grew by is the index and, with quotas, the ledger (the segments'
//!    mapped file pages are not counted);
//! 3. refused claims per second in a full scope of that store (a refusal
//!    may sweep expired records out first: sweeps are spaced so that this
//!    stays cheap).
//!
//! Two threads, Buffered, 36-byte keys, 200-byte responses.
//!
//! ```text
//! cargo bench -p idemkv-bench --bench quota                       # 0.3 s slices, 10 rounds, 100 000 scopes
//! IDEMKV_BENCH_SECONDS=0.2 IDEMKV_QUOTA_SCOPES=10000 cargo bench -p idemkv-bench --bench quota
//! ```

mod support;

use idemkv::{store::Quota, Claim, ClaimRequest, Config, Durability, Error, Fingerprint, Store};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use support::{as_f64, drive, ratio, seconds};

const THREADS: usize = 2;
const ROUNDS: usize = 10;
/// Opens of each kind for the footprint.
const OPENS: usize = 3;
const TENANTS: u64 = 1000;
const REPLAY_KEYS: u64 = 10_000;

fn config(quotas: bool) -> Config {
    let config = Config::new().durability(Durability::Buffered).compaction_interval(None);
    if quotas {
        // Every scope counted, none ever refused.
        config.quota(Quota::new().records(u64::MAX / 2).bytes(u64::MAX / 2))
    } else {
        config
    }
}

fn key(n: u64) -> String {
    format!("{n:036}")
}

fn tenant(n: u64) -> String {
    format!("tenant-{n:08}")
}

fn claim_complete(store: &Store, scope: &str, key: &str) {
    let request = ClaimRequest::new(key, Fingerprint::of(b"body")).scope(scope);
    match store.claim(&request).expect("claim") {
        Claim::Acquired(lease) => lease.complete(&[7; 200]).expect("complete"),
        Claim::Replay(_) => {}
        other => panic!("unexpected {other:?}"),
    }
}

/// Fresh claim+complete per call, then replays of preloaded keys.
fn slice(store: &Store, next: &AtomicU64, slice_seconds: f64) -> (f64, f64) {
    let fresh = drive(THREADS, slice_seconds, |_, _| {
        let n = REPLAY_KEYS + next.fetch_add(1, Ordering::Relaxed);
        claim_complete(store, &tenant(n % TENANTS), &key(n));
    });
    let replay = drive(THREADS, slice_seconds, |thread, n| {
        let n = (n * THREADS as u64 + thread as u64) % REPLAY_KEYS;
        claim_complete(store, &tenant(n % TENANTS), &key(n));
    });
    (fresh.ops_per_second, replay.ops_per_second)
}

fn throughput(slice_seconds: f64) {
    // Without quotas, without again (the control: how far two identical
    // stores drift apart on this machine), and with.
    let kinds = [("quotas off", false), ("off again", false), ("quotas on", true)];
    let stores: Vec<(tempfile::TempDir, Store)> = kinds
        .iter()
        .map(|(_, quotas)| {
            let dir = tempfile::tempdir().expect("tempdir");
            let store = Store::open(dir.path(), config(*quotas)).expect("open");
            for n in 0..REPLAY_KEYS {
                claim_complete(&store, &tenant(n % TENANTS), &key(n));
            }
            (dir, store)
        })
        .collect();
    let next = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
    // Per round: [store][fresh, replay] calls per second, the stores taking
    // turns in a rotating order.
    let mut rounds = Vec::new();
    for round in 0..ROUNDS {
        let mut measured = [[0.0; 2]; 3];
        for turn in 0..3 {
            let index = (round + turn) % 3;
            let (fresh, replay) = slice(&stores[index].1, &next[index], slice_seconds);
            measured[index] = [fresh, replay];
        }
        rounds.push(measured);
    }
    println!("calls/s, {THREADS} threads, Buffered, {TENANTS} tenants, {ROUNDS} rounds of {slice_seconds} s slices");
    println!(
        "{:<22} {:>11} {:>11} {:>11} {:>9} {:>11} {:>9}",
        "medians", kinds[0].0, kinds[1].0, kinds[2].0, "on ÷ off", "range", "control"
    );
    for (row, name) in ["fresh claim+complete", "replay"].into_iter().enumerate() {
        let rates = |index: usize| median(rounds.iter().map(|round| round[index][row]).collect());
        let ratios =
            |index: usize| -> Vec<f64> { rounds.iter().map(|round| ratio(round[index][row], round[0][row])).collect() };
        let on = ratios(2);
        let (low, high) = on.iter().fold((f64::MAX, 0.0_f64), |(low, high), ratio| (low.min(*ratio), high.max(*ratio)));
        println!(
            "{name:<22} {:>11.0} {:>11.0} {:>11.0} {:>9.2} {:>11} {:>9.2}",
            rates(0),
            rates(1),
            rates(2),
            median(on),
            format!("{low:.2}–{high:.2}"),
            median(ratios(1))
        );
    }
    let tracked = (0..TENANTS).filter(|n| stores[2].1.scope_usage(tenant(*n)).is_some()).count();
    assert_eq!(tracked as u64, TENANTS, "every tenant is counted");
}

/// The median of `values`.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) {
        f64::midpoint(values[middle - 1], values[middle])
    } else {
        values[middle]
    }
}

/// Anonymous resident memory of this process (`RssAnon`: heap, not the
/// file pages of the segments' maps), in bytes.
fn rss_anon_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status.lines().find(|line| line.starts_with("RssAnon:")).unwrap_or("");
    line.split_whitespace().nth(1).and_then(|kib| kib.parse::<u64>().ok()).unwrap_or(0) * 1024
}

/// The variable that makes this binary a child that opens one store.
const CHILD: &str = "IDEMKV_QUOTA_BENCH_OPEN";

/// In the child: opens the store in `dir` and prints the open's seconds
/// and the anonymous memory it grew by.
fn child_open(dir: &Path, quotas: bool) {
    let before = rss_anon_bytes();
    let started = Instant::now();
    let store = Store::open(dir, config(quotas)).expect("open");
    let seconds = started.elapsed().as_secs_f64();
    let grown = rss_anon_bytes().saturating_sub(before);
    println!("{seconds} {grown}");
    store.close().expect("close");
}

/// Opens the store in `dir` in a fresh process; returns the open's
/// seconds and the anonymous memory it grew by.
fn measure_open(dir: &Path, quotas: bool) -> (f64, u64) {
    let output = std::process::Command::new(std::env::current_exe().expect("this binary"))
        .env(CHILD, format!("{}:{}", u8::from(quotas), dir.display()))
        .output()
        .expect("run the child");
    assert!(output.status.success(), "child: {}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8_lossy(&output.stdout);
    let mut figures = text.split_whitespace();
    let seconds = figures.next().and_then(|value| value.parse().ok()).expect("seconds");
    let grown = figures.next().and_then(|value| value.parse().ok()).expect("bytes");
    (seconds, grown)
}

fn footprint(scopes: u64, slice_seconds: f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = Store::open(dir.path(), config(false)).expect("open");
        std::thread::scope(|scope| {
            for thread in 0..THREADS as u64 {
                let store = &store;
                scope.spawn(move || {
                    for n in (thread..scopes).step_by(THREADS) {
                        claim_complete(store, &tenant(n), &key(n));
                    }
                });
            }
        });
        store.close().expect("close");
    }
    // Warm the page cache once, then alternate.
    measure_open(dir.path(), true);
    let mut best = [(f64::MAX, u64::MAX); 2];
    for _ in 0..OPENS {
        for (index, quotas) in [false, true].into_iter().enumerate() {
            let (seconds, grown) = measure_open(dir.path(), quotas);
            best[index] = (best[index].0.min(seconds), best[index].1.min(grown));
        }
    }
    let ((off_seconds, off_bytes), (on_seconds, on_bytes)) = (best[0], best[1]);
    println!("{scopes} records, one per scope (15-byte scope names), best of {OPENS} opens each");
    println!("{:<34} {:>14} {:>14} {:>14}", "", "quotas off", "quotas on", "per scope");
    println!(
        "{:<34} {:>14.3} {:>14.3} {:>12.2} µs",
        "open, seconds",
        off_seconds,
        on_seconds,
        (on_seconds - off_seconds) * 1e6 / as_f64(scopes)
    );
    println!(
        "{:<34} {:>14} {:>14} {:>14.1}",
        "anonymous RSS grown by the open, B",
        off_bytes,
        on_bytes,
        as_f64(on_bytes.saturating_sub(off_bytes)) / as_f64(scopes)
    );
    refusals(dir.path(), slice_seconds);
}

/// Refused claims per second in a full scope of the store in `dir`.
fn refusals(dir: &Path, slice_seconds: f64) {
    let store = Store::open(dir, config(false).scope_quota("full", Quota::new().records(1))).expect("open");
    claim_complete(&store, "full", "taken");
    let records = store.stats().live_records;
    let refused = drive(1, slice_seconds, |_, n| {
        let key = key(n);
        let request = ClaimRequest::new(&key, Fingerprint::of(b"body")).scope("full");
        assert!(matches!(store.claim(&request), Err(Error::QuotaExceeded { .. })));
    });
    println!(
        "refused claims in a full scope, 1 thread, {records} records in the store: {:.0}/s (p99 {:?})",
        refused.ops_per_second,
        refused.percentile(0.99)
    );
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD) {
        let (quotas, dir) = spec.split_once(':').expect("quotas:dir");
        child_open(Path::new(dir), quotas == "1");
        return;
    }
    let slice_seconds = seconds(0.3);
    let scopes: u64 = std::env::var("IDEMKV_QUOTA_SCOPES").ok().and_then(|value| value.parse().ok()).unwrap_or(100_000);
    throughput(slice_seconds);
    println!();
    footprint(scopes, slice_seconds);
}
