//! Callers waiting for a key to leave Processing (`claim_wait`, HTTP
//! `Prefer: wait`): one event per waited-on key, notified whenever the key
//! stops being in progress by the holder a waiter saw: the holder completes,
//! fails or releases it, it is removed, another claim acquires it (a
//! takeover of an ended lease), or the store closes. A lease that merely
//! ends notifies nothing; a waiter wakes at the lease end its last look
//! reported. A waiter is a registered listener, not a thread: a blocking
//! caller parks on it, an async one awaits it.
//! Waiters are capped per key and per store, so a crowd of duplicates costs
//! bounded memory and the caller past the cap is answered at once.
//!
//! The order that loses no wake-up: listen first, then look at the key,
//! then wait. A finish that lands between the look and the wait has
//! already notified the listener.

use event_listener::{Event, EventListener, Listener};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The waiters of one shard, by key hash.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    keys: Mutex<HashMap<u128, Slot>>,
    /// Waiters registered in this shard, so that a finish with nobody
    /// waiting takes no lock.
    count: AtomicUsize,
}

#[derive(Debug)]
struct Slot {
    event: Event,
    waiters: usize,
}

/// The caps on waiters, and the store-wide count they apply to.
#[derive(Debug)]
pub(crate) struct WaitLimits {
    pub per_key_max: usize,
    pub total_max: usize,
    pub total: AtomicUsize,
}

impl Waiters {
    /// Registers a waiter for key `hash`, or `None` when the key or the
    /// store already has as many waiters as the limits allow.
    pub(crate) fn listen<'a>(&'a self, hash: u128, limits: &'a WaitLimits) -> Option<Waiter<'a>> {
        if limits.total.fetch_add(1, Ordering::AcqRel) >= limits.total_max {
            limits.total.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let mut keys = self.keys.lock();
        let slot = keys.entry(hash).or_insert_with(|| Slot { event: Event::new(), waiters: 0 });
        if slot.waiters >= limits.per_key_max {
            if slot.waiters == 0 {
                keys.remove(&hash);
            }
            limits.total.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        slot.waiters += 1;
        let listener = slot.event.listen();
        self.count.fetch_add(1, Ordering::AcqRel);
        Some(Waiter { waiters: self, limits, hash, listener: Some(listener) })
    }

    /// Wakes every waiter of key `hash`. Called after the key's record
    /// changed, outside the shard's lock.
    pub(crate) fn wake(&self, hash: u128) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        if let Some(slot) = self.keys.lock().get(&hash) {
            slot.event.notify(usize::MAX);
        }
    }

    /// Wakes every waiter of every key (the store is closing: each then
    /// looks again and gets [`crate::Error::Closed`]).
    pub(crate) fn wake_all(&self) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        for slot in self.keys.lock().values() {
            slot.event.notify(usize::MAX);
        }
    }
}

/// One registered waiter; dropping it unregisters it.
#[derive(Debug)]
pub(crate) struct Waiter<'a> {
    waiters: &'a Waiters,
    limits: &'a WaitLimits,
    hash: u128,
    listener: Option<EventListener>,
}

impl Waiter<'_> {
    /// Blocks the thread until woken or until `timeout` has passed.
    pub(crate) fn block(mut self, timeout: Duration) {
        if let Some(listener) = self.listener.take() {
            let _woken = listener.wait_timeout(timeout);
        }
    }

    /// Waits until woken; cancel-safe (dropping the future unregisters).
    #[cfg(feature = "tokio")]
    pub(crate) async fn woken(&mut self) {
        if let Some(listener) = self.listener.as_mut() {
            listener.await;
            self.listener = None;
        }
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        let mut keys = self.waiters.keys.lock();
        if let Some(slot) = keys.get_mut(&self.hash) {
            slot.waiters -= 1;
            if slot.waiters == 0 {
                keys.remove(&self.hash);
            }
        }
        self.waiters.count.fetch_sub(1, Ordering::AcqRel);
        self.limits.total.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_key_max: usize, total_max: usize) -> WaitLimits {
        WaitLimits { per_key_max, total_max, total: AtomicUsize::new(0) }
    }

    #[test]
    fn a_wake_reaches_every_waiter_of_the_key_only() {
        let waiters = Waiters::default();
        let limits = limits(8, 8);
        let first = waiters.listen(1, &limits).expect("room");
        let second = waiters.listen(1, &limits).expect("room");
        let other = waiters.listen(2, &limits).expect("room");
        waiters.wake(1);
        let started = std::time::Instant::now();
        first.block(Duration::from_secs(10));
        second.block(Duration::from_secs(10));
        assert!(started.elapsed() < Duration::from_secs(5), "woken waiters blocked");
        let started = std::time::Instant::now();
        other.block(Duration::from_millis(50));
        assert!(started.elapsed() >= Duration::from_millis(50), "a waiter of another key was woken");
        assert_eq!(limits.total.load(Ordering::Acquire), 0);
        assert!(waiters.keys.lock().is_empty(), "slots outlive their waiters");
    }

    #[test]
    fn caps_hold_per_key_and_in_total() {
        let waiters = Waiters::default();
        let limits = limits(2, 3);
        let a = waiters.listen(1, &limits).expect("room");
        let b = waiters.listen(1, &limits).expect("room");
        assert!(waiters.listen(1, &limits).is_none(), "third waiter of one key");
        let c = waiters.listen(2, &limits).expect("room");
        assert!(waiters.listen(3, &limits).is_none(), "fourth waiter in total");
        drop((a, b, c));
        assert!(waiters.listen(3, &limits).is_some(), "room again after leaving");
    }

    #[test]
    fn a_wake_before_the_wait_is_not_lost() {
        let waiters = Waiters::default();
        let limits = limits(1, 1);
        let waiter = waiters.listen(7, &limits).expect("room");
        waiters.wake(7);
        let started = std::time::Instant::now();
        waiter.block(Duration::from_secs(10));
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
