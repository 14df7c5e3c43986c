//! A real Redis server (AOF, `appendfsync always`) killed with SIGKILL in
//! the middle of a load of claims and completions, then restarted on its
//! AOF: every completion the backend acknowledged is still replayed with
//! its answer, no key ever ran twice, and a key whose claim was
//! acknowledged is never handed out afresh (attempt 1) after the restart.

#![cfg(all(feature = "tokio", feature = "redis"))]

use crate::common::crash_load::{check_after_restart, load_then_stop};
use crate::common::redis::RedisServer;
use idemkv::backend::redis::RedisBackend;
use idemkv::Config;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_completions_survive_a_kill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = RedisServer::start(dir.path());
    let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
    let seen = load_then_stop(backend, || server.kill()).await;
    server.restart();
    let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("reconnect");
    check_after_restart(&backend, &seen).await;
}
