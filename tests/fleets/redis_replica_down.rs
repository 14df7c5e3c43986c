//! A replica that is down while many callers wait for it: a primary and
//! its replica (`--replicaof`), a backend with `wait_for_replicas(1, ..)`,
//! the replica killed (SIGKILL), then 256 callers at once, each
//! completing a lease it took while the replica was up and then claiming
//! a fresh key.
//!
//! Every caller gets its typed answer — success or `NotReplicated`, never
//! `Unavailable` for time spent behind another call's `WAIT` — within the
//! wait's timeout and a margin; replays during the load answer without
//! waiting for the replica (and send no `WAIT` at all); once the load
//! stops nothing is left blocked: a fresh call takes the timeout once, and
//! with the replica back the next transitions are acknowledged. A script
//! the server lost (as on a promoted replica) costs one timeout, not two.

#![cfg(all(feature = "tokio", feature = "redis"))]

use crate::common::redis::RedisServer;
use idemkv::backend::redis::RedisBackend;
use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Config, Error, Fingerprint, LeaseToken,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The wait for the replica.
const WAIT: Duration = Duration::from_secs(2);
/// What an answer may take beyond [`WAIT`] on a loaded 2-core machine.
const MARGIN: Duration = Duration::from_secs(2);
/// Callers at once.
const CALLERS: usize = 256;
/// Keys completed while the replica was up, replayed while it is down.
const REPLAYED: usize = 32;

fn options() -> ClaimOptions {
    ClaimOptions::new().lease(Duration::from_secs(120)).ttl(Duration::from_secs(600))
}

fn body() -> Fingerprint {
    Fingerprint::of(b"body")
}

/// What one call answered, told apart as the test needs.
#[derive(Debug)]
enum Outcome {
    Acknowledged,
    NotReplicated,
    Other(String),
}

fn outcome<T: std::fmt::Debug>(answer: &Result<T, Error>, operation: &str) -> Outcome {
    match answer {
        Ok(_) => Outcome::Acknowledged,
        Err(Error::NotReplicated { operation: said, acknowledged: 0, required: 1, .. }) if *said == operation => {
            Outcome::NotReplicated
        }
        Err(other) => Outcome::Other(format!("{operation}: {other}")),
    }
}

/// One caller: completes `token`, then claims the fresh key `fresh`; each
/// answer with how long it took.
async fn caller(backend: RedisBackend, token: LeaseToken, fresh: String) -> Vec<(Outcome, Duration)> {
    let started = Instant::now();
    let completed = backend.complete(&token, b"charged").await;
    let mut answers = vec![(outcome(&completed, "complete"), started.elapsed())];
    let started = Instant::now();
    let claimed = backend.claim(b"", fresh.as_bytes(), body(), options()).await;
    answers.push((outcome(&claimed, "claim"), started.elapsed()));
    answers
}

/// Replays the completed keys in turn until `done` (at most 2,000): how
/// many, and the longest one took.
async fn replays(backend: RedisBackend, done: Arc<AtomicBool>) -> (usize, Duration) {
    let mut longest = Duration::ZERO;
    for n in 0..2_000 {
        if done.load(Ordering::Relaxed) {
            return (n, longest);
        }
        let key = format!("done-{}", n % REPLAYED);
        let started = Instant::now();
        let answer = backend.claim(b"", key.as_bytes(), body(), options()).await;
        longest = longest.max(started.elapsed());
        assert!(matches!(&answer, Ok(BackendClaim::Replay(response)) if response == b"charged"), "{answer:?}");
    }
    (2_000, longest)
}

/// Leases on `held-{n}` and completions of `done-{n}`, taken while the
/// replica answers.
async fn prepare(backend: &RedisBackend) -> Vec<LeaseToken> {
    let mut tokens = Vec::with_capacity(CALLERS);
    for n in 0..CALLERS + REPLAYED {
        let key = if n < CALLERS { format!("held-{n}") } else { format!("done-{}", n - CALLERS) };
        let answer = backend.claim(b"", key.as_bytes(), body(), options()).await.expect("claim, replicated");
        let BackendClaim::Acquired { token, .. } = answer else { panic!("{key} is fresh: {answer:?}") };
        if n < CALLERS {
            tokens.push(token);
        } else {
            backend.complete(&token, b"charged").await.expect("complete, replicated");
        }
    }
    tokens
}

