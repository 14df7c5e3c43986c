//! One contract, every backend: the public suite
//! (`idemkv::conformance::run_all`) — the state table, fencing, TTL,
//! scopes, `claim_wait`, concurrent duplicates, limits, renew, get and
//! remove, late finishes, checkpoints and reuse policies, and where
//! the backend offers them exact lease ends on a movable clock, quotas and
//! a restart — run against the embedded store (on real time and on a
//! manual clock), a standalone Redis server, a three-master Redis Cluster
//! and PostgreSQL (real servers, started here). With `conformance-http`,
//! the HTTP layer's public suite (`idemkv::conformance::http::run_all`)
//! runs over each of them too, as a backend's own test runs it. Each
//! target runs only with its own feature, and checks which scenarios its
//! backend skipped. Every backend runs behind [`AnyBackend`], as a
//! service that picks its backend at run time has it: each call goes to
//! the backend unchanged, and the suites are compiled once rather than once
//! a backend. With `near-cache`, the suite runs once more through a near
//! cache in front of the embedded store (on its movable clock), Redis and
//! PostgreSQL: a replay from memory must answer as the backend would.

#![cfg(feature = "conformance")]

use idemkv::conformance::{self, Capabilities, Capability, Report};
use idemkv::{backend::ClaimOptions, store::Quota, ManualClock, Record, Store};
use idemkv::{
    backend::{AnyBackend, BackendClaim, BackendLimits, IdempotencyBackend},
    Config, Durability, Error, Fingerprint,
};
use idemkv::{Keyspace, LeaseToken};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The scope the embedded targets limit, for the quota scenario.
const QUOTA_SCOPE: &str = "quota-scope";

/// What every backend is given: the limits the scenarios check, and a
/// TTL of a minute for what they leave behind.
fn config() -> Config {
    Config::new().response_bytes_max(4096).default_ttl(Duration::from_secs(60))
}

/// The quota of [`QUOTA_SCOPE`].
fn quota() -> Quota {
    Quota::new().records(2).retry_after(Duration::from_millis(2500))
}

/// The embedded store's, with its own settings on top (Buffered writes,
/// for speed; a quota), which a networked backend would refuse.
fn store_config(clock: Option<&ManualClock>) -> Config {
    let config = config().durability(Durability::Buffered).scope_quota(QUOTA_SCOPE, quota());
    match clock {
        Some(clock) => config.clock(Arc::new(clock.clone())),
        None => config,
    }
}

/// The capabilities of an embedded store in `dir`: quotas, and a restart
/// that closes it and opens it again on the same directory.
fn store_capabilities(dir: &Path, clock: Option<&ManualClock>) -> Capabilities<AnyBackend> {
    let (dir, clock) = (dir.to_path_buf(), clock.cloned());
    Capabilities::new().quota(QUOTA_SCOPE, quota()).persistence(move |backend: AnyBackend| {
        let store: Store = backend.downcast_ref::<Store>().expect("the embedded store").clone();
        drop(backend);
        let (dir, config) = (dir.clone(), store_config(clock.as_ref()));
        async move {
            store.close().expect("close");
            AnyBackend::new(Store::open(&dir, config).expect("reopen"))
        }
    })
}

/// The scenarios a target's report says were skipped, by name.
fn skipped(report: &Report) -> Vec<(&'static str, Capability)> {
    report.skipped.clone()
}

/// A store on real time or on `clock` in a fresh directory, and its
/// capabilities (the directory lives as long as the first).
fn embedded(clock: Option<&ManualClock>) -> (tempfile::TempDir, Store, Capabilities<AnyBackend>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), store_config(clock)).expect("open");
    let capabilities = store_capabilities(dir.path(), clock);
    let capabilities = match clock {
        Some(clock) => capabilities.movable_clock(clock.clone()),
        None => capabilities,
    };
    (dir, store, capabilities)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_store() {
    let (_dir, store, capabilities) = embedded(None);
    let report = conformance::run_all(AnyBackend::new(store), capabilities).await;
    assert_eq!(skipped(&report), []);
    assert!(report.passed.contains(&"lease_ends"), "real time: the boundaries with a margin: {report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_store_on_a_movable_clock() {
    let clock = ManualClock::new(crate::common::START_MS);
    let (_dir, store, capabilities) = embedded(Some(&clock));
    let report = conformance::run_all(AnyBackend::new(store), capabilities).await;
    assert_eq!(skipped(&report), []);
    assert!(report.passed.contains(&"lease_boundaries"), "{report:?}");
    assert!(!report.passed.contains(&"lease_ends"), "to the millisecond instead: {report:?}");
}

#[cfg(feature = "conformance-http")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_store_http() {
    let (_dir, store, capabilities) = embedded(None);
    let probe = store.clone();
    let report = conformance::http::run_all(AnyBackend::new(store), capabilities).await;
    assert_eq!(skipped(&report), [("restart_ttl", Capability::MovableClock)]);
    assert_eq!(probe.stats().quota_refusals, 1, "the quota scenario's one refusal");
}

