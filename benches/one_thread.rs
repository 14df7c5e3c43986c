//! The one-thread rows of `engines` (fresh claim + complete, replay, 90 %
//! replay / 10 % fresh), idemkv beside the naive peer, on the same
//! contract (`support/engines.rs`), with the calling thread's CPU time per
//! call beside the wall time: on this shared machine wall time moves with
//! other work, CPU time much less. Rounds alternate the engines, so both
//! see the same machine; the table gives each row's median over the rounds.
//! Small enough to run under `perf record`, which the criterion groups of
//! `engines` (four engines, preloaded one after another) are not. Beside
//! them the naive peer with its answers out of its map, in a file
//! (`naive-compact`) and in a log in memory (`naive-compact-mem`, a floor
//! for 32 B a key), and that floor with the checks idemkv's contract
//! makes on every claim (`naive-compact-checked`: a CRC per record, the
//! keyed 128-bit hash, the clocks, the counters): see
//! `support/engines/naive_compact.rs`.
//!
//! ```text
//! cargo bench -p idemkv-bench --bench one_thread                      # 1 M preloaded keys, 5 rounds of 2 s
//! IDEMKV_BENCH_KEYS=100000 IDEMKV_BENCH_SECONDS=0.5 IDEMKV_BENCH_ROUNDS=3 cargo bench -p idemkv-bench --bench one_thread
//! IDEMKV_BENCH_ENGINES=idemkv IDEMKV_BENCH_ROWS=replay perf record -g target/release/deps/one_thread-*
//! ```

mod support;

use std::time::{Duration, Instant};
use support::engines::{key, pick, Answer, Engine, Kind, FINGERPRINT, PRELOADED, RESPONSE};

/// The rows, as `engines` names its groups.
const ROWS: [&str; 3] = ["fresh_buffered_1t", "replay_1t", "mixed_90_10_1t"];

/// Calls between two looks at the clock.
const BATCH: u64 = 1_000;

/// Nanoseconds this thread has run on a CPU, from the scheduler's own
/// account (`/proc/thread-self/schedstat`); 0 where there is none.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|stat| stat.split_whitespace().next().and_then(|ns| ns.parse().ok()))
        .unwrap_or(0)
}

/// One engine's stores: a fresh one for fresh claims, a preloaded one for
/// replays and the mixed load; and the next fresh key of each.
struct Subject {
    kind: Kind,
    _dirs: [tempfile::TempDir; 2],
    fresh: Box<dyn Engine>,
    preloaded: Box<dyn Engine>,
    next: [u64; 2],
    keys: u64,
}

