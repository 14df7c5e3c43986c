//! Iteration over the live records of a store, shard by shard, for
//! inspection ([`crate::Store::iter`]).

use crate::engine::index::KeyHasher;
use crate::engine::shard::{KeyRef, Shard};
use crate::error::Result;
use crate::record::Record;

/// Iterator over live records, from [`crate::Store::iter`].
#[derive(Debug)]
pub struct Iter<'a> {
    shards: &'a [Shard],
    hasher: KeyHasher,
    shard: usize,
    keys: std::vec::IntoIter<(Vec<u8>, Vec<u8>)>,
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
            if let Some((scope, key)) = self.keys.next() {
                let key = KeyRef { hash: self.hasher.hash(&scope, &key), scope: &scope, key: &key };
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
