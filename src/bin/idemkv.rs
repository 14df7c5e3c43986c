//! `idemkv`: inspect, verify, compact and load-test a store directory.
//!
//! Read-only subcommands (`stats`, `get`, `list`) open the store, which
//! takes its lock: on a directory that a live process holds they fail with
//! a message naming that process. `verify` reads the files without opening
//! the store and works on a live directory too.

#![expect(clippy::cast_precision_loss, reason = "rates and ratios for display")]

use clap::{Parser, Subcommand, ValueEnum};
use hdrhistogram::Histogram;
use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, Record, State, Store};
use indicatif::{ProgressBar, ProgressStyle};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Writes one line to stdout. A reader that went away (`idemkv list DIR |
/// head -1`) ends the command quietly with success; any other failure to
/// write is an error of the command.
macro_rules! out {
    ($($arg:tt)*) => {
        if let Err(error) = writeln!(std::io::stdout().lock(), $($arg)*) {
            if error.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            return Err(format!("writing to stdout: {error}"));
        }
    };
}

#[derive(Parser)]
#[command(name = "idemkv", version, about = "Inspect, verify, compact and load-test an idemkv store directory")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Shards, segments, bytes on disk, records by state, counters.
    Stats {
        dir: PathBuf,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// One record: state, attempt, token, times and response.
    Get {
        dir: PathBuf,
        key: String,
        #[arg(long, default_value = "")]
        scope: String,
    },
    /// Live records, one a line.
    List {
        dir: PathBuf,
        #[arg(long, value_enum)]
        state: Option<StateFilter>,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// CRC-check every record of every segment; exits 1 on damage.
    Verify { dir: PathBuf },
    /// Run one compaction pass and print its report.
    Compact { dir: PathBuf },
    /// Cut a damaged store back to its last consistent point and list
    /// exactly what was dropped (never done automatically; the store must
    /// not be open).
    Repair { dir: PathBuf },
    /// Generate load: claims from many threads, then latency and answers.
    Load(LoadArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
    Prometheus,
}

#[derive(Clone, Copy, ValueEnum)]
enum StateFilter {
    Processing,
    Completed,
    Failed,
}

#[derive(Clone, Copy, ValueEnum)]
enum DurabilityArg {
    Sync,
    Buffered,
}

#[derive(clap::Args)]
struct LoadArgs {
    dir: PathBuf,
    /// Threads issuing claims.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Distinct keys at most; once all exist, every claim is a replay.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Share of claims that go to keys already created (0.0..=1.0).
    #[arg(long, default_value_t = 0.5)]
    replay_ratio: f64,
    #[arg(long, value_enum, default_value_t = DurabilityArg::Buffered)]
    durability: DurabilityArg,
    /// Bytes of each stored response.
    #[arg(long, default_value_t = 200)]
    value_bytes: usize,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Stats { dir, format } => stats(&dir, format),
        Command::Get { dir, key, scope } => get(&dir, &scope, &key),
        Command::List { dir, state, limit } => list(&dir, state, limit),
        Command::Verify { dir } => verify(&dir),
        Command::Compact { dir } => compact(&dir),
        Command::Repair { dir } => repair(&dir),
        Command::Load(args) => load(&args),
    };
    match outcome {
        Ok(code) => code,
        Err(message) => {
            eprintln!("idemkv: {message}");
            ExitCode::from(2)
        }
    }
}

/// Opens an existing store; never creates one.
fn open_existing(dir: &Path) -> Result<Store, String> {
    if !dir.join("MANIFEST").is_file() {
        return Err(format!("{} is not an idemkv store (no MANIFEST)", dir.display()));
    }
    Store::open(dir, Config::new().compaction_interval(None)).map_err(|error| error.to_string())
}

fn stats(dir: &Path, format: Format) -> Result<ExitCode, String> {
    let store = open_existing(dir)?;
    let stats = store.stats();
    let census = store.census().map_err(|error| error.to_string())?;
    let fields: Vec<(&str, u64)> = vec![
        ("shards", u64::from(store.shard_count())),
        ("segments", stats.segments),
        ("disk_bytes", stats.disk_bytes),
        ("live_bytes", stats.live_bytes),
        ("records_processing", census.processing),
        ("records_completed", census.completed),
        ("records_failed", census.failed),
        ("records_expired_not_compacted", census.expired),
        ("torn_tail_bytes_cut", stats.torn_tail_bytes_cut),
        ("claims", stats.claims),
        ("acquired", stats.acquired),
        ("replays", stats.replays),
        ("in_progress", stats.in_progress),
        ("mismatches", stats.mismatches),
        ("recovered", stats.recovered),
        ("lease_lost", stats.lease_lost),
        ("expirations", stats.expirations),
        ("fsyncs", stats.fsyncs),
        ("records_synced", stats.records_synced),
    ];
    let mut out = String::new();
    match format {
        Format::Text => {
            for (name, value) in &fields {
                let _ = writeln!(out, "{name:<32} {value}");
            }
        }
        Format::Json => {
            let body: Vec<String> = fields.iter().map(|(name, value)| format!("\"{name}\":{value}")).collect();
            let _ = writeln!(out, "{{{}}}", body.join(","));
        }
        Format::Prometheus => {
            for (name, value) in &fields {
                let _ = writeln!(out, "# TYPE idemkv_{name} gauge\nidemkv_{name} {value}");
            }
        }
    }
    out!("{}", out.trim_end_matches('\n'));
    Ok(ExitCode::SUCCESS)
}

fn text_or_hex(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_string(),
        Err(_) => bytes.iter().fold(String::from("0x"), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        }),
    }
}

