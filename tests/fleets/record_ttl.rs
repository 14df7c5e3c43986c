//! A record read back names its TTL, on every backend: the one its claim
//! set, or the backend's default, while it is Processing (what its
//! answer will be kept for: what the HTTP layer states on a long
//! operation's 202s) and once it is Completed, through `get` and `scan`
//! alike — the embedded store, Redis and PostgreSQL (real servers).

#![cfg(feature = "tokio")]

use idemkv::backend::{BackendClaim, ClaimOptions, IdempotencyBackend};
use idemkv::{Config, Fingerprint, State};
use std::time::Duration;

/// The backends' default TTL here.
const DEFAULT_TTL: Duration = Duration::from_secs(600);

fn config() -> Config {
    Config::new().default_ttl(DEFAULT_TTL)
}

/// Claims `key` of scope `ttl-scope` (with `ttl`, else the default) and
/// checks the TTL its record names before and after its completion.
async fn claimed_and_completed<B: IdempotencyBackend>(backend: &B, key: &[u8], ttl: Option<Duration>) {
    let options = ClaimOptions::new().lease(Duration::from_secs(30));
    let options = match ttl {
        Some(ttl) => options.ttl(ttl),
        None => options,
    };
    let claimed = backend.claim(b"ttl-scope", key, Fingerprint::of(b"body"), options).await.expect("claim");
    let BackendClaim::Acquired { token, .. } = claimed else { panic!("a new key is acquired: {claimed:?}") };
    let expected = u64::try_from(ttl.unwrap_or(DEFAULT_TTL).as_millis()).expect("ms");
    let running = backend.get(b"ttl-scope", key).await.expect("get").expect("present");
    assert_eq!((running.state, running.ttl_ms), (State::Processing, expected), "{running:?}");
    backend.complete(&token, b"201 done").await.expect("complete");
    let done = backend.get(b"ttl-scope", key).await.expect("get").expect("present");
    assert_eq!((done.state, done.ttl_ms), (State::Completed, expected), "{done:?}");
}

/// Two keys, one with a TTL of its own and one with the default; a scan
/// of their scope names both TTLs.
async fn every_record_names_its_ttl<B: IdempotencyBackend>(backend: &B) {
    claimed_and_completed(backend, b"asked", Some(Duration::from_secs(7200))).await;
    claimed_and_completed(backend, b"default", None).await;
    let page = backend.scan(b"ttl-scope", None, 10).await.expect("scan");
    let named: Vec<(&[u8], u64)> = page.iter().map(|record| (record.key.as_slice(), record.ttl_ms)).collect();
    assert_eq!(named, [(&b"asked"[..], 7_200_000), (&b"default"[..], 600_000)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_names_a_records_ttl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = idemkv::Store::open(dir.path(), config()).expect("open");
    every_record_names_its_ttl(&store).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_names_a_records_ttl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = crate::common::redis::RedisServer::start(dir.path());
    let backend = idemkv::backend::redis::RedisBackend::connect(&server.url(), config()).await.expect("connect");
    every_record_names_its_ttl(&backend).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_names_a_records_ttl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = crate::common::postgres::PostgresServer::start(dir.path());
    let backend = idemkv::backend::postgres::PostgresBackend::connect(&server.url(), config()).await.expect("connect");
    every_record_names_its_ttl(&backend).await;
}
