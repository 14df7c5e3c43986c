//! A networked backend checks the `Config` it is given when it connects,
//! as `Store::open` does, and refuses a setting of the embedded store alone
//! instead of ignoring it. Guards these regressions: a zero default lease
//! connected and gave one key two holders at once, a zero default TTL
//! connected and ran a completed request again, `shards(3)` (like every
//! storage setting) was accepted silently, and PostgreSQL connected with
//! key limits its primary key cannot hold, refusing the long keys at every
//! claim — on Redis, standalone and Cluster, and on PostgreSQL, real
//! servers started here on loopback.

#![cfg(any(feature = "redis", feature = "postgres"))]

use idemkv::io::StdStorage;
use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    store::Quota,
    Config, Durability, Error, Fingerprint, ManualClock,
};
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Values `Store::open` refuses as out of range, each with a word its
/// reason names.
fn invalid_values() -> Vec<(&'static str, Config)> {
    vec![
        ("default_lease", Config::new().default_lease(Duration::ZERO)),
        ("default_ttl", Config::new().default_ttl(Duration::ZERO)),
        ("default_ttl", Config::new().default_ttl(Duration::from_secs(400 * 24 * 3600))),
        ("duration_max", Config::new().duration_max(Duration::ZERO)),
        ("shards", Config::new().shards(3)),
        ("shards", Config::new().shards(0)),
        ("shards", Config::new().shards(2048)),
        ("key_bytes_max", Config::new().key_bytes_max(0)),
        ("key_bytes_max", Config::new().key_bytes_max(70_000)),
        ("scope_bytes_max", Config::new().scope_bytes_max(70_000)),
        ("segment_bytes", Config::new().segment_bytes(100)),
        ("Interval", Config::new().durability(Durability::Interval(Duration::ZERO))),
        ("compaction_live_fraction", Config::new().compaction_live_fraction(1.5)),
        ("compaction_interval", Config::new().compaction_interval(Some(Duration::ZERO))),
        ("quota", Config::new().quota(Quota::new().records(0))),
        ("scope_quota", Config::new().scope_quota(vec![b's'; 300], Quota::new().records(5))),
    ]
}

/// Each setting of the embedded store alone, set to a value it accepts
/// (the default's included), with the setter the refusal must name.
fn store_only_settings() -> Vec<(&'static str, Config)> {
    vec![
        ("shards", Config::new().shards(4)),
        ("durability", Config::new().durability(Durability::Sync)),
        ("durability", Config::new().durability(Durability::Buffered)),
        ("segment_bytes", Config::new().segment_bytes(1 << 30)),
        ("waiters_per_key_max", Config::new().waiters_per_key_max(8)),
        ("waiters_max", Config::new().waiters_max(64)),
        ("compaction_interval", Config::new().compaction_interval(None)),
        ("compaction_live_fraction", Config::new().compaction_live_fraction(0.25)),
        ("compaction_bytes_per_second", Config::new().compaction_bytes_per_second(0)),
        ("clock", Config::new().clock(Arc::new(ManualClock::new(1_767_225_600_000)))),
        ("storage", Config::new().storage(Arc::new(StdStorage))),
        ("quota", Config::new().quota(Quota::new().records(10))),
        ("scope_quota", Config::new().scope_quota(b"tenant", Quota::unlimited())),
    ]
}

/// Configurations the tests, examples, benches and the `idemkv` tool give
/// a backend, and the limits a backend honours at their edges, each with
/// the key, scope and response limits it sets: each must connect.
fn valid_configs() -> Vec<(Config, [usize; 3])> {
    vec![
        (Config::new(), [255, 255, 1 << 20]),
        (Config::new().response_bytes_max(4096), [255, 255, 4096]),
        (
            Config::new().response_bytes_max(16 << 20).default_ttl(Duration::from_secs(365 * 24 * 3600)),
            [255, 255, 16 << 20],
        ),
        (
            Config::new().default_lease(Duration::from_millis(1)).default_ttl(Duration::from_millis(1)),
            [255, 255, 1 << 20],
        ),
        (
            Config::new()
                .key_bytes_max(1)
                .scope_bytes_max(0)
                .duration_max(Duration::from_secs(10))
                .default_lease(Duration::from_secs(10))
                .default_ttl(Duration::from_secs(10)),
            [1, 0, 1 << 20],
        ),
        // Larger than a default segment holds: a backend has no segments.
        (Config::new().response_bytes_max(128 << 20), [255, 255, 128 << 20]),
    ]
}

fn fingerprint() -> Fingerprint {
    Fingerprint::of(b"POST /payments amount=10")
}

/// `len` bytes that no compression shortens (xorshift from `seed`).
fn incompressible(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_be_bytes()[3]
        })
        .collect()
}

