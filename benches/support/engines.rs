//! The claim/complete contract (absent → insert Processing; completed with
//! the same fingerprint → replay; another fingerprint → mismatch) on idemkv
//! and on what a service team would otherwise reach for:
//!
//! - naive: `Mutex<HashMap>` plus an append-only file written per mutation
//!   (length-prefixed binary records, fdatasync per mutation when durable;
//!   reopening replays the whole file into the map);
//! - redb 2 (`Durability::None` when buffered — it then survives no crash at
//!   all, which flatters it — and `Immediate` when durable);
//! - `SQLite` through rusqlite (bundled, WAL, `INSERT .. ON CONFLICT`,
//!   synchronous=OFF when buffered, FULL when durable).

use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, Store};
use parking_lot::Mutex;
use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Keys are 36 bytes (a UUID's length), responses 200 bytes.
pub const KEY_LEN: usize = 36;
pub const RESPONSE: [u8; 200] = [b'r'; 200];
pub const FINGERPRINT: [u8; 32] = [7; 32];
/// The key space of the preloaded (completed) keys; fresh keys use the
/// caller thread's number.
pub const PRELOADED: u16 = 0xffff;

/// A distinct 36-byte key for (space, n), built without allocating.
pub fn key(space: u16, n: u64) -> [u8; KEY_LEN] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut key = [b'k'; KEY_LEN];
    for (index, slot) in key[..4].iter_mut().enumerate() {
        *slot = HEX[usize::from((space >> (12 - 4 * index)) & 0xf)];
    }
    key[4] = b'-';
    for (index, slot) in key[5..21].iter_mut().enumerate() {
        *slot = HEX[usize::try_from((n >> (60 - 4 * index)) & 0xf).expect("a nibble")];
    }
    key[21] = b'-';
    key
}

/// The `n`th pick among `count` preloaded keys, spread over the whole set.
pub fn pick(n: u64, count: u64) -> u64 {
    n.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) % count
}

/// What a claim answered, reduced to what the benches check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Acquired(u64),
    Replay,
    InProgress,
    Mismatch,
}

pub trait Engine: Sync {
    fn claim(&self, key: &[u8], fingerprint: &[u8; 32]) -> Answer;
    fn complete(&self, key: &[u8], token: u64, response: &[u8]);

    /// Claim a fresh key and complete it, the way a service does.
    fn fresh(&self, key: &[u8], fingerprint: &[u8; 32], response: &[u8]) {
        let Answer::Acquired(token) = self.claim(key, fingerprint) else { panic!("fresh key not acquired") };
        self.complete(key, token, response);
    }

    /// Completed records for `key(PRELOADED, 0..count)`, by the fastest
    /// route the engine has (this is setup, never timed).
    fn preload(&self, count: u64) {
        for n in 0..count {
            self.fresh(&key(PRELOADED, n), &FINGERPRINT, &RESPONSE);
        }
    }

    /// Live records (to check a reopen found everything).
    fn records(&self) -> u64;

    /// Close cleanly (the default drops).
    fn close(self: Box<Self>) {}
}

/// The engines, in the order every group lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Idemkv,
    Naive,
    Redb,
    Sqlite,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Idemkv, Kind::Naive, Kind::Redb, Kind::Sqlite];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Idemkv => "idemkv",
            Kind::Naive => "naive",
            Kind::Redb => "redb",
            Kind::Sqlite => "sqlite",
        }
    }

    /// Opens (creating or reopening) this engine's files in `dir`, in its
    /// durable mode when `sync`, else its buffered one.
    pub fn open(self, dir: &Path, sync: bool) -> Box<dyn Engine> {
        match self {
            Kind::Idemkv => {
                let durability = if sync { Durability::Sync } else { Durability::Buffered };
                let config = Config::new().durability(durability).compaction_interval(None);
                Box::new(Idemkv(Store::open(dir.join("idemkv"), config).expect("open idemkv")))
            }
            Kind::Naive => Box::new(Naive::open(dir, sync)),
            Kind::Redb => Box::new(Redb::open(dir, sync)),
            Kind::Sqlite => Box::new(Sqlite::open(dir, sync)),
        }
    }
}

// ---------------------------------------------------------------- idemkv

struct Idemkv(Store);

impl Engine for Idemkv {
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

    fn records(&self) -> u64 {
        self.0.stats().live_records
    }

