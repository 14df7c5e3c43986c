//! `get`, `list`, `verify`, `compact` and `repair`.

use crate::output::{self, bytes, count, io_message, relative, text_or_hex, time, Failure, Out, EXIT_DAMAGE};
use crate::StateFilter;
use idemkv::{
    store::{DroppedRecord, Evidence},
    Config, Keyspace, Record, State, Store,
};
use std::path::Path;
use std::process::ExitCode;

/// The configuration of the tool's opens: no background compactor, and
/// the largest keys and scopes a store may hold, so that any stored key can
/// be looked up.
pub fn config() -> Config {
    Config::new().compaction_interval(None).key_bytes_max(65_535).scope_bytes_max(65_535)
}

/// Opens an existing store read-only (see [`Store::open_read_only`]).
pub fn open_read_only(dir: &Path) -> Result<Store, Failure> {
    Ok(Store::open_read_only(dir, config())?)
}

/// Opens an existing store for writing; never creates one.
pub fn open_existing(dir: &Path) -> Result<Store, Failure> {
    // Checked first, so that a missing or unreadable directory, or one
    // without a manifest, is said as such rather than being created.
    if let Err(error) = std::fs::read_dir(dir) {
        return Err(Failure::other(io_message("list", dir, &error)));
    }
    if let Err(error) = std::fs::symlink_metadata(dir.join("MANIFEST")) {
        return Err(Failure::other(if error.kind() == std::io::ErrorKind::NotFound {
            format!("{} is not an idemkv store (it has no MANIFEST)", dir.display())
        } else {
            io_message("read", &dir.join("MANIFEST"), &error)
        }));
    }
    Ok(Store::open(dir, config())?)
}

/// When a record's deadline is, said for its state.
fn deadline(record: &Record) -> (&'static str, String) {
    match record.state {
        State::Processing => ("lease_end", time(record.deadline_ms)),
        _ => ("expires", time(record.deadline_ms)),
    }
}

/// `keyspace=K ` for a record of idemkv's own keyspace `K`; nothing for
/// the caller's.
fn keyspace_label(keyspace: Keyspace) -> String {
    if keyspace.is_internal() {
        format!("keyspace={keyspace} ")
    } else {
        String::new()
    }
}

/// One record on one line.
fn describe(record: &Record) -> String {
    let (label, when) = deadline(record);
    format!(
        "{}scope={:?} key={:?} state={:?} attempt={} token={}{} created={} updated={} {label}={when}{}",
        keyspace_label(record.keyspace),
        text_or_hex(&record.scope),
        text_or_hex(&record.key),
        record.state,
        record.attempt,
        record.token,
        if record.recovered { " recovered" } else { "" },
        time(record.created_ms),
        time(record.updated_ms),
        record.checkpoint.as_ref().map_or_else(String::new, |point| format!(" recovery_step={:?}", point.step)),
    )
}

