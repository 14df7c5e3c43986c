//! `idemkv export` and `idemkv import`, run as an operator moving a
//! service from its embedded store to a fleet: every live record of the
//! store lands on the target as the contract would have made it — a
//! completion and a failure replay with their answers, a key reused for
//! another request is still a mismatch, a record in progress is taken over
//! after its lease as a recovered attempt with its checkpoint, an expired
//! record is left behind — on a real Redis server, a real PostgreSQL
//! server and another store; a second import changes nothing; a cut,
//! damaged or foreign file is refused whole.

use crate::support::{assert_fails, idemkv, scratch, stdout};
use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Checkpoint, Claim, ClaimRequest, Config, Fingerprint, Keyspace, Store,
};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A store with a completion, a failure, a key in progress with a
/// checkpoint (its lease ends 5 s after this returns), a completion in a
/// scope, and one record that expires before the import.
fn a_store_to_move(dir: &Path) -> PathBuf {
    let path = dir.join("store");
    let store = Store::open(&path, Config::new()).expect("open");
    let finish = |key: &str, fail: bool, answer: &[u8]| {
        let request = ClaimRequest::new(key, Fingerprint::of(key.as_bytes())).ttl(Duration::from_secs(3600));
        let Claim::Acquired(lease) = store.claim(&request).expect("claim") else { panic!("{key}") };
        if fail {
            lease.fail(answer).expect("fail");
        } else {
            lease.complete(answer).expect("complete");
        }
    };
    finish("paid", false, b"201 paid");
    finish("declined", true, b"402 declined");
    let scoped = ClaimRequest::new("paid", Fingerprint::of(b"tenant paid")).scope("tenant-7");
    let Claim::Acquired(lease) = store.claim(&scoped).expect("claim") else { panic!("scoped") };
    lease.complete(b"201 tenant").expect("complete");
    let short = ClaimRequest::new("short", Fingerprint::of(b"short")).ttl(Duration::from_millis(300));
    let Claim::Acquired(lease) = store.claim(&short).expect("claim") else { panic!("short") };
    lease.complete(b"gone soon").expect("complete");
    let held = ClaimRequest::new("held", Fingerprint::of(b"held")).lease(Duration::from_secs(5));
    let Claim::Acquired(mut lease) = store.claim(&held).expect("claim") else { panic!("held") };
    lease.checkpoint("charged", b"ch_1").expect("checkpoint");
    let _token = lease.into_token(); // its holder goes away
    store.close().expect("close");
    path
}

/// What a claim of `key` gets on the target.
async fn claim<B: IdempotencyBackend>(backend: &B, scope: &[u8], key: &str, body: &[u8]) -> BackendClaim {
    let options = ClaimOptions::new().lease(Duration::from_secs(5));
    backend.claim(scope, key.as_bytes(), Fingerprint::of(body), options).await.expect("claim")
}

/// Every record arrived as the contract would have made it.
async fn moved<B: IdempotencyBackend>(backend: &B) {
    let replay = |answer: BackendClaim| match answer {
        BackendClaim::Replay(response) => response,
        other => panic!("expected a replay, got {other:?}"),
    };
    assert_eq!(replay(claim(backend, b"", "paid", b"paid").await), b"201 paid");
    assert_eq!(replay(claim(backend, b"", "declined", b"declined").await), b"402 declined");
    assert_eq!(replay(claim(backend, b"tenant-7", "paid", b"tenant paid").await), b"201 tenant");
    assert!(matches!(claim(backend, b"", "paid", b"another request").await, BackendClaim::Mismatch));
    assert!(backend.get(b"", b"short").await.expect("get").is_none(), "expired before the import");
    match claim(backend, b"", "held", b"held").await {
        BackendClaim::InProgress { retry_after } => assert!(retry_after <= Duration::from_secs(5)),
        other => panic!("the held key is in progress until its lease ends, got {other:?}"),
    }
    // Then taken over once its lease has ended (bounded: 8 s).
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        match claim(backend, b"", "held", b"held").await {
            BackendClaim::InProgress { .. } => {}
            BackendClaim::Acquired { recovered, checkpoint, .. } => {
                assert!(recovered, "a takeover of a holder that went away");
                assert_eq!(checkpoint, Some(Checkpoint::new("charged", b"ch_1".to_vec())), "resumed where it stopped");
                return;
            }
            other => panic!("taken over after its lease, got {other:?}"),
        }
    }
    panic!("the held key was not taken over within 8 s of its 5 s lease");
}

