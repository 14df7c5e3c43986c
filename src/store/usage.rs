//! What a scope holds against its quota: [`Store::scope_usage`], and the
//! audit that tests and fuzzing run against a recount of the index.

#[cfg(feature = "testing")]
use crate::error::Result;
use crate::quota::ScopeUsage;
use crate::store::Store;
#[cfg(feature = "testing")]
use std::collections::HashMap;

impl Store {
    /// The live records and bytes `scope` holds against its quota, or
    /// `None` when it holds none, or when no quota applies to it (then
    /// nothing of it is counted). O(1): the counts as they stand, which
    /// include records expired but not yet found (see [`Quota`](crate::store::Quota): a claim
    /// that would be refused drops those first).
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::{Claim, ClaimRequest, Config, Error, Fingerprint, Store, store::{Quota, QuotaLimit}};
    /// # fn main() -> Result<(), Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path(), Config::new().quota(Quota::new().records(1)))?;
    /// let first = ClaimRequest::new("order-1", Fingerprint::of(b"a")).scope("tenant-a");
    /// let Claim::Acquired(lease) = store.claim(&first)? else { unreachable!() };
    /// lease.complete(b"201")?;
    /// assert_eq!(store.scope_usage("tenant-a").map(|usage| usage.records), Some(1));
    ///
    /// let second = ClaimRequest::new("order-2", Fingerprint::of(b"b")).scope("tenant-a");
    /// assert!(matches!(store.claim(&second), Err(Error::QuotaExceeded { limit: QuotaLimit::Records, .. })));
    /// assert!(store.remove(b"tenant-a", b"order-1")?);
    /// assert_eq!(store.scope_usage("tenant-a"), None);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn scope_usage(&self, scope: impl AsRef<[u8]>) -> Option<ScopeUsage> {
        self.engine().quota.as_ref()?.usage(scope.as_ref())
    }

    /// Recounts every limited scope's usage from the index (reading the
    /// scope of each live record) and compares it with the running counts:
    /// `None` when they agree, else the first difference. For tests and
    /// fuzzing, on a store nothing else uses meanwhile.
    ///
    /// # Errors
    /// [`Error::Closed`], [`Error::Poisoned`], [`Error::Corruption`], I/O.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn quota_audit(&self) -> Result<Option<String>> {
        let Some(ledger) = &self.engine().quota else {
            return Ok(None);
        };
        let mut counted = HashMap::new();
        for shard in &*self.engine().shards {
            shard.count_scopes(ledger, &mut counted)?;
        }
        let running = ledger.snapshot();
        let mut scopes = counted.keys().chain(running.keys());
        Ok(scopes.find_map(|scope| {
            let (recounted, kept) = (counted.get(scope), running.get(scope));
            (recounted != kept).then(|| {
                format!("scope {:?}: recounted {recounted:?}, running {kept:?}", String::from_utf8_lossy(scope))
            })
        }))
    }
}
