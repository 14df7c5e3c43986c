//! Iteration over the live records of a store, shard by shard, for
//! inspection ([`crate::Store::iter`]).

use crate::engine::shard::Shard;
use crate::error::Result;
use crate::record::Record;

/// Iterator over live records, from [`crate::Store::iter`].
#[derive(Debug)]
pub struct Iter<'a> {
    shards: &'a [Shard],
    shard: usize,
    hashes: std::vec::IntoIter<u128>,
    started: bool,
}

impl<'a> Iter<'a> {
    /// An iterator over the live records of `shards`, first shard first.
    pub(crate) fn new(shards: &'a [Shard]) -> Self {
        Iter { shards, shard: 0, hashes: Vec::new().into_iter(), started: false }
    }
}

impl Iterator for Iter<'_> {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        let shards = self.shards;
        loop {
            if let Some(hash) = self.hashes.next() {
                match shards[self.shard].get(hash, None) {
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
            match shard.hashes() {
                Ok(hashes) => self.hashes = hashes.into_iter(),
                Err(error) => {
                    self.shard = shards.len();
                    return Some(Err(error));
                }
            }
        }
    }
}
