//! idemkv beside what a service team would otherwise reach for, all
//! implementing the same claim/complete contract (absent → insert
//! Processing; completed with the same fingerprint → replay; another
//! fingerprint → mismatch), in one run:
//!
//! - naive: `Mutex<HashMap>` plus an append-only file written per mutation
//!   (fdatasync per mutation under Sync);
//! - redb 2 (`Durability::None` for Buffered — it then survives no crash at
//!   all, which flatters it — and Immediate for Sync);
//! - `SQLite` through rusqlite (bundled, WAL, `INSERT .. ON CONFLICT`,
//!   synchronous=OFF for Buffered, FULL for Sync).
//!
//! ```text
//! cargo bench --bench peers                       # 1 s per cell
//! IDEMKV_BENCH_SECONDS=0.05 cargo bench --bench peers
//! ```

mod support;

use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, Store};
use parking_lot::Mutex;
use redb::{ReadableTable, TableDefinition};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use support::{drive, ratio, Measured};

/// What a claim answered, reduced to what the bench checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Acquired(u64),
    Replay,
    InProgress,
    Mismatch,
}

trait Engine: Sync {
    fn name(&self) -> &'static str;
    fn claim(&self, key: &[u8], fingerprint: &[u8; 32]) -> Answer;
    fn complete(&self, key: &[u8], token: u64, response: &[u8]);

    /// Claim a fresh key and complete it, the way a service does.
    fn fresh(&self, key: &[u8], fingerprint: &[u8; 32], response: &[u8]) {
        let Answer::Acquired(token) = self.claim(key, fingerprint) else { panic!("fresh key not acquired") };
        self.complete(key, token, response);
    }
}

// ---------------------------------------------------------------- idemkv

struct Idemkv(Store);

impl Engine for Idemkv {
    fn name(&self) -> &'static str {
        "idemkv"
    }

    fn claim(&self, key: &[u8], fingerprint: &[u8; 32]) -> Answer {
        match self.0.claim(&ClaimRequest::new(key, Fingerprint::from_bytes(*fingerprint))).expect("claim") {
            Claim::Acquired(lease) => Answer::Acquired(lease.into_token().token),
            Claim::Replay(record) => {
                assert!(!record.response.is_empty());
                Answer::Replay
            }
            Claim::InProgress { .. } => Answer::InProgress,
            Claim::Mismatch => Answer::Mismatch,
        }
    }

    fn complete(&self, key: &[u8], token: u64, response: &[u8]) {
        let token = idemkv::LeaseToken { scope: Vec::new(), key: key.to_vec(), token };
        self.0.complete(&token, response).expect("complete");
    }

    fn fresh(&self, key: &[u8], fingerprint: &[u8; 32], response: &[u8]) {
        let request = ClaimRequest::new(key, Fingerprint::from_bytes(*fingerprint));
        let Claim::Acquired(lease) = self.0.claim(&request).expect("claim") else { panic!("fresh key not acquired") };
        lease.complete(response).expect("complete");
    }
}

// ---------------------------------------------------------------- naive

struct NaiveRecord {
    completed: bool,
    fingerprint: [u8; 32],
    token: u64,
    response: Vec<u8>,
}

struct NaiveState {
    map: HashMap<Vec<u8>, NaiveRecord>,
    file: File,
    next_token: u64,
}

struct Naive {
    state: Mutex<NaiveState>,
    sync: bool,
}

impl Naive {
    fn open(dir: &Path, sync: bool) -> Self {
        let file = OpenOptions::new().create(true).append(true).open(dir.join("naive.log")).expect("open");
        Naive { state: Mutex::new(NaiveState { map: HashMap::new(), file, next_token: 1 }), sync }
    }

    fn append(&self, file: &mut File, parts: &[&[u8]]) {
        let mut line = Vec::with_capacity(parts.iter().map(|part| part.len() + 1).sum());
        for part in parts {
            line.extend_from_slice(part);
            line.push(b' ');
        }
        line.push(b'\n');
        file.write_all(&line).expect("write");
        if self.sync {
            file.sync_data().expect("fsync");
        }
    }
}

