//! `load`: claims for a while — from threads on a store directory, or from
//! tokio tasks through the [`idemkv::backend::IdempotencyBackend`] trait on a Redis
//! server or Cluster — then throughput, latency percentiles, the count of
//! each answer and the fencing check (no key was ever held by two leases at
//! once). Both paths share the workload (which key next, the holders of
//! the fencing check, the tally), the progress bar and the summary.

#![expect(clippy::cast_precision_loss, reason = "rates and ratios for display")]

#[cfg(feature = "redis")]
mod backend;
mod embedded;
mod workload;

use crate::output::{self, count, latency as show_latency, Failure, Out, EXIT_DAMAGE};
use clap::ValueEnum;
use hdrhistogram::Histogram;
use idemkv::Durability;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;
use workload::Tally;

/// Most threads `load` starts on a store directory.
const LOAD_THREADS_MAX: usize = 1024;
/// Most tasks `load` runs on a backend.
const LOAD_TASKS_MAX: usize = 4096;
/// Threads on a store directory unless `--threads` says otherwise.
const DEFAULT_THREADS: usize = 4;
/// Tasks on a backend unless `--tasks` says otherwise.
const DEFAULT_TASKS: usize = 64;
/// Most distinct keys `load` tracks (8 bytes of memory each).
const LOAD_KEYS_MAX: u64 = 100_000_000;
/// Longest `load` run: a day.
const LOAD_SECONDS_MAX: f64 = 86_400.0;
/// Largest response `load` stores (each worker keeps one in memory).
const LOAD_VALUE_BYTES_MAX: usize = 16 << 20;
/// Longest fsync interval of `--durability interval`: an hour.
const LOAD_INTERVAL_MS_MAX: u64 = 3_600_000;
/// Longest `--ttl`: a year, the longest duration a store accepts by default.
const LOAD_TTL_SECONDS_MAX: u64 = 365 * 24 * 3600;
/// Default fsync interval of `--durability interval`.
const DEFAULT_INTERVAL_MS: u64 = 100;

/// When a claim's record reaches stable storage.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DurabilityArg {
    /// Every claim waits for its fsync (shared by concurrent claims).
    Sync,
    /// Written to the operating system, never fsynced by the store.
    Buffered,
    /// Written to the operating system; a background thread fsyncs every
    /// `--interval-ms`.
    Interval,
}

#[derive(clap::Args)]
#[command(after_help = "A store directory is loaded from threads calling the store. --redis and --redis-cluster \
                        (only when idemkv is built with the `redis` feature) load a Redis or Valkey server from \
                        tokio tasks through the backend trait, each run under a scope of its own; their records \
                        expire after --ttl.")]
pub struct LoadArgs {
    /// The store directory; created (with a new store) if it does not
    /// exist. Not with --redis or --redis-cluster.
    #[arg(required_unless_present_any = ["redis", "redis_cluster"], conflicts_with_all = ["redis", "redis_cluster"])]
    dir: Option<PathBuf>,
    /// Load this Redis / Valkey server instead of a store directory
    /// (`redis://host:port/db`). Needs idemkv built with the `redis`
    /// feature.
    #[arg(long, value_name = "URL", conflicts_with = "redis_cluster")]
    redis: Option<String>,
    /// Load a Redis Cluster through these nodes (comma-separated URLs).
    /// Needs idemkv built with the `redis` feature.
    #[arg(long, value_name = "URL,...", value_delimiter = ',')]
    redis_cluster: Vec<String>,
    /// On a store directory: threads issuing claims (1..=1024; default 4).
    #[arg(long)]
    threads: Option<usize>,
    /// On --redis or --redis-cluster: concurrent tasks issuing claims over
    /// the client's multiplexed connection, on one runtime thread
    /// (1..=4096; default 64).
    #[arg(long)]
    tasks: Option<usize>,
    /// How long to run, in seconds (above 0, at most a day).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Distinct keys at most (1..=100,000,000); once all exist, every
    /// claim is a replay.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Share of claims that go to keys already created (0.0..=1.0).
    #[arg(long, default_value_t = 0.5)]
    replay_ratio: f64,
    /// On a store directory: when a claim is durable: sync (fsync before
    /// it returns), buffered (no fsync; the default), or interval (fsync
    /// in the background every --interval-ms). Redis's durability is its
    /// own `appendfsync` setting.
    #[arg(long, value_enum)]
    durability: Option<DurabilityArg>,
    /// With --durability interval: milliseconds between background fsyncs
    /// (1..=3,600,000; default 100, so a power cut loses at most the last
    /// tenth of a second of claims).
    #[arg(long)]
    interval_ms: Option<u64>,
    /// Bytes of each stored response (0..=16 MiB).
    #[arg(long, default_value_t = 200)]
    value_bytes: usize,
    /// Seconds a completed record is kept (1..=31,536,000; default a day,
    /// the store's default TTL).
    #[arg(long)]
    ttl: Option<u64>,
}

