//! What a lease holder does to its key: finish it, renew its lease, store
//! a checkpoint. Each checks the fencing token against the lease table
//! first ([`Shard::held`]): a stale holder gets [`Error::LeaseLost`].

use super::{KeyRef, Shard, ShardState};
use crate::checkpoint::{self, Checkpoint};
use crate::clock::Now;
use crate::engine::entry::{Entry, Lease};
use crate::engine::telemetry::bump;
use crate::engine::transition::{self, Finish, Held};
use crate::error::{Error, Result};
use crate::events::event;
use crate::record::Header;

impl Shard {
    /// Finishes the lease `token` on `key`: complete, fail or release.
    pub(crate) fn finish(&self, key: &KeyRef<'_>, token: u64, finish: Finish<'_>, known: Option<&Held>) -> Result<u64> {
        let mut state = self.lock()?;
        let now = state.now(&*self.clock);
        let (held, _, entry) = self.held(&mut state, key, token, known, now)?;
        let header = transition::finish(&held, finish, state.log.next_lsn, now.wall_ms);
        let (response, counter) = match finish {
            Finish::Complete(response) => (response, &self.counters.completions),
            Finish::Fail(response) => (response, &self.counters.failures),
            Finish::Release => (&[][..], &self.counters.releases),
        };
        state.write(key, Some(&entry), &header, response, &self.commit, &self.counters, now)?;
        bump(counter);
        drop(state);
        self.waiters.wake(key.hash);
        Ok(header.lsn)
    }

    /// Extends the lease `token` on `key` to at least `extend_ms` of elapsed
    /// time from now. Returns the new lease end as written (wall clock) and
    /// the record's LSN.
    pub(crate) fn renew(
        &self,
        key: &KeyRef<'_>,
        token: u64,
        extend_ms: u64,
        known: Option<&Held>,
    ) -> Result<(u64, u64)> {
        let mut state = self.lock()?;
        let now = state.now(&*self.clock);
        let (held, lease_end_ms, entry) = self.held(&mut state, key, token, known, now)?;
        let header = transition::renew(&held, lease_end_ms, extend_ms, state.log.next_lsn, now);
        // The renewed record keeps the holder's last checkpoint.
        let checkpoint = state.stored_checkpoint(&entry, key)?;
        state.write(key, Some(&entry), &header, &checkpoint, &self.commit, &self.counters, now)?;
        bump(&self.counters.renewals);
        Ok((header.deadline_ms, header.lsn))
    }

    /// The stored Processing record that `token` holds, its lease end
    /// (monotonic) and its index entry, or `LeaseLost` — also for a lease abandoned past its
    /// end + TTL, which has expired. What the holder knows saves a read of
    /// the log.
    fn held(
        &self,
        state: &mut ShardState,
        key: &KeyRef<'_>,
        token: u64,
        known: Option<&Held>,
        now: Now,
    ) -> Result<(Header, u64, Entry)> {
        let live = state.live_lease(key, now, &self.counters);
        let Some(Lease { entry, end_ms: lease_end_ms }) = live.filter(|lease| transition::holds(&lease.entry, token))
        else {
            bump(&self.counters.lease_lost);
            event!(warn, shard = self.id, token, "lease lost: the key was taken over or expired; the call is refused");
            return Err(Error::LeaseLost { token });
        };
        match known {
            Some(held) => Ok((held.record(&entry), lease_end_ms, entry)),
            None => Ok((state.load(&entry, Some(key))?.0, lease_end_ms, entry)),
        }
    }

    /// Stores `checkpoint` (encoded, see [`crate::checkpoint`]) as the
    /// checkpoint of the lease `token` on `key`: a Processing record
    /// under the same token whose lease end stays where it is. Returns the
    /// record's LSN.
    pub(crate) fn checkpoint(
        &self,
        key: &KeyRef<'_>,
        token: u64,
        checkpoint: &[u8],
        known: Option<&Held>,
    ) -> Result<u64> {
        let mut state = self.lock()?;
        let now = state.now(&*self.clock);
        let (held, lease_end_ms, entry) = self.held(&mut state, key, token, known, now)?;
        let header = transition::renew(&held, lease_end_ms, 0, state.log.next_lsn, now);
        state.write(key, Some(&entry), &header, checkpoint, &self.commit, &self.counters, now)?;
        bump(&self.counters.checkpoints);
        Ok(header.lsn)
    }

    /// The checkpoint stored as `bytes` in a Processing record.
    pub(super) fn checkpoint_of(&self, bytes: &[u8]) -> Result<Option<Checkpoint>> {
        checkpoint::decode(bytes).map_err(|reason| Error::corruption(&self.dir, 0, reason))
    }
}