impl Subject {
    fn new(kind: Kind, keys: u64) -> Subject {
        let dirs = [tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir")];
        let fresh = kind.open(dirs[0].path(), false);
        let preloaded = kind.open(dirs[1].path(), false);
        let started = Instant::now();
        preloaded.preload(keys);
        assert_eq!(preloaded.records(), keys, "{} preload", kind.name());
        eprintln!("{}: {keys} keys preloaded in {:.1?}", kind.name(), started.elapsed());
        Subject { kind, _dirs: dirs, fresh, preloaded, next: [0, 0], keys }
    }

    /// One call of `row`; the `n`-th of this subject in that row.
    #[inline]
    fn call(&mut self, row: usize, n: u64) {
        match row {
            0 => {
                self.next[0] += 1;
                self.fresh.fresh(&key(0, self.next[0]), &FINGERPRINT, &RESPONSE);
            }
            1 => self.replay(n),
            _ if n.is_multiple_of(10) => {
                self.next[1] += 1;
                self.preloaded.fresh(&key(1, self.next[1]), &FINGERPRINT, &RESPONSE);
            }
            _ => self.replay(n),
        }
    }

    #[inline]
    fn replay(&self, n: u64) {
        assert_eq!(self.preloaded.claim(&key(PRELOADED, pick(n, self.keys)), &FINGERPRINT), Answer::Replay);
    }

    /// Calls of `row` for `seconds`: wall and CPU nanoseconds per call.
    fn run(&mut self, row: usize, seconds: Duration, first: u64) -> (f64, f64) {
        let (started, cpu_started) = (Instant::now(), thread_cpu_ns());
        let mut calls = 0;
        while started.elapsed() < seconds {
            for _ in 0..BATCH {
                self.call(row, first + calls);
                calls += 1;
            }
        }
        let wall = started.elapsed().as_secs_f64() * 1e9;
        let cpu = support::as_f64(thread_cpu_ns().saturating_sub(cpu_started));
        (wall / support::as_f64(calls), cpu / support::as_f64(calls))
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

fn main() {
    // `cargo test --benches` runs this without `--bench`: a smoke run.
    let quick = !std::env::args().any(|arg| arg == "--bench");
    let keys: u64 = env("IDEMKV_BENCH_KEYS", if quick { 2_000 } else { 1_000_000 });
    let seconds = Duration::from_secs_f64(env("IDEMKV_BENCH_SECONDS", if quick { 0.01 } else { 2.0 }));
    let rounds: usize = env("IDEMKV_BENCH_ROUNDS", if quick { 1 } else { 5 });
    let engines: String =
        env("IDEMKV_BENCH_ENGINES", "idemkv,naive,naive-compact,naive-compact-mem,naive-compact-checked".to_owned());
    let rows: String = env("IDEMKV_BENCH_ROWS", "fresh,replay,mixed".to_owned());
    let rows: Vec<usize> =
        (0..ROWS.len()).filter(|row| rows.split(',').any(|name| ROWS[*row].starts_with(name))).collect();
    let mut subjects: Vec<Subject> =
        [Kind::Idemkv, Kind::Naive, Kind::NaiveCompact, Kind::NaiveCompactMemory, Kind::NaiveCompactChecked]
            .into_iter()
            .filter(|kind| engines.split(',').any(|name| name == kind.name()))
            .map(|kind| Subject::new(kind, keys))
            .collect();
    // figures[row][subject] = (wall, cpu) of each round.
    let mut figures = vec![vec![(Vec::new(), Vec::new()); subjects.len()]; ROWS.len()];
    for round in 0..rounds {
        for &row in &rows {
            // Alternate which engine goes first.
            let order: Vec<usize> =
                if round % 2 == 0 { (0..subjects.len()).collect() } else { (0..subjects.len()).rev().collect() };
            for index in order {
                let first = u64::try_from(round).expect("few rounds") << 40;
                let (wall, cpu) = subjects[index].run(row, seconds, first);
                figures[row][index].0.push(wall);
                figures[row][index].1.push(cpu);
            }
        }
    }
    println!("{keys} preloaded keys, {rounds} rounds of {seconds:.1?} a row and engine; medians over the rounds");
    println!(
        "{:<18} {:<21} {:>12} {:>12} {:>12} {:>10} {:>10}",
        "row", "engine", "wall ns/op", "cpu ns/op", "ops/s", "× naive", "cpu × naive"
    );
    for &row in &rows {
        let medians: Vec<(f64, f64)> = figures[row].iter_mut().map(|(wall, cpu)| (median(wall), median(cpu))).collect();
        let naive = subjects.iter().position(|subject| subject.kind == Kind::Naive).map(|index| medians[index]);
        for (subject, (wall, cpu)) in subjects.iter().zip(&medians) {
            let (ratio, cpu_ratio) =
                naive.map_or((f64::NAN, f64::NAN), |(naive_wall, naive_cpu)| (naive_wall / wall, naive_cpu / cpu));
            println!(
                "{:<18} {:<21} {:>12.0} {:>12.0} {:>12.0} {:>9.2}× {:>9.2}×",
                ROWS[row],
                subject.kind.name(),
                wall,
                cpu,
                1e9 / wall,
                ratio,
                cpu_ratio
            );
        }
    }
    for subject in subjects {
        subject.fresh.close();
        subject.preloaded.close();
    }
}
