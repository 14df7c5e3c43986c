//! Reopen keeps every state, every response and the token order.

use crate::common::{acquire, config, fingerprint, open, replay, START_MS};
use idemkv::{Claim, ClaimRequest, ManualClock, State, Store};
use std::time::Duration;

#[test]
fn every_state_survives_close_and_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let lease_of =
        |key: &'static str| ClaimRequest::new(key, fingerprint(key)).lease(Duration::from_secs(60)).scope("s");
    let processing = acquire(&store, &lease_of("processing")).into_token();
    acquire(&store, &lease_of("completed")).complete(b"done").expect("complete");
    acquire(&store, &lease_of("failed")).fail(b"declined").expect("fail");
    let released = acquire(&store, &lease_of("released")).into_token();
    store.release(&released).expect("release");
    acquire(&store, &lease_of("removed")).complete(b"gone").expect("complete");
    assert!(store.remove(b"s", b"removed").expect("remove"));
    let mut renewed = acquire(&store, &lease_of("renewed"));
    renewed.renew(Duration::from_secs(600)).expect("renew");
    let _renewed_elsewhere = renewed.into_token();
    let big = vec![0xA5u8; 300_000];
    acquire(&store, &lease_of("big")).complete(&big).expect("complete");
    store.close().expect("close");

    let store = open(dir.path(), &clock);
    let record = store.get(b"s", b"processing").expect("get").expect("present");
    assert_eq!((record.state, record.token), (State::Processing, processing.token));
    assert_eq!(replay(&store, &lease_of("completed")).response, b"done");
    let failed = replay(&store, &lease_of("failed"));
    assert_eq!((failed.state, failed.response.as_slice()), (State::Failed, &b"declined"[..]));
    assert_eq!(replay(&store, &lease_of("big")).response, big);
    assert_eq!(store.get(b"s", b"released").expect("get"), None);
    assert_eq!(store.get(b"s", b"removed").expect("get"), None);
    assert_eq!(store.get(b"s", b"renewed").expect("get").expect("present").deadline_ms, START_MS + 600_000);

    // The held leases still finish after the reopen, by token.
    store.complete(&processing, b"finished after restart").expect("complete");
    clock.advance(Duration::from_secs(120));
    assert!(matches!(store.claim(&lease_of("renewed")).expect("claim"), Claim::InProgress { .. }));
    // A key's new token is above every token it had before the reopen.
    let again = acquire(&store, &lease_of("released"));
    assert!(again.token() > released.token);
    again.release().expect("release");
    acquire(&store, &lease_of("new")).complete(b"n").expect("complete");
    assert_eq!(store.stats().live_records, 6);
    assert_eq!(store.iter().count(), 6);
    drop(store);

    // Dropping without close also keeps everything (writes reached the OS).
    let store = open(dir.path(), &clock);
    assert_eq!(replay(&store, &lease_of("processing")).response, b"finished after restart");
    let mut keys: Vec<Vec<u8>> = store.iter().map(|record| record.expect("record").key).collect();
    keys.sort();
    assert_eq!(keys, [&b"big"[..], b"completed", b"failed", b"new", b"processing", b"renewed"]);
}

#[test]
fn expired_lease_is_recovered_after_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let request = ClaimRequest::new("k", fingerprint("r")).lease(Duration::from_secs(5));
    {
        let store = open(dir.path(), &clock);
        let _crashed_holder = acquire(&store, &request).into_token();
    }
    clock.advance(Duration::from_secs(5));
    let store = open(dir.path(), &clock);
    let lease = acquire(&store, &request);
    assert!(lease.recovered());
    assert_eq!(lease.attempt(), 2);
    lease.complete(b"second attempt").expect("complete");
}

#[test]
fn many_segments_and_shards_reopen_intact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let make = || Store::open(dir.path(), config(&clock).segment_bytes(8192).response_bytes_max(1024)).expect("open");
    let store = make();
    for index in 0..2_000u32 {
        let key = format!("key-{index}");
        let request = ClaimRequest::new(&key, fingerprint(&key));
        acquire(&store, &request).complete(key.as_bytes()).expect("complete");
    }
    store.close().expect("close");
    let segments = std::fs::read_dir(dir.path().join("shard-0000")).expect("ls").count();
    assert!(segments > 5, "expected several segments, found {segments}");
    let store = make();
    for index in 0..2_000u32 {
        let key = format!("key-{index}");
        assert_eq!(replay(&store, &ClaimRequest::new(&key, fingerprint(&key))).response, key.as_bytes());
    }
}