#[cfg(feature = "conformance-http")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_store_http_on_a_movable_clock() {
    let clock = ManualClock::new(crate::common::START_MS);
    let (_dir, store, capabilities) = embedded(Some(&clock));
    let report = conformance::http::run_all(AnyBackend::new(store), capabilities).await;
    let real_time = Capability::RealTime;
    assert_eq!(
        skipped(&report),
        [
            ("keepalive", real_time),
            ("keepalive_streaming", real_time),
            ("hold_takeover", real_time),
            ("keepalive_blocking", real_time)
        ]
    );
}

/// The near cache in front of the embedded store, on the store's movable
/// clock: every entry ends when the suite moves the clock past its TTL.
#[cfg(feature = "near-cache")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_store_behind_a_near_cache_on_a_movable_clock() {
    use idemkv::backend::near::{NearCache, NearCacheConfig};
    let clock = ManualClock::new(crate::common::START_MS);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), store_config(Some(&clock))).expect("open");
    let near = NearCache::new(store, NearCacheConfig::new().clock(Arc::new(clock.clone())));
    let capabilities = Capabilities::new().quota(QUOTA_SCOPE, quota()).movable_clock(clock);
    let report = conformance::run_all(AnyBackend::new(near.clone()), capabilities).await;
    assert_eq!(skipped(&report), [("survives_restart", Capability::Persistence)]);
    assert!(near.stats().hits > 0, "the suite's replays were answered from memory: {:?}", near.stats());
}

/// The embedded store with one flaw: `release` answers `Ok` and frees
/// nothing.
#[derive(Clone)]
struct ReleaseForgotten(Store);

impl IdempotencyBackend for ReleaseForgotten {
    async fn claim_in(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        key: &[u8],
        fingerprint: Fingerprint,
        options: ClaimOptions,
    ) -> Result<BackendClaim, Error> {
        IdempotencyBackend::claim_in(&self.0, keyspace, scope, key, fingerprint, options).await
    }

    async fn complete(&self, token: &LeaseToken, response: &[u8]) -> Result<(), Error> {
        IdempotencyBackend::complete(&self.0, token, response).await
    }

    async fn fail(&self, token: &LeaseToken, response: &[u8]) -> Result<(), Error> {
        IdempotencyBackend::fail(&self.0, token, response).await
    }

    async fn release(&self, _token: &LeaseToken) -> Result<(), Error> {
        Ok(())
    }

    async fn checkpoint(&self, token: &LeaseToken, step: &str, payload: &[u8]) -> Result<(), Error> {
        IdempotencyBackend::checkpoint(&self.0, token, step, payload).await
    }

    async fn renew(&self, token: &LeaseToken, extend: Duration) -> Result<(), Error> {
        IdempotencyBackend::renew(&self.0, token, extend).await
    }

    async fn get_in(&self, keyspace: Keyspace, scope: &[u8], key: &[u8]) -> Result<Option<Record>, Error> {
        IdempotencyBackend::get_in(&self.0, keyspace, scope, key).await
    }

    async fn remove_in(&self, keyspace: Keyspace, scope: &[u8], key: &[u8]) -> Result<bool, Error> {
        IdempotencyBackend::remove_in(&self.0, keyspace, scope, key).await
    }

    async fn replace_in(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        key: &[u8],
        expected: &[u8],
        answer: &[u8],
    ) -> Result<bool, Error> {
        IdempotencyBackend::replace_in(&self.0, keyspace, scope, key, expected, answer).await
    }

    async fn scan_in(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Record>, Error> {
        IdempotencyBackend::scan_in(&self.0, keyspace, scope, after, limit).await
    }

    fn limits(&self) -> BackendLimits {
        self.0.limits()
    }
}

/// The suite is no rubber stamp: a backend that breaks one row of the
/// contract fails it, and the panic names the scenario.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_breaks_the_contract_fails_the_suite_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), store_config(None)).expect("open");
    let run = tokio::spawn(conformance::run_all(AnyBackend::new(ReleaseForgotten(store)), Capabilities::new()));
    let panic = run.await.expect_err("the suite passed a backend whose release frees nothing").into_panic();
    let message = panic.downcast_ref::<String>().expect("a formatted message");
    assert!(message.starts_with("conformance scenario `state_table` failed: "), "{message}");
    assert!(message.contains("expected Acquired"), "{message}");
}

#[cfg(feature = "redis")]
mod redis {
    use super::{config, conformance, skipped, AnyBackend, Capabilities, Capability};
    use crate::common::redis::{RedisCluster, RedisServer};
    use idemkv::backend::redis::RedisBackend;
    use std::path::Path;

    /// A standalone server in `dir`, a backend on it, and its capabilities:
    /// a restart is a SIGKILL and a start on the same AOF.
    async fn standalone(dir: &Path) -> (AnyBackend, Capabilities<AnyBackend>) {
        standalone_as(dir, AnyBackend::new).await
    }

