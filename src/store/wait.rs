//! The embedded store's side of the claim-and-wait loop
//! ([`crate::claim::wait`]): a look is a claim counted as a wait's
//! (`Tally::WaitFirst`, then `Tally::WaitAgain`), a registration is a
//! listener on the key's event in its shard (capped per key and per
//! store), and a park blocks the thread or awaits the event. Every finish
//! of the key, its removal, a takeover and `close` fire the event, so the
//! loop never polls here.

use crate::claim::wait::{self, KeyWait, Poll};
use crate::claim::{Claim, ClaimRequest};
use crate::engine::shard::Tally;
use crate::engine::telemetry::ClaimStart;
use crate::engine::waiters::Waiter;
use crate::error::Result;
use crate::store::Store;
use std::time::Duration;

impl Store {
    /// Like [`claim`](Store::claim), but while the key is in progress it
    /// waits, up to `timeout`, for the holder to finish and then answers
    /// with the final state (HTTP `Prefer: wait`). After `timeout` it answers
    /// with the key's state then (`InProgress` unless the lease ended just
    /// then), and so it does at once when the key or the store already has
    /// as many waiters as
    /// [`Config::waiters_per_key_max`](crate::Config::waiters_per_key_max) and
    /// [`Config::waiters_max`](crate::Config::waiters_max) allow.
    ///
    /// A waiting caller parks on an event of its key, woken when the key
    /// stops being in progress by the holder it saw: a complete, fail,
    /// release or [`remove`](Store::remove), a takeover by another claim,
    /// or [`close`](Store::close) (then [`Error::Closed`](crate::Error::Closed)). It does not
    /// poll: without such an event it wakes only at the lease end its last
    /// look reported (to take over if the lease has ended by the store's
    /// [`Clock`](crate::Clock): a renewed lease is waited for again) and at
    /// `timeout`, both measured in real time. The call counts once in
    /// [`Stats::claims`](crate::store::Stats::claims) and once by its final answer,
    /// however often it looked again
    /// ([`Stats::wait_looks`](crate::store::Stats::wait_looks)).
    ///
    /// # Errors
    /// As [`claim`](Store::claim).
    pub fn claim_wait(&self, request: &ClaimRequest<'_>, timeout: Duration) -> Result<Claim> {
        wait::block_on(StoreWait::<false>::new(self, request).run(timeout))
    }

    /// [`Store::claim_wait`] as a future: while the key is in progress it
    /// awaits an event of the key (no thread, no polling), woken as
    /// [`Store::claim_wait`] is, up to `timeout`. Past [`Config::waiters_per_key_max`](crate::Config::waiters_per_key_max)
    /// or [`Config::waiters_max`](crate::Config::waiters_max) it answers
    /// `InProgress` at once. Counted as [`Store::claim_wait`] is: one claim,
    /// one answer.
    ///
    /// # Errors
    /// As [`Store::claim`].
    #[cfg(feature = "tokio")]
    pub async fn claim_wait_async(&self, request: &ClaimRequest<'_>, timeout: Duration) -> Result<Claim> {
        StoreWait::<true>::new(self, request).run(timeout).await
    }
}

/// One waiting caller of the store: the blocking one (`ASYNC` false) or
/// the future (`ASYNC` true, feature `tokio`).
struct StoreWait<'s, 'r, const ASYNC: bool> {
    store: &'s Store,
    request: &'s ClaimRequest<'r>,
    /// The key's index hash, known after the first look.
    hash: u128,
}

impl<'s, 'r, const ASYNC: bool> StoreWait<'s, 'r, ASYNC> {
    fn new(store: &'s Store, request: &'s ClaimRequest<'r>) -> Self {
        StoreWait { store, request, hash: 0 }
    }

    /// Runs the loop, then counts the call's answer once (and its
    /// latency, the wait included).
    async fn run(mut self, timeout: Duration) -> Result<Claim>
    where
        Self: KeyWait<Answer = Claim>,
    {
        let started = ClaimStart::now();
        let claim = wait::claim_wait(&mut self, timeout).await?;
        self.store.wait_answered(&claim, self.hash, started);
        Ok(claim)
    }

    fn tally(again: bool) -> Tally {
        if again {
            Tally::WaitAgain
        } else {
            Tally::WaitFirst
        }
    }
}

impl<'s> KeyWait for StoreWait<'s, '_, false> {
    type Answer = Claim;
    type Armed = Waiter<'s>;
    const POLL: Option<Poll> = None;

    async fn look(&mut self, again: bool) -> Result<Claim> {
        let (claim, hash) = self.store.look(self.request, Self::tally(again))?;
        self.hash = hash;
        Ok(claim)
    }

    async fn arm(&mut self) -> Option<Waiter<'s>> {
        self.store.engine().listen(self.hash)
    }

    async fn park(&mut self, armed: Waiter<'s>, pause: Duration) {
        armed.block(pause);
    }
}

#[cfg(feature = "tokio")]
impl<'s> KeyWait for StoreWait<'s, '_, true> {
    type Answer = Claim;
    type Armed = Waiter<'s>;
    const POLL: Option<Poll> = None;

    async fn look(&mut self, again: bool) -> Result<Claim> {
        let (claim, hash) = self.store.look_async(self.request, Self::tally(again)).await?;
        self.hash = hash;
        Ok(claim)
    }

    async fn arm(&mut self) -> Option<Waiter<'s>> {
        self.store.engine().listen(self.hash)
    }

    async fn park(&mut self, mut armed: Waiter<'s>, pause: Duration) {
        let _woken_or_not = tokio::time::timeout(pause, armed.woken()).await;
    }
}
