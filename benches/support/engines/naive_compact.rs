//! The naive peer with its answers out of its map (`naive-compact`): the
//! same append-only record format as [`super::naive`], but the map keeps
//! no record, only where each key's newest record is — a 64-bit hash of
//! the key to the record's offset and length, 16 bytes an entry (17 B a
//! bucket with its control byte; about 36 B a key at 1 M keys, where the
//! table has just doubled) — and a replay reads its record back from the
//! log and checks the key and fingerprint there; a completion reads its
//! claim back too (for the fingerprint it keeps). Three variants:
//!
//! - a file, read back with `pread` (`naive-compact`): what the naive
//!   peer's speed owes to keeping every answer in RAM (about 300 B a key);
//! - process memory, read in place (`naive-compact-mem`): a floor for an
//!   engine that keeps 32 B a key or less and reads its answers from a
//!   mapped log, as idemkv does: the same memory reads (the map's bucket,
//!   then the record), and nothing else — no checksum, no clock, no
//!   counter, no TTL, one lock. The log is then anonymous memory where
//!   idemkv's is the page cache, so its resident size is not 32 B a key;
//! - process memory, with the checks idemkv's contract makes on every
//!   claim (`naive-compact-checked`): the floor above plus a CRC32 on
//!   each record, verified whenever it is read; the key's keyed 128-bit
//!   SipHash-1-3 (what idemkv places keys by: a hostile client cannot
//!   choose keys that meet) in place of the 64-bit one; the wall clock
//!   read for the TTL; two readings of the claims' latency clock
//!   (`quanta`, as with idemkv's `metrics` feature); and the two counters
//!   a replay adds to (`Store::stats`). What a replay costs at least
//!   with idemkv's layout *and* its checks: the line between what its
//!   contract costs and what its code does. `IDEMKV_BENCH_CHECKS` names
//!   the checks it makes (`crc,hash,clock,timing,counters`, every one
//!   unless set), so that each one's share can be measured.
//!
//! A bench engine, not a store: two keys whose hashes meet would share a
//! slot (the second finds the first's record, whose key differs, and
//! reads as absent), and reopening starts empty.

use super::naive::{decode, encode, NAIVE_CLAIM, NAIVE_COMPLETE};
use super::{Answer, Engine};
use idemkv::{Clock, SystemClock};
use parking_lot::Mutex;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::hash::BuildHasher;
use std::hint::black_box;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

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

    /// The record of `slot`, decoded: (key, fingerprint, token, response);
    /// its trailing CRC checked first when `checked`.
    fn record(&mut self, slot: u64, checked: bool) -> (&[u8], [u8; 32], u64, &[u8]) {
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
        let bytes = if checked {
            let (body, crc) = bytes.split_at(bytes.len() - 4);
            assert_eq!(crc32fast::hash(body).to_le_bytes(), crc, "a damaged record");
            body
        } else {
            bytes
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
    /// With idemkv's per-claim checks (`naive-compact-checked`).
    checks: Option<Checks>,
}

/// What idemkv's contract adds to each claim, each unless left out of
/// `IDEMKV_BENCH_CHECKS`: a CRC per record (`crc`), the keyed 128-bit
/// hash (`hash`, its key here), the wall clock for the TTL (`clock`), the
/// claim's latency (`timing`), and the counters `Store::stats` reports
/// (`counters`).
#[expect(clippy::struct_excessive_bools, reason = "a switch a check, each read where its check is")]
struct Checks {
    crc: bool,
    key: Option<[u64; 2]>,
    clock: bool,
    timing: bool,
    counters: bool,
    claims: AtomicU64,
    replays: AtomicU64,
}

impl Checks {
    fn from_env() -> Checks {
        let named = std::env::var("IDEMKV_BENCH_CHECKS").unwrap_or_else(|_| "crc,hash,clock,timing,counters".into());
        let on = |check: &str| named.split(',').any(|name| name == check);
        Checks {
            crc: on("crc"),
            key: on("hash").then(|| [fastrand::u64(..), fastrand::u64(..)]),
            clock: on("clock"),
            timing: on("timing"),
            counters: on("counters"),
            claims: AtomicU64::new(0),
            replays: AtomicU64::new(0),
        }
    }
}

/// Where [`NaiveCompact`] keeps its log, and what it checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Variant {
    File,
    Memory,
    Checked,
}

