//! A shard's part in the per-scope quotas (see [`crate::quota`]): counting
//! its records into the store-wide ledger at open, keeping them counted as
//! the index changes, and sweeping expired records out when a claim would
//! be refused.
//!
//! The index knows a key only by its hash, so when a record leaves it
//! without its key at hand (an expiry), the record's scope is read back
//! from its frame: the fixed prefix and the scope, never the response.
//!
//! Quotas count the caller's records only: idemkv's own
//! ([`Keyspace`]'s other keyspaces — holds, versions, inbox entries...)
//! are made by the service's own features, not by a tenant's requests,
//! and never count against the tenant whose scope they name.

use super::state::ShardState;
use super::{KeyRef, Shard};
use crate::engine::entry::Entry;
use crate::engine::frame::{self, PREFIX_BYTES};
use crate::engine::ledger::Ledger;
use crate::engine::telemetry::{bump, Counters};
use crate::engine::transition;
use crate::error::{Error, Result};
use crate::events::event;
use crate::keyspace::Keyspace;
#[cfg(feature = "testing")]
use crate::quota::ScopeUsage;
use crate::record::{Header, Kind};
use std::borrow::Cow;
#[cfg(feature = "testing")]
use std::collections::HashMap;
use std::sync::Arc;

impl ShardState {
    /// Counts the put `header` of `bytes` if it gives `key` a live record
    /// the index does not hold yet (a new claim). Returns the bytes counted
    /// (`None`: quotas off, not a new record, or the scope not limited),
    /// which [`ShardState::quota_give_back`] returns if the write fails.
    ///
    /// # Errors
    /// [`Error::QuotaExceeded`], counted in the shard's refusals.
    pub(super) fn quota_admit(
        &self,
        key: &KeyRef<'_>,
        indexed: bool,
        header: &Header,
        bytes: u64,
        counters: &Counters,
    ) -> Result<Option<u64>> {
        let Some(ledger) = &self.quota else {
            return Ok(None);
        };
        if header.kind == Kind::Tombstone || indexed || key.keyspace.is_internal() {
            return Ok(None);
        }
        match ledger.admit(key.scope, bytes) {
            Ok(counted) => Ok(counted.then_some(bytes)),
            Err(error) => {
                bump(&counters.quota_refusals);
                Err(error)
            }
        }
    }

    /// Returns what [`ShardState::quota_admit`] counted for a write that
    /// failed.
    pub(super) fn quota_give_back(&self, key: &KeyRef<'_>, admitted: Option<u64>) {
        if let (Some(ledger), Some(bytes)) = (&self.quota, admitted) {
            ledger.remove(key.scope, bytes);
        }
    }

    /// The index now holds `new` for `key`, in place of `old` (or of
    /// nothing, when the write was admitted as `admitted` bytes).
    pub(super) fn quota_settle(&self, key: &KeyRef<'_>, old: Option<&Entry>, admitted: Option<u64>, new: &Entry) {
        let Some(ledger) = self.quota.as_ref().filter(|_| !key.keyspace.is_internal()) else { return };
        if let Some(old_bytes) = old.map(|old| old.frame_len.into()).or(admitted) {
            ledger.resize(key.scope, old_bytes, new.frame_len.into());
        }
    }

    /// `entry` is about to leave the index; its key is `key`, or its
    /// keyspace and scope are read back from its frame. Returns `false` if
    /// that read fails: the key must then stay indexed (and counted), and
    /// a later try drops it, so that the counts never drift from the
    /// index.
    pub(super) fn quota_release(&self, entry: &Entry, key: Option<&KeyRef<'_>>) -> bool {
        let Some(ledger) = &self.quota else { return true };
        let known = key.map(|key| (key.keyspace, Cow::Borrowed(key.scope)));
        match known.map_or_else(|| self.scope_of(entry), Ok) {
            Ok((Keyspace::Caller, scope)) => {
                ledger.remove(&scope, entry.frame_len.into());
                true
            }
            Ok(_) => true,
            #[cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "read by the event"))]
            Err(error) => {
                event!(warn, %error, "an expired record's scope could not be read back; it stays until a later try");
                false
            }
        }
    }

