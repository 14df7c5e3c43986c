//! Memory per live record and recovery speed.
//!
//! Loads N keys (36-byte keys, 200-byte responses, claim + complete) into a
//! `Buffered` store, prints RSS bytes per live record, then closes it and
//! times `Store::open` (warm page cache). Then it opens the store again in a
//! process of its own, as a service's restart does, and prints what that
//! open holds a record: the reopen in the loading process also counts what
//! the first store and its loading threads freed and the allocator kept.
//!
//! ```text
//! cargo bench -p idemkv-bench --bench footprint                          # 1 M records
//! IDEMKV_FOOTPRINT_RECORDS=10000000 cargo bench -p idemkv-bench --bench footprint
//! ```

mod support;

use idemkv::{Config, Durability, Store};
use std::time::Instant;
use support::as_f64;

const THREADS: u64 = 2;
/// Set in the process that opens the store of this folder alone.
const OPEN_ONLY: &str = "IDEMKV_FOOTPRINT_OPEN_ONLY";

fn config() -> Config {
    Config::new().durability(Durability::Buffered).compaction_interval(None)
}

fn main() {
    if let Ok(dir) = std::env::var(OPEN_ONLY) {
        return open_only(&dir);
    }
    let records: u64 =
        std::env::var("IDEMKV_FOOTPRINT_RECORDS").ok().and_then(|value| value.parse().ok()).unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), config()).expect("open");
    let before = support::rss_bytes();
    let anon_before = support::anon_rss_bytes();
    let started = Instant::now();
    support::load_completed(&store, records, THREADS);
    let load_seconds = started.elapsed().as_secs_f64();
    let after = support::rss_bytes();
    let anon_after = support::anon_rss_bytes();
    let stats = store.stats();
    assert_eq!(stats.live_records, records);
    println!(
        "{records} records loaded in {load_seconds:.1} s ({:.0} claim+complete/s on {THREADS} threads)",
        as_f64(records) / load_seconds
    );
    println!(
        "RSS {} -> {} bytes: {:.1} bytes per live record; {} bytes on disk",
        before,
        after,
        as_f64(after.saturating_sub(before)) / as_f64(records),
        stats.disk_bytes
    );
    println!(
        "anonymous RSS {} -> {} bytes: {:.1} bytes per live record",
        anon_before,
        anon_after,
        as_f64(anon_after.saturating_sub(anon_before)) / as_f64(records)
    );
    store.close().expect("close");

    let started = Instant::now();
    let store = Store::open(dir.path(), config()).expect("reopen");
    let open_seconds = started.elapsed().as_secs_f64();
    assert_eq!(store.stats().live_records, records);
    println!(
        "after reopen: anonymous RSS {} bytes: {:.1} bytes per live record",
        support::anon_rss_bytes(),
        as_f64(support::anon_rss_bytes().saturating_sub(anon_before)) / as_f64(records)
    );
    println!(
        "recovery: open took {open_seconds:.2} s: {:.0} live records/s, {:.0} log records/s",
        as_f64(records) / open_seconds,
        as_f64(2 * records) / open_seconds
    );
    store.close().expect("close");
    let child = std::process::Command::new(std::env::current_exe().expect("this bench's binary"))
        .env(OPEN_ONLY, dir.path())
        .status()
        .expect("a process of its own");
    assert!(child.success(), "the open in a process of its own: {child}");
}

/// Opens the store in `dir` in this process, which has held no other, and
/// prints the anonymous RSS the open added a live record.
fn open_only(dir: &str) {
    let anon_before = support::anon_rss_bytes();
    let started = Instant::now();
    let store = Store::open(dir, config()).expect("open in a process of its own");
    let open_seconds = started.elapsed().as_secs_f64();
    let anon_after = support::anon_rss_bytes();
    let records = store.stats().live_records;
    println!(
        "open in a process of its own: {open_seconds:.2} s; anonymous RSS {anon_before} -> {anon_after} bytes: {:.1} bytes per live record",
        as_f64(anon_after.saturating_sub(anon_before)) / as_f64(records.max(1))
    );
}