/// A claim of the longest scope and key a configuration allows is
/// acquired, completed and replayed.
async fn longest_scope_and_key_held<B: IdempotencyBackend>(backend: &B, scope_bytes: usize, key_bytes: usize) {
    let (scope, key) = (incompressible(scope_bytes, 1), incompressible(key_bytes, 2));
    let claim = backend.claim(&scope, &key, fingerprint(), ClaimOptions::new()).await;
    let Ok(BackendClaim::Acquired { token, .. }) = claim else {
        panic!("scope of {scope_bytes} bytes, key of {key_bytes}: expected Acquired, got {claim:?}");
    };
    backend.complete(&token, b"201 charged").await.expect("complete");
    let again = backend.claim(&scope, &key, fingerprint(), ClaimOptions::new()).await.expect("claim again");
    assert!(matches!(&again, BackendClaim::Replay(response) if response == b"201 charged"), "{again:?}");
}

/// The zero default lease is refused; were it not, the same claim twice
/// would show two holders of one key.
async fn zero_lease_refused<B, F, Fut>(connect: F)
where
    B: IdempotencyBackend + Debug,
    F: Fn(Config) -> Fut,
    Fut: Future<Output = Result<B, Error>>,
{
    match connect(Config::new().default_lease(Duration::ZERO)).await {
        Err(Error::InvalidConfig(reason)) => assert!(reason.contains("default_lease"), "reason: {reason}"),
        Err(other) => panic!("a zero default lease: expected InvalidConfig, got {other:?}"),
        Ok(backend) => {
            let first = backend.claim(b"zero-lease", b"order-1", fingerprint(), ClaimOptions::new()).await;
            let second = backend.claim(b"zero-lease", b"order-1", fingerprint(), ClaimOptions::new()).await;
            panic!("a zero default lease connected; the same claim twice answered {first:?}, then {second:?}");
        }
    }
}

/// The zero default TTL is refused; were it not, a completed request would
/// be claimed again instead of replayed.
async fn zero_ttl_refused<B, F, Fut>(connect: F)
where
    B: IdempotencyBackend + Debug,
    F: Fn(Config) -> Fut,
    Fut: Future<Output = Result<B, Error>>,
{
    match connect(Config::new().default_ttl(Duration::ZERO)).await {
        Err(Error::InvalidConfig(reason)) => assert!(reason.contains("default_ttl"), "reason: {reason}"),
        Err(other) => panic!("a zero default TTL: expected InvalidConfig, got {other:?}"),
        Ok(backend) => {
            let claim = backend.claim(b"zero-ttl", b"order-1", fingerprint(), ClaimOptions::new()).await;
            if let Ok(BackendClaim::Acquired { token, .. }) = &claim {
                let _ = backend.complete(token, b"201 charged").await;
            }
            let again = backend.claim(b"zero-ttl", b"order-1", fingerprint(), ClaimOptions::new()).await;
            panic!("a zero default TTL connected; claim, complete, claim answered {claim:?}, then {again:?}");
        }
    }
}

/// Every value `Store::open` refuses is refused, with its reason.
async fn invalid_values_refused<B, F, Fut>(connect: F)
where
    B: Debug,
    F: Fn(Config) -> Fut,
    Fut: Future<Output = Result<B, Error>>,
{
    let mut wrong = Vec::new();
    for (name, config) in invalid_values() {
        let described = format!("{config:?}");
        assert!(config.validate().is_err(), "Store::open accepts {described}");
        match connect(config).await {
            Err(Error::InvalidConfig(reason)) if reason.contains(name) => {}
            other => wrong.push(format!("{name}: expected InvalidConfig, got {other:?} for {described}")),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} invalid values not refused:\n{}",
        wrong.len(),
        invalid_values().len(),
        wrong.join("\n")
    );
}

/// Every setting of the embedded store alone is refused, naming its
/// setter and the backend.
async fn store_only_settings_refused<B, F, Fut>(connect: F, expected_backend: &str)
where
    B: Debug,
    F: Fn(Config) -> Fut,
    Fut: Future<Output = Result<B, Error>>,
{
    let mut wrong = Vec::new();
    for (name, config) in store_only_settings() {
        config.validate().expect("a value the embedded store accepts");
        match connect(config).await {
            Err(Error::UnsupportedSetting { backend, setting }) if (backend, setting) == (expected_backend, name) => {}
            other => wrong.push(format!("{name}: expected UnsupportedSetting, got {other:?}")),
        }
    }
    let count = store_only_settings().len();
    assert!(wrong.is_empty(), "{} of {count} settings not refused:\n{}", wrong.len(), wrong.join("\n"));
}

