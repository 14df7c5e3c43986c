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
use crate::engine::waiters::Waiter;
use crate::error::Result;
use crate::store::Store;
use std::time::{Duration, Instant};

/// One waiting caller of the store: the blocking one (`ASYNC` false) or
/// the future (`ASYNC` true, feature `tokio`).
pub(super) struct StoreWait<'s, 'r, const ASYNC: bool> {
    store: &'s Store,
    request: &'s ClaimRequest<'r>,
    /// The key's index hash, known after the first look.
    hash: u128,
}

impl<'s, 'r, const ASYNC: bool> StoreWait<'s, 'r, ASYNC> {
    pub(super) fn new(store: &'s Store, request: &'s ClaimRequest<'r>) -> Self {
        StoreWait { store, request, hash: 0 }
    }

    /// Runs the loop, then counts the call's answer once (and its
    /// latency, the wait included).
    pub(super) async fn run(mut self, timeout: Duration) -> Result<Claim>
    where
        Self: KeyWait<Answer = Claim>,
    {
        let started = Instant::now();
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