fn describe(record: &Record) -> String {
    format!(
        "scope={:?} key={:?} state={:?} attempt={} token={} created_ms={} updated_ms={} deadline_ms={}",
        text_or_hex(&record.scope),
        text_or_hex(&record.key),
        record.state,
        record.attempt,
        record.token,
        record.created_ms,
        record.updated_ms,
        record.deadline_ms
    )
}

fn get(dir: &Path, scope: &str, key: &str) -> Result<ExitCode, String> {
    let store = open_existing(dir)?;
    if let Some(record) = store.get(scope.as_bytes(), key.as_bytes()).map_err(|error| error.to_string())? {
        out!("{}", describe(&record));
        out!("response: {}", text_or_hex(&record.response));
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("idemkv: no live record for scope {scope:?} key {key:?}");
        Ok(ExitCode::from(1))
    }
}

fn list(dir: &Path, filter: Option<StateFilter>, limit: usize) -> Result<ExitCode, String> {
    let store = open_existing(dir)?;
    let wanted = filter.map(|filter| match filter {
        StateFilter::Processing => State::Processing,
        StateFilter::Completed => State::Completed,
        StateFilter::Failed => State::Failed,
    });
    let mut shown = 0;
    for record in &store {
        let record = record.map_err(|error| error.to_string())?;
        if wanted.is_some_and(|state| state != record.state) {
            continue;
        }
        if shown == limit {
            break;
        }
        out!("{}", describe(&record));
        shown += 1;
    }
    Ok(ExitCode::SUCCESS)
}

fn verify(dir: &Path) -> Result<ExitCode, String> {
    let report = idemkv::verify(dir).map_err(|error| error.to_string())?;
    out!(
        "{} shards, {} segments, {} records, {} bytes checked",
        report.shards,
        report.segments,
        report.records,
        report.bytes
    );
    let spans = report.torn_tails.iter().map(|span| ("torn tail (cut at next open)", span));
    for (label, span) in spans.chain(report.damage.iter().map(|span| ("DAMAGE", span))) {
        out!("{label}: {} offset {} length {}: {}", span.file.display(), span.offset, span.length, span.reason);
    }
    if report.is_clean() {
        out!("clean");
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(1))
    }
}

fn repair(dir: &Path) -> Result<ExitCode, String> {
    let report = idemkv::repair(dir).map_err(|error| error.to_string())?;
    for action in &report.actions {
        out!("{action}");
    }
    for record in &report.records_dropped {
        out!(
            "dropped: {} scope {:?} key {:?} lsn {} {}",
            record.file.display(),
            String::from_utf8_lossy(&record.scope),
            String::from_utf8_lossy(&record.key),
            record.lsn,
            record.kind
        );
    }
    out!(
        "{} records dropped, {} unreadable bytes cut{}",
        report.records_dropped.len(),
        report.unreadable_bytes,
        if report.dropped_nothing() { "; nothing to repair" } else { "" }
    );
    Ok(ExitCode::SUCCESS)
}

fn compact(dir: &Path) -> Result<ExitCode, String> {
    let store = open_existing(dir)?;
    let report = store.compact().map_err(|error| error.to_string())?;
    out!(
        "segments dropped {}, rewritten {}, bytes reclaimed {}, records dropped {}, index entries released {}",
        report.segments_dropped,
        report.segments_rewritten,
        report.bytes_reclaimed,
        report.records_dropped,
        report.index_entries_released
    );
    store.close().map_err(|error| error.to_string())?;
    Ok(ExitCode::SUCCESS)
}

/// Counts of each answer, and the fencing check's findings.
#[derive(Default)]
struct Tally {
    acquired: AtomicU64,
    replays: AtomicU64,
    in_progress: AtomicU64,
    mismatches: AtomicU64,
    double_holders: AtomicU64,
}

/// Most threads `load` starts.
const LOAD_THREADS_MAX: usize = 1024;
/// Most distinct keys `load` tracks (8 bytes of memory each).
const LOAD_KEYS_MAX: u64 = 100_000_000;
/// Longest `load` run: a day.
const LOAD_SECONDS_MAX: f64 = 86_400.0;

