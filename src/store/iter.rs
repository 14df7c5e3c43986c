//! Iteration over the live records of a store, shard by shard, for
//! inspection ([`crate::Store::iter`]).

use crate::engine::entry::KeyHasher;
use crate::engine::shard::{KeyRef, Shard};
use crate::error::Result;
use crate::keyspace::{Keyspace, Name};
use crate::record::Record;

/// Iterator over live records, from [`crate::Store::iter`].
#[derive(Debug)]
pub struct Iter<'a> {
    shards: &'a [Shard],
    hasher: KeyHasher,
    shard: usize,
    keys: std::vec::IntoIter<Name>,
    started: bool,
}

impl<'a> Iter<'a> {
    /// An iterator over the live records of `shards`, first shard first.
    pub(crate) fn new(shards: &'a [Shard], hasher: KeyHasher) -> Self {
        Iter { shards, hasher, shard: 0, keys: Vec::new().into_iter(), started: false }
    }
}

impl Iterator for Iter<'_> {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        let shards = self.shards;
        loop {
            if let Some((keyspace, scope, key)) = self.keys.next() {
                let hash = self.hasher.hash(keyspace, &scope, &key);
                let key = KeyRef { hash, keyspace, scope: &scope, key: &key };
                match shards[self.shard].get(&key) {
                    Ok((Some(record), _)) => return Some(Ok(record)),
                    Ok((None, _)) => continue,
                    Err(error) => return Some(Err(error)),
                }
            }
            if self.started {
                self.shard += 1;
            }
            self.started = true;
            let shard = shards.get(self.shard)?;
            match shard.keys() {
                Ok(keys) => self.keys = keys.into_iter(),
                Err(error) => {
                    self.shard = shards.len();
                    return Some(Err(error));
                }
            }
        }
    }
}

impl crate::Store {
    /// The live records of `scope` whose key sorts after `after` (from the
    /// first, for `None`), in key order (bytewise), at most `limit`: a page
    /// of an operator's listing (see
    /// `IdempotencyBackend::scan`). It
    /// reads every record's scope and key, shard by shard, as
    /// [`iter`](crate::Store::iter) does, then the matching records.
    ///
    /// # Errors
    /// [`Error::ScopeTooLong`](crate::Error::ScopeTooLong), I/O errors.
    pub fn scan(&self, scope: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Record>> {
        self.scan_in(Keyspace::Caller, scope, after, limit)
    }

    /// [`scan`](crate::Store::scan) of the records of `keyspace`.
    ///
    /// # Errors
    /// As [`scan`](crate::Store::scan).
    pub fn scan_in(&self, keyspace: Keyspace, scope: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Record>> {
        self.engine.config.check_scope(scope)?;
        let mut matches = Vec::new();
        for (shard, keys) in self.engine.shards.iter().enumerate() {
            for (found_keyspace, found_scope, key) in keys.keys()? {
                if found_keyspace == keyspace
                    && found_scope == scope
                    && after.is_none_or(|after| key.as_slice() > after)
                {
                    matches.push((shard, key));
                }
            }
        }
        matches.sort_unstable_by(|(_, one), (_, other)| one.cmp(other));
        let mut page = Vec::with_capacity(limit.min(matches.len()));
        for (shard, key) in matches {
            if page.len() == limit {
                break;
            }
            let hash = self.engine.hasher.hash(keyspace, scope, &key);
            let found = self.engine.shards[shard].get(&KeyRef { hash, keyspace, scope, key: &key })?;
            if let (Some(record), _) = found {
                page.push(record);
            }
        }
        Ok(page)
    }
}
