//! `load` through the [`IdempotencyBackend`] trait (feature `redis`): tokio
//! tasks on one runtime thread share the client's multiplexed connection,
//! the way a service's request handlers would. One thread is enough to
//! keep a server busy, and leaves the other cores to a server on the same
//! machine.
//!
//! Each run claims under a scope of its own (`load-<time>-<process>`), so a
//! second run against the same server starts from no keys, as on a new
//! store directory; its records expire after the TTL.

use super::workload::{gather, latency_histogram, record, Progress, Workload};
use super::{report, summary, Plan};
use crate::output::{now_ms, Failure};
use hdrhistogram::Histogram;
use idemkv::backend::redis::RedisBackend;
use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Config, Error, Fingerprint,
};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// The store's default TTL, which `--ttl` replaces.
const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);

pub(super) fn run(plan: &Plan, urls: &[String], cluster: bool, tasks: usize) -> Result<ExitCode, Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| Failure::other(format!("cannot start the tokio runtime: {error}")))?;
    runtime.block_on(async {
        let ttl = plan.ttl.unwrap_or(DEFAULT_TTL);
        let config = Config::new().response_bytes_max(plan.value_bytes.max(1 << 20)).default_ttl(ttl);
        let backend = connect(urls, cluster, config).await?;
        let scope = format!("load-{:x}-{}", now_ms(), std::process::id());
        let (work, results, elapsed) = drive(Arc::new(backend), plan, tasks, &scope).await?;
        let (latency, failure) = gather(results)?;
        let mut lines = summary((tasks, "tasks"), &latency, elapsed, &work.tally);
        let shown: Vec<String> = urls.iter().map(|url| redact(url)).collect();
        lines.push(format!(
            "redis: {} {}, scope {scope}, records kept {} after completion",
            if cluster { "cluster" } else { "server" },
            shown.join(","),
            humantime::format_duration(ttl)
        ));
        report(lines, failure, Ok(()), &work.tally)
    })
}

/// Connects; a bad URL or an unreachable server is one line.
async fn connect(urls: &[String], cluster: bool, config: Config) -> Result<RedisBackend, Failure> {
    let connected = if cluster {
        let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
        RedisBackend::connect_cluster(&nodes, config).await
    } else {
        let url = urls.first().map_or("", String::as_str);
        RedisBackend::connect(url, config).await
    };
    let shown = urls.iter().map(|url| redact(url)).collect::<Vec<_>>().join(",");
    let option = if cluster { "--redis-cluster" } else { "--redis" };
    connected.map_err(|error| match error {
        Error::InvalidConfig(message) => Failure::other(format!("bad {option} URL {shown}: {}", one_line(&message))),
        // Nothing was called yet: the client's reason is the whole story.
        Error::Backend { source, .. } => Failure::other(format!("cannot connect to {shown}: {}", one_line(&source))),
        error => Failure::other(format!("cannot connect to {shown}: {}", one_line(&error))),
    })
}

/// `message` on one line: the client's errors may span several (a parse
/// error of what answered in place of a server, say).
fn one_line(message: &dyn std::fmt::Display) -> String {
    message.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `url` without its password (`redis://user:secret@host` →
/// `redis://user:***@host`), for printing.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rsplit_once('@') {
        Some((user_info, host)) => {
            let user =
                user_info.split_once(':').map_or(user_info.to_string(), |(user, _password)| format!("{user}:***"));
            format!("{scheme}://{user}@{host}{}", &rest[authority_end..])
        }
        None => url.to_string(),
    }
}

/// What every task claims with.
struct Job {
    scope: Vec<u8>,
    fingerprint: Fingerprint,
    response: Vec<u8>,
}

type Results = Vec<(Histogram<u64>, Option<String>)>;

/// Runs `tasks` tasks for the plan's duration; the workload, each task's
/// latencies and error, and the run's length in seconds.
async fn drive<B: IdempotencyBackend>(
    backend: Arc<B>,
    plan: &Plan,
    tasks: usize,
    scope: &str,
) -> Result<(Arc<Workload>, Results, f64), Failure> {
    let work = Arc::new(Workload::new(plan)?);
    let job = Arc::new(Job {
        scope: scope.as_bytes().to_vec(),
        fingerprint: Fingerprint::of(b"idemkv load"),
        response: vec![b'v'; plan.value_bytes],
    });
    let progress = Progress::start(plan.duration)?;
    let empty = latency_histogram()?;
    let mut running = JoinSet::new();
    for task in 0..tasks {
        let (backend, work, job, latency) = (Arc::clone(&backend), Arc::clone(&work), Arc::clone(&job), empty.clone());
        running.spawn(async move { worker(&*backend, &work, &job, task as u64, latency).await });
    }
    while let Some(pause) = progress.pause(&work) {
        tokio::time::sleep(pause).await;
        progress.update(&work);
    }
    work.stop.store(true, Ordering::Relaxed);
    let mut results = Vec::with_capacity(tasks);
    while let Some(joined) = running.join_next().await {
        results.push(joined.unwrap_or_else(|_| (empty.clone(), Some("a load task panicked".into()))));
    }
    Ok((work, results, progress.finish()))
}

/// Runs claims until stopped; returns their latencies and the error that
/// stopped this task early, if one did (it then stops the others too).
async fn worker<B: IdempotencyBackend>(
    backend: &B,
    work: &Workload,
    job: &Job,
    task: u64,
    mut latency: Histogram<u64>,
) -> (Histogram<u64>, Option<String>) {
    let outcome = claims(backend, work, job, task, &mut latency).await;
    if outcome.is_err() {
        work.stop.store(true, Ordering::Relaxed);
    }
    (latency, outcome.err())
}

async fn claims<B: IdempotencyBackend>(
    backend: &B,
    work: &Workload,
    job: &Job,
    task: u64,
    latency: &mut Histogram<u64>,
) -> Result<(), String> {
    let mut random = Workload::seed(task);
    while !work.stopped() {
        let index = work.next(&mut random);
        let key = Workload::key(index);
        let call = Instant::now();
        let claim = backend
            .claim(&job.scope, key.as_bytes(), job.fingerprint, ClaimOptions::new())
            .await
            .map_err(|error| one_line(&error))?;
        record(latency, call);
        match claim {
            BackendClaim::Acquired { token, recovered, .. } => {
                work.acquired(index, token.token, recovered);
                let finished = backend.complete(&token, &job.response).await.map_err(|error| one_line(&error));
                work.finished(index, token.token);
                finished?;
            }
            BackendClaim::Replay(_) => {
                work.tally.replays.fetch_add(1, Ordering::Relaxed);
            }
            BackendClaim::InProgress { .. } => {
                work.tally.in_progress.fetch_add(1, Ordering::Relaxed);
            }
            BackendClaim::Mismatch => {
                work.tally.mismatches.fetch_add(1, Ordering::Relaxed);
            }
            _ => return Err("an answer this idemkv does not know".into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_not_printed() {
        assert_eq!(redact("redis://127.0.0.1:6379/0"), "redis://127.0.0.1:6379/0");
        assert_eq!(redact("redis://:secret@host:6379"), "redis://:***@host:6379");
        assert_eq!(redact("rediss://user:secret@host/2"), "rediss://user:***@host/2");
        assert_eq!(redact("redis://user@host"), "redis://user@host");
        assert_eq!(redact("not a url"), "not a url");
    }
}
