//! The naive peer with its answers out of its map (`naive-compact`): the
//! same append-only record format as [`super::naive`], but the map keeps
//! no record, only where each key's newest record is — a 64-bit hash of
//! the key to the record's offset and length, 16 bytes an entry (17 B a
//! bucket with its control byte; about 36 B a key at 1 M keys, where the
//! table has just doubled) — and a replay reads its record back from the
//! log and checks the key and fingerprint there; a completion reads its
//! claim back too (for the fingerprint it keeps). Two places for the log:
//!
//! - a file, read back with `pread` (`naive-compact`): what the naive
//!   peer's speed owes to keeping every answer in RAM (about 300 B a key);
//! - process memory, read in place (`naive-compact-mem`): a floor for an
//!   engine that keeps 32 B a key or less and reads its answers from a
//!   mapped log, as idemkv does: the same memory reads (the map's bucket,
//!   then the record), and nothing else — no checksum, no clock, no
//!   counter, no TTL, one lock. The log is then anonymous memory where
//!   idemkv's is the page cache, so its resident size is not 32 B a key.
//!
//! A bench engine, not a store: two keys whose hashes meet would share a
//! slot (the second finds the first's record, whose key differs, and
//! reads as absent), and reopening starts empty.

use super::naive::{decode, encode, NAIVE_CLAIM, NAIVE_COMPLETE};
use super::{Answer, Engine};
use parking_lot::Mutex;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::hash::BuildHasher;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The top bit of a slot: its record is a completion.
const COMPLETED: u64 = 1 << 63;
/// A slot: the record's length above this bit, its offset below.
const LENGTH_SHIFT: u32 = 40;

/// The slot of a record of `len` bytes at `at`.
fn slot(at: u64, len: usize, completed: bool) -> u64 {
    let len = u64::try_from(len).expect("small record");
    assert!(at < 1 << LENGTH_SHIFT && len < 1 << (63 - LENGTH_SHIFT), "a bench's file and records");
    at | (len << LENGTH_SHIFT) | if completed { COMPLETED } else { 0 }
}

/// Where the records are.
enum Log {
    /// A file, and a record read back from it, reused.
    File { file: File, read: Vec<u8> },
    /// Process memory.
    Memory(Vec<u8>),
}

impl Log {
    fn append(&mut self, record: &[u8], sync: bool) {
        match self {
            Log::File { file, .. } => {
                file.write_all(record).expect("write");
                if sync {
                    file.sync_data().expect("fdatasync");
                }
            }
            Log::Memory(log) => log.extend_from_slice(record),
        }
    }

    /// The record of `slot`, decoded: (key, fingerprint, token, response).
    fn record(&mut self, slot: u64) -> (&[u8], [u8; 32], u64, &[u8]) {
        let len = usize::try_from((slot & !COMPLETED) >> LENGTH_SHIFT).expect("small");
        let at = slot & ((1 << LENGTH_SHIFT) - 1);
        let bytes = match self {
            Log::File { file, read } => {
                read.resize(len, 0);
                file.read_exact_at(read, at).expect("read back");
                &read[..]
            }
            Log::Memory(log) => {
                let at = usize::try_from(at).expect("in memory");
                &log[at..at + len]
            }
        };
        let (_, key, fingerprint, token, response, _) = decode(bytes, 0).expect("a whole record");
        (key, fingerprint, token, response)
    }
}

struct State {
    /// Hash of the key → [`slot`] of its newest record.
    slots: HashMap<u64, u64>,
    log: Log,
    end: u64,
    next_token: u64,
}

pub(super) struct NaiveCompact {
    state: Mutex<State>,
    hasher: RandomState,
    sync: bool,
}

impl NaiveCompact {
    /// Its log in a file in `dir` when `in_file`, else in memory.
    pub(super) fn open(dir: &Path, sync: bool, in_file: bool) -> Self {
        let log = if in_file {
            let path = dir.join("naive-compact.log");
            let file = OpenOptions::new().create(true).truncate(true).read(true).write(true).open(path).expect("open");
            Log::File { file, read: Vec::new() }
        } else {
            Log::Memory(Vec::new())
        };
        let state = State { slots: HashMap::new(), log, end: 0, next_token: 1 };
        NaiveCompact { state: Mutex::new(state), hasher: RandomState::new(), sync }
    }

    /// Appends `record` and gives its [`slot`].
    fn append(&self, state: &mut State, record: &[u8], completed: bool) -> u64 {
        let at = state.end;
        state.log.append(record, self.sync);
        state.end += record.len() as u64;
        slot(at, record.len(), completed)
    }
}

impl Engine for NaiveCompact {
    fn claim(&self, key: &[u8], fingerprint: &[u8; 32]) -> Answer {
        let hash = self.hasher.hash_one(key);
        let mut guard = self.state.lock();
        let state = &mut *guard;
        if let Some(&slot) = state.slots.get(&hash) {
            let (stored_key, stored_fingerprint, _, response) = state.log.record(slot);
            if stored_key == key {
                return match (stored_fingerprint == *fingerprint, slot & COMPLETED != 0) {
                    (false, _) => Answer::Mismatch,
                    (true, true) => {
                        let response = response.to_vec();
                        assert!(!response.is_empty());
                        Answer::Replay
                    }
                    (true, false) => Answer::InProgress,
                };
            }
        }
        let token = state.next_token;
        state.next_token += 1;
        let slot = self.append(state, &encode(NAIVE_CLAIM, key, fingerprint, token, &[]), false);
        state.slots.insert(hash, slot);
        Answer::Acquired(token)
    }

    fn complete(&self, key: &[u8], token: u64, response: &[u8]) {
        let hash = self.hasher.hash_one(key);
        let mut guard = self.state.lock();
        let state = &mut *guard;
        let claimed = *state.slots.get(&hash).expect("claimed");
        let (_, fingerprint, stored_token, _) = state.log.record(claimed);
        assert_eq!(stored_token, token);
        let slot = self.append(state, &encode(NAIVE_COMPLETE, key, &fingerprint, token, response), true);
        state.slots.insert(hash, slot);
    }

    fn records(&self) -> u64 {
        self.state.lock().slots.len() as u64
    }
}