/// What is loaded.
enum Target {
    /// A store directory, from threads.
    Directory { dir: PathBuf, durability: Durability, threads: usize },
    /// A Redis server (`cluster` false, one URL) or Cluster, from tasks.
    #[cfg_attr(not(feature = "redis"), expect(dead_code, reason = "refused without the redis feature"))]
    Redis { urls: Vec<String>, cluster: bool, tasks: usize },
}

/// The checked arguments.
struct Plan {
    target: Target,
    duration: Duration,
    keys: u64,
    replay_ratio: f64,
    value_bytes: usize,
    ttl: Option<Duration>,
}

/// Checks the numbers of `args`, before anything is created or connected.
fn check_numbers(args: &LoadArgs) -> Result<(), Failure> {
    if !(1..=LOAD_KEYS_MAX).contains(&args.keys) {
        return Err(Failure::other(format!("--keys must be in 1..={LOAD_KEYS_MAX}")));
    }
    if !args.duration.is_finite() || args.duration <= 0.0 || args.duration > LOAD_SECONDS_MAX {
        return Err(Failure::other(format!(
            "--duration must be a number of seconds above 0 and at most {LOAD_SECONDS_MAX}"
        )));
    }
    if !(0.0..=1.0).contains(&args.replay_ratio) {
        return Err(Failure::other("--replay-ratio must be in 0..=1"));
    }
    if args.value_bytes > LOAD_VALUE_BYTES_MAX {
        return Err(Failure::other(format!("--value-bytes must be at most {LOAD_VALUE_BYTES_MAX}")));
    }
    if args.ttl.is_some_and(|ttl| !(1..=LOAD_TTL_SECONDS_MAX).contains(&ttl)) {
        return Err(Failure::other(format!("--ttl must be in 1..={LOAD_TTL_SECONDS_MAX} seconds")));
    }
    Ok(())
}

/// The durability a store directory is loaded with.
fn durability(args: &LoadArgs) -> Result<Durability, Failure> {
    match (args.durability.unwrap_or(DurabilityArg::Buffered), args.interval_ms) {
        (DurabilityArg::Sync, None) => Ok(Durability::Sync),
        (DurabilityArg::Buffered, None) => Ok(Durability::Buffered),
        (DurabilityArg::Interval, interval_ms) => {
            let interval_ms = interval_ms.unwrap_or(DEFAULT_INTERVAL_MS);
            if !(1..=LOAD_INTERVAL_MS_MAX).contains(&interval_ms) {
                return Err(Failure::other(format!("--interval-ms must be in 1..={LOAD_INTERVAL_MS_MAX}")));
            }
            Ok(Durability::Interval(Duration::from_millis(interval_ms)))
        }
        (_, Some(_)) => Err(Failure::other("--interval-ms needs --durability interval")),
    }
}

