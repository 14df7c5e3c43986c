//! A shard's listings: the keys of a scope in key order, and the caller's
//! keys whose completion carries staged messages, so that a scope's scan
//! reads that scope's records alone and a relay's sweep the pending ones
//! alone.
//!
//! The index holds no scope (16 bytes a key: a tag and an address), and
//! keeping every key's bytes in order would triple what a key costs in
//! memory. So a listing is made for what is listed: a scope's keys the
//! first time that scope is scanned, every scope's staged keys the first
//! time any is swept (one pass over the shard's records, under its shared
//! lock, as one page of a scan took before), and from then on every write
//! of the shard keeps it: a put of a live record adds its key (a staged one
//! while its completion carries messages), a tombstone or an expiry the
//! shard sees takes it out. What expires unseen (compaction's drop of an
//! expired record, an abandoned lease's) is taken out by the next page
//! that meets it, which reads every record it lists anyway. A listing
//! lives as long as the store is open: about 60 bytes a key of a listed
//! scope (a B-tree entry and the key's bytes), as much a key with staged
//! messages not yet delivered, nothing for the others.

use crate::keyspace::Keyspace;
use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;

/// Which keys of a scope a listing holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which {
    /// Every key with a live record.
    Every,
    /// The caller's keys whose Completed record carries staged messages.
    Staged,
}

/// The keys of one listing, in key order (bytewise).
type Keys = BTreeSet<Box<[u8]>>;

/// A shard's listings (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Listings {
    /// The keys of each scope listed so far, by keyspace.
    every: HashMap<Keyspace, HashMap<Box<[u8]>, Keys>>,
    /// Once a sweep asked: the caller's staged keys of every scope (the
    /// outbox stages there), a scope without any left out.
    staged: Option<HashMap<Box<[u8]>, Keys>>,
}

/// What a pass over a shard's records makes: the keys of one scope, or
/// the staged keys of every scope.
#[derive(Debug)]
pub(crate) enum Made {
    Every(Keys),
    Staged(HashMap<Box<[u8]>, Keys>),
}

impl Listings {
    /// Whether no listing is kept (a write then has nothing to note).
    pub(crate) fn is_empty(&self) -> bool {
        self.every.is_empty() && self.staged.is_none()
    }

    fn keys(&self, which: Which, keyspace: Keyspace, scope: &[u8]) -> Option<&Keys> {
        match which {
            Which::Every => self.every.get(&keyspace)?.get(scope),
            Which::Staged if keyspace == Keyspace::Caller => self.staged.as_ref()?.get(scope),
            Which::Staged => None,
        }
    }

    /// Whether the listing is made.
    pub(crate) fn has(&self, which: Which, keyspace: Keyspace, scope: &[u8]) -> bool {
        match which {
            Which::Every => self.every.get(&keyspace).is_some_and(|scopes| scopes.contains_key(scope)),
            Which::Staged => self.staged.is_some(),
        }
    }

    /// Keeps what a pass `made` for the listing of `scope` of `keyspace`,
    /// unless one is made already (by a page that ran beside this one:
    /// the same keys).
    pub(crate) fn install(&mut self, keyspace: Keyspace, scope: &[u8], made: Made) {
        match made {
            Made::Every(keys) => {
                self.every.entry(keyspace).or_default().entry(scope.into()).or_insert(keys);
            }
            Made::Staged(scopes) => {
                self.staged.get_or_insert(scopes);
            }
        }
    }

    /// A write of `key`: `live` whether it now has a live record, `staged`
    /// whether that record is a completion that carries staged messages.
    pub(crate) fn noted(&mut self, keyspace: Keyspace, scope: &[u8], key: &[u8], live: bool, staged: bool) {
        if let Some(keys) = self.every.get_mut(&keyspace).and_then(|scopes| scopes.get_mut(scope)) {
            if !live {
                keys.remove(key);
            } else if !keys.contains(key) {
                keys.insert(key.into());
            }
        }
        if keyspace == Keyspace::Caller {
            if let Some(scopes) = &mut self.staged {
                if live && staged {
                    scopes.entry(scope.into()).or_default().insert(key.into());
                } else {
                    forget_staged(scopes, scope, key);
                }
            }
        }
    }