impl NaiveCompact {
    /// Its log in a file in `dir` for [`Variant::File`], else in memory.
    pub(super) fn open(dir: &Path, sync: bool, variant: Variant) -> Self {
        let log = if variant == Variant::File {
            let path = dir.join("naive-compact.log");
            let file = OpenOptions::new().create(true).truncate(true).read(true).write(true).open(path).expect("open");
            Log::File { file, read: Vec::new() }
        } else {
            Log::Memory(Vec::new())
        };
        let state = State { slots: HashMap::new(), log, end: 0, next_token: 1 };
        let checks = (variant == Variant::Checked).then(Checks::from_env);
        NaiveCompact { state: Mutex::new(state), hasher: RandomState::new(), sync, checks }
    }

    /// The key's map key: its 64-bit `SipHash`, or with the checks the low
    /// half of its keyed 128-bit one.
    fn hash(&self, key: &[u8]) -> u64 {
        match self.checks.as_ref().and_then(|checks| checks.key) {
            None => self.hasher.hash_one(key),
            Some(sip_key) => {
                use siphasher::sip128::{Hasher128, SipHasher13};
                use std::hash::Hasher;
                let mut hasher = SipHasher13::new_with_keys(sip_key[0], sip_key[1]);
                hasher.write(&(key.len() as u64).to_le_bytes());
                hasher.write(key);
                #[expect(clippy::cast_possible_truncation, reason = "the low half")]
                let low = hasher.finish128().as_u128() as u64;
                low
            }
        }
    }

    /// A record as written: with the checks, its CRC after it.
    fn framed(&self, mut record: Vec<u8>) -> Vec<u8> {
        if self.checked() {
            let crc = crc32fast::hash(&record);
            record.extend_from_slice(&crc.to_le_bytes());
        }
        record
    }

    /// Whether records carry a CRC.
    fn checked(&self) -> bool {
        self.checks.as_ref().is_some_and(|checks| checks.crc)
    }

    /// Appends `record` and gives its [`slot`].
    fn append(&self, state: &mut State, record: &[u8], completed: bool) -> u64 {
        let at = state.end;
        state.log.append(record, self.sync);
        state.end += record.len() as u64;
        slot(at, record.len(), completed)
    }

    /// The claim's answer, under the lock.
    fn answer(&self, key: &[u8], fingerprint: &[u8; 32]) -> Answer {
        let hash = self.hash(key);
        let checked = self.checked();
        let mut guard = self.state.lock();
        let state = &mut *guard;
        if let Some(checks) = self.checks.as_ref().filter(|checks| checks.counters) {
            checks.claims.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(&slot) = state.slots.get(&hash) {
            let (stored_key, stored_fingerprint, _, response) = state.log.record(slot, checked);
            if stored_key == key {
                return match (stored_fingerprint == *fingerprint, slot & COMPLETED != 0) {
                    (false, _) => Answer::Mismatch,
                    (true, true) => {
                        if let Some(checks) = &self.checks {
                            if checks.clock {
                                // A finished record's TTL is read against the wall clock.
                                black_box(SystemClock.now_ms());
                            }
                            if checks.counters {
                                checks.replays.fetch_add(1, Ordering::Relaxed);
                            }
                        }
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
        let record = self.framed(encode(NAIVE_CLAIM, key, fingerprint, token, &[]));
        let slot = self.append(state, &record, false);
        state.slots.insert(hash, slot);
        Answer::Acquired(token)
    }
}

impl Engine for NaiveCompact {
    fn claim(&self, key: &[u8], fingerprint: &[u8; 32]) -> Answer {
        let started = self.checks.as_ref().filter(|checks| checks.timing).map(|_| quanta::Instant::now());
        let answer = self.answer(key, fingerprint);
        if let Some(started) = started {
            black_box(started.elapsed());
        }
        answer
    }

    fn complete(&self, key: &[u8], token: u64, response: &[u8]) {
        let hash = self.hash(key);
        let checked = self.checked();
        let mut guard = self.state.lock();
        let state = &mut *guard;
        let claimed = *state.slots.get(&hash).expect("claimed");
        let (_, fingerprint, stored_token, _) = state.log.record(claimed, checked);
        assert_eq!(stored_token, token);
        let record = self.framed(encode(NAIVE_COMPLETE, key, &fingerprint, token, response));
        let slot = self.append(state, &record, true);
        state.slots.insert(hash, slot);
    }

    fn records(&self) -> u64 {
        self.state.lock().slots.len() as u64
    }
}
