//! A scope's indexes on a real Redis server, checked by what the server
//! ran (`INFO stats`): a scan among many other scopes' records and a relay
//! sweep over many completions without staged messages cost a bounded
//! number of commands, not one per record the server keeps (before the
//! indexes, a page was a `SCAN` of every record and a `GET` of each); the
//! entries of records that lived out their time leave the index as the
//! scope is written; records written before the indexes (none filed) are
//! filed at the next connect. On a Cluster, where each scope's indexes sit
//! in 16 buckets with its records, the same holds, and the records an
//! earlier build named by their own digest move to their buckets at the
//! next connect.

#![cfg(all(feature = "tokio", feature = "redis", feature = "messaging"))]

use crate::common::redis::{RedisCluster, RedisServer};
use crate::common::Kept;
use idemkv::backend::redis::RedisBackend;
use idemkv::messaging::{Outbox, OutboxMessage, Relay, RelayConfig};
use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Config, Fingerprint,
};
use std::sync::Arc;
use std::time::Duration;

/// The commands the server has run (a script's own among them), this one
/// included.
fn commands(server: &RedisServer) -> u64 {
    let stats = server.cli(&["INFO", "stats"]).expect("INFO");
    let line = stats.lines().find_map(|line| line.trim().strip_prefix("total_commands_processed:"));
    line.expect("total_commands_processed").parse().expect("a number")
}

/// The commands `call` made the server run (the two `INFO`s apart).
async fn counted<T>(server: &RedisServer, call: impl std::future::Future<Output = T>) -> (T, u64) {
    let before = commands(server);
    let answer = call.await;
    (answer, commands(server) - before - 1)
}

async fn put<B: IdempotencyBackend>(backend: &B, scope: &[u8], key: &[u8], ttl: Duration) {
    let options = ClaimOptions::new().ttl(ttl);
    let BackendClaim::Acquired { token, .. } =
        backend.claim(scope, key, Fingerprint::of(key), options).await.expect("claim")
    else {
        panic!("a fresh key")
    };
    backend.complete(&token, b"201").await.expect("complete");
}