/// Runs the callers and the replays beside them; panics on any answer
/// but success or `NotReplicated`, or one later than the wait's bound.
async fn load(backend: &RedisBackend, tokens: Vec<LeaseToken>) {
    let done = Arc::new(AtomicBool::new(false));
    let replaying = tokio::spawn(replays(backend.clone(), Arc::clone(&done)));
    let callers: Vec<_> = tokens
        .into_iter()
        .enumerate()
        .map(|(n, token)| tokio::spawn(caller(backend.clone(), token, format!("fresh-{n}"))))
        .collect();
    let mut answers = Vec::with_capacity(2 * CALLERS);
    for task in callers {
        answers.extend(task.await.expect("caller"));
    }
    done.store(true, Ordering::Relaxed);
    let (replayed, longest) = replaying.await.expect("replays");

    let others: Vec<&String> = answers
        .iter()
        .filter_map(|(answer, _)| if let Outcome::Other(what) = answer { Some(what) } else { None })
        .collect();
    assert!(
        others.is_empty(),
        "{} answers neither success nor NotReplicated: {:?}",
        others.len(),
        &others[..others.len().min(5)]
    );
    let late = answers.iter().filter(|(_, took)| *took > WAIT + MARGIN).count();
    let slowest = answers.iter().map(|(_, took)| *took).max().unwrap_or_default();
    assert_eq!(late, 0, "answers later than the wait and its margin (slowest {slowest:?})");
    let unreplicated = answers.iter().filter(|(answer, _)| matches!(answer, Outcome::NotReplicated)).count();
    assert_eq!(unreplicated, 2 * CALLERS, "the replica is down: nothing is acknowledged by it");
    // A replay that waited for the replica would take the whole wait.
    assert!(replayed > 0 && longest < WAIT, "{replayed} replays, the longest {longest:?}");
    println!("{} answers, the slowest {slowest:?}; {replayed} replays, the longest {longest:?}", answers.len());
}

/// A primary, its replica, and a backend on the primary that waits for
/// the replica.
async fn start(dir: &std::path::Path) -> (RedisServer, RedisServer, RedisBackend) {
    let primary = RedisServer::start(&dir.join("primary"));
    let replica = RedisServer::start_replica(&dir.join("replica"), &primary);
    let backend =
        RedisBackend::connect(&primary.url(), Config::new()).await.expect("connect").wait_for_replicas(1, WAIT);
    (primary, replica, backend)
}

/// Kills the replica, once its primary has seen it go.
fn down(primary: &RedisServer, replica: &mut RedisServer) {
    replica.kill();
    primary.wait_for("info replication", "connected_slaves:0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_caller_is_answered_within_the_wait_with_the_replica_down() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (primary, mut replica, backend) = start(dir.path()).await;
    let tokens = prepare(&backend).await;

    down(&primary, &mut replica);
    load(&backend, tokens).await;

    // Replays send no `WAIT` at all, nor do mismatches.
    let waits = primary.calls("wait");
    for n in 0..REPLAYED {
        let key = format!("done-{n}");
        let answer = backend.claim(b"", key.as_bytes(), body(), options()).await;
        assert!(matches!(answer, Ok(BackendClaim::Replay(_))), "{answer:?}");
        let other = backend.claim(b"", key.as_bytes(), Fingerprint::of(b"other"), options()).await;
        assert!(matches!(other, Ok(BackendClaim::Mismatch)), "{other:?}");
    }
    assert_eq!(primary.calls("wait"), waits, "a claim that writes nothing waits for nothing");

    // Nothing left blocked by the load: a fresh call waits once.
    let started = Instant::now();
    let answer = backend.claim(b"", b"after", body(), options()).await;
    assert!(matches!(outcome(&answer, "claim"), Outcome::NotReplicated), "{answer:?}");
    assert!(started.elapsed() <= WAIT + MARGIN, "after the load: {:?}", started.elapsed());

    // The replica back: acknowledged again.
    replica.restart();
    replica.wait_for("info replication", "master_link_status:up");
    let answer = backend.claim(b"", b"again", body(), options()).await.expect("claim, replicated again");
    let BackendClaim::Acquired { token, .. } = answer else { panic!("a fresh key: {answer:?}") };
    backend.complete(&token, b"charged").await.expect("complete, replicated again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_the_server_lost_costs_one_wait_not_two() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (primary, mut replica, backend) = start(dir.path()).await;
    let answer = backend.claim(b"", b"first", body(), options()).await.expect("claim, replicated");
    let BackendClaim::Acquired { token, .. } = answer else { panic!("a fresh key: {answer:?}") };

    // As on a replica just promoted: no replica, and none of the scripts.
    down(&primary, &mut replica);
    assert_eq!(primary.cli(&["SCRIPT", "FLUSH"]).as_deref().map(str::trim), Some("OK"));
    let started = Instant::now();
    let completed = backend.complete(&token, b"charged").await;
    assert!(matches!(outcome(&completed, "complete"), Outcome::NotReplicated), "{completed:?}");
    assert!(started.elapsed() < 2 * WAIT, "one wait, not one per try of the script: {:?}", started.elapsed());
    let replayed = backend.claim(b"", b"first", body(), options()).await;
    assert!(matches!(&replayed, Ok(BackendClaim::Replay(response)) if response == b"charged"), "{replayed:?}");
}
