//! What the index knows of a record, the lease table of a shard's
//! Processing keys, and the keyed hash of `(scope, key)`.
//!
//! A shard's index proper is the compact [`crate::engine::index::Table`]:
//! a tag and an address per key. An [`Entry`] is what a record says of
//! itself and where it is, read back from the log (or, for a Processing
//! key, kept in the shard's [`Leases`]).

use crate::engine::index::Address;
use crate::keyspace::Keyspace;
use crate::record::State;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Where the newest record of a live key is, and what a claim decides on:
/// read back from the record's header, or kept for a Processing key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// LSN of the newest record (durability waits compare against it).
    pub lsn: u64,
    /// Fencing token of the current or last holder.
    pub token: u64,
    /// Wall-clock ms from which the record reads absent: expiry (Completed /
    /// Failed), or written lease end + TTL (Processing, an abandoned lease;
    /// its lease end proper is in the shard's [`LeaseEnds`]), as the
    /// transition module's `gone_ms` computes it.
    pub deadline_ms: u64,
    pub segment: u32,
    pub offset: u32,
    pub frame_len: u32,
    pub state: State,
}

impl Entry {
    /// Where the record is, as the table holds it.
    pub(crate) fn address(&self) -> Address {
        Address { segment: self.segment, offset: self.offset, len: self.frame_len }
    }

    /// A Completed or Failed record whose TTL has passed reads as absent.
    /// (A Processing record's expiry also depends on its lease end: see
    /// `is_gone` in the transition module.)
    pub(crate) fn is_expired(&self, now_ms: u64) -> bool {
        self.state.is_expired(self.deadline_ms, now_ms)
    }
}

/// The keys are already uniform hashes; hashing them again is waste.
#[derive(Default)]
pub(crate) struct PassThroughHasher(u64);

impl Hasher for PassThroughHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only index keys are hashed here, through `write_u64`; this path
        // folds arbitrary input for completeness.
        for chunk in bytes.chunks(8) {
            let mut raw = [0u8; 8];
            raw[..chunk.len()].copy_from_slice(chunk);
            self.0 ^= u64::from_le_bytes(raw);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// The 128-bit index hash as two words: a `u128` would align buckets to
/// 16 bytes and waste 8 of every 64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexKey([u64; 2]);

impl std::hash::Hash for IndexKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // The low word of a uniform hash is hash enough; the shard was
        // chosen from the top bits of the high word, so the two are
        // independent.
        state.write_u64(self.0[0]);
    }
}

impl From<u128> for IndexKey {
    fn from(hash: u128) -> Self {
        #[expect(clippy::cast_possible_truncation, reason = "splitting into the two halves")]
        IndexKey([hash as u64, (hash >> 64) as u64])
    }
}

impl From<IndexKey> for u128 {
    fn from(key: IndexKey) -> u128 {
        u128::from(key.0[0]) | (u128::from(key.0[1]) << 64)
    }
}

/// A Processing key's entry and its lease end on the monotonic scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lease {
    pub entry: Entry,
    pub end_ms: u64,
}

/// The entry and lease end of every Processing key of a shard, beside the
/// table, by the key's 128-bit hash: what a lease holder's calls (finish,
/// renew, checkpoint) check the token against without reading the log,
/// and what expiry of abandoned leases walks. Only keys in flight are here.
#[derive(Debug, Default)]
pub(crate) struct Leases(HashMap<IndexKey, Lease, BuildHasherDefault<PassThroughHasher>>);

impl Leases {
    pub(crate) fn get(&self, hash: u128) -> Option<&Lease> {
        self.0.get(&IndexKey::from(hash))
    }

    pub(crate) fn get_mut(&mut self, hash: u128) -> Option<&mut Lease> {
        self.0.get_mut(&IndexKey::from(hash))
    }

    pub(crate) fn insert(&mut self, hash: u128, lease: Lease) {
        self.0.insert(IndexKey::from(hash), lease);
    }

    pub(crate) fn remove(&mut self, hash: u128) {
        self.0.remove(&IndexKey::from(hash));
    }

    /// Every `(hash, lease)`.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u128, &Lease)> + '_ {
        self.0.iter().map(|(key, lease)| (u128::from(*key), lease))
    }
}

/// The keyed hash that places `(scope, key)` in a shard and in the index.
/// SipHash-1-3 with the store's random 128-bit key (from the manifest), so
/// clients cannot choose keys that collide.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyHasher {
    key: [u64; 2],
}

impl KeyHasher {
    pub(crate) fn new(key: [u64; 2]) -> Self {
        KeyHasher { key }
    }

    /// The 128-bit index key; the scope's length goes first so that
    /// `("ab", "c")` and `("a", "bc")` differ. A record of idemkv's own
    /// keyspaces starts with a word no scope's length can be (`u64::MAX`
    /// less the keyspace's byte), so that it never meets a caller's; a
    /// caller's hashes as it did before keyspaces.
    pub(crate) fn hash(&self, keyspace: Keyspace, scope: &[u8], key: &[u8]) -> u128 {
        use siphasher::sip128::{Hasher128, SipHasher13};
        let mut hasher = SipHasher13::new_with_keys(self.key[0], self.key[1]);
        if keyspace.is_internal() {
            hasher.write(&(u64::MAX - u64::from(keyspace.to_byte())).to_le_bytes());
        }
        hasher.write(&(scope.len() as u64).to_le_bytes());
        hasher.write(scope);
        hasher.write(key);
        hasher.finish128().as_u128()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_boundary_matters() {
        let hasher = KeyHasher::new([1, 2]);
        let caller = Keyspace::Caller;
        assert_ne!(hasher.hash(caller, b"ab", b"c"), hasher.hash(caller, b"a", b"bc"));
        assert_eq!(hasher.hash(caller, b"a", b"bc"), hasher.hash(caller, b"a", b"bc"));
        assert_ne!(KeyHasher::new([1, 3]).hash(caller, b"a", b"bc"), hasher.hash(caller, b"a", b"bc"));
    }

    #[test]
    fn keyspaces_never_meet() {
        let hasher = KeyHasher::new([1, 2]);
        let mut seen = std::collections::HashSet::new();
        for keyspace in Keyspace::ALL {
            assert!(seen.insert(hasher.hash(keyspace, b"T", b"acct-7")), "{keyspace} met another keyspace");
        }
        // The earlier layout's prefixed scope is the caller's, and nobody else's.
        assert!(seen.insert(hasher.hash(Keyspace::Caller, b"idemkv.hold/T", b"acct-7")));
    }

    #[test]
    fn expiry_only_for_terminal_states() {
        let mut entry = Entry {
            lsn: 1,
            token: 1,
            deadline_ms: 10,
            segment: 1,
            offset: 32,
            frame_len: 100,
            state: State::Processing,
        };
        assert!(!entry.is_expired(20));
        entry.state = State::Completed;
        assert!(!entry.is_expired(9));
        assert!(entry.is_expired(10));
    }
}
