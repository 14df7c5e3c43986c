//! `export` and `import`: a store's live records to a file, and a file's
//! records into any backend — Redis, PostgreSQL or another store — for a
//! service that moves from one process to a fleet.
//!
//! The file is JSON lines: a header (`{"idemkv_export":2,...}`), one
//! record a line (bytes in hex, times in ms since the Unix epoch; a record
//! of idemkv's own keyspaces names it, `"keyspace":"hold"`, a caller's
//! does not), and a trailer with the count (`{"end":N}`), so that a cut
//! file is refused as a whole. A file of format 1 (written before
//! keyspaces) is read too: its records under format 2's `idemkv.hold/`-style
//! scopes go to their keyspaces, as a store's migration moves them. Import reads the whole file first and refuses it, importing
//! nothing, when a line is not a record, the trailer is missing or its
//! count is wrong, or a record is larger than the target accepts.
//!
//! Import goes through the backend's contract, so a record lands exactly
//! as a claim would make it: a Completed or Failed record is claimed with
//! its fingerprint and completed (or failed) with its response, to expire
//! when it would have; a Processing record is claimed for what is left of
//! its lease (at least 1 ms) with its checkpoint, and left held: its
//! holder is gone, so the next claim after the lease end takes it over as
//! a recovered attempt with that checkpoint, as it would have on the
//! store. What the target already holds under a key is kept, never
//! overwritten (counted `present`), so an import run twice changes
//! nothing; an expired record is skipped. Tokens and attempt numbers start
//! afresh on the target: no holder of the old ones is left.

use crate::output::{count, Failure, Out};
use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Checkpoint, Fingerprint, Keyspace, Record, State, Store,
};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The format version of the export file this tool writes; it reads 1 too.
const VERSION: u32 = 2;
/// How long an imported record's claim holds before its finish.
const IMPORT_LEASE: Duration = Duration::from_secs(30);

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    idemkv_export: u32,
    exported_ms: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Trailer {
    end: u64,
}

/// One record of the file.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    /// Absent for the caller's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    keyspace: Option<String>,
    scope: String,
    key: String,
    state: LineState,
    fingerprint: String,
    /// Completed, Failed: when it expires; Processing: when its lease ends.
    deadline_ms: u64,
    response: String,
    checkpoint: Option<LinePoint>,
}

#[derive(Serialize, Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum LineState {
    Processing,
    Completed,
    Failed,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinePoint {
    step: String,
    payload: String,
}

/// A record read back from the file, checked.
struct Imported {
    keyspace: Keyspace,
    scope: Vec<u8>,
    key: Vec<u8>,
    state: LineState,
    fingerprint: Fingerprint,
    deadline_ms: u64,
    response: Vec<u8>,
    checkpoint: Option<Checkpoint>,
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(0))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut text, byte| {
        let _ = write!(text, "{byte:02x}");
        text
    })
}

fn unhex(text: &str, what: &str) -> Result<Vec<u8>, String> {
    let digits = text.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return Err(format!("{what}: an odd number of hex digits"));
    }
    let digit =
        |c: u8| char::from(c).to_digit(16).ok_or_else(|| format!("{what}: {:?} is not a hex digit", char::from(c)));
    digits.chunks(2).map(|pair| Ok(u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).unwrap_or(0))).collect()
}

/// `idemkv export DIR FILE`: every live record of the store (opened
/// read-only) into a new file, synced before the summary is printed.
pub fn export(dir: &Path, file: &Path) -> Result<ExitCode, Failure> {
    let store = crate::inspect::open_read_only(dir)?;
    let created = OpenOptions::new().write(true).create_new(true).open(file).map_err(|error| {
        Failure::other(match error.kind() {
            std::io::ErrorKind::AlreadyExists => format!("{} exists: export writes a new file", file.display()),
            _ => crate::output::io_message("create", file, &error),
        })
    })?;
    let mut writer = BufWriter::new(created);
    let write_error = |error: std::io::Error| Failure::other(crate::output::io_message("write", file, &error));
    let put = |writer: &mut BufWriter<File>, line: String| writeln!(writer, "{line}").map_err(write_error);
    put(&mut writer, json(&Header { idemkv_export: VERSION, exported_ms: now_ms() }))?;
    let mut written = 0u64;
    for record in &store {
        put(&mut writer, json(&line_of(&record?)))?;
        written += 1;
    }
    put(&mut writer, json(&Trailer { end: written }))?;
    let file_handle = writer.into_inner().map_err(|error| write_error(error.into_error()))?;
    file_handle.sync_all().map_err(write_error)?;
    Out::default().line(format!("exported {} live records to {}", count(written), file.display()))?;
    Ok(ExitCode::SUCCESS)
}

fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn line_of(record: &Record) -> Line {
    let state = match record.state {
        State::Processing => LineState::Processing,
        State::Failed => LineState::Failed,
        State::Completed => LineState::Completed,
    };
    Line {
        keyspace: record.keyspace.is_internal().then(|| record.keyspace.to_string()),
        scope: hex(&record.scope),
        key: hex(&record.key),
        state,
        fingerprint: hex(record.fingerprint.as_bytes()),
        deadline_ms: record.deadline_ms,
        response: hex(&record.response),
        checkpoint: record
            .checkpoint
            .as_ref()
            .map(|point| LinePoint { step: point.step.clone(), payload: hex(&point.payload) }),
    }
}

/// Reads and checks the whole file: its records, or the first reason it is
/// refused (with its line number).
fn read_file(file: &Path) -> Result<Vec<Imported>, Failure> {
    let opened = File::open(file).map_err(|error| Failure::other(crate::output::io_message("open", file, &error)))?;
    let refused =
        |line: usize, why: String| Failure::other(format!("{}:{line}: {why}; nothing was imported", file.display()));
    let mut lines = BufReader::new(opened).lines().enumerate().map(|(index, line)| (index + 1, line));
    let (_, first) = lines.next().ok_or_else(|| refused(1, "empty, not an export file".into()))?;
    let first = first.map_err(|error| refused(1, error.to_string()))?;
    let version = match serde_json::from_str::<Header>(&first) {
        Ok(header) if (1..=VERSION).contains(&header.idemkv_export) => header.idemkv_export,
        Ok(header) => {
            return Err(refused(1, format!("export format {} (this tool reads 1 to {VERSION})", header.idemkv_export)))
        }
        Err(_) => return Err(refused(1, "not an idemkv export header".into())),
    };
    let mut records = Vec::new();
    for (number, text) in lines {
        let text = text.map_err(|error| refused(number, error.to_string()))?;
        if let Ok(trailer) = serde_json::from_str::<Trailer>(&text) {
            if trailer.end != records.len() as u64 {
                return Err(refused(
                    number,
                    format!("the trailer counts {} records, the file has {}", trailer.end, records.len()),
                ));
            }
            return Ok(records);
        }
        let line: Line =
            serde_json::from_str(&text).map_err(|error| refused(number, format!("not a record: {error}")))?;
        records.push(checked(line, version).map_err(|why| refused(number, why))?);
    }
    Err(refused(records.len() + 1, "no trailer: the file is cut short".into()))
}

fn checked(line: Line, version: u32) -> Result<Imported, String> {
    let fingerprint: [u8; 32] =
        unhex(&line.fingerprint, "fingerprint")?.try_into().map_err(|_| "fingerprint: not 32 bytes".to_string())?;
    let checkpoint = match line.checkpoint {
        Some(point) => Some(Checkpoint::new(point.step, unhex(&point.payload, "checkpoint payload")?)),
        None => None,
    };
    let scope = unhex(&line.scope, "scope")?;
    let (keyspace, scope) = match (line.keyspace, version) {
        (Some(_), 1) => return Err("a keyspace in a file of format 1".into()),
        (Some(name), _) => (name.parse::<Keyspace>().map_err(|error| error.to_string())?, scope),
        (None, 1) => {
            let (keyspace, rest) = Keyspace::from_legacy_scope(&scope);
            (keyspace, rest.to_vec())
        }
        (None, _) => (Keyspace::Caller, scope),
    };
    Ok(Imported {
        keyspace,
        scope,
        key: unhex(&line.key, "key")?,
        state: line.state,
        fingerprint: Fingerprint::from_bytes(fingerprint),
        deadline_ms: line.deadline_ms,
        response: unhex(&line.response, "response")?,
        checkpoint,
    })
}

