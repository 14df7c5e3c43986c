//! The networked backends count what the embedded store counts, under its
//! names, labelled `backend` instead of `shard`: every claim answer, the
//! finishing and lease calls, refusals of stale tokens, removals, a
//! waiting claim's looks, and calls the server did not answer — checked
//! with a real `metrics` recorder against real servers.

#![cfg(feature = "metrics")]

use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Config, Fingerprint, LeaseToken,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use std::collections::HashMap;
use std::time::Duration;

/// Counters by (name, `backend` label), summed over other labels, and the
/// claim-latency samples by `outcome`.
struct Seen {
    counters: HashMap<(String, String), u64>,
    claim_seconds: HashMap<String, usize>,
}

impl Seen {
    fn of(snapshotter: &Snapshotter) -> Seen {
        let (mut counters, mut claim_seconds) = (HashMap::new(), HashMap::new());
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let key = key.key();
            let label = |name: &str| key.labels().find(|label| label.key() == name).map(|l| l.value().to_string());
            match value {
                DebugValue::Counter(count) => {
                    let backend = label("backend").unwrap_or_default();
                    *counters.entry((key.name().to_string(), backend)).or_default() += count;
                }
                DebugValue::Histogram(samples) if key.name() == "idempo_claim_seconds" => {
                    *claim_seconds.entry(label("outcome").unwrap_or_default()).or_default() += samples.len();
                }
                _ => {}
            }
        }
        Seen { counters, claim_seconds }
    }

    fn counter(&self, name: &str, backend: &str) -> u64 {
        self.counters.get(&(name.to_string(), backend.to_string())).copied().unwrap_or(0)
    }
}

fn fp(text: &str) -> Fingerprint {
    Fingerprint::of(text.as_bytes())
}

fn options() -> ClaimOptions {
    ClaimOptions::new().lease(Duration::from_secs(10)).ttl(Duration::from_secs(60))
}

async fn acquire<B: IdempotencyBackend>(backend: &B, key: &[u8]) -> LeaseToken {
    match backend.claim(b"", key, fp("body"), options()).await.expect("claim") {
        BackendClaim::Acquired { token, .. } => token,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// The same calls on any backend, then what the recorder must have seen.
async fn every_call_is_counted<B: IdempotencyBackend + Clone>(backend: B, label: &str, snapshotter: &Snapshotter) {
    let token = acquire(&backend, b"counted").await;
    let in_progress = backend.claim(b"", b"counted", fp("body"), options()).await.expect("claim");
    assert!(matches!(in_progress, BackendClaim::InProgress { .. }), "{in_progress:?}");
    let mismatch = backend.claim(b"", b"counted", fp("other"), options()).await.expect("claim");
    assert!(matches!(mismatch, BackendClaim::Mismatch), "{mismatch:?}");
    backend.renew(&token, Duration::from_secs(10)).await.expect("renew");
    backend.checkpoint(&token, "charged", b"ch_1").await.expect("checkpoint");
    backend.complete(&token, b"201").await.expect("complete");
    let replay = backend.claim(b"", b"counted", fp("body"), options()).await.expect("claim");
    assert!(matches!(replay, BackendClaim::Replay(_)), "{replay:?}");
    assert!(backend.complete(&token, b"again").await.is_err(), "a stale token");

    let failed = acquire(&backend, b"failed").await;
    backend.fail(&failed, b"402").await.expect("fail");
    let released = acquire(&backend, b"released").await;
    backend.release(&released).await.expect("release");
    let removed = acquire(&backend, b"removed").await;
    assert!(backend.remove(b"", b"removed").await.expect("remove"));
    assert!(!backend.remove(b"", b"removed").await.expect("remove again"), "nothing left: not counted");
    drop(removed);

    // A waiting claim, woken by the finish: one claim, looks again counted.
    let held = acquire(&backend, b"waited").await;
    let waiter = {
        let backend = backend.clone();
        tokio::spawn(async move {
            let waiting = options().wait(Some(Duration::from_secs(10)));
            backend.claim(b"", b"waited", fp("body"), waiting).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    backend.complete(&held, b"done").await.expect("complete");
    let answer = waiter.await.expect("waiter").expect("claim");
    assert!(matches!(answer, BackendClaim::Replay(_)), "{answer:?}");

    let seen = Seen::of(snapshotter);
    let count = |name: &str| seen.counter(name, label);
    // counted ×4, failed, released, removed, waited, the waiter.
    assert_eq!(count("idempo_claims_total"), 9);
    assert_eq!(count("idempo_acquired_total"), 5);
    assert_eq!(count("idempo_recovered_total"), 0);
    assert_eq!(count("idempo_conflict_total"), 1, "the waiter ended on a replay");
    assert_eq!(count("idempo_mismatch_total"), 1);
    assert_eq!(count("idempo_replay_total"), 2);
    assert_eq!(count("duplicate_detected_total"), 4);
    assert!(count("idempo_wait_looks_total") >= 1, "the waiter looked again");
    assert_eq!(count("idempo_completed_total"), 2);
    assert_eq!(count("idempo_failed_total"), 1);
    assert_eq!(count("idempo_released_total"), 1);
    assert_eq!(count("idempo_renewed_total"), 1);
    assert_eq!(count("idempo_checkpoints_total"), 1);
    assert_eq!(count("idempo_lease_lost_total"), 1);
    assert_eq!(count("idempo_removed_total"), 1);
    assert_eq!(count("idempo_backend_errors_total"), 0);
    assert_eq!(seen.counter("idempo_claims_total", "shard"), 0, "nothing under another label");
    let timed: usize = seen.claim_seconds.values().sum();
    assert_eq!(timed, 9, "every claim answer timed: {:?}", seen.claim_seconds);
    assert_eq!(seen.claim_seconds.get("in_progress"), Some(&1));
}

/// After the server is gone, a claim is counted with the failure.
async fn an_unanswered_call_is_counted<B: IdempotencyBackend>(backend: &B, label: &str, snapshotter: &Snapshotter) {
    let before = Seen::of(snapshotter).counter("idempo_backend_errors_total", label);
    let claim = tokio::time::timeout(Duration::from_secs(30), backend.claim(b"", b"gone", fp("body"), options()));
    assert!(claim.await.expect("an answer in time").is_err(), "the server is gone");
    assert_eq!(Seen::of(snapshotter).counter("idempo_backend_errors_total", label), before + 1);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

#[cfg(feature = "redis")]
#[test]
fn redis_counts_every_call() {
    crate::common::own_process(module_path!(), "redis_counts_every_call", || {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("the only recorder of this process");
        let dir = tempfile::tempdir().expect("tempdir");
        let mut server = crate::common::redis::RedisServer::start(dir.path());
        runtime().block_on(async {
            let backend =
                idemkv::backend::redis::RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
            every_call_is_counted(backend.clone(), "redis", &snapshotter).await;
            server.kill();
            an_unanswered_call_is_counted(&backend, "redis", &snapshotter).await;
        });
    });
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_counts_every_call() {
    crate::common::own_process(module_path!(), "postgres_counts_every_call", || {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("the only recorder of this process");
        let dir = tempfile::tempdir().expect("tempdir");
        let mut server = crate::common::postgres::PostgresServer::start(dir.path());
        runtime().block_on(async {
            let url = server.url();
            let backend =
                idemkv::backend::postgres::PostgresBackend::connect(&url, Config::new()).await.expect("connect");
            every_call_is_counted(backend.clone(), "postgres", &snapshotter).await;
            server.stop_immediate();
            an_unanswered_call_is_counted(&backend, "postgres", &snapshotter).await;
        });
    });
}
