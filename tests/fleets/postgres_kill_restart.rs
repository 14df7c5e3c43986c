//! A real PostgreSQL server (`synchronous_commit` on) stopped with
//! `pg_ctl stop -m immediate` (every process quits, no checkpoint) in
//! the middle of a load of claims and completions, then restarted on its
//! WAL: every completion the backend acknowledged is still replayed with
//! its answer, no key ever ran twice, and a key whose claim was
//! acknowledged is never handed out afresh (attempt 1) after the restart.

#![cfg(all(feature = "tokio", feature = "postgres"))]

use crate::common::crash_load::{check_after_restart, load_then_stop};
use crate::common::postgres::PostgresServer;
use idemkv::backend::postgres::PostgresBackend;
use idemkv::Config;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_completions_survive_an_immediate_stop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = PostgresServer::start(dir.path());
    let backend = PostgresBackend::connect(&server.url(), Config::new()).await.expect("connect");
    let seen = load_then_stop(backend, || server.stop_immediate()).await;
    server.restart();
    let backend = PostgresBackend::connect(&server.url(), Config::new()).await.expect("reconnect");
    check_after_restart(&backend, &seen).await;
}
