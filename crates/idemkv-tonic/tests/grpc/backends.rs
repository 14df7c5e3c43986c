//! Every scenario that holds for any backend, on Redis (a server and a
//! three-master Cluster) and PostgreSQL:
//! real servers started here from the test fixtures of the root package
//! (`tests/common`), as its fleet tests start them (`bash .ci/servers`
//! puts them on the PATH). The embedded store runs them in their own
//! modules.

use crate::postgres_server::PostgresServer;
use crate::redis_server::{RedisCluster, RedisServer};
use crate::{crash_mid_call, in_progress_then_replay, kept_status, mismatch};
use idemkv::backend::postgres::PostgresBackend;
use idemkv::backend::redis::RedisBackend;
use idemkv::backend::AnyBackend;
use idemkv::{Config, Durability, Store};

/// `embedded_store!(scenario)`: the test `embedded_store`, which runs
/// `scenario` on an embedded store (each scenario's own module, so that a
/// test's name says its scenario).
macro_rules! embedded_store {
    ($scenario:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn embedded_store() {
            let (_dir, store) = crate::backends::embedded();
            $scenario(store).await;
        }
    };
}

/// An embedded store in a fresh directory (which lives as long as the
/// first).
pub fn embedded() -> (tempfile::TempDir, AnyBackend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), Config::new().durability(Durability::Buffered)).expect("open");
    (dir, AnyBackend::new(store))
}

/// The scenarios, one after another, over `backend`.
async fn every_scenario(backend: AnyBackend) {
    in_progress_then_replay::scenario(backend.clone()).await;
    kept_status::scenario(backend.clone()).await;
    mismatch::scenario(backend.clone()).await;
    crash_mid_call::scenario(backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(&dir.path().join("redis"));
    let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
    every_scenario(AnyBackend::new(backend)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = RedisCluster::start_async(dir.path()).await;
    let backend = cluster.connect(Config::new()).await.expect("connect");
    every_scenario(AnyBackend::new(backend)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = PostgresServer::start(&dir.path().join("postgres"));
    let backend = PostgresBackend::connect(&server.url(), Config::new()).await.expect("connect");
    every_scenario(AnyBackend::new(backend)).await;
}
