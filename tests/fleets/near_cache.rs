//! The near cache (`idemkv::backend::near::NearCache`) on real Redis and
//! PostgreSQL servers, its calls counted where they land: what the server
//! ran (Redis `INFO commandstats`; PostgreSQL's log of every statement,
//! `log_statement = all` on the backend's sessions). A replay it answers
//! sends nothing; a backend without it (the default) sends a claim a
//! replay; a fingerprint that is not the entry's goes to the server and is
//! its `Mismatch`; `replace`, `remove` and expiry drop the entry (the
//! server answers the next claim); the bound evicts. On the embedded store
//! with clocks of its own: an entry never outlives its record, whether the
//! server's clock is a day ahead of the process's or a day behind.

#![cfg(feature = "near-cache")]

use idemkv::backend::near::{NearCache, NearCacheConfig};
use idemkv::backend::{BackendClaim, ClaimOptions, IdempotencyBackend};
use idemkv::{Config, Durability, Fingerprint, ManualClock, Store};
use std::sync::Arc;
use std::time::Duration;

const TTL: Duration = Duration::from_secs(60);

/// A second before [`TTL`] ends.
const JUST_BEFORE_TTL: Duration = Duration::from_secs(59);

fn options() -> ClaimOptions {
    ClaimOptions::new().lease(Duration::from_secs(10)).ttl(TTL)
}

fn fp(text: &str) -> Fingerprint {
    Fingerprint::of(text.as_bytes())
}

