//! The in-memory index of a shard: what a claim decision needs, keyed by a
//! 128-bit keyed hash of `(scope, key)`. Keys, fingerprints and responses
//! stay in the log; a hit reads its record back and checks the full key.

use crate::record::State;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Where the newest record of a live key is, and what a claim decides on.
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

// 16-byte key + 40-byte entry = 56 bytes a bucket: what keeps the index
// under 96 bytes per record at hashbrown's load factors.
const _: () = assert!(std::mem::size_of::<Entry>() == 40);
const _: () = assert!(std::mem::size_of::<(IndexKey, Entry)>() == 56);

impl Entry {
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

/// A shard's index, keyed by the 128-bit hash of `(scope, key)`.
#[derive(Debug, Default)]
pub(crate) struct Index(HashMap<IndexKey, Entry, BuildHasherDefault<PassThroughHasher>>);

impl Index {
    pub(crate) fn get(&self, hash: &u128) -> Option<&Entry> {
        self.0.get(&IndexKey::from(*hash))
    }

    pub(crate) fn get_mut(&mut self, hash: &u128) -> Option<&mut Entry> {
        self.0.get_mut(&IndexKey::from(*hash))
    }

    pub(crate) fn insert(&mut self, hash: u128, entry: Entry) -> Option<Entry> {
        self.0.insert(IndexKey::from(hash), entry)
    }

    /// Inserts `entry` unless the key's entry is as new or newer (by LSN);
    /// returns whether it did. One probe of the table.
    pub(crate) fn insert_newer(&mut self, hash: u128, entry: Entry) -> bool {
        match self.0.entry(IndexKey::from(hash)) {
            std::collections::hash_map::Entry::Occupied(mut present) => {
                if present.get().lsn >= entry.lsn {
                    return false;
                }
                present.insert(entry);
            }
            std::collections::hash_map::Entry::Vacant(vacant) => {
                vacant.insert(entry);
            }
        }
        true
    }

    /// Makes room for `additional` more keys.
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.0.reserve(additional);
    }

    pub(crate) fn remove(&mut self, hash: &u128) -> Option<Entry> {
        self.0.remove(&IndexKey::from(*hash))
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.0.capacity()
    }

    pub(crate) fn shrink_to(&mut self, capacity: usize) {
        self.0.shrink_to(capacity);
    }

    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&Entry) -> bool) {
        self.0.retain(|_, entry| keep(entry));
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &Entry> {
        self.0.values()
    }

    pub(crate) fn hashes(&self) -> impl Iterator<Item = u128> + '_ {
        self.0.keys().map(|key| u128::from(*key))
    }

    /// Every `(hash, entry)`.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u128, &Entry)> + '_ {
        self.0.iter().map(|(key, entry)| (u128::from(*key), entry))
    }
}

/// The lease end, on the monotonic scale, of every Processing key of a
/// shard, beside the index: an index entry has no room for a second time
/// (it stays 40 bytes), and only Processing keys need one.
#[derive(Debug, Default)]
pub(crate) struct LeaseEnds(HashMap<IndexKey, u64, BuildHasherDefault<PassThroughHasher>>);

impl LeaseEnds {
    pub(crate) fn get(&self, hash: u128) -> Option<u64> {
        self.0.get(&IndexKey::from(hash)).copied()
    }

    pub(crate) fn insert(&mut self, hash: u128, lease_end_ms: u64) {
        self.0.insert(IndexKey::from(hash), lease_end_ms);
    }

    pub(crate) fn remove(&mut self, hash: u128) {
        self.0.remove(&IndexKey::from(hash));
    }

    /// Every `(hash, lease end)`.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u128, u64)> + '_ {
        self.0.iter().map(|(key, end)| (u128::from(*key), *end))
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
    /// `("ab", "c")` and `("a", "bc")` differ.
    pub(crate) fn hash(&self, scope: &[u8], key: &[u8]) -> u128 {
        use siphasher::sip128::{Hasher128, SipHasher13};
        let mut hasher = SipHasher13::new_with_keys(self.key[0], self.key[1]);
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
        assert_ne!(hasher.hash(b"ab", b"c"), hasher.hash(b"a", b"bc"));
        assert_eq!(hasher.hash(b"a", b"bc"), hasher.hash(b"a", b"bc"));
        assert_ne!(KeyHasher::new([1, 3]).hash(b"a", b"bc"), hasher.hash(b"a", b"bc"));
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
