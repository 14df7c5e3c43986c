//! The HTTP conformance scenarios that run on any target
//! (`idemkv::conformance::http::run_all_on`) on the middleware over
//! Redis (a server and a three-master Cluster) and over PostgreSQL: real
//! servers, started here as the library's
//! fleet tests start them (`tests/common`, shared with them), with the
//! settings those tests give each backend.

#[path = "../../../../tests/common/postgres.rs"]
#[allow(dead_code, reason = "the library's helpers; these tests use a few")]
mod postgres_server;
#[path = "../../../../tests/common/redis.rs"]
#[allow(dead_code, reason = "the library's helpers; these tests use a few")]
mod redis_server;
#[path = "../../../../tests/common/server_start.rs"]
mod server_start;

use crate::target::Actix;
use idemkv::backend::postgres::PostgresBackend;
use idemkv::backend::redis::RedisBackend;
use idemkv::conformance::http::run_all_on;
use idemkv::conformance::{Capabilities, Capability};
use idemkv::Config;
use std::time::Duration;

/// What the fleet tests give every backend: the response budget the
/// scenarios check, and a TTL of a minute for what they leave behind.
fn config() -> Config {
    Config::new().response_bytes_max(4096).default_ttl(Duration::from_secs(60))
}

#[actix_web::test]
async fn every_scenario_on_redis() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = redis_server::RedisServer::start(dir.path());
    let backend = RedisBackend::connect(&server.url(), config()).await.expect("connect");
    let capabilities = Capabilities::new().key_prefix("actix-redis");
    let report = run_all_on(&Actix(backend), &capabilities).await;
    assert_eq!(report.skipped, [("quota", Capability::Quotas)], "{report:?}");
}

#[actix_web::test]
async fn every_scenario_on_a_redis_cluster() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = redis_server::RedisCluster::start_async(dir.path()).await;
    let backend = cluster.connect(config()).await.expect("connect");
    let capabilities = Capabilities::new().key_prefix("actix-cluster");
    let report = run_all_on(&Actix(backend), &capabilities).await;
    assert_eq!(report.skipped, [("quota", Capability::Quotas)], "{report:?}");
}

#[actix_web::test]
async fn every_scenario_on_postgres() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = postgres_server::PostgresServer::start(dir.path());
    let backend = PostgresBackend::connect(&server.url(), config()).await.expect("connect");
    let capabilities = Capabilities::new().key_prefix("actix-postgres");
    let report = run_all_on(&Actix(backend), &capabilities).await;
    assert_eq!(report.skipped, [("quota", Capability::Quotas)], "{report:?}");
}
