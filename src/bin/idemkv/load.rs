//! `load`: claims from many threads for a while, then throughput, latency
//! percentiles, the count of each answer and the fencing check (no key was
//! ever held by two leases at once).

#![expect(clippy::cast_precision_loss, reason = "rates and ratios for display")]

use crate::output::{self, bytes, count, latency as show_latency, Failure, Out, EXIT_DAMAGE};
use clap::ValueEnum;
use hdrhistogram::Histogram;
use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, Store};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Most threads `load` starts.
const LOAD_THREADS_MAX: usize = 1024;
/// Most distinct keys `load` tracks (8 bytes of memory each).
const LOAD_KEYS_MAX: u64 = 100_000_000;
/// Longest `load` run: a day.
const LOAD_SECONDS_MAX: f64 = 86_400.0;
/// Largest response `load` stores (each thread keeps one in memory).
const LOAD_VALUE_BYTES_MAX: usize = 16 << 20;
/// Longest fsync interval of `--durability interval`: an hour.
const LOAD_INTERVAL_MS_MAX: u64 = 3_600_000;

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
pub struct LoadArgs {
    /// The store directory; created (with a new store) if it does not exist.
    dir: PathBuf,
    /// Threads issuing claims (1..=1024).
    #[arg(long, default_value_t = 4)]
    threads: usize,
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
    /// When a claim is durable: sync (fsync before it returns), buffered
    /// (no fsync), or interval (fsync in the background every
    /// --interval-ms).
    #[arg(long, value_enum, default_value_t = DurabilityArg::Buffered)]
    durability: DurabilityArg,
    /// With --durability interval: milliseconds between background fsyncs
    /// (1..=3,600,000; default 100, so a power cut loses at most the last
    /// tenth of a second of claims).
    #[arg(long)]
    interval_ms: Option<u64>,
    /// Bytes of each stored response (0..=16 MiB).
    #[arg(long, default_value_t = 200)]
    value_bytes: usize,
}

/// Default fsync interval of `--durability interval`.
const DEFAULT_INTERVAL_MS: u64 = 100;

/// Counts of each answer, and the fencing check's findings.
#[derive(Default)]
struct Tally {
    acquired: AtomicU64,
    replays: AtomicU64,
    in_progress: AtomicU64,
    mismatches: AtomicU64,
    double_holders: AtomicU64,
}

/// The arguments checked before anything is created, and the durability
/// they ask for.
fn check(args: &LoadArgs) -> Result<Durability, Failure> {
    if !(1..=LOAD_THREADS_MAX).contains(&args.threads) {
        return Err(Failure::other(format!("--threads must be in 1..={LOAD_THREADS_MAX}")));
    }
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
    match (args.durability, args.interval_ms) {
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

pub fn load(args: &LoadArgs) -> Result<ExitCode, Failure> {
    let durability = check(args)?;
    let keys = usize::try_from(args.keys).map_err(|_| Failure::other("--keys too large for this machine"))?;
    let config = Config::new()
        .durability(durability)
        .response_bytes_max(args.value_bytes.max(1 << 20))
        .segment_bytes((64 << 20).max(2 * args.value_bytes as u64 + (1 << 20)));
    let store = Store::open(&args.dir, config)?;
    // Per key, the token of the holder between its Acquired and its finish.
    let holders: Vec<AtomicU64> = (0..keys).map(|_| AtomicU64::new(0)).collect();
    let created = AtomicU64::new(0);
    let tally = Tally::default();
    let stop = AtomicBool::new(false);
    let duration = Duration::from_secs_f64(args.duration);
    let progress = ProgressBar::new(duration.as_millis().try_into().unwrap_or(u64::MAX));
    let style = ProgressStyle::with_template("{bar:40} {elapsed}/{duration} {msg}")
        .map_err(|error| Failure::other(error.to_string()))?;
    progress.set_style(style);
    let started = Instant::now();
    let empty = latency_histogram()?;
    let histograms: Vec<(Histogram<u64>, Option<String>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..args.threads)
            .map(|thread| {
                let context = (&store, holders.as_slice(), &created, &tally, &stop);
                let latency = empty.clone();
                scope.spawn(move || worker(context, args, thread as u64, latency))
            })
            .collect();
        while started.elapsed() < duration && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100).min(duration.saturating_sub(started.elapsed())));
            let done = tally.acquired.load(Ordering::Relaxed)
                + tally.replays.load(Ordering::Relaxed)
                + tally.in_progress.load(Ordering::Relaxed);
            progress.set_position(started.elapsed().as_millis().try_into().unwrap_or(u64::MAX));
            progress.set_message(format!("{:.0} claims/s", done as f64 / started.elapsed().as_secs_f64()));
        }
        stop.store(true, Ordering::Relaxed);
        workers
            .into_iter()
            .map(|worker| worker.join().unwrap_or_else(|_| (empty.clone(), Some("a load thread panicked".into()))))
            .collect()
    });
    // A worker that failed (a full disk, say) stopped them all; what was
    // acknowledged until then is still summed up below.
    let (histograms, failures): (Vec<_>, Vec<_>) = histograms.into_iter().unzip();
    let failure = failures.into_iter().flatten().next();
    progress.finish_and_clear();
    let elapsed = started.elapsed().as_secs_f64();
    let mut latency = latency_histogram()?;
    for histogram in &histograms {
        latency.add(histogram).map_err(|error| Failure::other(error.to_string()))?;
    }
    let mut summary = summary(args, &latency, elapsed, &tally, &store);
    let closed = store.close();
    let doubles = tally.double_holders.load(Ordering::Relaxed);
    if failure.is_none() && closed.is_ok() && doubles == 0 {
        summary.push("fencing check: no key was ever held twice".into());
    }
    // The summary is printed even when the run stopped on an error: the
    // count of acknowledged claims is not lost.
    let mut out = Out::default();
    for line in &summary {
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

/// The lines of the summary: throughput, latencies, answers, the store.
fn summary(args: &LoadArgs, latency: &Histogram<u64>, elapsed: f64, tally: &Tally, store: &Store) -> Vec<String> {
    let claims = latency.len();
    let mut lines = vec![format!(
        "{} claims in {elapsed:.1} s on {} thread{}: {} claims/s",
        count(claims),
        args.threads,
        if args.threads == 1 { "" } else { "s" },
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
    let stats = store.stats();
    lines.push(format!(
        "store: {} live records, {} on disk, {} fsyncs",
        count(stats.live_records),
        bytes(stats.disk_bytes),
        count(stats.fsyncs)
    ));
    lines
}

/// Claims per second, rounded, with thousands separators.
fn rate(claims: u64, seconds: f64) -> String {
    let rate = format!("{:.0}", claims as f64 / seconds);
    rate.parse().map_or(rate, count)
}

type Context<'a> = (&'a Store, &'a [AtomicU64], &'a AtomicU64, &'a Tally, &'a AtomicBool);

/// Latencies from 1 ns to an hour at 3 significant digits: a fixed range,
/// so that no latency is clamped to a small automatic bound.
fn latency_histogram() -> Result<Histogram<u64>, Failure> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).map_err(|error| Failure::other(error.to_string()))
}