/// What an import did, by record.
#[derive(Default)]
struct Tally {
    completed: u64,
    failed: u64,
    processing: u64,
    /// The target holds the same request under the key.
    present: u64,
    /// The target holds another request under the key.
    conflicting: u64,
    /// A finished record's key is in progress on the target (an import
    /// cut short between its claim and its finish, or a live service).
    busy: u64,
    expired: u64,
}

/// Imports `file` into `backend`; prints what it did.
pub async fn import<B: IdempotencyBackend>(backend: &B, file: &Path, target: &str) -> Result<ExitCode, Failure> {
    let records = read_file(file)?;
    let limits = backend.limits();
    for (index, record) in records.iter().enumerate() {
        let too_large = record.key.len() > limits.key_bytes_max
            || record.scope.len() > limits.scope_bytes_max
            || record.response.len() > limits.response_bytes_max;
        if too_large {
            return Err(Failure::other(format!(
                "{}:{}: a key, scope or response larger than {target} accepts; nothing was imported",
                file.display(),
                index + 2
            )));
        }
    }
    let mut tally = Tally::default();
    for record in &records {
        import_one(backend, record, &mut tally).await?;
    }
    let mut out = Out::default();
    out.line(format!(
        "imported into {target}: {} completed, {} failed, {} processing; {} already there (kept), {} expired (skipped)",
        count(tally.completed),
        count(tally.failed),
        count(tally.processing),
        count(tally.present),
        count(tally.expired)
    ))?;
    if tally.conflicting + tally.busy == 0 {
        return Ok(ExitCode::SUCCESS);
    }
    out.line(format!(
        "not imported: {} keys the target holds for another request (kept), {} keys in progress there \
         (run the import again once their lease, at most {} s, has ended)",
        count(tally.conflicting),
        count(tally.busy),
        IMPORT_LEASE.as_secs()
    ))?;
    Ok(ExitCode::from(crate::output::EXIT_DAMAGE))
}

async fn import_one<B: IdempotencyBackend>(backend: &B, record: &Imported, tally: &mut Tally) -> Result<(), Failure> {
    let left = Duration::from_millis(record.deadline_ms.saturating_sub(now_ms()));
    let options = match record.state {
        LineState::Processing => ClaimOptions::new().lease(left.max(Duration::from_millis(1))),
        LineState::Completed | LineState::Failed if left.is_zero() => {
            tally.expired += 1;
            return Ok(());
        }
        LineState::Completed | LineState::Failed => ClaimOptions::new().lease(IMPORT_LEASE).ttl(left),
    };
    let claimed = backend.claim_in(record.keyspace, &record.scope, &record.key, record.fingerprint, options).await?;
    let token = match (claimed, record.state) {
        (BackendClaim::Acquired { token, .. }, _) => token,
        (BackendClaim::Replay(_), _) | (BackendClaim::InProgress { .. }, LineState::Processing) => {
            tally.present += 1;
            return Ok(());
        }
        (BackendClaim::InProgress { .. }, _) => {
            tally.busy += 1;
            return Ok(());
        }
        _ => {
            tally.conflicting += 1;
            return Ok(());
        }
    };
    match record.state {
        LineState::Completed => {
            backend.complete(&token, &record.response).await?;
            tally.completed += 1;
        }
        LineState::Failed => {
            backend.fail(&token, &record.response).await?;
            tally.failed += 1;
        }
        LineState::Processing => {
            if let Some(point) = &record.checkpoint {
                backend.checkpoint(&token, &point.step, &point.payload).await?;
            }
            // Left held: its holder is gone, the next claim after the
            // lease end takes it over.
            tally.processing += 1;
        }
    }
    Ok(())
}

/// `idemkv import FILE --store DIR`: into another store (opened for
/// writing, created if missing).
pub fn import_into_store(file: &Path, dir: &Path) -> Result<ExitCode, Failure> {
    let store = Store::open(dir, crate::inspect::config())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| Failure::other(error.to_string()))?;
    let outcome = runtime.block_on(import(&store, file, &format!("the store {}", dir.display())));
    store.close()?;
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_what_is_not_hex() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(unhex(&hex(&bytes), "x"), Ok(bytes));
        assert!(unhex("abc", "x").is_err(), "odd");
        assert!(unhex("zz", "x").is_err(), "not hex");
        assert!(unhex("é1", "x").is_err(), "not ascii");
    }
}