/// Dropping the last handle releases the directory before the drop
/// returns, even while the background compactor is in the middle of a
/// step (which holds the engine): an open right after the drop is never
/// refused as `Locked`. It once was, now and then, when a compaction step
/// held the engine past the drop.
#[test]
fn an_open_right_after_the_last_drop_is_never_locked_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    // A compactor that wakes every millisecond and finds work every time:
    // everything written expires at once.
    let config = || {
        config(&clock)
            .segment_bytes(4096)
            .response_bytes_max(1024)
            .compaction_interval(Some(Duration::from_millis(1)))
            .compaction_live_fraction(1.0)
    };
    for round in 0..200u32 {
        let store = Store::open(dir.path(), config()).unwrap_or_else(|error| panic!("round {round}: {error}"));
        for n in 0..8 {
            let key = format!("k-{round}-{n}");
            let request = ClaimRequest::new(key.as_bytes(), fingerprint("b")).ttl(Duration::from_millis(1));
            if let Claim::Acquired(lease) = store.claim(&request).expect("claim") {
                lease.complete(&[7; 300]).expect("complete");
            }
        }
        clock.advance(Duration::from_secs(1));
        drop(store);
    }
}

/// A child process this process starts shares its open files from its fork
/// until its exec, so a store dropped in that moment is still locked on
/// this process's behalf: an open then waits the moment out instead of
/// answering `Locked`. Here a child holds the lock (the lock file as its
/// standard input) for 200 ms after this process let go of it.
#[test]
fn an_open_waits_out_a_lock_a_starting_child_still_shares() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    open(dir.path(), &clock).close().expect("close");
    let path = dir.path().join(idemkv::store::LOCK_FILE_NAME);
    let lock = std::fs::OpenOptions::new().read(true).write(true).open(&path).expect("lock file");
    lock.try_lock().expect("free");
    std::fs::write(&path, std::process::id().to_string()).expect("holder pid");
    let mut child = std::process::Command::new("sleep").arg("0.2").stdin(lock).spawn().expect("sleep");
    let store = Store::open(dir.path(), config(&clock)).expect("open once the child lets go");
    child.wait().expect("child");
    drop(store);
    // A lock this process really holds is refused at once, as before.
    let holder = open(dir.path(), &clock);
    assert!(matches!(Store::open(dir.path(), config(&clock)), Err(idemkv::Error::Locked { .. })));
    drop(holder);
}

/// A replaced answer is a record like any other: it survives a reopen from
/// the hints and from the log alone, and compaction keeps it, not the
/// answer it replaced; its token stays, and it lives its TTL from the
/// replacement.
#[test]
fn a_replaced_answer_survives_reopen_and_compaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("order", fingerprint("order")).ttl(Duration::from_secs(600)).scope("s");
    let token = acquire(&store, &request).into_token();
    store.complete(&token, b"with messages").expect("complete");
    let before = store.get(b"s", b"order").expect("get").expect("present");
    clock.advance(Duration::from_secs(5));
    assert!(store.replace(b"s", b"order", b"with messages", b"bare").expect("replace"));
    assert!(!store.replace(b"s", b"order", b"with messages", b"again").expect("replace"), "a stale answer");
    assert_eq!(store.stats().replacements, 1);
    store.close().expect("close");

    for reopen in ["hints", "log"] {
        if reopen == "log" {
            crate::common::delete_hints(dir.path());
        }
        let store = open(dir.path(), &clock);
        let after = replay(&store, &request);
        assert_eq!(after.response, b"bare", "{reopen}");
        assert_eq!((after.token, after.deadline_ms), (before.token, before.deadline_ms + 5_000), "{reopen}");
        assert_eq!(after.updated_ms, START_MS + 5_000, "{reopen}");
        store.compact().expect("compact");
        drop(store);
    }
    let store = open(dir.path(), &clock);
    assert_eq!(replay(&store, &request).response, b"bare", "after compaction");
    // Replaced 5 s after its completion: it lives 600 s from then.
    clock.advance(Duration::from_secs(599));
    assert!(store.get(b"s", b"order").expect("get").is_some(), "its TTL runs from the replacement");
    clock.advance(Duration::from_secs(1));
    assert_eq!(store.get(b"s", b"order").expect("get"), None, "then it expires");
}
