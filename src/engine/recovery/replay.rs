//! The index being rebuilt at open, from hint entries and log frames
//! alike: both arrive as [`HintEntry`]s and are applied by one rule.

use crate::engine::entry::{Entry, FullIndex, IndexKey, KeyHasher, PassThroughHasher};
use crate::engine::segment::hint::HintEntry;
use crate::keyspace::Keyspace;
use crate::record::Kind;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// The newest record of every key seen so far. Entries are applied
/// newest-LSN-wins, so the result does not depend on the order segments
/// are read in, nor on an entry being applied twice (a hint that failed
/// half-way, then the log).
pub(crate) struct Replay<'a> {
    hasher: &'a KeyHasher,
    pub index: FullIndex,
    /// The LSN of the tombstone of every key whose newest record is one.
    tombstones: HashMap<IndexKey, u64, BuildHasherDefault<PassThroughHasher>>,
    pub max_lsn: u64,
    pub max_updated_ms: u64,
}

impl<'a> Replay<'a> {
    pub(crate) fn new(hasher: &'a KeyHasher) -> Self {
        Replay { hasher, index: FullIndex::default(), tombstones: HashMap::default(), max_lsn: 0, max_updated_ms: 0 }
    }

    /// The index hash of `(scope, key)` of `keyspace`.
    pub(crate) fn hash(&self, keyspace: Keyspace, scope: &[u8], key: &[u8]) -> u128 {
        self.hasher.hash(keyspace, scope, key)
    }

    /// Applies the frame `entry` of segment `segment`.
    ///
    /// # Errors
    /// A frame beyond 4 GiB, which an index entry cannot point at.
    pub(crate) fn apply(&mut self, segment: u32, entry: &HintEntry) -> Result<(), &'static str> {
        self.max_lsn = self.max_lsn.max(entry.lsn);
        let tombstone =
            if self.tombstones.is_empty() { None } else { self.tombstones.get(&IndexKey::from(entry.hash)).copied() };
        match entry.kind {
            Kind::Put(state) => {
                if tombstone.is_some_and(|lsn| entry.lsn <= lsn) {
                    return Ok(());
                }
                let too_large = "frame beyond 4 GiB";
                let indexed = Entry {
                    lsn: entry.lsn,
                    token: entry.token,
                    deadline_ms: entry.deadline_ms,
                    segment,
                    offset: u32::try_from(entry.offset).map_err(|_| too_large)?,
                    frame_len: u32::try_from(entry.len).map_err(|_| too_large)?,
                    state,
                };
                if self.index.insert_newer(entry.hash, indexed) && tombstone.is_some() {
                    self.tombstones.remove(&IndexKey::from(entry.hash));
                }
            }
            Kind::Tombstone => {
                let newest = self.index.get(&entry.hash).map(|indexed| indexed.lsn).max(tombstone).unwrap_or(0);
                if entry.lsn <= newest {
                    return Ok(());
                }
                self.index.remove(&entry.hash);
                self.tombstones.insert(IndexKey::from(entry.hash), entry.lsn);
            }
        }
        Ok(())
    }
}
