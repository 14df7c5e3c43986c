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

mod naive;
mod naive_compact;
mod redb_engine;
mod sqlite_engine;

use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, Store};
use naive::Naive;
use naive_compact::Variant;
use redb_engine::Redb;
use sqlite_engine::Sqlite;
use std::path::Path;

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
    /// The naive peer with its answers on disk (`one_thread` only).
    NaiveCompact,
    /// The naive peer with its answers in a log in memory, read in place:
    /// a floor for 32 B a key (`one_thread` only).
    NaiveCompactMemory,
    /// That floor with idemkv's per-claim checks (`one_thread` only).
    NaiveCompactChecked,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Idemkv, Kind::Naive, Kind::Redb, Kind::Sqlite];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Idemkv => "idemkv",
            Kind::Naive => "naive",
            Kind::Redb => "redb",
            Kind::Sqlite => "sqlite",
            Kind::NaiveCompact => "naive-compact",
            Kind::NaiveCompactMemory => "naive-compact-mem",
            Kind::NaiveCompactChecked => "naive-compact-checked",
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
            Kind::NaiveCompact => Box::new(naive_compact::NaiveCompact::open(dir, sync, Variant::File)),
            Kind::NaiveCompactMemory => Box::new(naive_compact::NaiveCompact::open(dir, sync, Variant::Memory)),
            Kind::NaiveCompactChecked => Box::new(naive_compact::NaiveCompact::open(dir, sync, Variant::Checked)),
        }
    }
}

// ---------------------------------------------------------------- idemkv

struct Idemkv(Store);

impl Engine for Idemkv {
    fn claim(&self, key: &[u8], fingerprint: &[u8; 32]) -> Answer {
        // A replay copies the response out, once, as the naive peer's
        // clone does; nothing else of the record is copied.
        let request = ClaimRequest::new(key, Fingerprint::from_bytes(*fingerprint));
        match self.0.claim_with(&request, |record| record.response().to_vec()).expect("claim") {
            Claim::Acquired(lease) => Answer::Acquired(lease.into_token().token),
            Claim::Replay(response) => {
                assert!(!response.is_empty());
                Answer::Replay
            }
            Claim::InProgress { .. } => Answer::InProgress,
            Claim::Mismatch => Answer::Mismatch,
        }
    }

    fn complete(&self, key: &[u8], token: u64, response: &[u8]) {
        let token =
            idemkv::LeaseToken { keyspace: idemkv::Keyspace::Caller, scope: Vec::new(), key: key.to_vec(), token };
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
