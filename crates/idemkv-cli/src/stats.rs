//! `stats`: what is on disk, read through a read-only open. The running
//! counters (claims, replays, fsyncs, ...) are not here: they live in the
//! process that has the store open, and a read-only open of the files
//! cannot know them.

use crate::inspect::open_read_only;
use crate::output::{self, bytes, count, relative, time, Failure, Out};
use crate::Format;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::AtomicU64;

/// What `stats` reports: facts of the files, as of the read-only open.
struct Facts {
    shards: u32,
    segments: u64,
    /// Bytes of the segment files as they are: the zeros the writer filled
    /// ahead of the records and a torn tail included.
    disk_bytes: u64,
    live_bytes: u64,
    processing: u64,
    completed: u64,
    failed: u64,
    expired: u64,
    /// `created_ms` of the oldest live record.
    oldest_created_ms: Option<u64>,
    now_ms: u64,
    torn_tail_bytes: u64,
}

/// Where the running counters are, in the text format (two lines).
const COUNTERS_TEXT: &str = "not on disk: claims, replays, fsyncs and the other running counters are\n           \
                             kept by the process that has the store open (Store::stats() there, or its metrics)";

/// Where the running counters are, in the JSON format.
const COUNTERS_NOTE: &str = "running counters (claims, replays, fsyncs, ...) are kept by the process that has \
                             the store open: Store::stats() there, or the metrics it emits; they are not on disk";

pub fn stats(dir: &Path, format: Format) -> Result<ExitCode, Failure> {
    let facts = facts(dir)?;
    let text = match format {
        Format::Text => text(dir, &facts),
        Format::Json => json(&facts),
        Format::Prometheus => prometheus(&facts)?,
    };
    Out::default().line(text.trim_end_matches('\n'))?;
    Ok(ExitCode::SUCCESS)
}

fn facts(dir: &Path) -> Result<Facts, Failure> {
    let store = open_read_only(dir)?;
    let stats = store.stats();
    let census = store.census()?;
    let mut oldest_created_ms: Option<u64> = None;
    for record in &store {
        let created_ms = record?.created_ms;
        oldest_created_ms = Some(oldest_created_ms.map_or(created_ms, |oldest| oldest.min(created_ms)));
    }
    let torn_tail_bytes = store.torn_tail_bytes_found();
    Ok(Facts {
        shards: store.shard_count(),
        segments: stats.segments,
        disk_bytes: stats.disk_bytes,
        live_bytes: stats.live_bytes,
        processing: census.processing,
        completed: census.completed,
        failed: census.failed,
        expired: census.expired,
        oldest_created_ms,
        now_ms: output::now_ms(),
        torn_tail_bytes,
    })
}

fn text(dir: &Path, facts: &Facts) -> String {
    let live = facts.processing + facts.completed + facts.failed;
    let oldest = match facts.oldest_created_ms {
        Some(created_ms) => format!("created {} ({})", time(created_ms), relative(created_ms, facts.now_ms)),
        None => "no live record".to_string(),
    };
    let torn = if facts.torn_tail_bytes == 0 {
        "none".to_string()
    } else {
        format!(
            "{} after the last whole record, left in place:\n{:11}a read-only open never cuts it, the next writable \
             open does",
            bytes(facts.torn_tail_bytes),
            ""
        )
    };
    let lines = [
        ("store", format!("{} (opened read-only: nothing on disk was changed)", dir.display())),
        ("shards", facts.shards.to_string()),
        ("segments", count(facts.segments)),
        ("on disk", format!("{} in segment files", bytes(facts.disk_bytes))),
        ("live data", format!("{} in records not expired or superseded", bytes(facts.live_bytes))),
        (
            "records",
            format!(
                "{} live: {} processing, {} completed, {} failed",
                count(live),
                count(facts.processing),
                count(facts.completed),
                count(facts.failed)
            ),
        ),
        ("expired", format!("{} records past their TTL, not yet compacted away", count(facts.expired))),
        ("oldest", oldest),
        ("torn tail", torn),
        ("counters", COUNTERS_TEXT.to_string()),
    ];
    lines.iter().fold(String::new(), |mut text, (label, value)| {
        let _infallible = writeln!(text, "{label:<10} {value}");
        text
    })
}

fn json(facts: &Facts) -> String {
    let oldest = facts.oldest_created_ms.map_or_else(
        || "\"oldest_record_created\":null,\"oldest_record_age_seconds\":null".to_string(),
        |created_ms| {
            format!(
                "\"oldest_record_created\":\"{}\",\"oldest_record_age_seconds\":{}",
                time(created_ms),
                facts.now_ms.saturating_sub(created_ms) / 1000
            )
        },
    );
    format!(
        "{{\"shards\":{},\"segments\":{},\"disk_bytes\":{},\"live_bytes\":{},\"records_processing\":{},\
         \"records_completed\":{},\"records_failed\":{},\"records_expired_not_compacted\":{},{oldest},\
         \"torn_tail_bytes\":{},\"counters\":\"{COUNTERS_NOTE}\"}}",
        facts.shards,
        facts.segments,
        facts.disk_bytes,
        facts.live_bytes,
        facts.processing,
        facts.completed,
        facts.failed,
        facts.expired,
        facts.torn_tail_bytes,
    )
}

/// A gauge of whole numbers.
fn gauge(value: u64) -> Gauge<u64, AtomicU64> {
    let gauge = Gauge::<u64, AtomicU64>::default();
    gauge.set(value);
    gauge
}

/// The facts in the Prometheus text format (`OpenMetrics`): every one a gauge (a level read off the
/// files, not a count of events since some start), with its unit. No
/// counter: those belong to the process that has the store open.
fn prometheus(facts: &Facts) -> Result<String, Failure> {
    let mut registry = Registry::with_prefix("idemkv");
    registry.register("shards", "Shards of the store", gauge(u64::from(facts.shards)));
    registry.register("segments", "Segment files, sealed and active", gauge(facts.segments));
    registry.register_with_unit("disk", "Bytes of the segment files", Unit::Bytes, gauge(facts.disk_bytes));
    registry.register_with_unit(
        "live",
        "Bytes of the records that are neither expired nor superseded",
        Unit::Bytes,
        gauge(facts.live_bytes),
    );
    let records = Family::<Vec<(&'static str, &'static str)>, Gauge<u64, AtomicU64>>::default();
    for (state, value) in [
        ("processing", facts.processing),
        ("completed", facts.completed),
        ("failed", facts.failed),
        ("expired", facts.expired),
    ] {
        records.get_or_create(&vec![("state", state)]).set(value);
    }
    registry.register(
        "records",
        "Records in the index by state; expired: past their TTL, not yet compacted away",
        records,
    );
    if let Some(created_ms) = facts.oldest_created_ms {
        let age = Gauge::<f64, AtomicU64>::default();
        #[expect(clippy::cast_precision_loss, reason = "milliseconds as seconds for display")]
        age.set(facts.now_ms.saturating_sub(created_ms) as f64 / 1000.0);
        registry.register_with_unit("oldest_record_age", "Age of the oldest live record", Unit::Seconds, age);
    }
    registry.register_with_unit(
        "torn_tail",
        "Bytes after the last whole record of active segments (cut at the next writable open)",
        Unit::Bytes,
        gauge(facts.torn_tail_bytes),
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)
        .map_err(|error| Failure::other(format!("encoding the metrics: {error}")))?;
    Ok(text)
}