    /// [`standalone`], the backend put behind `wrap` (and so again at the
    /// restart).
    async fn standalone_as(dir: &Path, wrap: fn(RedisBackend) -> AnyBackend) -> (AnyBackend, Capabilities<AnyBackend>) {
        let mut server = RedisServer::start(dir);
        let backend = RedisBackend::connect(&server.url(), config()).await.expect("connect");
        let capabilities = Capabilities::new().persistence(move |backend: AnyBackend| {
            drop(backend);
            server.kill();
            server.restart();
            let url = server.url();
            async move { wrap(RedisBackend::connect(&url, config()).await.expect("reconnect")) }
        });
        (wrap(backend), capabilities)
    }

    /// A three-master cluster in `dir` and a backend on it.
    async fn cluster(dir: &Path) -> (RedisCluster, AnyBackend) {
        let cluster = RedisCluster::start_async(dir).await;
        let backend = cluster.connect(config()).await.expect("connect");
        (cluster, AnyBackend::new(backend))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_standalone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (backend, capabilities) = standalone(dir.path()).await;
        let report = conformance::run_all(backend, capabilities).await;
        assert_eq!(skipped(&report), [("quota_refusals", Capability::Quotas)]);
        assert!(report.passed.contains(&"lease_ends"), "{report:?}");
    }

    /// The suite through a near cache in front of the server.
    #[cfg(feature = "near-cache")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_standalone_behind_a_near_cache() {
        use idemkv::backend::near::{NearCache, NearCacheConfig};
        let dir = tempfile::tempdir().expect("tempdir");
        let near = |backend| AnyBackend::new(NearCache::new(backend, NearCacheConfig::new()));
        let (backend, capabilities) = standalone_as(dir.path(), near).await;
        let report = conformance::run_all(backend, capabilities).await;
        assert_eq!(skipped(&report), [("quota_refusals", Capability::Quotas)]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_cluster() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_cluster, backend) = cluster(dir.path()).await;
        let report = conformance::run_all(backend, Capabilities::new()).await;
        let lacks = [("quota_refusals", Capability::Quotas), ("survives_restart", Capability::Persistence)];
        assert_eq!(skipped(&report), lacks);
        assert!(report.passed.contains(&"lease_ends"), "{report:?}");
    }

    #[cfg(feature = "conformance-http")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn redis_standalone_http() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (backend, capabilities) = standalone(dir.path()).await;
        let report = conformance::http::run_all(backend, capabilities).await;
        assert_eq!(skipped(&report), [("quota", Capability::Quotas), ("restart_ttl", Capability::MovableClock)]);
    }

    #[cfg(feature = "conformance-http")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn redis_cluster_http() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_cluster, backend) = cluster(dir.path()).await;
        let report = conformance::http::run_all(backend, Capabilities::new()).await;
        assert_eq!(skipped(&report), [("quota", Capability::Quotas), ("restart", Capability::Persistence)]);
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::{config, conformance, skipped, AnyBackend, Capabilities, Capability};
    use crate::common::postgres::PostgresServer;
    use idemkv::backend::postgres::PostgresBackend;
    use std::path::Path;

    /// A server in `dir`, a backend on it, and its capabilities: a restart
    /// is an immediate stop (no checkpoint, as at a crash) and a start that
    /// replays the WAL.
    async fn server(dir: &Path) -> (AnyBackend, Capabilities<AnyBackend>) {
        server_as(dir, AnyBackend::new).await
    }

    /// [`server`], the backend put behind `wrap` (and so again at the
    /// restart).
    async fn server_as(dir: &Path, wrap: fn(PostgresBackend) -> AnyBackend) -> (AnyBackend, Capabilities<AnyBackend>) {
        let mut server = PostgresServer::start(dir);
        let backend = PostgresBackend::connect(&server.url(), config()).await.expect("connect");
        let capabilities = Capabilities::new().persistence(move |backend: AnyBackend| {
            drop(backend);
            server.stop_immediate();
            server.restart();
            let url = server.url();
            async move { wrap(PostgresBackend::connect(&url, config()).await.expect("reconnect")) }
        });
        (wrap(backend), capabilities)
    }

    /// The suite through a near cache in front of the server.
    #[cfg(feature = "near-cache")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_behind_a_near_cache() {
        use idemkv::backend::near::{NearCache, NearCacheConfig};
        let dir = tempfile::tempdir().expect("tempdir");
        let near = |backend| AnyBackend::new(NearCache::new(backend, NearCacheConfig::new()));
        let (backend, capabilities) = server_as(dir.path(), near).await;
        let report = conformance::run_all(backend, capabilities).await;
        assert_eq!(skipped(&report), [("quota_refusals", Capability::Quotas)]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (backend, capabilities) = server(dir.path()).await;
        let report = conformance::run_all(backend, capabilities).await;
        assert_eq!(skipped(&report), [("quota_refusals", Capability::Quotas)]);
        assert!(report.passed.contains(&"lease_ends"), "{report:?}");
    }

    #[cfg(feature = "conformance-http")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres_http() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (backend, capabilities) = server(dir.path()).await;
        let report = conformance::http::run_all(backend, capabilities).await;
        assert_eq!(skipped(&report), [("quota", Capability::Quotas), ("restart_ttl", Capability::MovableClock)]);
    }
}