/// Exports the store, checks the summary, and waits out the short record.
fn export(dir: &Path, store: &Path) -> PathBuf {
    let file = dir.join("records.jsonl");
    let output = idemkv(&["export", store.to_str().expect("utf-8"), file.to_str().expect("utf-8")]);
    assert_eq!(output.status.code(), Some(0), "{}", crate::support::stderr(&output));
    assert!(stdout(&output).contains("exported 5 live records"), "{}", stdout(&output));
    std::thread::sleep(Duration::from_millis(400));
    file
}

fn import(file: &Path, target: &[&str]) -> String {
    let output = idemkv(&[&["import", file.to_str().expect("utf-8")][..], target].concat());
    assert_eq!(output.status.code(), Some(0), "{}", crate::support::stderr(&output));
    stdout(&output)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

#[test]
fn into_another_store_and_a_second_import_changes_nothing() {
    let dir = scratch();
    let file = export(dir.path(), &a_store_to_move(dir.path()));
    let target = dir.path().join("target");
    let summary = import(&file, &["--store", target.to_str().expect("utf-8")]);
    assert!(summary.contains("2 completed, 1 failed, 1 processing; 0 already there (kept), 1 expired"), "{summary}");
    let again = import(&file, &["--store", target.to_str().expect("utf-8")]);
    assert!(again.contains("0 completed, 0 failed, 0 processing; 4 already there (kept), 1 expired"), "{again}");
    let store = Store::open(&target, Config::new()).expect("open the target");
    runtime().block_on(moved(&store));
}

#[cfg(feature = "redis")]
#[test]
fn into_redis() {
    let dir = scratch();
    let file = export(dir.path(), &a_store_to_move(dir.path()));
    let server = crate::common::redis::RedisServer::start(&dir.path().join("redis"));
    let summary = import(&file, &["--redis", &server.url(), "--prefix", "moved"]);
    assert!(summary.contains("2 completed, 1 failed, 1 processing"), "{summary}");
    runtime().block_on(async {
        let backend =
            idemkv::backend::redis::RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
        moved(&backend.prefix("moved")).await;
    });
}

#[cfg(feature = "postgres")]
#[test]
fn into_postgres() {
    let dir = scratch();
    let file = export(dir.path(), &a_store_to_move(dir.path()));
    let server = crate::common::postgres::PostgresServer::start(&dir.path().join("postgres"));
    let summary = import(&file, &["--postgres", &server.url()]);
    assert!(summary.contains("2 completed, 1 failed, 1 processing"), "{summary}");
    runtime().block_on(async {
        let backend =
            idemkv::backend::postgres::PostgresBackend::connect(&server.url(), Config::new()).await.expect("connect");
        moved(&backend).await;
    });
}

#[test]
fn a_cut_damaged_or_foreign_file_is_refused_whole() {
    let dir = scratch();
    let file = export(dir.path(), &a_store_to_move(dir.path()));
    let text = std::fs::read_to_string(&file).expect("read");
    let lines: Vec<&str> = text.lines().collect();
    let target = dir.path().join("target");
    let target_arg = target.to_str().expect("utf-8");
    let cases: [(&str, String, &str); 5] = [
        ("cut", lines[..lines.len() - 1].join("\n"), "no trailer: the file is cut short"),
        ("a line lost", [&lines[..2], &lines[3..]].concat().join("\n"), "the trailer counts 5 records, the file has 4"),
        ("a damaged line", text.replacen("\"fingerprint\":\"", "\"fingerprint\":\"zz", 1), "not a hex digit"),
        ("foreign", "{\"hello\":1}\n".to_string(), "not an idemkv export header"),
        ("a later format", text.replacen("\"idemkv_export\":2", "\"idemkv_export\":3", 1), "export format 3"),
    ];
    for (what, contents, expected) in cases {
        let bad = dir.path().join(format!("{}.jsonl", what.replace(' ', "-")));
        std::fs::write(&bad, contents).expect("write");
        let output = idemkv(&["import", bad.to_str().expect("utf-8"), "--store", target_arg]);
        assert_fails(&output, 2, expected, what);
        assert!(crate::support::stderr(&output).contains("nothing was imported"), "{what}");
    }
    let store = Store::open(&target, Config::new()).expect("open the target");
    assert_eq!(store.iter().count(), 0, "nothing was imported from any of them");
    drop(store);
    let output = idemkv(&["export", dir.path().join("store").to_str().expect("utf-8"), file.to_str().expect("utf-8")]);
    assert_fails(&output, 2, "exists: export writes a new file", "an existing file");
    let no_target = idemkv(&["import", file.to_str().expect("utf-8")]);
    assert_eq!(no_target.status.code(), Some(2), "a usage error");
    assert!(crate::support::stderr(&no_target).contains("--redis"), "names the targets");
}

/// A store with one record of idemkv's own (a version) and a caller's
/// record whose scope looks like one: both land where they were, in their
/// keyspaces; a file of format 1 (before keyspaces) lands its
/// `idemkv.version/`-scoped record in the version keyspace, as a store's
/// migration would.
#[test]
fn keyspaces_travel_with_their_records_and_format_1_maps_the_old_prefixes() {
    let dir = scratch();
    let path = dir.path().join("store");
    let store = Store::open(&path, Config::new()).expect("open");
    for (keyspace, scope) in [(Keyspace::Version, "acct-7"), (Keyspace::Caller, "idemkv.version/acct-8")] {
        let request = ClaimRequest::new("payment-1", Fingerprint::of(b"v")).scope(scope).keyspace(keyspace);
        let Claim::Acquired(lease) = store.claim(&request).expect("claim") else { panic!("{keyspace}") };
        lease.complete(keyspace.name().as_bytes()).expect("complete");
    }
    store.close().expect("close");
    let file = dir.path().join("export.jsonl");
    let output = idemkv(&["export", path.to_str().expect("utf-8"), file.to_str().expect("utf-8")]);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    let text = std::fs::read_to_string(&file).expect("read");
    assert!(text.starts_with("{\"idemkv_export\":2") && text.contains("\"keyspace\":\"version\""), "{text}");

    let target = dir.path().join("target");
    let output = idemkv(&["import", file.to_str().expect("utf-8"), "--store", target.to_str().expect("utf-8")]);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    let store = Store::open(&target, Config::new()).expect("open the target");
    let own = store.get_in(Keyspace::Version, b"acct-7", b"payment-1").expect("get_in").expect("its own");
    assert_eq!(own.response, b"version");
    let caller = store.get(b"idemkv.version/acct-8", b"payment-1").expect("get").expect("the caller's");
    assert_eq!(caller.response, b"caller");
    store.close().expect("close");

    // The same file as format 1 wrote it: no keyspaces, the old prefixes.
    let old = dir.path().join("format-1.jsonl");
    let format_1 =
        text.replacen("\"idemkv_export\":2", "\"idemkv_export\":1", 1).replace("\"keyspace\":\"version\",", "");
    std::fs::write(&old, format_1).expect("write");
    let earlier = dir.path().join("from-format-1");
    let output = idemkv(&["import", old.to_str().expect("utf-8"), "--store", earlier.to_str().expect("utf-8")]);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    let store = Store::open(&earlier, Config::new()).expect("open");
    assert!(store.get_in(Keyspace::Version, b"acct-8", b"payment-1").expect("get_in").is_some(), "mapped");
    assert!(store.get(b"idemkv.version/acct-8", b"payment-1").expect("get").is_none());
}