    /// The keyspace and scope of the record `entry` points at, read from
    /// its frame.
    fn scope_of(&self, entry: &Entry) -> Result<(Keyspace, Cow<'_, [u8]>)> {
        let offset = u64::from(entry.offset);
        let corrupt = |reason: &str| Error::corruption(self.log.path(entry.segment), offset, reason);
        let prefix = self.log.read(entry.segment, offset, PREFIX_BYTES)?;
        let (header, _, _) = frame::decode_prefix(&prefix).map_err(|_| corrupt("record prefix unreadable"))?;
        if header.lsn != entry.lsn {
            return Err(corrupt("record LSN differs from the index"));
        }
        let end = PREFIX_BYTES + usize::from(header.scope_len);
        let scope = match self.log.read(entry.segment, offset, end)? {
            Cow::Borrowed(bytes) => Cow::Borrowed(&bytes[PREFIX_BYTES..]),
            Cow::Owned(mut bytes) => Cow::Owned(bytes.split_off(PREFIX_BYTES)),
        };
        Ok((header.keyspace, scope))
    }
}

impl Shard {
    /// Counts this shard's live records into `ledger`, and keeps them
    /// counted from here on. Called once at open, before the shard serves.
    pub(crate) fn attach_quota(&self, ledger: &Arc<Ledger>) -> Result<()> {
        let mut state = self.state.write();
        // Straight into the ledger: no second copy of every scope's name.
        count(&state, ledger, |scope, bytes| ledger.add(scope, bytes))?;
        state.quota = Some(Arc::clone(ledger));
        Ok(())
    }

    /// Adds this shard's live records to `counted`, by limited scope.
    #[cfg(feature = "testing")]
    pub(crate) fn count_scopes(&self, ledger: &Ledger, counted: &mut HashMap<Vec<u8>, ScopeUsage>) -> Result<()> {
        count(&*self.read()?, ledger, |scope, bytes| {
            if let Some(usage) = counted.get_mut(scope) {
                usage.records += 1;
                usage.bytes += bytes;
            } else {
                counted.insert(scope.to_vec(), ScopeUsage { records: 1, bytes });
            }
        })
    }

    /// Drops every expired record (a TTL that passed, an abandoned lease
    /// past its end + TTL) and counts it; returns the records left.
    pub(crate) fn sweep_expired(&self) -> Result<u64> {
        let mut state = self.lock()?;
        let now = state.now(&*self.clock);
        // Finished records by their headers (a Processing one is in the
        // lease table, which the abandoned-lease expiry walks), read only
        // in the segments whose accounting holds bytes that may have
        // expired by now (it counts them by deadline rounded up to the
        // second, hence the 999 ms).
        let by_ms = now.wall_ms.saturating_add(999);
        let expiring: std::collections::BTreeSet<u32> =
            state.usage.iter().filter(|(_, usage)| usage.expired_bytes(by_ms) > 0).map(|(id, _)| *id).collect();
        let mut gone = Vec::new();
        for (tag, at) in state.index.iter().filter(|(_, at)| expiring.contains(&at.segment)) {
            let (header, _) = state.read_at(at)?;
            if let Some(entry) = transition::entry(&header, at).filter(|entry| entry.is_expired(now.wall_ms)) {
                gone.push((tag, entry));
            }
        }
        for (tag, entry) in gone {
            // A finished record has no lease: its tag is all the table needs.
            if state.index_remove(u128::from(tag), &entry) {
                bump(&self.counters.expirations);
            }
        }
        state.expire_abandoned(now, &self.counters);
        Ok(state.index.len() as u64)
    }
}

/// Calls `add(scope, bytes)` for each live record of `state` in a limited
/// scope of the caller's keyspace.
fn count(state: &ShardState, ledger: &Ledger, mut add: impl FnMut(&[u8], u64)) -> Result<()> {
    for (_, at) in state.index.iter() {
        let (header, frame) = state.read_at(at)?;
        let (scope, _, _) = header.body(&frame);
        if header.keyspace == Keyspace::Caller && ledger.counts(scope) {
            add(scope, u64::from(at.len));
        }
    }
    Ok(())
}
