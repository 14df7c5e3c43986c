//! The naive peer with its answers on disk (`naive-compact`): the same
//! append-only file and record format as [`super::naive`], but the map
//! keeps no record, only where each key's newest record is — a 64-bit
//! hash of the key to the record's offset and length, 16 bytes an entry
//! (17 B a bucket with its control byte; about 36 B a key at 1 M keys,
//! where the table has just doubled) — and a replay reads its record back
//! from the file (`pread`) and checks the key and fingerprint there; a
//! completion reads its claim back too (for the fingerprint it keeps).
//! What the naive peer's speed owes to keeping every answer in RAM (about
//! 300 B a key).
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

struct State {
    /// Hash of the key → [`slot`] of its newest record.
    slots: HashMap<u64, u64>,
    file: File,
    end: u64,
    next_token: u64,
    /// A record read back, reused.
    read: Vec<u8>,
}

pub(super) struct NaiveCompact {
    state: Mutex<State>,
    hasher: RandomState,
    sync: bool,
}

impl NaiveCompact {
    pub(super) fn open(dir: &Path, sync: bool) -> Self {
        let path = dir.join("naive-compact.log");
        let file = OpenOptions::new().create(true).truncate(true).read(true).write(true).open(path).expect("open");
        let state = State { slots: HashMap::new(), file, end: 0, next_token: 1, read: Vec::new() };
        NaiveCompact { state: Mutex::new(state), hasher: RandomState::new(), sync }
    }

    /// Appends `record` and gives its [`slot`].
    fn append(&self, state: &mut State, record: &[u8], completed: bool) -> u64 {
        let at = state.end;
        state.file.write_all(record).expect("write");
        if self.sync {
            state.file.sync_data().expect("fdatasync");
        }
        state.end += record.len() as u64;
        slot(at, record.len(), completed)
    }
}

/// Reads the record of `slot` back into `state.read`.
fn read_back(state: &mut State, slot: u64) {
    let len = usize::try_from((slot & !COMPLETED) >> LENGTH_SHIFT).expect("small");
    state.read.resize(len, 0);
    state.file.read_exact_at(&mut state.read, slot & ((1 << LENGTH_SHIFT) - 1)).expect("read back");
}

impl Engine for NaiveCompact {
    fn claim(&self, key: &[u8], fingerprint: &[u8; 32]) -> Answer {
        let hash = self.hasher.hash_one(key);
        let mut guard = self.state.lock();
        let state = &mut *guard;
        if let Some(&slot) = state.slots.get(&hash) {
            read_back(state, slot);
            let (_, stored_key, stored_fingerprint, _, response, _) = decode(&state.read, 0).expect("a whole record");
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
        read_back(state, claimed);
        let (_, _, fingerprint, stored_token, _, _) = decode(&state.read, 0).expect("a whole record");
        assert_eq!(stored_token, token);
        let slot = self.append(state, &encode(NAIVE_COMPLETE, key, &fingerprint, token, response), true);
        state.slots.insert(hash, slot);
    }

    fn records(&self) -> u64 {
        self.state.lock().slots.len() as u64
    }
}
