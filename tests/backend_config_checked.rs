//! A networked backend checks the `Config` it is given when it connects,
//! as `Store::open` does, and refuses a setting of the embedded store alone
//! instead of ignoring it. Guards three regressions: a zero default lease
//! connected and gave one key two holders at once, a zero default TTL
//! connected and ran a completed request again, and `shards(3)` (like every
//! storage setting) was accepted silently — on Redis, standalone and
//! Cluster, and on PostgreSQL, real servers started here on loopback.

#![cfg(any(feature = "redis", feature = "postgres"))]

mod common;

use idemkv::io::StdStorage;
use idemkv::{BackendClaim, ClaimOptions, Config, Durability, Error, Fingerprint, IdempotencyBackend, ManualClock, Quota};
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
        (Config::new().default_lease(Duration::from_millis(1)).default_ttl(Duration::from_millis(1)), [255, 255, 1 << 20]),
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
    for (name, config) in invalid_values() {
        let described = format!("{config:?}");
        assert!(config.validate().is_err(), "Store::open accepts {described}");
        match connect(config).await {
            Err(Error::InvalidConfig(reason)) => assert!(reason.contains(name), "{name}: reason {reason}"),
            other => panic!("{name}: expected InvalidConfig, got {other:?} for {described}"),
        }
    }
}

/// Every setting of the embedded store alone is refused, naming its
/// setter and the backend.
async fn store_only_settings_refused<B, F, Fut>(connect: F, expected_backend: &str)
where
    B: Debug,
    F: Fn(Config) -> Fut,
    Fut: Future<Output = Result<B, Error>>,
{
    for (name, config) in store_only_settings() {
        config.validate().expect("a value the embedded store accepts");
        match connect(config).await {
            Err(Error::UnsupportedSetting { backend, setting }) => {
                assert_eq!((backend, setting), (expected_backend, name));
            }
            other => panic!("{name}: expected UnsupportedSetting, got {other:?}"),
        }
    }
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
    use common::redis::{RedisCluster, RedisServer};
    use idemkv::redis::RedisBackend;

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

    /// The Cluster's connect runs the same check: all of it on one Cluster.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_cluster_checks_its_config() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cluster = tokio::task::spawn_blocking({
            let dir = dir.path().to_path_buf();
            move || RedisCluster::start(&dir)
        })
        .await
        .expect("cluster");
        let urls = cluster.urls();
        let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
        let connect = |config| RedisBackend::connect_cluster(&nodes, config);
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
    use common::postgres::PostgresServer;
    use idemkv::postgres::PostgresBackend;

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
        let client: idemkv::postgres::tokio_postgres::Config = url.parse().expect("url");
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
}
