//! The async face of the store (feature `tokio`): the same calls as
//! futures, for services on tokio. Nothing here parks a thread: a claim
//! writes its record under the shard's lock as the blocking call does
//! (a buffered write, no fsync), a caller that waits for a key awaits an
//! event of that key, and under [`Durability::Sync`](crate::Durability::Sync)
//! a caller awaits the end of the fsync that covers its record, which a
//! thread of the shard's own runs (started by the first such caller, one
//! a shard, stopped with the store), batch after batch while callers wait.
//!
//! Every future here is cancel-safe in the sense that matters: dropping it
//! never leaves a half-written record, and a lease acquired before the drop
//! is counted as abandoned (the key stays Processing until its lease ends).
//! A finishing call of a [`Lease`] refused before it wrote anything hands
//! the lease back, as the blocking calls do ([`FinishError`]).

use crate::claim::{Claim, ClaimRequest};
use crate::engine::shard::Tally;
use crate::engine::telemetry::ClaimStart;
use crate::engine::transition::Finish;
use crate::error::Result;
use crate::lease::{FinishError, Lease};
use crate::record::RecordRef;
use crate::store::Store;

impl Store {
    /// [`Store::claim`] as a future.
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::{Claim, ClaimRequest, Config, Fingerprint, Store};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), idemkv::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path(), Config::new())?;
    /// let request = ClaimRequest::new("order-9", Fingerprint::of(b"POST /orders 9"));
    /// if let Claim::Acquired(lease) = store.claim_async(&request).await? {
    ///     lease.complete_async(b"201 created").await?;
    /// }
    /// let Claim::Replay(record) = store.claim_async(&request).await? else { unreachable!() };
    /// assert_eq!(record.response, b"201 created");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Store::claim`].
    pub async fn claim_async(&self, request: &ClaimRequest<'_>) -> Result<Claim> {
        let started = ClaimStart::now();
        let (claim, hash) = self.look_async(request, Tally::Answer).await?;
        self.claim_timed(&claim, hash, started);
        Ok(claim)
    }

    /// [`Store::claim_async`] with a replay answered by `replay` from the
    /// record where it lies, as [`Store::claim_with`] does.
    pub(crate) async fn claim_async_with<R>(
        &self,
        request: &ClaimRequest<'_>,
        replay: impl FnOnce(RecordRef<'_>) -> R,
    ) -> Result<Claim<R>> {
        let started = ClaimStart::now();
        let (claim, hash, lsn) = self.claim_unsynced_with(request, Tally::Answer, replay)?;
        self.engine().wait_durable_async(hash, lsn).await?;
        self.claim_timed(&claim, hash, started);
        Ok(claim)
    }

    /// One look at the key for a claim, counted as `tally` says; the
    /// durability wait takes no thread.
    pub(super) async fn look_async(&self, request: &ClaimRequest<'_>, tally: Tally) -> Result<(Claim, u128)> {
        let (claim, hash, lsn) = self.claim_unsynced(request, tally)?;
        self.engine().wait_durable_async(hash, lsn).await?;
        Ok((claim, hash))
    }
}

impl Lease {
    /// [`Lease::complete`] as a future. A refused call hands the lease back
    /// as [`Lease::complete`] does.
    ///
    /// # Errors
    /// As [`Lease::complete`].
    pub async fn complete_async(self, response: &[u8]) -> Result<(), FinishError> {
        self.finish_async(Finish::Complete(response)).await
    }

    /// [`Lease::fail`] as a future.
    ///
    /// # Errors
    /// As [`Lease::fail`].
    pub async fn fail_async(self, response: &[u8]) -> Result<(), FinishError> {
        self.finish_async(Finish::Fail(response)).await
    }

    /// [`Lease::release`] as a future.
    ///
    /// # Errors
    /// As [`Lease::release`].
    pub async fn release_async(self) -> Result<(), FinishError> {
        self.finish_async(Finish::Release).await
    }
}