impl Engine for Naive {
    fn name(&self) -> &'static str {
        "naive"
    }

    fn claim(&self, key: &[u8], fingerprint: &[u8; 32]) -> Answer {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        if let Some(record) = state.map.get(key) {
            return match (record.fingerprint == *fingerprint, record.completed) {
                (false, _) => Answer::Mismatch,
                (true, true) => {
                    let response = record.response.clone();
                    assert!(!response.is_empty());
                    Answer::Replay
                }
                (true, false) => Answer::InProgress,
            };
        }
        let token = state.next_token;
        state.next_token += 1;
        state.map.insert(
            key.to_vec(),
            NaiveRecord { completed: false, fingerprint: *fingerprint, token, response: Vec::new() },
        );
        self.append(&mut state.file, &[b"claim", key, fingerprint, &token.to_le_bytes()]);
        Answer::Acquired(token)
    }

    fn complete(&self, key: &[u8], token: u64, response: &[u8]) {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        let record = state.map.get_mut(key).expect("claimed");
        assert_eq!(record.token, token);
        record.completed = true;
        record.response = response.to_vec();
        self.append(&mut state.file, &[b"complete", key, &token.to_le_bytes(), response]);
    }
}

// ---------------------------------------------------------------- redb

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idempotency");

struct Redb {
    db: redb::Database,
    durability: redb::Durability,
    next_token: std::sync::atomic::AtomicU64,
}

/// Value layout: state (1 processing, 2 completed), fingerprint, token, response.
fn redb_value(completed: bool, fingerprint: &[u8; 32], token: u64, response: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(41 + response.len());
    value.push(if completed { 2 } else { 1 });
    value.extend_from_slice(fingerprint);
    value.extend_from_slice(&token.to_le_bytes());
    value.extend_from_slice(response);
    value
}

fn decide(value: &[u8], fingerprint: &[u8; 32]) -> Answer {
    if value[1..33] != fingerprint[..] {
        Answer::Mismatch
    } else if value[0] == 2 {
        assert!(value.len() > 41);
        Answer::Replay
    } else {
        Answer::InProgress
    }
}

impl Redb {
    fn open(dir: &Path, sync: bool) -> Self {
        let db = redb::Database::create(dir.join("redb")).expect("redb");
        let durability = if sync { redb::Durability::Immediate } else { redb::Durability::None };
        Redb { db, durability, next_token: std::sync::atomic::AtomicU64::new(1) }
    }
}

impl Engine for Redb {
    fn name(&self) -> &'static str {
        "redb"
    }

    fn claim(&self, key: &[u8], fingerprint: &[u8; 32]) -> Answer {
        // Hits are answered from a read transaction, as a tuned service would.
        if let Ok(table) = self.db.begin_read().expect("read").open_table(TABLE) {
            if let Some(value) = table.get(key).expect("get") {
                return decide(value.value(), fingerprint);
            }
        }
        let mut transaction = self.db.begin_write().expect("write");
        transaction.set_durability(self.durability);
        let answer = {
            let mut table = transaction.open_table(TABLE).expect("table");
            let existing = table.get(key).expect("get").map(|value| decide(value.value(), fingerprint));
            if let Some(answer) = existing {
                answer
            } else {
                let token = self.next_token.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                table.insert(key, redb_value(false, fingerprint, token, &[]).as_slice()).expect("insert");
                Answer::Acquired(token)
            }
        };
        transaction.commit().expect("commit");
        answer
    }

    fn complete(&self, key: &[u8], token: u64, response: &[u8]) {
        let mut transaction = self.db.begin_write().expect("write");
        transaction.set_durability(self.durability);
        {
            let mut table = transaction.open_table(TABLE).expect("table");
            let fingerprint: [u8; 32] = {
                let value = table.get(key).expect("get").expect("claimed");
                let value = value.value();
                assert_eq!(value[33..41], token.to_le_bytes());
                value[1..33].try_into().expect("32 bytes")
            };
            table.insert(key, redb_value(true, &fingerprint, token, response).as_slice()).expect("insert");
        }
        transaction.commit().expect("commit");
    }
}

// ---------------------------------------------------------------- SQLite

struct Sqlite {
    connection: Mutex<rusqlite::Connection>,
    next_token: std::sync::atomic::AtomicU64,
}