    fn close(self: Box<Self>) {
        self.0.close().expect("close idemkv");
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

const NAIVE_CLAIM: u8 = 1;
const NAIVE_COMPLETE: u8 = 2;

impl Naive {
    /// Opens the log, replaying whatever it holds into the map.
    fn open(dir: &Path, sync: bool) -> Self {
        let path = dir.join("naive.log");
        let mut map = HashMap::new();
        let mut next_token = 1;
        if let Ok(bytes) = std::fs::read(&path) {
            let mut at = 0;
            while let Some((kind, key, fingerprint, token, response, next)) = Naive::decode(&bytes, at) {
                next_token = next_token.max(token + 1);
                if kind == NAIVE_CLAIM {
                    let record = NaiveRecord { completed: false, fingerprint, token, response: Vec::new() };
                    map.insert(key.to_vec(), record);
                } else if let Some(record) = map.get_mut(key) {
                    record.completed = true;
                    record.response = response.to_vec();
                }
                at = next;
            }
        }
        let file = OpenOptions::new().create(true).append(true).open(path).expect("open naive log");
        Naive { state: Mutex::new(NaiveState { map, file, next_token }), sync }
    }

    /// One record at `at`: kind, key length (u16), key, fingerprint, token
    /// (u64), response length (u32), response; `None` at the end or a torn tail.
    #[allow(clippy::type_complexity, reason = "one record's fields, read once")]
    fn decode(bytes: &[u8], at: usize) -> Option<(u8, &[u8], [u8; 32], u64, &[u8], usize)> {
        let take = |from: usize, len: usize| bytes.get(from..from + len);
        let kind = *bytes.get(at)?;
        let key_len = usize::from(u16::from_le_bytes(take(at + 1, 2)?.try_into().ok()?));
        let key = take(at + 3, key_len)?;
        let mut cursor = at + 3 + key_len;
        let fingerprint: [u8; 32] = take(cursor, 32)?.try_into().ok()?;
        let token = u64::from_le_bytes(take(cursor + 32, 8)?.try_into().ok()?);
        let response_len = usize::try_from(u32::from_le_bytes(take(cursor + 40, 4)?.try_into().ok()?)).ok()?;
        cursor += 44;
        let response = take(cursor, response_len)?;
        Some((kind, key, fingerprint, token, response, cursor + response_len))
    }

    fn append(&self, file: &mut File, kind: u8, key: &[u8], record: &NaiveRecord) {
        let mut line = Vec::with_capacity(47 + key.len() + record.response.len());
        line.push(kind);
        line.extend_from_slice(&u16::try_from(key.len()).expect("short key").to_le_bytes());
        line.extend_from_slice(key);
        line.extend_from_slice(&record.fingerprint);
        line.extend_from_slice(&record.token.to_le_bytes());
        line.extend_from_slice(&u32::try_from(record.response.len()).expect("small response").to_le_bytes());
        line.extend_from_slice(&record.response);
        file.write_all(&line).expect("write");
        if self.sync {
            file.sync_data().expect("fdatasync");
        }
    }
}

impl Engine for Naive {
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
        let record = NaiveRecord { completed: false, fingerprint: *fingerprint, token, response: Vec::new() };
        self.append(&mut state.file, NAIVE_CLAIM, key, &record);
        state.map.insert(key.to_vec(), record);
        Answer::Acquired(token)
    }

    fn complete(&self, key: &[u8], token: u64, response: &[u8]) {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        let record = state.map.get_mut(key).expect("claimed");
        assert_eq!(record.token, token);
        record.completed = true;
        record.response = response.to_vec();
        self.append(&mut state.file, NAIVE_COMPLETE, key, record);
    }

    fn records(&self) -> u64 {
        u64::try_from(self.state.lock().map.len()).expect("fits")
    }
}

// ---------------------------------------------------------------- redb

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idempotency");

struct Redb {
    db: redb::Database,
    durability: redb::Durability,
    next_token: AtomicU64,
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
        Redb { db, durability, next_token: AtomicU64::new(1 << 40) }
    }
}

impl Engine for Redb {
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
                let token = self.next_token.fetch_add(1, Ordering::Relaxed);
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

    /// Completed rows written 10,000 to a durable transaction.
    fn preload(&self, count: u64) {
        for start in (0..count).step_by(10_000) {
            let transaction = self.db.begin_write().expect("write");
            {
                let mut table = transaction.open_table(TABLE).expect("table");
                for n in start..count.min(start + 10_000) {
                    let value = redb_value(true, &FINGERPRINT, n + 1, &RESPONSE);
                    table.insert(&key(PRELOADED, n)[..], value.as_slice()).expect("insert");
                }
            }
            transaction.commit().expect("commit");
        }
    }

    fn records(&self) -> u64 {
        match self.db.begin_read().expect("read").open_table(TABLE) {
            Ok(table) => table.len().expect("len"),
            Err(_) => 0,
        }
    }
}

// ---------------------------------------------------------------- SQLite

struct Sqlite {
    connection: Mutex<rusqlite::Connection>,
    next_token: AtomicU64,
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
        Sqlite { connection: Mutex::new(connection), next_token: AtomicU64::new(1 << 40) }
    }
}

impl Engine for Sqlite {
    fn claim(&self, key: &[u8], fingerprint: &[u8; 32]) -> Answer {
        let connection = self.connection.lock();
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
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

    /// Completed rows inserted 10,000 to a transaction.
    fn preload(&self, count: u64) {
        let mut connection = self.connection.lock();
        for start in (0..count).step_by(10_000) {
            let transaction = connection.transaction().expect("begin");
            {
                let mut insert = transaction
                    .prepare_cached("INSERT INTO keys (k, state, fp, token, response) VALUES (?1, 2, ?2, ?3, ?4)")
                    .expect("prepare");
                for n in start..count.min(start + 10_000) {
                    let params = rusqlite::params![
                        &key(PRELOADED, n)[..],
                        &FINGERPRINT[..],
                        (n + 1).cast_signed(),
                        &RESPONSE[..]
                    ];
                    insert.execute(params).expect("insert");
                }
            }
            transaction.commit().expect("commit");
        }
    }

    fn records(&self) -> u64 {
        let count: i64 =
            self.connection.lock().query_row("SELECT count(*) FROM keys", [], |row| row.get(0)).expect("count");
        count.cast_unsigned()
    }
}
