//! How long `Store::open` takes with per-segment hint files and without
//! them (warm page cache), and the RSS per live record after open.
//!
//! Loads N keys (36-byte keys, 200-byte responses, claim + complete, so two
//! log records a key) into a `Buffered` store with 4 shards, closes it, reads
//! every file once to warm the page cache, then times:
//!
//! - `hints`: a writable open that loads every segment's hint file;
//! - `no hints, read-only`: the hint files deleted, a read-only open, which
//!   replays every record and writes nothing (the log path alone);
//! - `no hints, writable`: the hint files deleted, a writable open, which
//!   replays every record and writes the missing hints back.
//!
//! Each is the best of `IDEMKV_OPEN_RUNS` runs (default 3).
//!
//! ```text
//! cargo bench -p idemkv-bench --bench open                                  # 10 M records
//! IDEMKV_OPEN_RECORDS=100000 cargo bench -p idemkv-bench --bench open       # a smoke run
//! IDEMKV_OPEN_DIR=/var/tmp/open cargo bench -p idemkv-bench --bench open    # keep the store for the next run
//! ```

mod support;

use idemkv::{Config, Durability, Store};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;
use support::{as_f64, cpu_seconds};

const THREADS: u64 = 2;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

fn config() -> Config {
    Config::new().shards(4).durability(Durability::Buffered).compaction_interval(None)
}

fn load(dir: &Path, records: u64) {
    let store = Store::open(dir, config()).expect("open");
    let started = Instant::now();
    support::load_completed(&store, records, THREADS);
    let seconds = started.elapsed().as_secs_f64();
    let stats = store.stats();
    assert_eq!(stats.live_records, records);
    println!(
        "built: {records} records in {seconds:.1} s, {} segments, {:.2} GB of log",
        stats.segments,
        as_f64(stats.disk_bytes) / 1e9
    );
    store.close().expect("close");
}

/// Every file under `dir`, the deepest first.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("ls") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            found.extend(files(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// Reads every file once, so the timed opens find them in the page cache.
fn warm(dir: &Path) -> u64 {
    let mut buffer = vec![0u8; 1 << 20];
    let mut bytes = 0;
    for path in files(dir) {
        let mut file = std::fs::File::open(&path).expect("open");
        loop {
            let read = file.read(&mut buffer).expect("read");
            if read == 0 {
                break;
            }
            bytes += read as u64;
        }
    }
    bytes
}

/// Deletes the hint files; returns how many there were.
fn delete_hints(dir: &Path) -> usize {
    let hints: Vec<PathBuf> =
        files(dir).into_iter().filter(|path| path.extension().is_some_and(|extension| extension == "hint")).collect();
    for path in &hints {
        std::fs::remove_file(path).expect("remove hint");
    }
    hints.len()
}

/// One timed open.
#[derive(Clone, Copy)]
struct Run {
    seconds: f64,
    cpu_seconds: f64,
    /// RSS bytes the open added, per live record.
    rss_per_record: f64,
}

fn timed_open(dir: &Path, records: u64, read_only: bool) -> Run {
    let before = support::rss_bytes();
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    let store = if read_only { Store::open_read_only(dir, config()) } else { Store::open(dir, config()) };
    let store = store.expect("open");
    let seconds = started.elapsed().as_secs_f64();
    let cpu_seconds = cpu_seconds() - cpu_before;
    let after = support::rss_bytes();
    assert_eq!(store.stats().live_records, records);
    if read_only {
        drop(store);
    } else {
        store.close().expect("close");
    }
    Run { seconds, cpu_seconds, rss_per_record: as_f64(after.saturating_sub(before)) / as_f64(records) }
}

/// The fastest of `runs` opens, each after `prepare`.
fn best_of(runs: u64, dir: &Path, records: u64, read_only: bool, prepare: impl Fn()) -> Run {
    let mut best = Run { seconds: f64::INFINITY, cpu_seconds: 0.0, rss_per_record: 0.0 };
    for _ in 0..runs {
        prepare();
        let run = timed_open(dir, records, read_only);
        if run.seconds < best.seconds {
            best = run;
        }
    }
    best
}