impl Sqlite {
    fn open(dir: &Path, sync: bool) -> Self {
        let connection = rusqlite::Connection::open(dir.join("sqlite.db")).expect("sqlite");
        let synchronous = if sync { "FULL" } else { "OFF" };
        connection
            .execute_batch(&format!(
                "PRAGMA journal_mode=WAL; PRAGMA synchronous={synchronous};
                 CREATE TABLE IF NOT EXISTS keys (k BLOB PRIMARY KEY, state INTEGER NOT NULL,
                   fp BLOB NOT NULL, token INTEGER NOT NULL, response BLOB) WITHOUT ROWID;"
            ))
            .expect("schema");
        Sqlite { connection: Mutex::new(connection), next_token: std::sync::atomic::AtomicU64::new(1) }
    }
}

impl Engine for Sqlite {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn claim(&self, key: &[u8], fingerprint: &[u8; 32]) -> Answer {
        let connection = self.connection.lock();
        let token = self.next_token.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let inserted = connection
            .prepare_cached("INSERT INTO keys (k, state, fp, token) VALUES (?1, 1, ?2, ?3) ON CONFLICT(k) DO NOTHING")
            .expect("prepare")
            .execute(rusqlite::params![key, &fingerprint[..], token.cast_signed()])
            .expect("insert");
        if inserted == 1 {
            return Answer::Acquired(token);
        }
        let mut select =
            connection.prepare_cached("SELECT state, fp, response FROM keys WHERE k = ?1").expect("prepare");
        select
            .query_row([key], |row| {
                let state: i64 = row.get(0)?;
                let stored: Vec<u8> = row.get(1)?;
                let response: Option<Vec<u8>> = row.get(2)?;
                Ok(if stored != fingerprint[..] {
                    Answer::Mismatch
                } else if state == 2 {
                    assert!(response.is_some_and(|response| !response.is_empty()));
                    Answer::Replay
                } else {
                    Answer::InProgress
                })
            })
            .expect("select")
    }

    fn complete(&self, key: &[u8], token: u64, response: &[u8]) {
        let connection = self.connection.lock();
        let updated = connection
            .prepare_cached("UPDATE keys SET state = 2, response = ?2 WHERE k = ?1 AND token = ?3")
            .expect("prepare")
            .execute(rusqlite::params![key, response, token.cast_signed()])
            .expect("update");
        assert_eq!(updated, 1);
    }
}

// ---------------------------------------------------------------- workloads

#[derive(Debug, Clone, Copy)]
enum Workload {
    Fresh,
    Replay,
    Mixed,
    InProgress,
    Mismatch,
}

const PRELOADED: u64 = 10_000;

/// A key of exactly `len` bytes for (thread, n); thread `u16::MAX` names
/// the preloaded keys.
fn key_into(buffer: &mut [u8; 255], len: usize, thread: usize, n: u64) -> &[u8] {
    let text = format!("{thread:04x}-{n:016x}-");
    let bytes = text.as_bytes();
    for (index, slot) in buffer[..len].iter_mut().enumerate() {
        *slot = bytes.get(index).copied().unwrap_or(b'k');
    }
    if len < bytes.len() {
        // Short keys keep the distinguishing tail.
        buffer[..len].copy_from_slice(&bytes[bytes.len() - len..]);
    }
    &buffer[..len]
}

const PRELOAD_THREAD: usize = 0xffff;

struct Shape {
    threads: usize,
    key_len: usize,
    response: Vec<u8>,
}

fn preload(engine: &dyn Engine, shape: &Shape, processing: bool) {
    let fingerprint = [7u8; 32];
    let mut buffer = [0u8; 255];
    for n in 0..PRELOADED {
        let key = key_into(&mut buffer, shape.key_len, PRELOAD_THREAD, n);
        let Answer::Acquired(token) = engine.claim(key, &fingerprint) else { panic!("preload") };
        if !processing {
            engine.complete(key, token, &shape.response);
        }
    }
}

