//! A slow compaction (a byte rate of 1 B/s: hours of pacing sleep per
//! segment) never holds up `close`, never keeps the directory locked after
//! the last handle is dropped, and a manual pass is cut short by `close`.
//!
//! Regression tests for "Storage integrity" item 7: `close` blocked for as
//! long as the pacer slept, and the background compactor held the engine
//! (and so the directory lock) for the whole pass.

use idemkv::{Claim, ClaimRequest, Config, Durability, Error, Fingerprint, Store};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn config(background: bool) -> Config {
    Config::new()
        .shards(1)
        .durability(Durability::Buffered)
        .segment_bytes(4096)
        .response_bytes_max(512)
        .compaction_interval(background.then_some(Duration::from_millis(10)))
        .compaction_bytes_per_second(1)
}

/// Fills several segments with released keys: all dead, so compaction
/// drops the oldest segments, each followed by a pacing sleep of hours.
/// Then opens the store with or without the background compactor; returns
/// it with its segment count before any compaction.
fn open_with_dead_segments(dir: &Path, background: bool) -> (Store, u64) {
    let store = Store::open(dir, config(false)).expect("open");
    for n in 0..150 {
        let key = format!("dead-{n}");
        let Claim::Acquired(lease) = store.claim(&ClaimRequest::new(&key, Fingerprint::of(b"r"))).expect("claim")
        else {
            panic!("a new key is acquired");
        };
        lease.release().expect("release");
    }
    let segments = store.stats().segments;
    assert!(segments > 3, "too few segments to compact: {segments}");
    store.close().expect("close");
    (Store::open(dir, config(background)).expect("reopen"), segments)
}

/// Waits until the background compactor has dropped a segment: it is then
/// in the pacer's sleep.
fn wait_for_a_compaction_step(store: &Store, segments_before: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.stats().segments >= segments_before {
        assert!(Instant::now() < deadline, "the background compactor never ran");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `call` on a thread and says how long it took, if under `limit`.
fn within<T: Send + 'static>(limit: Duration, call: impl FnOnce() -> T + Send + 'static) -> Option<(T, Duration)> {
    let (done, finished) = mpsc::channel();
    let started = Instant::now();
    std::thread::spawn(move || done.send(call()));
    finished.recv_timeout(limit).ok().map(|value| (value, started.elapsed()))
}

#[test]
fn close_during_a_slow_background_compaction_returns_promptly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, segments) = open_with_dead_segments(dir.path(), true);
    wait_for_a_compaction_step(&store, segments);
    let (closed, took) = within(Duration::from_secs(5), move || store.close()).expect("close waited for the pacer");
    closed.expect("close");
    assert!(took < Duration::from_millis(500), "close took {took:?}");
}

#[test]
fn dropping_the_last_handle_during_a_compaction_frees_the_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, segments) = open_with_dead_segments(dir.path(), true);
    wait_for_a_compaction_step(&store, segments);
    drop(store);
    let reopen = |path: &Path| {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match Store::open(path, config(false)) {
                Err(Error::Locked { .. }) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                other => return other,
            }
        }
    };
    let reopened = reopen(dir.path()).expect("reopen once the last handle is gone");
    assert!(reopened.stats().segments < segments, "the dropped segment came back");
}

#[test]
fn close_cuts_a_manual_compaction_short() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, segments) = open_with_dead_segments(dir.path(), false);
    let compacting = store.clone();
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || done.send(compacting.compact()));
    wait_for_a_compaction_step(&store, segments);
    let (closed, took) = within(Duration::from_secs(5), move || store.close()).expect("close waited");
    closed.expect("close");
    assert!(took < Duration::from_millis(500), "close took {took:?}");
    let pass = finished.recv_timeout(Duration::from_secs(5)).expect("the pass kept sleeping after close");
    assert!(matches!(pass, Err(Error::Closed)), "{pass:?}");
}