/// Every valid configuration a backend is given connects, with the limits
/// it was given.
async fn valid_configs_connect<B, F, Fut>(connect: F)
where
    B: IdempotencyBackend + Debug,
    F: Fn(Config) -> Fut,
    Fut: Future<Output = Result<B, Error>>,
{
    for (config, [key, scope, response]) in valid_configs() {
        let described = format!("{config:?}");
        let backend = connect(config).await.unwrap_or_else(|error| panic!("{described}: {error}"));
        let limits = backend.limits();
        assert_eq!(
            [limits.key_bytes_max, limits.scope_bytes_max, limits.response_bytes_max],
            [key, scope, response],
            "{described}"
        );
    }
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use crate::common::redis::{RedisCluster, RedisServer};
    use idemkv::backend::redis::RedisBackend;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_refuses_zero_lease() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = RedisServer::start(dir.path());
        let url = server.url();
        zero_lease_refused(|config| RedisBackend::connect(&url, config)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_refuses_zero_ttl() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = RedisServer::start(dir.path());
        let url = server.url();
        zero_ttl_refused(|config| RedisBackend::connect(&url, config)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_refuses_invalid_values() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = RedisServer::start(dir.path());
        let url = server.url();
        invalid_values_refused(|config| RedisBackend::connect(&url, config)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_refuses_store_only_settings() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = RedisServer::start(dir.path());
        let url = server.url();
        store_only_settings_refused(|config| RedisBackend::connect(&url, config), "redis").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_accepts_valid_configs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = RedisServer::start(dir.path());
        let url = server.url();
        valid_configs_connect(|config| RedisBackend::connect(&url, config)).await;
    }

    /// Redis holds scope and key in the record's value: the `Config`'s own
    /// limits, at their largest, are all there is.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_holds_its_longest_scope_and_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = RedisServer::start(dir.path());
        let config = Config::new().scope_bytes_max(65_535).key_bytes_max(65_535);
        let backend = RedisBackend::connect(&server.url(), config).await.expect("connect");
        longest_scope_and_key_held(&backend, 65_535, 65_535).await;
    }

    /// The Cluster's connect runs the same check: all of it on one Cluster.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_cluster_checks_its_config() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cluster = RedisCluster::start_async(dir.path()).await;
        let connect = |config| cluster.connect(config);
        zero_lease_refused(connect).await;
        zero_ttl_refused(connect).await;
        invalid_values_refused(connect).await;
        store_only_settings_refused(connect, "redis").await;
        valid_configs_connect(connect).await;
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use crate::common::postgres::PostgresServer;
    use idemkv::backend::postgres::PostgresBackend;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_refuses_zero_lease() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = PostgresServer::start(dir.path());
        let url = server.url();
        zero_lease_refused(|config| PostgresBackend::connect(&url, config)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_refuses_zero_ttl() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = PostgresServer::start(dir.path());
        let url = server.url();
        zero_ttl_refused(|config| PostgresBackend::connect(&url, config)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_refuses_invalid_values() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = PostgresServer::start(dir.path());
        let url = server.url();
        invalid_values_refused(|config| PostgresBackend::connect(&url, config)).await;
    }

    /// `connect_with` (the client's own configuration and pool size) runs
    /// the same check as `connect`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_refuses_store_only_settings() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = PostgresServer::start(dir.path());
        let url = server.url();
        store_only_settings_refused(|config| PostgresBackend::connect(&url, config), "postgres").await;
        let client: idemkv::backend::postgres::tokio_postgres::Config = url.parse().expect("url");
        store_only_settings_refused(|config| PostgresBackend::connect_with(client.clone(), 2, config), "postgres")
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_accepts_valid_configs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = PostgresServer::start(dir.path());
        let url = server.url();
        valid_configs_connect(|config| PostgresBackend::connect(&url, config)).await;
    }

    /// PostgreSQL's primary key holds a scope and key of 2,685 bytes
    /// together, however incompressible: a configuration that allows more
    /// is refused at connect, instead of a long key refused by the server
    /// at every claim; one at the limit holds its longest scope and key,
    /// whatever the padding between them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_refuses_keys_its_primary_key_cannot_hold() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = PostgresServer::start(dir.path());
        let url = server.url();
        for (scope_bytes, key_bytes) in [(1341, 1343), (0, 4096), (65_535, 65_535)] {
            let config = Config::new().scope_bytes_max(scope_bytes).key_bytes_max(key_bytes);
            match PostgresBackend::connect(&url, config).await {
                Err(Error::InvalidConfig(reason)) => assert!(reason.contains("2683"), "reason: {reason}"),
                Err(other) => panic!("{scope_bytes} + {key_bytes}: expected InvalidConfig, got {other:?}"),
                Ok(backend) => {
                    let (scope, key) = (incompressible(scope_bytes, 1), incompressible(key_bytes, 2));
                    let claim = backend.claim(&scope, &key, fingerprint(), ClaimOptions::new()).await;
                    panic!("{scope_bytes} + {key_bytes} bytes connected; the longest claim answered {claim:?}");
                }
            }
        }
        for (scope_bytes, key_bytes) in [(255, 2428), (1341, 1342), (0, 2683)] {
            let config = Config::new().scope_bytes_max(scope_bytes).key_bytes_max(key_bytes);
            let backend = PostgresBackend::connect(&url, config).await.expect("connect");
            longest_scope_and_key_held(&backend, scope_bytes, key_bytes).await;
        }
    }
}
