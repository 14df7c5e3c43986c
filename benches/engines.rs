//! Criterion benches of the hot paths, idemkv beside naive (`Mutex<HashMap>`
//! plus an append-only file), redb 2 and `SQLite` in the same group, all on
//! the same claim/complete contract (`support/engines.rs`), 36-byte keys and
//! 200-byte responses:
//!
//! | group | what one element is |
//! |---|---|
//! | `fresh_buffered_1t`, `fresh_buffered_2t` | a fresh claim + complete, buffered (idemkv `Buffered`, redb `Durability::None`, `SQLite` synchronous=OFF, naive without fsync), 1 or 2 threads |
//! | `replay_1t`, `replay_2t` | a claim answered with the stored response, from `IDEMKV_BENCH_KEYS` preloaded keys |
//! | `mixed_90_10_1t` | 9 replays and 1 fresh claim + complete in 10 |
//! | `sync_1`, `sync_128` | a fresh claim + complete in each engine's durable mode (idemkv `Sync`, redb `Immediate`, `SQLite` FULL, naive fdatasync per mutation), 1 or 128 callers |
//! | `open` | a record of a store of `IDEMKV_BENCH_OPEN_RECORDS` reopened (warm cache; open + count) |
//!
//! After the groups, single replay calls of idemkv and naive are timed one
//! by one (p50/p99), then a summary prints every engine's throughput, read
//! back from criterion's estimates, with its ratios to naive and idemkv.
//!
//! ```text
//! cargo bench -p idemkv-bench --bench engines                  # 1 M keys and records, about 6 minutes here
//! IDEMKV_BENCH_KEYS=20000 IDEMKV_BENCH_OPEN_RECORDS=20000 cargo bench -p idemkv-bench --bench engines -- --test
//! cargo bench -p idemkv-bench --bench engines -- replay        # criterion's filter (setup still runs)
//! ```
//!
//! In test mode (`-- --test`, or `cargo test --benches`) the sizes default
//! to 20,000 and every bench runs once; the summary then has no figures.

mod support;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode, Throughput};
use hdrhistogram::Histogram;
use std::time::{Duration, Instant, SystemTime};
use support::engines::{key, pick, Answer, Engine, Kind, FINGERPRINT, PRELOADED, RESPONSE};
use support::pool::with_pool;
use support::summary::{self, Group, Latency};

/// Sample counts and times per group kind.
struct Timing {
    samples: usize,
    warm_up: Duration,
    measurement: Duration,
    flat: bool,
}

const BUFFERED: Timing =
    Timing { samples: 20, warm_up: Duration::from_secs(1), measurement: Duration::from_secs(4), flat: false };
const SYNC: Timing =
    Timing { samples: 10, warm_up: Duration::from_secs(1), measurement: Duration::from_secs(4), flat: false };
/// Each open is one iteration of up to two seconds (the naive peer reading
/// 1 M records back): flat sampling, 10 of them.
const OPEN: Timing =
    Timing { samples: 10, warm_up: Duration::from_secs(1), measurement: Duration::from_secs(20), flat: true };

const REPLAY_CALLS: u64 = 200_000;

struct Bench {
    criterion: Criterion,
    groups: Vec<Group>,
    keys: u64,
    open_records: u64,
    quick: bool,
}