    /// Takes `key` out of one listing (a page found it not listed any more).
    pub(crate) fn forget(&mut self, which: Which, keyspace: Keyspace, scope: &[u8], key: &[u8]) {
        match which {
            Which::Every => {
                if let Some(keys) = self.every.get_mut(&keyspace).and_then(|scopes| scopes.get_mut(scope)) {
                    keys.remove(key);
                }
            }
            Which::Staged => {
                if let (Some(scopes), Keyspace::Caller) = (&mut self.staged, keyspace) {
                    forget_staged(scopes, scope, key);
                }
            }
        }
    }

    /// Up to `limit` keys of the listing after `after`, in order (none for
    /// a listing not made).
    pub(crate) fn range(
        &self,
        which: Which,
        keyspace: Keyspace,
        scope: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Vec<Box<[u8]>> {
        let Some(keys) = self.keys(which, keyspace, scope) else { return Vec::new() };
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        keys.range::<[u8], _>((from, Bound::Unbounded)).take(limit).cloned().collect()
    }
}

/// Takes `key` of `scope` out of the staged keys, and the scope once it
/// has none.
fn forget_staged(scopes: &mut HashMap<Box<[u8]>, Keys>, scope: &[u8], key: &[u8]) {
    if let Some(keys) = scopes.get_mut(scope) {
        keys.remove(key);
        if keys.is_empty() {
            scopes.remove(scope);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(listed: &[&[u8]]) -> Keys {
        listed.iter().map(|key| Box::<[u8]>::from(*key)).collect()
    }

    #[test]
    fn a_listing_follows_the_writes_once_made_and_pages_in_key_order() {
        let mut listings = Listings::default();
        assert!(listings.is_empty());
        listings.noted(Keyspace::Caller, b"shop", b"k9", true, true);
        assert!(!listings.has(Which::Every, Keyspace::Caller, b"shop"), "nothing kept before a listing is made");
        listings.install(Keyspace::Caller, b"shop", Made::Every(keys(&[b"k2", b"k1"])));
        listings.install(Keyspace::Caller, b"shop", Made::Staged([(b"shop"[..].into(), keys(&[b"k1"]))].into()));
        listings.noted(Keyspace::Caller, b"shop", b"k3", true, true);
        listings.noted(Keyspace::Caller, b"shop", b"k1", true, false);
        listings.noted(Keyspace::Caller, b"shop", b"k2", false, false);
        listings.noted(Keyspace::Caller, b"other", b"k4", true, true);
        listings.noted(Keyspace::Relay, b"shop", b"k5", true, true);
        let every = listings.range(Which::Every, Keyspace::Caller, b"shop", None, 10);
        assert_eq!(every, keys(&[b"k1", b"k3"]).into_iter().collect::<Vec<_>>());
        let staged = listings.range(Which::Staged, Keyspace::Caller, b"shop", None, 10);
        assert_eq!(staged, keys(&[b"k3"]).into_iter().collect::<Vec<_>>());
        let after = listings.range(Which::Every, Keyspace::Caller, b"shop", Some(b"k1"), 1);
        assert_eq!(after, keys(&[b"k3"]).into_iter().collect::<Vec<_>>());
        assert!(listings.range(Which::Staged, Keyspace::Relay, b"shop", None, 5).is_empty(), "the caller's alone");
        let other = listings.range(Which::Staged, Keyspace::Caller, b"other", None, 5);
        assert_eq!(other, keys(&[b"k4"]).into_iter().collect::<Vec<_>>(), "every scope's, once made");
        listings.forget(Which::Every, Keyspace::Caller, b"shop", b"k3");
        assert_eq!(listings.range(Which::Every, Keyspace::Caller, b"shop", Some(b"k1"), 5), Vec::<Box<[u8]>>::new());
    }

    #[test]
    fn a_listing_made_twice_keeps_the_first() {
        let mut listings = Listings::default();
        listings.install(Keyspace::Inbox, b"ledger", Made::Every(keys(&[b"m1"])));
        listings.noted(Keyspace::Inbox, b"ledger", b"m2", true, false);
        listings.install(Keyspace::Inbox, b"ledger", Made::Every(keys(&[b"m1"])));
        assert_eq!(listings.range(Which::Every, Keyspace::Inbox, b"ledger", None, 5).len(), 2);
    }
}