/// What `args` ask to load, with what: every argument checked.
fn check(args: &LoadArgs) -> Result<Plan, Failure> {
    check_numbers(args)?;
    let redis = match (&args.redis, args.redis_cluster.as_slice()) {
        (None, []) => None,
        (Some(url), []) => Some((vec![url.clone()], false)),
        (None, nodes) => Some((nodes.to_vec(), true)),
        (Some(_), _) => return Err(Failure::other("give --redis or --redis-cluster, not both")),
    };
    let target = match (args.dir.clone(), redis) {
        (Some(dir), None) => {
            if args.tasks.is_some() {
                return Err(Failure::other("--tasks is for --redis and --redis-cluster; use --threads"));
            }
            let threads = args.threads.unwrap_or(DEFAULT_THREADS);
            if !(1..=LOAD_THREADS_MAX).contains(&threads) {
                return Err(Failure::other(format!("--threads must be in 1..={LOAD_THREADS_MAX}")));
            }
            Target::Directory { dir, durability: durability(args)?, threads }
        }
        (None, Some((urls, cluster))) => {
            if args.threads.is_some() {
                return Err(Failure::other("--threads is for a store directory; use --tasks"));
            }
            if args.durability.is_some() || args.interval_ms.is_some() {
                return Err(Failure::other(
                    "--durability and --interval-ms are for a store directory (Redis has appendfsync)",
                ));
            }
            let tasks = args.tasks.unwrap_or(DEFAULT_TASKS);
            if !(1..=LOAD_TASKS_MAX).contains(&tasks) {
                return Err(Failure::other(format!("--tasks must be in 1..={LOAD_TASKS_MAX}")));
            }
            if !cfg!(feature = "redis") {
                return Err(Failure::other(
                    "--redis needs idemkv built with the `redis` feature (cargo install idemkv --features redis)",
                ));
            }
            Target::Redis { urls, cluster, tasks }
        }
        (Some(_), Some(_)) => return Err(Failure::other("give a store directory or --redis, not both")),
        (None, None) => return Err(Failure::other("give a store directory (or --redis URL)")),
    };
    Ok(Plan {
        target,
        duration: Duration::from_secs_f64(args.duration),
        keys: args.keys,
        replay_ratio: args.replay_ratio,
        value_bytes: args.value_bytes,
        ttl: args.ttl.map(Duration::from_secs),
    })
}

pub fn load(args: &LoadArgs) -> Result<ExitCode, Failure> {
    let plan = check(args)?;
    match &plan.target {
        Target::Directory { dir, durability, threads } => embedded::run(&plan, dir, *durability, *threads),
        #[cfg(feature = "redis")]
        Target::Redis { urls, cluster, tasks } => backend::run(&plan, urls, *cluster, *tasks),
        #[cfg(not(feature = "redis"))]
        Target::Redis { .. } => Err(Failure::other("--redis needs idemkv built with the `redis` feature")),
    }
}

/// The lines of the summary: throughput, latencies, answers. `workers` is
/// the count and name of what issued the claims (`threads`, `tasks`).
fn summary(workers: (usize, &str), latency: &Histogram<u64>, elapsed: f64, tally: &Tally) -> Vec<String> {
    let claims = latency.len();
    let (workers, name) = workers;
    let mut lines = vec![format!(
        "{} claims in {elapsed:.1} s on {workers} {}: {} claims/s",
        count(claims),
        if workers == 1 { name.trim_end_matches('s') } else { name },
        rate(claims, elapsed)
    )];
    if claims > 0 {
        let quantiles = [("p50", 0.50), ("p99", 0.99), ("p99.9", 0.999), ("max", 1.0)]
            .map(|(label, quantile)| format!("{label} {}", show_latency(latency.value_at_quantile(quantile))));
        lines.push(format!("claim latency: {}", quantiles.join(", ")));
    }
    lines.push(format!(
        "answers: acquired {}, replay {}, in progress {}, mismatch {}",
        count(tally.acquired.load(Ordering::Relaxed)),
        count(tally.replays.load(Ordering::Relaxed)),
        count(tally.in_progress.load(Ordering::Relaxed)),
        count(tally.mismatches.load(Ordering::Relaxed))
    ));
    lines
}

/// Prints the summary — even when the run stopped on an error, so that the
/// count of acknowledged claims is not lost — and decides the exit: the
/// error that stopped the run, then `closed`'s, then a double holder.
fn report(
    mut lines: Vec<String>,
    failure: Option<String>,
    closed: Result<(), Failure>,
    tally: &Tally,
) -> Result<ExitCode, Failure> {
    let doubles = tally.double_holders.load(Ordering::Relaxed);
    if failure.is_none() && closed.is_ok() && doubles == 0 {
        lines.push("fencing check: no key was ever held twice".into());
    }
    let mut out = Out::default();
    for line in &lines {
        out.line(line)?;
    }
    if let Some(failure) = failure {
        return Err(Failure::other(format!("load stopped early: {failure}")));
    }
    closed?;
    if doubles > 0 {
        output::warn(&format!("FAILED: {doubles} keys were acquired while another lease on them was valid"));
        return Ok(ExitCode::from(EXIT_DAMAGE));
    }
    Ok(ExitCode::SUCCESS)
}

/// Claims per second, rounded, with thousands separators.
fn rate(claims: u64, seconds: f64) -> String {
    let rate = format!("{:.0}", claims as f64 / seconds);
    rate.parse().map_or(rate, count)
}