fn print_run(label: &str, run: Run, records: u64, note: &str) {
    println!(
        "  {label:<20} {:7.3} s  {:6.2} CPU s  {:>9.0} records/s  RSS {:5.1} B/record{note}",
        run.seconds,
        run.cpu_seconds,
        as_f64(records) / run.seconds,
        run.rss_per_record
    );
}

/// A hasher that passes a uniform 64-bit key through, as the index's does.
#[derive(Default)]
struct PassThrough(u64);

impl std::hash::Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut raw = [0u8; 8];
            raw[..chunk.len()].copy_from_slice(chunk);
            self.0 ^= u64::from_le_bytes(raw);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// The floor of any open on this machine: inserting `records` random
/// 128-bit keys with a 40-byte value (the index's bucket layout) into 4
/// pre-sized hash maps, one per shard, on 2 threads, with no I/O and no
/// decoding. Returns the wall seconds.
fn index_floor(records: u64) -> f64 {
    type Map = std::collections::HashMap<[u64; 2], [u64; 5], std::hash::BuildHasherDefault<PassThrough>>;
    let per_shard = usize::try_from(records / 4).expect("fits");
    let started = Instant::now();
    std::thread::scope(|scope| {
        for pair in 0..2u64 {
            scope.spawn(move || {
                for shard in 0..2u64 {
                    let mut state = 0x9E37_79B9_7F4A_7C15 ^ (pair * 2 + shard + 1);
                    let mut next = move || {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        state
                    };
                    let mut map = Map::default();
                    map.reserve(per_shard);
                    for _ in 0..per_shard {
                        map.insert([next(), next()], [1, 2, 3, 4, 5]);
                    }
                    std::hint::black_box(&map);
                }
            });
        }
    });
    started.elapsed().as_secs_f64()
}

fn main() {
    let records = env_u64("IDEMKV_OPEN_RECORDS", 10_000_000);
    let runs = env_u64("IDEMKV_OPEN_RUNS", 3).max(1);
    let scratch = tempfile::tempdir().expect("tempdir");
    let parent = std::env::var_os("IDEMKV_OPEN_DIR").map_or_else(|| scratch.path().to_path_buf(), PathBuf::from);
    let dir = parent.join(format!("store-{records}"));
    if dir.join("MANIFEST").exists() {
        println!("reusing the store in {}", dir.display());
    } else {
        std::fs::create_dir_all(&parent).expect("mkdir");
        load(&dir, records);
    }
    // One writable open and close, so that every sealed segment and the
    // active one have a hint whatever wrote the store.
    timed_open(&dir, records, false);
    let warmed = warm(&dir);
    println!("page cache warmed: {:.2} GB read", as_f64(warmed) / 1e9);

    let hints = best_of(runs, &dir, records, false, || {});
    if std::env::var_os("IDEMKV_OPEN_HINTS_ONLY").is_some() {
        // For a profile of the hint path alone.
        print_run("hints", hints, records, "");
        return;
    }
    let read_only = best_of(runs, &dir, records, true, || {
        delete_hints(&dir);
    });
    let writable = best_of(runs, &dir, records, false, || {
        delete_hints(&dir);
    });
    let hint_files = files(&dir).iter().filter(|path| path.extension().is_some_and(|ext| ext == "hint")).count();
    println!("open of {records} records, best of {runs}, warm cache ({hint_files} hint files):");
    print_run("hints", hints, records, "");
    print_run("no hints, read-only", read_only, records, "");
    print_run("no hints, writable", writable, records, " (writes the hints back)");
    println!("  ratio: no hints (read-only) / hints = {:.1}x", read_only.seconds / hints.seconds);
    let floor = (0..runs).map(|_| index_floor(records)).fold(f64::INFINITY, f64::min);
    println!("  floor: {floor:.3} s to insert {records} random keys into 4 pre-sized maps of the index's layout on 2 threads (no I/O)");
}