/// Claims `key` with `fingerprint` and completes it with `answer` through
/// `backend`.
async fn complete<B: IdempotencyBackend>(backend: &B, key: &[u8], fingerprint: Fingerprint, answer: &[u8]) {
    match backend.claim(b"shop", key, fingerprint, options()).await.expect("claim") {
        BackendClaim::Acquired { token, .. } => backend.complete(&token, answer).await.expect("complete"),
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// A claim of `key` with `fingerprint`, expected to replay `answer`.
async fn replays<B: IdempotencyBackend>(backend: &B, key: &[u8], fingerprint: Fingerprint, answer: &[u8]) {
    let claimed = backend.claim(b"shop", key, fingerprint, options()).await.expect("claim");
    assert!(matches!(&claimed, BackendClaim::Replay(stored) if stored == answer), "{claimed:?}");
}

/// What every scenario checks on a server, `sent` counting what reached
/// it since the last call.
async fn replays_cost_nothing_but_the_contract_holds<B, F>(backend: B, mut sent: F)
where
    B: IdempotencyBackend + Clone,
    F: FnMut() -> u64,
{
    // Off by default: the bare backend asks the server at every replay.
    complete(&backend, b"plain", fp("a"), b"201 a").await;
    sent();
    for _ in 0..5 {
        replays(&backend, b"plain", fp("a"), b"201 a").await;
    }
    assert!(sent() >= 5, "every replay of the bare backend is a call");

    // On: a completion through the cache fills it; its replays send nothing.
    let near = NearCache::new(backend.clone(), NearCacheConfig::new());
    complete(&near, b"k1", fp("a"), b"201 a").await;
    sent();
    for _ in 0..20 {
        replays(&near, b"k1", fp("a"), b"201 a").await;
    }
    assert_eq!(sent(), 0, "replays answered from memory");
    assert_eq!(near.stats().hits, 20);

    // Another request under the key: the server's mismatch, never the cache's.
    let other = near.claim(b"shop", b"k1", fp("b"), options()).await.expect("claim");
    assert!(matches!(other, BackendClaim::Mismatch), "{other:?}");
    assert!(sent() >= 1, "a mismatch is the server's answer");
    replays(&near, b"k1", fp("a"), b"201 a").await;
    assert_eq!(sent(), 0, "the entry outlives a mismatch");

    // A key completed elsewhere: the first replay reads it, the next is free.
    complete(&backend, b"k2", fp("a"), b"201 elsewhere").await;
    replays(&near, b"k2", fp("a"), b"201 elsewhere").await;
    assert!(sent() >= 2, "the claim and the read that filled the entry");
    replays(&near, b"k2", fp("a"), b"201 elsewhere").await;
    assert_eq!(sent(), 0);

    // `replace` drops the entry: the server answers the next claim.
    assert!(near.replace(b"shop", b"k1", b"201 a", b"201 a, amended").await.expect("replace"));
    sent();
    replays(&near, b"k1", fp("a"), b"201 a, amended").await;
    assert!(sent() >= 1, "after a replace the server answers");
    replays(&near, b"k1", fp("a"), b"201 a, amended").await;
    assert_eq!(sent(), 0, "and the new answer is kept");

    // `remove` drops it: the key runs again.
    assert!(near.remove(b"shop", b"k2").await.expect("remove"));
    let again = near.claim(b"shop", b"k2", fp("a"), options()).await.expect("claim");
    assert!(matches!(again, BackendClaim::Acquired { .. }), "a removed key runs again: {again:?}");
}

/// An entry ends when its record does: with a TTL of 1 s, a claim after it
/// is the server's (`Acquired`), not a replay from memory; with a manual
/// clock moved past a TTL of a minute, the claim goes to the server.
async fn expiry_drops_the_entry<B, F>(backend: B, mut sent: F)
where
    B: IdempotencyBackend + Clone,
    F: FnMut() -> u64,
{
    let near = NearCache::new(backend.clone(), NearCacheConfig::new());
    let short = ClaimOptions::new().lease(Duration::from_secs(10)).ttl(Duration::from_secs(1));
    let BackendClaim::Acquired { token, .. } = near.claim(b"shop", b"short", fp("a"), short).await.expect("claim")
    else {
        panic!("expected Acquired");
    };
    near.complete(&token, b"201").await.expect("complete");
    sent();
    let kept = near.claim(b"shop", b"short", fp("a"), short).await.expect("claim");
    assert!(matches!(kept, BackendClaim::Replay(_)), "{kept:?}");
    assert_eq!(sent(), 0, "replayed from memory within its TTL");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let after = near.claim(b"shop", b"short", fp("a"), short).await.expect("claim");
    assert!(matches!(after, BackendClaim::Acquired { .. }), "expired: the server's answer, {after:?}");

    let clock = ManualClock::new(crate::common::START_MS);
    let near = NearCache::new(backend, NearCacheConfig::new().clock(Arc::new(clock.clone())));
    complete(&near, b"long", fp("a"), b"201").await;
    sent();
    clock.advance(JUST_BEFORE_TTL);
    replays(&near, b"long", fp("a"), b"201").await;
    assert_eq!(sent(), 0, "a second before its TTL ends: from memory");
    clock.advance(Duration::from_secs(2));
    replays(&near, b"long", fp("a"), b"201").await;
    assert!(sent() >= 1, "past its TTL on the cache's clock: the server answers");
}

/// A bound of 4 entries keeps 4 of 16 completions at most: the others'
/// replays go to the server.
async fn the_bound_evicts<B, F>(backend: B, mut sent: F)
where
    B: IdempotencyBackend + Clone,
    F: FnMut() -> u64,
{
    let near = NearCache::new(backend, NearCacheConfig::new().entries_max(4));
    for n in 0..16 {
        complete(&near, format!("bound-{n}").as_bytes(), fp("a"), b"201").await;
    }
    assert!(near.stats().entries <= 4, "{:?}", near.stats());
    sent();
    for n in 0..16 {
        replays(&near, format!("bound-{n}").as_bytes(), fp("a"), b"201").await;
    }
    assert!(near.stats().hits <= 4, "{:?}", near.stats());
    assert!(sent() >= 12, "at least 12 of 16 replays reached the server");
}

/// An entry never outlives its record, whatever the offset between the
/// server's clock and the process's: the store (the server) on a clock a
/// day ahead of the cache's, then a day behind; both move together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_ends_with_its_record_whatever_the_clocks_offset() {
    const DAY: u64 = 24 * 3600 * 1000;
    let start = crate::common::START_MS;
    for server_ms in [start + DAY, start - DAY] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (server, process) = (ManualClock::new(server_ms), ManualClock::new(start));
        let config = Config::new().durability(Durability::Buffered).clock(Arc::new(server.clone()));
        let store = Store::open(dir.path(), config).expect("open");
        let near = NearCache::new(store.clone(), NearCacheConfig::new().clock(Arc::new(process.clone())));
        // One entry made by a completion here, one from a replay of a key
        // completed elsewhere.
        complete(&near, b"here", fp("a"), b"201").await;
        complete(&store, b"elsewhere", fp("a"), b"201").await;
        replays(&near, b"elsewhere", fp("a"), b"201").await;
        assert_eq!(near.stats().fills, 2, "{:?}", near.stats());

        let claims = store.stats().claims;
        for clock in [&server, &process] {
            clock.advance(JUST_BEFORE_TTL);
        }
        replays(&near, b"here", fp("a"), b"201").await;
        replays(&near, b"elsewhere", fp("a"), b"201").await;
        assert_eq!(store.stats().claims, claims, "within the TTL, from memory (server at {server_ms})");
        for clock in [&server, &process] {
            clock.advance(Duration::from_secs(2));
        }
        for key in [&b"here"[..], b"elsewhere"] {
            let after = near.claim(b"shop", key, fp("a"), options()).await.expect("claim");
            assert!(matches!(after, BackendClaim::Acquired { .. }), "expired on the server: {after:?}");
        }
    }
}