pub fn get(dir: &Path, keyspace: Keyspace, scope: &str, key: &str) -> Result<ExitCode, Failure> {
    let store = open_read_only(dir)?;
    let Some(record) = store.get_in(keyspace, scope.as_bytes(), key.as_bytes())? else {
        output::warn(&format!("no live record for {}scope {scope:?} key {key:?}", keyspace_label(keyspace)));
        return Ok(ExitCode::from(EXIT_DAMAGE));
    };
    let now_ms = output::now_ms();
    let recovered = if record.recovered { ", took over an expired lease" } else { "" };
    let kind = if std::str::from_utf8(&record.response).is_ok() { "text" } else { "hex" };
    let deadline = if record.state == State::Processing { "lease end" } else { "expires" };
    let mut lines = vec![
        ("keyspace", record.keyspace.to_string()),
        ("scope", format!("{:?}", text_or_hex(&record.scope))),
        ("key", format!("{:?}", text_or_hex(&record.key))),
        ("state", format!("{:?}", record.state)),
        ("attempt", format!("{} (token {}{recovered})", record.attempt, record.token)),
        ("created", format!("{} ({})", time(record.created_ms), relative(record.created_ms, now_ms))),
        ("updated", format!("{} ({})", time(record.updated_ms), relative(record.updated_ms, now_ms))),
        (deadline, format!("{} ({})", time(record.deadline_ms), relative(record.deadline_ms, now_ms))),
    ];
    match (&record.checkpoint, record.state) {
        (Some(point), _) => lines.push((
            "recovery",
            format!(
                "step {:?}, payload {} ({})",
                point.step,
                text_or_hex(&point.payload),
                bytes(point.payload.len() as u64)
            ),
        )),
        (None, State::Processing) => lines.push(("recovery", "none".to_string())),
        (None, _) => lines.push((
            "response",
            format!("{} ({kind}, {})", text_or_hex(&record.response), bytes(record.response.len() as u64)),
        )),
    }
    let mut out = Out::default();
    for (label, value) in lines {
        out.line(format_args!("{label:<9} {value}"))?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn list(
    dir: &Path,
    (filter, keyspace): (Option<StateFilter>, Option<Keyspace>),
    limit: usize,
) -> Result<ExitCode, Failure> {
    let store = open_read_only(dir)?;
    let wanted = filter.map(|filter| match filter {
        StateFilter::Processing => State::Processing,
        StateFilter::Completed => State::Completed,
        StateFilter::Failed => State::Failed,
    });
    let mut out = Out::default();
    let mut shown = 0;
    for record in &store {
        if shown == limit || out.is_closed() {
            break;
        }
        let record = record?;
        if wanted.is_some_and(|state| state != record.state) || keyspace.is_some_and(|ks| ks != record.keyspace) {
            continue;
        }
        out.line(describe(&record))?;
        shown += 1;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn verify(dir: &Path) -> Result<ExitCode, Failure> {
    let report = idemkv::store::verify(dir)?;
    let mut out = Out::default();
    out.line(format_args!(
        "{} shards, {} segments, {} records, {} checked",
        report.shards,
        count(report.segments),
        count(report.records),
        bytes(report.bytes)
    ))?;
    if report.hints_checked + report.hints_ignored > 0 {
        out.line(format_args!(
            "hint files: {} match their segments, {} ignored by open",
            count(report.hints_checked),
            count(report.hints_ignored)
        ))?;
    }
    for hint in &report.ignored_hints {
        let next = if hint.active_segment {
            "the next writable open deletes it and writes a new one when the store is closed"
        } else {
            "the next writable open rewrites it from the log"
        };
        out.line(format_args!("hint ignored: {}: {}; {next}", hint.file.display(), hint.reason))?;
    }
    let spans = report.torn_tails.iter().map(|span| ("torn tail (cut at the next writable open)", span));
    let mut advised = None;
    for (label, span) in spans.chain(report.damage.iter().map(|span| ("DAMAGE", span))) {
        out.line(format_args!(
            "{label}: {} offset {} length {}: {}",
            span.file.display(),
            span.offset,
            span.length,
            span.reason
        ))?;
        // Once per file: every span of a segment gets the same advice.
        if label == "DAMAGE" && advised != Some((&span.file, &span.repair)) {
            out.line(format_args!("  {}", span.repair))?;
            advised = Some((&span.file, &span.repair));
        }
    }
    if report.is_clean() {
        out.line("clean")?;
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(EXIT_DAMAGE))
    }
}

pub fn repair(dir: &Path) -> Result<ExitCode, Failure> {
    let report = idemkv::store::repair(dir)?;
    let mut out = Out::default();
    for action in &report.actions {
        out.line(action)?;
    }
    for record in &report.records_dropped {
        out.line(dropped(record))?;
    }
    if report.did_nothing() {
        out.line("clean: nothing to repair")?;
        return Ok(ExitCode::SUCCESS);
    }
    let of = |evidence| report.records_dropped.iter().filter(|record| record.evidence == evidence).count();
    let superseded = report.records_dropped.iter().filter(|record| record.superseded).count();
    out.line(format_args!(
        "records dropped: {} ({} superseded by a newer record that was kept, so their keys read as before; {} \
         without a readable key, {} unchecked: no hint covers them), unreadable bytes removed: {}, whole \
         records kept in the segments rewritten: {}",
        count(report.records_dropped.len() as u64),
        count(superseded as u64),
        count(of(Evidence::HintWithoutKey) as u64),
        count(of(Evidence::Unverified) as u64),
        count(report.unreadable_bytes),
        count(report.records_kept),
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// One dropped record on one line.
fn dropped(record: &DroppedRecord) -> String {
    let name = match record.evidence {
        Evidence::HintWithoutKey => "scope and key unknown (no readable copy is left)".to_string(),
        _ => format!(
            "{}scope {:?} key {:?}",
            keyspace_label(record.keyspace),
            text_or_hex(&record.scope),
            text_or_hex(&record.key)
        ),
    };
    let how = match record.evidence {
        Evidence::Frame => "",
        Evidence::Unverified => " (unchecked: as its damaged bytes read)",
        _ => " (listed by the segment's hint)",
    };
    format!(
        "dropped: {} offset {}: {name} lsn {} {}{how}{}",
        record.file.display(),
        record.offset,
        record.lsn,
        record.kind,
        if record.superseded { "; superseded by a kept record" } else { "" }
    )
}

pub fn compact(dir: &Path) -> Result<ExitCode, Failure> {
    let store = open_existing(dir)?;
    let report = store.compact()?;
    store.close()?;
    let mut out = Out::default();
    out.line(format_args!(
        "segments dropped {}, rewritten {}, {} reclaimed, records dropped {}, index entries released {}",
        report.segments_dropped,
        report.segments_rewritten,
        bytes(report.bytes_reclaimed),
        report.records_dropped,
        report.index_entries_released
    ))?;
    Ok(ExitCode::SUCCESS)
}