/// `count` completed keys of each of `scopes`.
async fn fill(backend: &RedisBackend, scopes: &[&[u8]], count: usize) {
    for scope in scopes {
        for n in 0..count {
            put(backend, scope, format!("k-{n:04}").as_bytes(), Duration::from_secs(600)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_among_other_scopes_runs_commands_for_its_own_records_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
    fill(&backend, &[b"big-1", b"big-2", b"big-3"], 400).await;
    fill(&backend, &[b"small"], 5).await;
    let (page, ran) = counted(&server, backend.scan(b"small", None, 10)).await;
    let page = page.expect("scan");
    assert_eq!(page.len(), 5);
    assert!(page.iter().all(|record| record.scope == b"small"), "{page:?}");
    // One range of the index, one script reading the five records (a GET
    // each, and its TIME).
    assert!(ran <= 5 * 2 + 6, "a page of 5 among 1,205 records ran {ran} commands");
    let (rest, ran) = counted(&server, backend.scan(b"big-2", Some(b"k-0389"), 100)).await;
    let keys: Vec<Vec<u8>> = rest.expect("scan").into_iter().map(|record| record.key).collect();
    assert_eq!(keys.first().map(Vec::as_slice), Some(&b"k-0390"[..]));
    assert_eq!(keys.len(), 10);
    assert!(ran <= 10 * 2 + 6, "the last 10 keys of a scope ran {ran} commands");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_reads_the_keys_with_staged_messages_and_none_of_the_other_completions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let backend = Arc::new(RedisBackend::connect(&server.url(), Config::new()).await.expect("connect"));
    fill(&backend, &[b"shop"], 600).await;
    let kept = Kept::default();
    let relay = Relay::new(Arc::clone(&backend), kept.clone(), RelayConfig::new([&b"shop"[..]]));
    let (sweep, ran) = counted(&server, relay.sweep()).await;
    assert_eq!(sweep.expect("sweep").keys, 0);
    // The staged keys' index, empty: one range.
    assert!(ran <= 2, "a sweep over 600 completions without messages ran {ran} commands");

    let outbox = Outbox::shared(Arc::clone(&backend));
    let claimed = backend.claim(b"shop", b"order-7", Fingerprint::of(b"order-7"), ClaimOptions::new()).await;
    let Ok(BackendClaim::Acquired { token, .. }) = claimed else { panic!("{claimed:?}") };
    outbox.complete(&token, b"201", &[OutboxMessage::new("orders", b"placed".to_vec())]).await.expect("stage");
    let (sweep, ran) = counted(&server, relay.sweep()).await;
    assert_eq!(sweep.expect("sweep").delivered, 1);
    assert_eq!(kept.0.lock().expect("lock").len(), 1);
    // Its delivery (progress read, claimed, completed; the messages
    // dropped) and two ranges, whatever the 600 others.
    assert!(ran <= 60, "a sweep delivering one key among 601 ran {ran} commands");
    let (sweep, ran) = counted(&server, relay.sweep()).await;
    assert_eq!(sweep.expect("sweep").keys, 0, "delivered keys leave the staged index");
    assert!(ran <= 2, "{ran}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_entries_of_records_that_lived_out_their_time_leave_as_the_scope_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
    for n in 0..30 {
        // Long enough that none ends while the 30 are written, however
        // busy the machine.
        put(&backend, b"shop", format!("brief-{n:02}").as_bytes(), Duration::from_secs(2)).await;
    }
    let cardinality = |suffix: &str| {
        let name = String::from_utf8(index_names(&server, suffix)).expect("utf-8");
        server.cli(&["ZCARD", &name]).expect("ZCARD").trim().parse::<u64>().expect("a number")
    };
    assert_eq!(cardinality("keys"), 30);
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    for n in 0..20 {
        put(&backend, b"shop", format!("kept-{n:02}").as_bytes(), Duration::from_secs(600)).await;
    }
    // Each completion dropped two ended entries: all 30 are gone.
    assert_eq!((cardinality("keys"), cardinality("ends")), (20, 20));
    let page = backend.scan(b"shop", None, 100).await.expect("scan");
    assert_eq!(page.len(), 20);
}

/// The name of the caller's scope `shop`'s index ending in `suffix`, as
/// the server has it.
fn index_names(server: &RedisServer, suffix: &str) -> Vec<u8> {
    let found = server.cli(&["--scan", "--pattern", &format!("idemkv:scope:*:{suffix}")]).expect("scan");
    let names: Vec<&str> = found.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
    assert_eq!(names.len(), 1, "{names:?}");
    names[0].as_bytes().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_written_before_the_indexes_are_filed_at_the_next_connect() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let earlier = Arc::new(RedisBackend::connect(&server.url(), Config::new()).await.expect("connect"));
    fill(&earlier, &[b"shop", b"other"], 20).await;
    let claimed = earlier.claim(b"shop", b"order-7", Fingerprint::of(b"order-7"), ClaimOptions::new()).await;
    let Ok(BackendClaim::Acquired { token, .. }) = claimed else { panic!("{claimed:?}") };
    let outbox = Outbox::shared(Arc::clone(&earlier));
    outbox.complete(&token, b"201", &[OutboxMessage::new("orders", b"placed".to_vec())]).await.expect("stage");
    // As an earlier build left the server: no index, no mark.
    let indexes = server.cli(&["--scan", "--pattern", "idemkv:scope:*"]).expect("scan");
    for name in indexes.lines().map(str::trim).filter(|line| !line.is_empty()) {
        server.cli(&["DEL", name]).expect("DEL");
    }
    assert_eq!(server.cli(&["DEL", "idemkv:scopes"]).as_deref().map(str::trim), Some("1"));
    assert!(earlier.scan(b"shop", None, 100).await.expect("scan").is_empty(), "nothing filed");

    let backend = Arc::new(RedisBackend::connect(&server.url(), Config::new()).await.expect("connect"));
    assert_eq!(backend.scan(b"shop", None, 100).await.expect("scan").len(), 21);
    assert_eq!(backend.scan(b"other", None, 100).await.expect("scan").len(), 20);
    let staged = backend.scan_staged(b"shop", None, 10).await.expect("scan_staged");
    assert_eq!(staged.iter().map(|record| record.key.as_slice()).collect::<Vec<_>>(), [&b"order-7"[..]]);
    assert_eq!(server.cli(&["GET", "idemkv:scopes"]).as_deref().map(str::trim), Some("1"));
}

/// The commands every node of `cluster` has run.
fn cluster_commands(cluster: &RedisCluster) -> u64 {
    cluster.nodes.iter().map(commands).sum()
}

async fn on_cluster(cluster: &RedisCluster) -> Arc<RedisBackend> {
    Arc::new(cluster.connect(Config::new()).await.expect("connect"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_on_a_cluster_reads_the_keys_with_staged_messages_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = RedisCluster::start_async(dir.path()).await;
    let backend = on_cluster(&cluster).await;
    fill(&backend, &[b"shop"], 300).await;
    let kept = Kept::default();
    let relay = Relay::new(Arc::clone(&backend), kept.clone(), RelayConfig::new([&b"shop"[..]]));
    let before = cluster_commands(&cluster);
    assert_eq!(relay.sweep().await.expect("sweep").keys, 0);
    // The staged keys of the scope's 16 buckets, none: a range of each
    // (the INFOs of three nodes apart).
    let ran = cluster_commands(&cluster) - before - 3;
    assert!(ran <= 16, "a sweep over 300 completions without messages ran {ran} commands");

    let outbox = Outbox::shared(Arc::clone(&backend));
    let claimed = backend.claim(b"shop", b"order-7", Fingerprint::of(b"order-7"), ClaimOptions::new()).await;
    let Ok(BackendClaim::Acquired { token, .. }) = claimed else { panic!("{claimed:?}") };
    // Held, not completed: a sweep leaves it be.
    let held = backend.claim(b"shop", b"order-8", Fingerprint::of(b"order-8"), ClaimOptions::new()).await;
    let Ok(BackendClaim::Acquired { token: held, .. }) = held else { panic!("{held:?}") };
    outbox.complete(&token, b"201", &[OutboxMessage::new("orders", b"placed".to_vec())]).await.expect("stage");
    let before = cluster_commands(&cluster);
    let sweep = relay.sweep().await.expect("sweep");
    assert_eq!((sweep.keys, sweep.delivered), (1, 1));
    assert_eq!(kept.0.lock().expect("lock").len(), 1);
    // Its delivery and two rounds of ranges, whatever the 300 others.
    let ran = cluster_commands(&cluster) - before - 3;
    assert!(ran <= 2 * 16 + 60, "a sweep delivering one key among 301 ran {ran} commands");
    let before = cluster_commands(&cluster);
    assert_eq!(relay.sweep().await.expect("sweep").keys, 0, "a delivered key leaves the staged keys");
    let ran = cluster_commands(&cluster) - before - 3;
    assert!(ran <= 16, "the entry was dropped, yet the next sweep ran {ran} commands");
    outbox.complete(&held, b"201", &[OutboxMessage::new("orders", b"second".to_vec())]).await.expect("stage");
    assert_eq!(relay.sweep().await.expect("sweep").delivered, 1);
    assert_eq!(kept.0.lock().expect("lock").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_on_a_cluster_runs_commands_for_its_own_records_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = RedisCluster::start_async(dir.path()).await;
    let backend = on_cluster(&cluster).await;
    fill(&backend, &[b"shop", b"big-1", b"big-2"], 300).await;
    fill(&backend, &[b"small"], 5).await;
    let before = cluster_commands(&cluster);
    let page = backend.scan(b"small", None, 10).await.expect("scan");
    let ran = cluster_commands(&cluster) - before - 3;
    assert_eq!(page.iter().map(|record| record.key.as_slice()).collect::<Vec<_>>(), keys(0..5));
    // A round of 16 ranges, a page script per bucket with keys (its TIME
    // and a GET a key), the round that finds nothing after them.
    assert!(ran <= 16 * 2 + 5 * 2 + 16, "a page of 5 among 905 records ran {ran} commands");

    let mut found = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    let before = cluster_commands(&cluster);
    for _ in 0..100 {
        let page = backend.scan(b"shop", after.as_deref(), 25).await.expect("scan");
        let Some(last) = page.last() else { break };
        after = Some(last.key.clone());
        found.extend(page.into_iter().map(|record| record.key));
    }
    let ran = cluster_commands(&cluster) - before - 3;
    assert_eq!(found, keys(0..300), "every key once, in order");
    // 13 pages: a few rounds each, every round a range a bucket that may
    // hold more and a script a bucket read, each key read once.
    assert!(ran <= 13 * 3 * 32 + 300 * 2, "a scan of 300 keys in pages of 25 ran {ran} commands");
    // A scan that starts again sees the keys written since.
    for n in 300..305 {
        put(&*backend, b"shop", format!("k-{n:04}").as_bytes(), Duration::from_secs(600)).await;
    }
    let page = backend.scan(b"shop", Some(b"k-0298"), 100).await.expect("scan");
    assert_eq!(page.iter().map(|record| record.key.clone()).collect::<Vec<_>>(), keys(299..305));
}

/// The keys `fill` writes, numbered `numbers`.
fn keys(numbers: std::ops::Range<usize>) -> Vec<Vec<u8>> {
    numbers.map(|n| format!("k-{n:04}").into_bytes()).collect()
}

/// The names on `cluster`'s nodes that match `pattern`.
fn names_on(cluster: &RedisCluster, pattern: &str) -> Vec<String> {
    let mut names = Vec::new();
    for node in &cluster.nodes {
        let found = node.cli(&["--scan", "--pattern", pattern]).expect("scan");
        names.extend(found.lines().map(str::trim).filter(|line| !line.is_empty()).map(str::to_owned));
    }
    names
}

/// Copies every name of `server` to `cluster` as it is (`DUMP`,
/// `RESTORE` with its time to live): a Cluster as an earlier build left
/// it, whose names were a standalone server's.
async fn copied(server: &RedisServer, cluster: &RedisCluster) -> usize {
    let client = ::redis::Client::open(server.url()).expect("client");
    let mut from = client.get_multiplexed_async_connection().await.expect("connection");
    let names: Vec<Vec<u8>> = ::redis::cmd("KEYS").arg("idemkv:*").query_async(&mut from).await.expect("KEYS");
    let to = ::redis::cluster::ClusterClient::new(cluster.urls()).expect("cluster client");
    let mut to = to.get_async_connection().await.expect("cluster connection");
    for name in &names {
        let dump: Vec<u8> = ::redis::cmd("DUMP").arg(name).query_async(&mut from).await.expect("DUMP");
        let ttl: i64 = ::redis::cmd("PTTL").arg(name).query_async(&mut from).await.expect("PTTL");
        let restore = ::redis::cmd("RESTORE").arg(name).arg(ttl.max(0)).arg(dump).clone();
        let () = restore.query_async(&mut to).await.expect("RESTORE");
    }
    names.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clusters_records_of_an_earlier_build_move_to_their_buckets_at_the_next_connect() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(&dir.path().join("single"));
    let cluster = RedisCluster::start_async(&dir.path().join("cluster")).await;
    // Records named as every earlier build named a Cluster's: a standalone
    // server's names (its indexes, in other slots, are not copied).
    let earlier = Arc::new(RedisBackend::connect(&server.url(), Config::new()).await.expect("connect"));
    fill(&earlier, &[b"shop"], 40).await;
    fill(&earlier, &[b"other"], 5).await;
    let claimed = earlier.claim(b"shop", b"order-7", Fingerprint::of(b"order-7"), ClaimOptions::new()).await;
    let Ok(BackendClaim::Acquired { token, .. }) = claimed else { panic!("{claimed:?}") };
    let outbox = Outbox::shared(Arc::clone(&earlier));
    outbox.complete(&token, b"201", &[OutboxMessage::new("orders", b"placed".to_vec())]).await.expect("stage");
    let held = earlier.claim(b"shop", b"order-8", Fingerprint::of(b"order-8"), ClaimOptions::new()).await;
    assert!(matches!(held, Ok(BackendClaim::Acquired { .. })), "{held:?}");
    for name in server.cli(&["KEYS", "idemkv:scope:*"]).expect("KEYS").lines().filter(|line| !line.trim().is_empty()) {
        server.cli(&["DEL", name.trim()]).expect("DEL");
    }
    server.cli(&["DEL", "idemkv:scopes"]).expect("DEL");
    assert_eq!(copied(&server, &cluster).await, 40 + 5 + 2 + 1, "the records and the keyspaces' mark");
    // The staged keys an earlier build kept apart on a Cluster.
    cluster.nodes[0].cli(&["-c", "ZADD", "idemkv:staged:{5a}:keys", "0", "order-7"]).expect("ZADD");
    cluster.nodes[0].cli(&["-c", "SET", "idemkv:staged", "1"]).expect("SET");

    let backend = on_cluster(&cluster).await;
    let page = backend.scan(b"shop", None, 100).await.expect("scan");
    let mut expected = keys(0..40);
    expected.extend([b"order-7".to_vec(), b"order-8".to_vec()]);
    assert_eq!(page.into_iter().map(|record| record.key).collect::<Vec<_>>(), expected);
    assert_eq!(backend.scan(b"other", None, 100).await.expect("scan").len(), 5);
    let staged = backend.scan_staged(b"shop", None, 10).await.expect("scan_staged");
    assert_eq!(staged.iter().map(|record| record.key.as_slice()).collect::<Vec<_>>(), [&b"order-7"[..]]);
    let replay = backend.claim(b"shop", b"k-0003", Fingerprint::of(b"k-0003"), ClaimOptions::new()).await;
    assert!(matches!(replay, Ok(BackendClaim::Replay(ref answer)) if answer == b"201"), "{replay:?}");
    let held = backend.claim(b"shop", b"order-8", Fingerprint::of(b"order-8"), ClaimOptions::new()).await;
    assert!(matches!(held, Ok(BackendClaim::InProgress { .. })), "the moved lease still holds: {held:?}");
    assert!(names_on(&cluster, "idemkv:{*}:r").is_empty(), "no record is left at its old name");
    assert!(names_on(&cluster, "idemkv:staged*").is_empty(), "the staged keys of before are gone");
    assert_eq!(cluster.nodes[0].cli(&["-c", "GET", "idemkv:buckets"]).as_deref().map(str::trim), Some("1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_prefix_that_would_split_a_record_from_its_indexes_is_refused_before_any_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = RedisCluster::start_async(dir.path()).await;
    for prefix in ["app{x", "a{}b"] {
        let backend = cluster.connect(Config::new()).await.expect("connect").prefix(prefix);
        let claimed = backend.claim(b"shop", b"k", Fingerprint::of(b"k"), ClaimOptions::new()).await;
        assert!(matches!(claimed, Err(idemkv::Error::InvalidConfig(_))), "{prefix}: {claimed:?}");
        assert!(matches!(backend.scan(b"shop", None, 10).await, Err(idemkv::Error::InvalidConfig(_))));
        assert!(names_on(&cluster, &format!("{prefix}*")).is_empty(), "{prefix}: nothing written");
    }
    // A closed tag puts every name in its one slot, and works.
    let backend = Arc::new(cluster.connect(Config::new()).await.expect("connect").prefix("app{t}"));
    fill(&backend, &[b"shop"], 20).await;
    let page = backend.scan(b"shop", None, 100).await.expect("scan");
    assert_eq!(page.into_iter().map(|record| record.key).collect::<Vec<_>>(), keys(0..20));
}