fn run(engine: &dyn Engine, workload: Workload, shape: &Shape, seconds: f64) -> Measured {
    let fingerprint = [7u8; 32];
    let other = [8u8; 32];
    match workload {
        Workload::Replay | Workload::Mixed | Workload::Mismatch => preload(engine, shape, false),
        Workload::InProgress => preload(engine, shape, true),
        Workload::Fresh => {}
    }
    drive(shape.threads, seconds, |thread, n| {
        let mut buffer = [0u8; 255];
        let pick = n.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) % PRELOADED;
        let fresh = |buffer: &mut [u8; 255]| {
            let key = key_into(buffer, shape.key_len, thread, n);
            engine.fresh(key, &fingerprint, &shape.response);
        };
        match workload {
            Workload::Fresh => fresh(&mut buffer),
            Workload::Mixed if n % 10 == 0 => fresh(&mut buffer),
            Workload::Replay | Workload::Mixed => {
                let key = key_into(&mut buffer, shape.key_len, PRELOAD_THREAD, pick);
                assert_eq!(engine.claim(key, &fingerprint), Answer::Replay);
            }
            Workload::InProgress => {
                let key = key_into(&mut buffer, shape.key_len, PRELOAD_THREAD, pick);
                assert_eq!(engine.claim(key, &fingerprint), Answer::InProgress);
            }
            Workload::Mismatch => {
                let key = key_into(&mut buffer, shape.key_len, PRELOAD_THREAD, pick);
                assert_eq!(engine.claim(key, &other), Answer::Mismatch);
            }
        }
    })
}

fn engines(dir: &Path, sync: bool) -> Vec<Box<dyn Engine>> {
    let durability = if sync { Durability::Sync } else { Durability::Buffered };
    let store = Store::open(dir.join("idemkv"), Config::new().durability(durability)).expect("open");
    vec![
        Box::new(Idemkv(store)),
        Box::new(Naive::open(dir, sync)),
        Box::new(Redb::open(dir, sync)),
        Box::new(Sqlite::open(dir, sync)),
    ]
}

/// One table row: every engine on a fresh directory, then ratios.
fn row(label: &str, workload: Workload, shape: &Shape, sync: bool, seconds: f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut figures = Vec::new();
    for engine in engines(dir.path(), sync) {
        let measured = run(engine.as_ref(), workload, shape, seconds);
        figures.push((engine.name(), measured));
    }
    let ours = figures[0].1.ops_per_second;
    let mut line = format!("{label:<34}");
    for (name, measured) in &figures {
        let _ = write!(
            line,
            " | {name} {:>9.0}/s p50 {:>7.1?} p99 {:>7.1?}",
            measured.ops_per_second,
            measured.percentile(0.50),
            measured.percentile(0.99)
        );
    }
    for (name, measured) in &figures[1..] {
        let _ = write!(line, " | ×{name} {:.1}", ratio(ours, measured.ops_per_second));
    }
    println!("{line}");
}

fn main() {
    let seconds = support::seconds(1.0);
    let shape = |threads, key_len, response_len| Shape { threads, key_len, response: vec![b'r'; response_len] };
    println!("ops/s and latency per call (fresh = claim + complete), {seconds} s per cell");
    println!("-- Buffered, 1 thread, 36-byte keys, 200-byte responses");
    for (label, workload) in [
        ("fresh claim+complete", Workload::Fresh),
        ("replay hit", Workload::Replay),
        ("90% replay / 10% fresh", Workload::Mixed),
        ("in-progress answer", Workload::InProgress),
        ("mismatch answer", Workload::Mismatch),
    ] {
        row(label, workload, &shape(1, 36, 200), false, seconds);
    }
    println!("-- Buffered, threads");
    for threads in [1, 2, 4, 8] {
        row(&format!("fresh, {threads} threads"), Workload::Fresh, &shape(threads, 36, 200), false, seconds);
        row(&format!("replay, {threads} threads"), Workload::Replay, &shape(threads, 36, 200), false, seconds);
    }
    println!("-- Sync (fsync before every answer)");
    for threads in [1, 8] {
        row(&format!("fresh, {threads} threads"), Workload::Fresh, &shape(threads, 36, 200), true, seconds);
    }
    println!("-- Buffered, 1 thread, key and response sizes");
    for key_len in [16, 36, 255] {
        for response_len in [200, 4096] {
            let label = format!("fresh, key {key_len} B, resp {response_len} B");
            row(&label, Workload::Fresh, &shape(1, key_len, response_len), false, seconds);
            let label = format!("replay, key {key_len} B, resp {response_len} B");
            row(&label, Workload::Replay, &shape(1, key_len, response_len), false, seconds);
        }
    }
}
