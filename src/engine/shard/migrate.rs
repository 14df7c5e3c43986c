//! A shard's part in moving format 2's records of idemkv's own (scopes
//! under `idemkv.hold/` and the like) into their keyspaces, once, at the
//! first writable open of a format-2 store by a build that knows
//! keyspaces (see `engine::migrate`).

use super::{KeyRef, Shard};
use crate::engine::transition;
use crate::error::{Error, Result};
use crate::keyspace::Keyspace;
use crate::record::Header;

/// A live record as it lies: its header and what it stores (a finished
/// record's response, a Processing one's checkpoint).
pub(crate) struct Lying {
    pub header: Header,
    pub stored: Vec<u8>,
}

impl Shard {
    /// The scope and key of the caller's records whose scope is under one
    /// of format 2's prefixes. A record whose frame does not read (damage
    /// a hint covered) is passed over: it stays where it is, refused when
    /// read as before, for `idemkv repair` to deal with.
    pub(crate) fn legacy_keys(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let state = self.read()?;
        let mut found = Vec::new();
        for (_, at) in state.index.iter() {
            let (header, frame) = match state.read_at(at) {
                Ok(read) => read,
                Err(Error::Corruption { .. }) => continue,
                Err(error) => return Err(error),
            };
            let (scope, key, _) = header.body(&frame);
            if header.keyspace == Keyspace::Caller && Keyspace::from_legacy_scope(scope).0.is_internal() {
                found.push((scope.to_vec(), key.to_vec()));
            }
        }
        Ok(found)
    }

    /// The live record of `key` as it lies; `None` if it is absent.
    pub(crate) fn lying(&self, key: &KeyRef<'_>) -> Result<Option<Lying>> {
        let mut state = self.lock()?;
        let now = state.now(&*self.clock);
        let Some(found) = state.live(key, now, &self.counters)? else { return Ok(None) };
        Ok(Some(Lying { header: found.header, stored: found.header.body(&found.frame).2.to_vec() }))
    }

    /// Takes the live record of `key` out of the index with a tombstone,
    /// uncounted (it moved; nobody removed it).
    pub(crate) fn take_out(&self, key: &KeyRef<'_>) -> Result<()> {
        let mut state = self.lock()?;
        let now = state.now(&*self.clock);
        let next_lsn = state.log.next_lsn;
        let Some(found) = state.live(key, now, &self.counters)? else { return Ok(()) };
        let tombstone = transition::remove(&found.header, next_lsn, now.wall_ms);
        let entry = found.entry;
        state.write(key, Some(&entry), &tombstone, &[], &self.commit, &self.counters, now)
    }

    /// Writes `lying` as the record of `key`, at the next LSN with that
    /// LSN as its fencing token (a token of its old shard may be any
    /// number here), all else as it was. A record already there is kept:
    /// a move done before a crash is not done twice.
    pub(crate) fn put_in(&self, key: &KeyRef<'_>, lying: &Lying) -> Result<bool> {
        let mut state = self.lock()?;
        let now = state.now(&*self.clock);
        if state.live(key, now, &self.counters)?.is_some() {
            return Ok(false);
        }
        let next_lsn = state.log.next_lsn;
        let header = Header { lsn: next_lsn, token: next_lsn, ..lying.header };
        state.write(key, None, &header, &lying.stored, &self.commit, &self.counters, now)?;
        Ok(true)
    }
}
