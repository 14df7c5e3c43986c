//! Iteration over the live records of a store, shard by shard, for
//! inspection ([`crate::Store::iter`]), and a scope's pages
//! ([`crate::Store::scan`], [`crate::Store::scan_staged`]) from the shards'
//! listings.

use crate::engine::entry::KeyHasher;
use crate::engine::shard::listing::Which;
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
    /// of an operator's listing (see `IdempotencyBackend::scan`). Not a
    /// snapshot: records that change meanwhile may or may not be seen.
    ///
    /// What it costs: what it returns. Each shard keeps the keys of a
    /// scope in order from the first scan of that scope on (one pass over
    /// the shard's records then; every write keeps them after it, at about
    /// 60 bytes a key of a scope listed so, for as long as the store is
    /// open); a page reads up to `limit` keys of each shard's and the
    /// records of the `limit` first.
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
        self.listed((Which::Every, keyspace, scope), after, limit)
    }

    /// The caller's Completed records of `scope` whose answer carries
    /// staged messages (an outbox's envelope), in key order after `after`,
    /// at most `limit`: what a relay's sweep delivers (see
    /// `IdempotencyBackend::scan_staged`). Each shard keeps those keys of
    /// a scope from the first such page of it on, as
    /// [`scan`](crate::Store::scan) keeps a scope's, so that a sweep costs
    /// what is pending, not what is kept.
    ///
    /// # Errors
    /// As [`scan`](crate::Store::scan).
    pub fn scan_staged(&self, scope: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Record>> {
        self.listed((Which::Staged, Keyspace::Caller, scope), after, limit)
    }

    /// A page of a listing: up to `limit` keys after `after` from each
    /// shard, the first `limit` of them all, their records; a page that
    /// lost keys whose records are gone reads on.
    fn listed(&self, listing: (Which, Keyspace, &[u8]), after: Option<&[u8]>, limit: usize) -> Result<Vec<Record>> {
        self.engine.config.check_scope(listing.2)?;
        let shards = &self.engine.shards;
        let mut page = Vec::new();
        let mut after = after.map(<[u8]>::to_vec);
        while page.len() < limit {
            let want = limit - page.len();
            let mut candidates: Vec<(Box<[u8]>, usize)> = Vec::new();
            for (index, shard) in shards.iter().enumerate() {
                let keys = shard.listed_keys(listing, after.as_deref(), want)?;
                candidates.extend(keys.into_iter().map(|key| (key, index)));
            }
            candidates.sort_unstable();
            candidates.truncate(want);
            let Some((last, _)) = candidates.last() else { break };
            let next = last.to_vec();
            let mut found = Vec::with_capacity(candidates.len());
            for (index, shard) in shards.iter().enumerate() {
                let keys: Vec<&[u8]> =
                    candidates.iter().filter(|(_, at)| *at == index).map(|(key, _)| &**key).collect();
                if !keys.is_empty() {
                    found.extend(shard.listed_records(listing, &keys, &self.engine.hasher)?);
                }
            }
            found.sort_unstable_by(|one, other| one.key.cmp(&other.key));
            page.extend(found);
            if candidates.len() < want {
                break;
            }
            after = Some(next);
        }
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::shard::RECORDS_READ;
    use crate::record::STAGED_MARK;
    use crate::{Claim, ClaimRequest, Config, Fingerprint, Store};

    fn complete(store: &Store, scope: &[u8], key: &str, answer: &[u8]) {
        let request = ClaimRequest::new(key, Fingerprint::of(key.as_bytes())).scope(scope);
        let Claim::Acquired(lease) = store.claim(&request).expect("claim") else { panic!("fresh") };
        lease.complete(answer).expect("complete");
    }

    /// The records `work` read from the log on this thread, and its answer.
    fn reads<T>(work: impl FnOnce() -> T) -> (u64, T) {
        let before = RECORDS_READ.with(std::cell::Cell::get);
        let answer = work();
        (RECORDS_READ.with(std::cell::Cell::get) - before, answer)
    }

    /// Every key of `scope`, 7 a page.
    fn scan_all(store: &Store, scope: &[u8]) -> Vec<Vec<u8>> {
        let (mut keys, mut after) = (Vec::new(), None::<Vec<u8>>);
        loop {
            let page = store.scan(scope, after.as_deref(), 7).expect("scan");
            let Some(last) = page.last() else { return keys };
            after = Some(last.key.clone());
            keys.extend(page.into_iter().map(|record| record.key));
        }
    }

    /// Guards the cost of a scope's scan: before the listings, every page
    /// read every record of the store.
    #[test]
    fn after_its_first_a_scan_reads_its_scopes_records_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path(), Config::new()).expect("open");
        for n in 0..1000 {
            complete(&store, b"big", &format!("k-{n:04}"), b"201");
        }
        for n in (0..20).rev() {
            complete(&store, b"small", &format!("s-{n:02}"), b"201");
        }
        let (first, keys) = reads(|| scan_all(&store, b"small"));
        assert_eq!(keys, (0..20).map(|n| format!("s-{n:02}").into_bytes()).collect::<Vec<_>>());
        assert!(first >= 1020, "the first scan makes the listing: one pass ({first} reads)");
        let (again, keys) = reads(|| scan_all(&store, b"small"));
        assert_eq!(keys.len(), 20);
        assert_eq!(again, 20, "each record of the scope once, none of the others");
        complete(&store, b"small", "s-99", b"201");
        assert!(store.remove(b"small", b"s-00").expect("remove"));
        let (after_writes, keys) = reads(|| scan_all(&store, b"small"));
        assert_eq!(
            (keys.first().map(Vec::as_slice), keys.last().map(Vec::as_slice)),
            (Some(&b"s-01"[..]), Some(&b"s-99"[..]))
        );
        assert_eq!(after_writes, 20, "the writes kept the listing");
    }

    /// Guards the cost of a relay's sweep: before the listings, it read
    /// every record of its scopes at every page.
    #[test]
    fn after_the_first_a_sweep_reads_none_of_the_completions_without_messages() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path(), Config::new()).expect("open");
        for n in 0..1000 {
            complete(&store, b"shop", &format!("k-{n:04}"), b"201");
        }
        let staged = [&STAGED_MARK[..], b"messages"].concat();
        complete(&store, b"shop", "order-7", &staged);
        let (first, found) = reads(|| store.scan_staged(b"shop", None, 256).expect("scan_staged"));
        assert_eq!(found.len(), 1);
        assert!(first >= 1001, "the first sweep makes the listing: one pass ({first} reads)");
        let (again, found) = reads(|| store.scan_staged(b"shop", None, 256).expect("scan_staged"));
        assert_eq!((again, found[0].key.as_slice()), (1, &b"order-7"[..]), "the staged record alone");
        assert!(store.replace(b"shop", b"order-7", &staged, b"201").expect("replace"));
        let (delivered, found) = reads(|| store.scan_staged(b"shop", None, 256).expect("scan_staged"));
        assert_eq!((delivered, found.len()), (0, 0), "dropped messages leave the listing");
        complete(&store, b"elsewhere", "order-8", &staged);
        let (other, found) = reads(|| store.scan_staged(b"elsewhere", None, 256).expect("scan_staged"));
        assert_eq!((other, found.len()), (1, 1), "every scope's staged keys are kept once any was swept");
    }
}