/// Regression: a replay from memory is ready at once, and a task that
/// looped over them never gave its thread back (the bench's replay row
/// starved the backend's connection until its calls timed out). On one
/// thread, another task runs while a loop of replays goes on.
#[tokio::test(flavor = "current_thread")]
async fn a_loop_of_replays_from_memory_lets_other_tasks_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), Config::new().durability(Durability::Buffered)).expect("open");
    let near = NearCache::new(store, NearCacheConfig::new());
    complete(&near, b"k", fp("a"), b"201").await;
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = Arc::clone(&ran);
    tokio::spawn(async move { other.store(true, std::sync::atomic::Ordering::SeqCst) });
    for _ in 0..10_000 {
        replays(&near, b"k", fp("a"), b"201").await;
        if ran.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
    }
    assert!(ran.load(std::sync::atomic::Ordering::SeqCst), "the other task never ran");
    assert!(near.stats().hits < 10_000, "{:?}", near.stats());
}

/// A claim answered from memory refuses the durations the backend would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hit_refuses_the_durations_the_backend_refuses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hour = Duration::from_secs(3600);
    let config = Config::new().durability(Durability::Buffered).default_ttl(hour).duration_max(2 * hour);
    let near = NearCache::new(Store::open(dir.path(), config).expect("open"), NearCacheConfig::new());
    complete(&near, b"k", fp("a"), b"201").await;
    for options in [options().lease(Duration::ZERO), options().ttl(3 * hour)] {
        let refused = near.claim(b"shop", b"k", fp("a"), options).await;
        assert!(matches!(refused, Err(idemkv::Error::InvalidDuration { .. })), "{refused:?}");
    }
    assert_eq!(near.stats().hits, 0);
}

#[cfg(feature = "redis")]
mod redis {
    use super::{expiry_drops_the_entry, replays_cost_nothing_but_the_contract_holds, the_bound_evicts};
    use crate::common::redis::RedisServer;
    use idemkv::backend::redis::RedisBackend;
    use idemkv::Config;

    /// The commands the server ran since the last call, the test's own
    /// `INFO` and `CONFIG RESETSTAT` apart.
    fn sent(server: &RedisServer) -> u64 {
        let stats = server.cli(&["INFO", "commandstats"]).expect("INFO");
        server.cli(&["CONFIG", "RESETSTAT"]).expect("RESETSTAT");
        stats
            .lines()
            .filter_map(|line| line.trim().strip_prefix("cmdstat_")?.split_once(':'))
            .filter(|(name, _)| !["info", "config|resetstat", "config"].contains(name))
            .map(|(_, fields)| {
                let calls = fields.split(',').find_map(|pair| pair.strip_prefix("calls=")).expect("calls");
                calls.parse::<u64>().expect("a number")
            })
            .sum()
    }

    async fn server() -> (tempfile::TempDir, RedisServer, RedisBackend) {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = RedisServer::start(dir.path());
        let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
        (dir, server, backend)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_replays_from_memory_and_the_contract_holds() {
        let (_dir, server, backend) = server().await;
        replays_cost_nothing_but_the_contract_holds(backend, || sent(&server)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_expiry_drops_the_entry() {
        let (_dir, server, backend) = server().await;
        expiry_drops_the_entry(backend, || sent(&server)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_the_bound_evicts() {
        let (_dir, server, backend) = server().await;
        the_bound_evicts(backend, || sent(&server)).await;
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::{expiry_drops_the_entry, replays_cost_nothing_but_the_contract_holds, the_bound_evicts};
    use crate::common::postgres::PostgresServer;
    use idemkv::backend::postgres::{PostgresBackend, PostgresOptions, Reaping};
    use idemkv::Config;

    /// The statements the server logged since the last call (every
    /// statement of the backend's sessions: `log_statement = all`).
    fn sent(server: &PostgresServer, seen: &mut u64) -> u64 {
        let log = std::fs::read_to_string(server.dir.join("server.log")).expect("server.log");
        let logged = log.lines().filter(|line| line.contains("LOG:  execute") || line.contains("LOG:  statement:"));
        let total = u64::try_from(logged.count()).expect("a count");
        total - std::mem::replace(seen, total)
    }

    /// A server, and a backend whose sessions log every statement (no
    /// reaper: its statements would count).
    async fn server() -> (tempfile::TempDir, PostgresServer, PostgresBackend) {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = PostgresServer::start(dir.path());
        let url = format!("{}?options=-c%20log_statement%3Dall", server.url());
        let options = PostgresOptions::new().reaping(Reaping::Off);
        let connect = url.parse().expect("url");
        let backend = PostgresBackend::connect_with_options(connect, Config::new(), options).await.expect("connect");
        (dir, server, backend)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_replays_from_memory_and_the_contract_holds() {
        let (_dir, server, backend) = server().await;
        let mut seen = 0;
        replays_cost_nothing_but_the_contract_holds(backend, || sent(&server, &mut seen)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_expiry_drops_the_entry() {
        let (_dir, server, backend) = server().await;
        let mut seen = 0;
        expiry_drops_the_entry(backend, || sent(&server, &mut seen)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_the_bound_evicts() {
        let (_dir, server, backend) = server().await;
        let mut seen = 0;
        the_bound_evicts(backend, || sent(&server, &mut seen)).await;
    }
}