fn load(args: &LoadArgs) -> Result<ExitCode, String> {
    if !(1..=LOAD_THREADS_MAX).contains(&args.threads) {
        return Err(format!("--threads must be in 1..={LOAD_THREADS_MAX}"));
    }
    if !(1..=LOAD_KEYS_MAX).contains(&args.keys) {
        return Err(format!("--keys must be in 1..={LOAD_KEYS_MAX}"));
    }
    if !args.duration.is_finite() || args.duration <= 0.0 || args.duration > LOAD_SECONDS_MAX {
        return Err(format!("--duration must be a number of seconds above 0 and at most {LOAD_SECONDS_MAX}"));
    }
    if !(0.0..=1.0).contains(&args.replay_ratio) {
        return Err("--replay-ratio must be in 0..=1".into());
    }
    let durability = match args.durability {
        DurabilityArg::Sync => Durability::Sync,
        DurabilityArg::Buffered => Durability::Buffered,
    };
    let config = Config::new()
        .durability(durability)
        .response_bytes_max(args.value_bytes.max(1 << 20))
        .segment_bytes((64 << 20).max(2 * args.value_bytes as u64 + (1 << 20)));
    let store = Store::open(&args.dir, config).map_err(|error| error.to_string())?;
    let keys = usize::try_from(args.keys).map_err(|_| "--keys too large".to_string())?;
    // Per key, the token of the holder between its Acquired and its finish.
    let holders: Vec<AtomicU64> = (0..keys).map(|_| AtomicU64::new(0)).collect();
    let created = AtomicU64::new(0);
    let tally = Tally::default();
    let stop = AtomicBool::new(false);
    let duration = Duration::from_secs_f64(args.duration);
    let progress = ProgressBar::new(duration.as_millis().try_into().unwrap_or(u64::MAX));
    progress.set_style(
        ProgressStyle::with_template("{bar:40} {elapsed}/{duration} {msg}").map_err(|error| error.to_string())?,
    );
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
        while started.elapsed() < duration {
            std::thread::sleep(Duration::from_millis(100));
            let done = tally.acquired.load(Ordering::Relaxed)
                + tally.replays.load(Ordering::Relaxed)
                + tally.in_progress.load(Ordering::Relaxed);
            progress.set_position(started.elapsed().as_millis().try_into().unwrap_or(u64::MAX));
            progress.set_message(format!("{:.0} claims/s", done as f64 / started.elapsed().as_secs_f64()));
        }
        stop.store(true, Ordering::Relaxed);
        workers.into_iter().map(|worker| worker.join().expect("load thread")).collect()
    });
    // A worker that failed (a full disk, say) stopped them all; what was
    // acknowledged until then is still summed up below.
    let (histograms, failures): (Vec<_>, Vec<_>) = histograms.into_iter().unzip();
    let failure = failures.into_iter().flatten().next();
    progress.finish_and_clear();
    let elapsed = started.elapsed().as_secs_f64();
    let mut latency = latency_histogram()?;
    for histogram in &histograms {
        latency.add(histogram).map_err(|error| error.to_string())?;
    }
    let claims = latency.len();
    out!("{claims} claims in {elapsed:.1} s on {} threads: {:.0} claims/s", args.threads, claims as f64 / elapsed);
    for (label, quantile) in [("p50", 0.50), ("p99", 0.99), ("p99.9", 0.999)] {
        out!("claim latency {label}: {:?}", Duration::from_nanos(latency.value_at_quantile(quantile)));
    }
    out!(
        "answers: acquired {}, replay {}, in progress {}, mismatch {}",
        tally.acquired.load(Ordering::Relaxed),
        tally.replays.load(Ordering::Relaxed),
        tally.in_progress.load(Ordering::Relaxed),
        tally.mismatches.load(Ordering::Relaxed)
    );
    let stats = store.stats();
    out!("store: {} live records, {} bytes on disk, {} fsyncs", stats.live_records, stats.disk_bytes, stats.fsyncs);
    let closed = store.close().map_err(|error| error.to_string());
    if let Some(failure) = failure {
        return Err(format!("load stopped early: {failure}"));
    }
    closed?;
    let doubles = tally.double_holders.load(Ordering::Relaxed);
    if doubles > 0 {
        eprintln!("idemkv: FAILED: {doubles} keys were acquired while another lease on them was valid");
        return Ok(ExitCode::from(1));
    }
    out!("fencing check: no key was ever held twice");
    Ok(ExitCode::SUCCESS)
}

type Context<'a> = (&'a Store, &'a [AtomicU64], &'a AtomicU64, &'a Tally, &'a AtomicBool);

/// Latencies from 1 ns to an hour at 3 significant digits: a fixed range,
/// so that no latency is clamped to a small automatic bound.
fn latency_histogram() -> Result<Histogram<u64>, String> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).map_err(|error| error.to_string())
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
