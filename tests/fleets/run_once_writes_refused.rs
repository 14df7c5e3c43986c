//! `RunOnce` over Redis when the server refuses writes after the closure's
//! side effect and before its completion is kept, and takes them again a
//! second later (`min-replicas-to-write 1` on a primary without replicas:
//! every write is refused at once with `NOREPLICAS`, as while a primary
//! has lost its replicas): the completion is tried again while the lease
//! is held, the key stays in progress meanwhile, and once the server takes
//! writes the answer is stored and replayed — the closure ran once.
//! `RunOnce` once gave up at the first failure: the lease lapsed and the
//! next redelivery ran the closure again. The server refuses rather than
//! stops, so that the quick tries fail at once and what stores the answer
//! is the background tries.

#![cfg(all(feature = "tokio", feature = "redis"))]

use crate::common::redis::RedisServer;
use idemkv::backend::redis::RedisBackend;
use idemkv::backend::{ClaimOptions, RunOnce};
use idemkv::{Config, Fingerprint, Once, Outcome};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_the_server_refused_for_a_moment_is_stored_later_and_runs_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Arc::new(RedisServer::start(dir.path()));
    let url = server.url();
    let backend = RedisBackend::connect(&url, Config::new()).await.expect("connect");
    let once = RunOnce::new(backend).lease(Duration::from_secs(5));
    let fingerprint = Fingerprint::of(b"ship order 7");
    let runs = Arc::new(AtomicU32::new(0));
    let run = || {
        let (runs, server) = (Arc::clone(&runs), Arc::clone(&server));
        once.run(b"shipping", b"order-7", fingerprint, ClaimOptions::new(), move |_| async move {
            let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
            // The side effect ran; the server refuses writes before its
            // answer is kept, and takes them again a second later.
            refuse_writes(&server, true);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(1));
                refuse_writes(&server, false);
            });
            Outcome::Complete(format!("label {run}").into_bytes())
        })
    };

    let first = run().await;
    assert!(first.is_err(), "the server refused writes when the closure ended: {first:?}");
    // Redeliveries, as a queue would make them (refused while the server
    // refuses writes, in progress while the answer waits), until the key
    // is neither: the stored answer, well within twenty seconds.
    let deadline = Instant::now() + Duration::from_secs(20);
    let last = loop {
        let again = run().await;
        if !matches!(again, Err(_) | Ok(Once::InProgress { .. })) || Instant::now() > deadline {
            break again;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the closure ran twice: {last:?}");
    assert_eq!(last.expect("the replay"), Once::Replayed(b"label 1".to_vec()));
}

/// Has `server` refuse every write (it counts no replica, and then asks
/// for one), or take them again.
fn refuse_writes(server: &RedisServer, refuse: bool) {
    let replicas = if refuse { "1" } else { "0" };
    let answer = server.cli(&["config", "set", "min-replicas-to-write", replicas]);
    assert_eq!(answer.as_deref().map(str::trim), Some("OK"), "config set min-replicas-to-write {replicas}");
}