impl Bench {
    /// A group of `elements` per iteration, recorded for the summary.
    fn group(
        &mut self,
        name: &'static str,
        timing: &Timing,
        elements: u64,
        unit: &'static str,
    ) -> BenchmarkGroup<'_, WallTime> {
        self.groups.push(Group { name, elements, unit, engines: Kind::ALL.map(Kind::name).to_vec() });
        let mut group = self.criterion.benchmark_group(name);
        group
            .throughput(Throughput::Elements(elements))
            .sample_size(timing.samples)
            .warm_up_time(timing.warm_up)
            .measurement_time(timing.measurement);
        if timing.flat {
            group.sampling_mode(SamplingMode::Flat);
        }
        group
    }

    /// Fresh claim + complete on a new store per engine, one caller.
    fn fresh_1t(&mut self, name: &'static str, sync: bool, timing: &Timing) {
        let mut group = self.group(name, timing, 1, "ops/s");
        for kind in Kind::ALL {
            let dir = tempfile::tempdir().expect("tempdir");
            let engine = kind.open(dir.path(), sync);
            let mut n = 0;
            group.bench_function(kind.name(), |bencher| {
                bencher.iter(|| {
                    n += 1;
                    engine.fresh(&key(0, n), &FINGERPRINT, &RESPONSE);
                });
            });
            engine.close();
        }
        group.finish();
    }

    /// Fresh claim + complete on a new store per engine, `threads` callers.
    fn fresh_threads(&mut self, name: &'static str, sync: bool, threads: usize, timing: &Timing) {
        let mut group = self.group(name, timing, 1, "ops/s");
        for kind in Kind::ALL {
            let dir = tempfile::tempdir().expect("tempdir");
            let engine = kind.open(dir.path(), sync);
            let op = |thread: usize, n: u64| {
                engine.fresh(&key(u16::try_from(thread).expect("few threads"), n), &FINGERPRINT, &RESPONSE);
            };
            with_pool(threads, &op, |pool| {
                group.bench_function(kind.name(), |bencher| bencher.iter_custom(|iters| pool.run(iters)));
            });
            engine.close();
        }
        group.finish();
    }

    /// Replays (and the mixed load) on one preloaded store per engine.
    fn preloaded_groups(&mut self) -> Vec<Latency> {
        let keys = self.keys;
        let preloaded: Vec<Preloaded> = Kind::ALL.map(|kind| preloaded(kind, keys)).into();
        self.replay_groups(&preloaded);
        // Per-call latencies, outside criterion, on the same stores.
        let latencies = if self.quick { Vec::new() } else { replay_latencies(&preloaded, keys) };
        for (_, dir, engine) in preloaded {
            engine.close();
            drop(dir);
        }
        latencies
    }

    /// The replay groups (one thread, two, and 9 replays to 1 fresh claim)
    /// over the preloaded stores.
    fn replay_groups(&mut self, preloaded: &[Preloaded]) {
        let keys = self.keys;
        let mut group = self.group("replay_1t", &BUFFERED, 1, "ops/s");
        for (kind, _, engine) in preloaded {
            let mut n = 0;
            group.bench_function(kind.name(), |bencher| {
                bencher.iter(|| {
                    n += 1;
                    replay(engine.as_ref(), keys, n);
                });
            });
        }
        group.finish();

        let mut group = self.group("replay_2t", &BUFFERED, 1, "ops/s");
        for (kind, _, engine) in preloaded {
            // Each thread walks its own sequence of picks.
            let op = |thread: usize, n: u64| {
                replay(engine.as_ref(), keys, n ^ (u64::try_from(thread).expect("index") << 40));
            };
            with_pool(2, &op, |pool| {
                group.bench_function(kind.name(), |bencher| bencher.iter_custom(|iters| pool.run(iters)));
            });
        }
        group.finish();

        let mut group = self.group("mixed_90_10_1t", &BUFFERED, 1, "ops/s");
        for (kind, _, engine) in preloaded {
            let mut n = 0_u64;
            group.bench_function(kind.name(), |bencher| {
                bencher.iter(|| {
                    n += 1;
                    if n.is_multiple_of(10) {
                        engine.fresh(&key(0, n), &FINGERPRINT, &RESPONSE);
                    } else {
                        replay(engine.as_ref(), keys, n);
                    }
                });
            });
        }
        group.finish();
    }

    /// Time to reopen a store of `open_records` records (built once, outside
    /// the timing; the page cache is warm after criterion's warm-up).
    fn open(&mut self) {
        let records = self.open_records;
        let mut group = self.group("open", &OPEN, records, "records/s");
        for kind in Kind::ALL {
            let dir = tempfile::tempdir().expect("tempdir");
            let engine = kind.open(dir.path(), false);
            engine.preload(records);
            engine.close();
            group.bench_function(kind.name(), |bencher| {
                bencher.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let started = Instant::now();
                        let engine = kind.open(dir.path(), false);
                        let found = engine.records();
                        total += started.elapsed();
                        assert_eq!(found, records, "{} reopened", kind.name());
                        engine.close();
                    }
                    total
                });
            });
        }
        group.finish();
    }
}