/// Runs claims until stopped; returns their latencies and the error that
/// stopped this worker early, if one did (it then stops the others too).
fn worker(
    context: Context<'_>,
    args: &LoadArgs,
    thread: u64,
    mut latency: Histogram<u64>,
) -> (Histogram<u64>, Option<String>) {
    let outcome = claims(context, args, thread, &mut latency);
    if outcome.is_err() {
        context.4.store(true, Ordering::Relaxed);
    }
    (latency, outcome.err())
}

fn claims(context: Context<'_>, args: &LoadArgs, thread: u64, latency: &mut Histogram<u64>) -> Result<(), String> {
    let (store, holders, created, tally, stop) = context;
    let fingerprint = Fingerprint::of(b"idemkv load");
    let response = vec![b'v'; args.value_bytes];
    let mut random = 0x9E37_79B9_7F4A_7C15_u64 ^ (thread + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
    while !stop.load(Ordering::Relaxed) {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        let existing = created.load(Ordering::Relaxed);
        let replay = existing > 0 && ((random % 10_000) as f64) < args.replay_ratio * 10_000.0;
        let index = if replay || existing >= args.keys {
            (random >> 16) % existing.max(1)
        } else {
            created.fetch_add(1, Ordering::Relaxed).min(args.keys - 1)
        };
        let key = format!("load-{index:016x}");
        let call = Instant::now();
        let claim = store.claim(&ClaimRequest::new(&key, fingerprint)).map_err(|error| error.to_string())?;
        latency.saturating_record(u64::try_from(call.elapsed().as_nanos()).unwrap_or(u64::MAX));
        match claim {
            Claim::Acquired(lease) => {
                tally.acquired.fetch_add(1, Ordering::Relaxed);
                // The slot holds this lease's token until the lease is
                // finished: a second acquire meanwhile is a double holder.
                let slot = &holders[usize::try_from(index).unwrap_or(usize::MAX)];
                let token = lease.token();
                if slot.compare_exchange(0, token, Ordering::SeqCst, Ordering::SeqCst).is_err() && !lease.recovered() {
                    tally.double_holders.fetch_add(1, Ordering::Relaxed);
                }
                let finished = lease.complete(&response).map_err(|error| error.error.to_string());
                let _ours_or_a_taker_s = slot.compare_exchange(token, 0, Ordering::SeqCst, Ordering::SeqCst);
                finished?;
            }
            Claim::Replay(_) => {
                tally.replays.fetch_add(1, Ordering::Relaxed);
            }
            Claim::InProgress { .. } => {
                tally.in_progress.fetch_add(1, Ordering::Relaxed);
            }
            Claim::Mismatch => {
                tally.mismatches.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}
