//! A load of claims and completions on a networked backend whose server
//! is stopped hard in the middle, then the check after its restart: every
//! completion the backend acknowledged is still replayed with its answer,
//! no key ever ran twice, and a key whose claim was acknowledged is never
//! handed out afresh (attempt 1). The server side — how it stops and
//! restarts — is the caller's.

use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Fingerprint,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Concurrent tasks of the load.
pub const TASKS: usize = 16;
const KEYS_PER_TASK_MAX: usize = 20_000;

/// What the callers were told, per key.
#[derive(Default)]
pub struct Acknowledged {
    /// Acquired answers (a run of the side effect each).
    runs: HashMap<String, u32>,
    /// Completions acknowledged, with the answer stored.
    completed: HashMap<String, String>,
}

impl Acknowledged {
    /// The keys whose completion was acknowledged, with their answers.
    pub fn completed(&self) -> impl Iterator<Item = (&str, &str)> {
        self.completed.iter().map(|(key, response)| (key.as_str(), response.as_str()))
    }
}

fn options() -> ClaimOptions {
    ClaimOptions::new().lease(Duration::from_secs(60)).ttl(Duration::from_secs(600))
}

/// Two tasks share each key (tasks `t` and `t + TASKS / 2`), so claims
/// race. A task ends at its first failed call or at its bound.
async fn load<B: IdempotencyBackend>(
    backend: Arc<B>,
    task: usize,
    seen: Arc<Mutex<Acknowledged>>,
    stop: Arc<AtomicBool>,
) {
    let lane = task % (TASKS / 2);
    for n in 0..KEYS_PER_TASK_MAX {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let key = format!("lane-{lane}-key-{n}");
        let Ok(answer) = backend.claim(b"", key.as_bytes(), Fingerprint::of(key.as_bytes()), options()).await else {
            return;
        };
        if let BackendClaim::Acquired { token, .. } = answer {
            *seen.lock().runs.entry(key.clone()).or_default() += 1;
            let response = format!("charged {key}");
            if backend.complete(&token, response.as_bytes()).await.is_err() {
                return;
            }
            seen.lock().completed.insert(key, response);
        }
    }
}

/// Runs the load on `backend` for 1.5 s, then calls `stop_server`, and
/// returns what was acknowledged once every task has ended (a hung one
/// would hit the client's timeout).
pub async fn load_then_stop<B: IdempotencyBackend>(backend: B, stop_server: impl FnOnce()) -> Acknowledged {
    let backend = Arc::new(backend);
    let seen = Arc::new(Mutex::new(Acknowledged::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| tokio::spawn(load(Arc::clone(&backend), task, Arc::clone(&seen), Arc::clone(&stop))))
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop_server();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task).await.expect("tasks end").expect("task");
    }
    stop.store(true, Ordering::Relaxed);
    let seen = std::mem::take(&mut *seen.lock());
    seen
}

/// Checks `seen` against `backend`, connected to the restarted server.
pub async fn check_after_restart<B: IdempotencyBackend>(backend: &B, seen: &Acknowledged) {
    assert!(seen.completed.len() > 100, "the load ran before the stop: {} completions", seen.completed.len());
    for (key, runs) in &seen.runs {
        assert_eq!(*runs, 1, "{key} ran {runs} times");
    }
    let mut in_flight = 0;
    for key in seen.runs.keys() {
        let answer =
            backend.claim(b"", key.as_bytes(), Fingerprint::of(key.as_bytes()), options()).await.expect("claim");
        match (seen.completed.get(key), answer) {
            (Some(stored), BackendClaim::Replay(response)) => assert_eq!(response, stored.as_bytes(), "{key}"),
            (Some(_), other) => panic!("{key}: an acknowledged completion was lost: {other:?}"),
            // Claimed (acknowledged), completion unacknowledged: the key is
            // still held, or the completion took effect before the stop.
            (None, BackendClaim::InProgress { .. }) => in_flight += 1,
            (None, BackendClaim::Replay(response)) => assert_eq!(response, format!("charged {key}").as_bytes()),
            (None, other) => panic!("{key}: an acknowledged claim was lost: {other:?}"),
        }
    }
    println!(
        "{} keys claimed, {} completions acknowledged, {in_flight} in flight at the stop",
        seen.runs.len(),
        seen.completed.len()
    );
    assert!(in_flight <= TASKS, "at most one claim in flight per task: {in_flight}");
}