/// An engine's store preloaded with keys, and its directory.
type Preloaded = (Kind, tempfile::TempDir, Box<dyn Engine>);

/// A new store of `kind` with `keys` completed keys.
fn preloaded(kind: Kind, keys: u64) -> Preloaded {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = kind.open(dir.path(), false);
    let started = Instant::now();
    engine.preload(keys);
    assert_eq!(engine.records(), keys, "{} preload", kind.name());
    eprintln!("{}: {keys} keys preloaded in {:.1?}", kind.name(), started.elapsed());
    (kind, dir, engine)
}

/// A claim of the `n`-th pick of `keys` preloaded keys, answered with its
/// stored response.
#[inline]
fn replay(engine: &dyn Engine, keys: u64, n: u64) {
    assert_eq!(engine.claim(&key(PRELOADED, pick(n, keys)), &FINGERPRINT), Answer::Replay);
}

/// Single replay calls of idemkv and naive timed one by one, after a
/// warm-up of a tenth as many.
fn replay_latencies(preloaded: &[Preloaded], keys: u64) -> Vec<Latency> {
    let mut latencies = Vec::new();
    for (kind, _, engine) in preloaded.iter().filter(|(kind, ..)| matches!(kind, Kind::Idemkv | Kind::Naive)) {
        let mut histogram = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).expect("bounds");
        for n in 0..REPLAY_CALLS / 10 {
            replay(engine.as_ref(), keys, n.wrapping_add(1 << 50));
        }
        for n in 0..REPLAY_CALLS {
            let started = Instant::now();
            replay(engine.as_ref(), keys, n.wrapping_add(1 << 52));
            histogram.saturating_record(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX));
        }
        let at = |quantile| Duration::from_nanos(histogram.value_at_quantile(quantile));
        latencies.push(Latency {
            engine: kind.name(),
            calls: REPLAY_CALLS,
            p50: at(0.50),
            p99: at(0.99),
            p999: at(0.999),
        });
    }
    latencies
}

fn main() {
    let since = SystemTime::now();
    let args: Vec<String> = std::env::args().collect();
    // Criterion's own rule: `--bench` (as `cargo bench` passes) without
    // `--test` benchmarks; anything else runs each bench once.
    let quick = args.iter().any(|arg| arg == "--test" || arg == "--list") || !args.iter().any(|arg| arg == "--bench");
    let size = |name: &str| {
        let default = if quick { 20_000 } else { 1_000_000 };
        std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
    };
    let directory = summary::criterion_directory();
    let mut bench = Bench {
        criterion: Criterion::default().configure_from_args().output_directory(&directory),
        groups: Vec::new(),
        keys: size("IDEMKV_BENCH_KEYS"),
        open_records: size("IDEMKV_BENCH_OPEN_RECORDS"),
        quick,
    };
    assert!(bench.keys > 0 && bench.open_records > 0, "sizes must be positive");

    bench.fresh_1t("fresh_buffered_1t", false, &BUFFERED);
    bench.fresh_threads("fresh_buffered_2t", false, 2, &BUFFERED);
    bench.fresh_1t("sync_1", true, &SYNC);
    bench.fresh_threads("sync_128", true, 128, &SYNC);
    bench.open();
    let latencies = bench.preloaded_groups();
    bench.criterion.final_summary();

    // The summary lists the groups in the issue's order.
    let order = [
        "fresh_buffered_1t",
        "fresh_buffered_2t",
        "replay_1t",
        "replay_2t",
        "mixed_90_10_1t",
        "sync_1",
        "sync_128",
        "open",
    ];
    bench.groups.sort_by_key(|group| order.iter().position(|name| *name == group.name));
    summary::print(&directory, since, quick, &bench.groups, &latencies);
}
