//! Endless-load soak: a steady rate of new keys with a short TTL, printing
//! disk bytes, live data, live records and RSS over time (they must level
//! off, disk within 2x the live data), then claim latency with and without
//! compaction running.
//!
//! ```text
//! cargo bench -p idemkv-bench --bench soak                       # 60 s of load, 2 s TTL
//! IDEMKV_SOAK_SECONDS=5 cargo bench -p idemkv-bench --bench soak # a short smoke run
//! ```

mod support;

use hdrhistogram::Histogram;
use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, Store};
use std::time::{Duration, Instant};
use support::as_f64;

const RATE_PER_SECOND: u64 = 20_000;
const TTL: Duration = Duration::from_secs(2);
const RESPONSE: [u8; 200] = [b'r'; 200];

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm.split_whitespace().nth(1).and_then(|pages| pages.parse::<u64>().ok()).unwrap_or(0) * 4096
}

/// Claims and completes fresh keys at `RATE_PER_SECOND` for `seconds`,
/// calling `tick` once a second; returns the claim latencies (a fixed-size
/// histogram, so the bench's own memory stays flat).
fn load(store: &Store, prefix: &str, seconds: u64, mut tick: impl FnMut(u64)) -> Histogram<u64> {
    let fingerprint = Fingerprint::of(b"POST /payments");
    let started = Instant::now();
    let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram");
    let mut next_tick = 1;
    for n in 0..RATE_PER_SECOND * seconds {
        let due = Duration::from_secs_f64(as_f64(n) / as_f64(RATE_PER_SECOND));
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
        if started.elapsed() >= Duration::from_secs(next_tick) {
            tick(next_tick);
            next_tick += 1;
        }
        let key = format!("{prefix}-{n:012}");
        let request = ClaimRequest::new(&key, fingerprint).ttl(TTL);
        let call = Instant::now();
        let claim = store.claim(&request).expect("claim");
        latencies.saturating_record(u64::try_from(call.elapsed().as_nanos()).unwrap_or(u64::MAX));
        let Claim::Acquired(lease) = claim else { panic!("fresh key not acquired") };
        lease.complete(&RESPONSE).expect("complete");
    }
    latencies
}

fn p99(latencies: &Histogram<u64>) -> Duration {
    Duration::from_nanos(latencies.value_at_quantile(0.99))
}

fn config(compaction: Option<Duration>) -> Config {
    Config::new()
        .durability(Durability::Buffered)
        .segment_bytes(1 << 20)
        .response_bytes_max(64 << 10)
        .compaction_interval(compaction)
        .compaction_bytes_per_second(0)
}

fn main() {
    let seconds: u64 = std::env::var("IDEMKV_SOAK_SECONDS").ok().and_then(|value| value.parse().ok()).unwrap_or(60);
    println!(
        "soak: {RATE_PER_SECOND} new keys/s, TTL {TTL:?}, 200-byte responses, compaction every 250 ms, {seconds} s"
    );
    println!(
        "{:>5} {:>12} {:>12} {:>8} {:>10} {:>12} {:>9}",
        "s", "disk bytes", "live bytes", "ratio", "live recs", "RSS bytes", "segments"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), config(Some(Duration::from_millis(250)))).expect("open");
    let mut worst_ratio_after_warmup: f64 = 0.0;
    let with_compaction = load(&store, "soak", seconds, |second| {
        let stats = store.stats();
        let ratio = as_f64(stats.disk_bytes) / as_f64(stats.live_bytes.max(1));
        if second > 3 * TTL.as_secs() {
            worst_ratio_after_warmup = worst_ratio_after_warmup.max(ratio);
        }
        println!(
            "{second:>5} {:>12} {:>12} {:>8.2} {:>10} {:>12} {:>9}",
            stats.disk_bytes,
            stats.live_bytes,
            ratio,
            stats.live_records,
            rss_bytes(),
            stats.segments
        );
    });
    println!("worst disk / live ratio after {}s warm-up: {worst_ratio_after_warmup:.2}", 3 * TTL.as_secs());
    drop(store);

    let quiet_dir = tempfile::tempdir().expect("tempdir");
    let quiet = Store::open(quiet_dir.path(), config(None)).expect("open");
    let without_compaction = load(&quiet, "quiet", seconds.min(20), |_| {});
    println!(
        "claim p99 with compaction {:?}, without {:?}: {:.2}x",
        p99(&with_compaction),
        p99(&without_compaction),
        p99(&with_compaction).as_secs_f64() / p99(&without_compaction).as_secs_f64().max(1e-9)
    );
}
