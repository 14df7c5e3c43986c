//! The in-flight gate of one destination: a `tokio::sync::Semaphore`
//! whose permits follow the destination's [`ConcurrencyLimit`]. A lower
//! limit takes free permits away at once and the rest as attempts in
//! flight finish (their permits are forgotten instead of returned); a
//! higher one gives those back first, then adds permits.

use super::concurrency::{ConcurrencyConfig, ConcurrencyLimit, LoadSample, LoadSignal};
#[cfg(feature = "metrics")]
use super::metrics;
use parking_lot::Mutex;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub(super) struct Limiter {
    /// The `destination` label of the limit's gauge.
    #[cfg(feature = "metrics")]
    destination: String,
    semaphore: Arc<Semaphore>,
    state: Mutex<State>,
}

struct State {
    limit: ConcurrencyLimit,
    in_flight: u32,
    /// Permits a lower limit took away that were held at the time: the
    /// next ones released are forgotten.
    owed: u32,
}

impl Limiter {
    /// A limiter at the configured initial limit. Its caller records
    /// that limit's gauge, once it holds no lock.
    #[cfg_attr(not(feature = "metrics"), expect(unused_variables, reason = "the label is for the exporter"))]
    pub(super) fn new(config: ConcurrencyConfig, destination: &str) -> Self {
        let limit = ConcurrencyLimit::new(config);
        Limiter {
            #[cfg(feature = "metrics")]
            destination: destination.to_owned(),
            semaphore: Arc::new(Semaphore::new(limit.limit() as usize)),
            state: Mutex::new(State { limit, in_flight: 0, owed: 0 }),
        }
    }

    /// The limit in force.
    pub(super) fn limit(&self) -> u32 {
        self.state.lock().limit.limit()
    }

    /// Waits for a slot. `None` only if the semaphore were closed, which
    /// nothing does.
    pub(super) async fn acquire(self: &Arc<Self>) -> Option<Slot> {
        let permit = Arc::clone(&self.semaphore).acquire_owned().await.ok()?;
        let mut state = self.state.lock();
        state.in_flight = state.in_flight.saturating_add(1);
        let (generation, in_flight) = (state.limit.generation(), state.in_flight);
        drop(state);
        Some(Slot { limiter: Arc::clone(self), permit: Some(permit), generation, in_flight })
    }

    /// Ends an attempt that held `permit`: moves the limit by `sample`
    /// (none when the attempt was dropped), resizes the permits, and
    /// returns or forgets this one.
    fn release(&self, permit: OwnedSemaphorePermit, sample: Option<LoadSample>) {
        let mut state = self.state.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        let before = state.limit.limit();
        let moved = sample.and_then(|sample| state.limit.record(sample));
        if let Some(after) = moved {
            self.resize(&mut state, before, after);
        }
        if state.owed > 0 {
            state.owed -= 1;
            permit.forget();
        } else {
            drop(permit);
        }
        drop(state);
        #[cfg(feature = "metrics")]
        if let Some(after) = moved {
            metrics::concurrency_limit(&self.destination, after);
        }
    }

    fn resize(&self, state: &mut State, before: u32, after: u32) {
        if after < before {
            let fewer = before - after;
            let taken = u32::try_from(self.semaphore.forget_permits(fewer as usize)).unwrap_or(fewer);
            state.owed = state.owed.saturating_add(fewer.saturating_sub(taken));
        } else {
            let more = after - before;
            let repaid = more.min(state.owed);
            state.owed -= repaid;
            self.semaphore.add_permits((more - repaid) as usize);
        }
    }
}

/// An attempt's place among those in flight to its destination. Its
/// outcome is given with [`record`](Self::record); dropped without one
/// (the caller's future was dropped mid-attempt), it frees its place and
/// leaves the limit as it was.
pub(super) struct Slot {
    limiter: Arc<Limiter>,
    permit: Option<OwnedSemaphorePermit>,
    generation: u64,
    in_flight: u32,
}

impl Slot {
    /// The attempt's outcome, as a load signal.
    pub(super) fn record(mut self, signal: LoadSignal) {
        if let Some(permit) = self.permit.take() {
            let sample = LoadSample { generation: self.generation, in_flight: self.in_flight, signal };
            self.limiter.release(permit, Some(sample));
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            self.limiter.release(permit, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(initial: u32) -> Arc<Limiter> {
        let config = ConcurrencyConfig { initial_limit: initial, min_limit: 1, max_limit: 8, backoff_ratio: 0.5 };
        Arc::new(Limiter::new(config, "test"))
    }

    #[tokio::test]
    async fn a_lower_limit_is_paid_by_the_permits_in_flight() {
        let limiter = limiter(4);
        let mut slots = Vec::new();
        for _ in 0..4 {
            slots.push(limiter.acquire().await.expect("slot"));
        }
        assert_eq!(limiter.semaphore.available_permits(), 0);
        // One overload halves the limit to 2 while 4 are out.
        slots.pop().expect("slot").record(LoadSignal::Overload);
        assert_eq!(limiter.limit(), 2);
        assert_eq!(limiter.semaphore.available_permits(), 0, "the released permit paid a debt");
        drop(slots.pop());
        assert_eq!(limiter.semaphore.available_permits(), 0, "so did the dropped one");
        drop(slots.pop());
        assert_eq!(limiter.semaphore.available_permits(), 1);
        drop(slots.pop());
        assert_eq!(limiter.semaphore.available_permits(), 2, "as many as the limit once all are back");
    }

    #[tokio::test]
    async fn a_higher_limit_adds_permits() {
        let limiter = limiter(2);
        for _ in 0..20 {
            let first = limiter.acquire().await.expect("slot");
            let second = limiter.acquire().await.expect("slot");
            first.record(LoadSignal::Success);
            second.record(LoadSignal::Success);
        }
        // Two in flight at most: it grows while they fill half of it.
        assert_eq!(limiter.limit(), 4);
        assert_eq!(limiter.semaphore.available_permits(), 4);
    }

    #[tokio::test]
    async fn a_debt_is_repaid_before_permits_are_added() {
        let limiter = limiter(4);
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(limiter.acquire().await.expect("slot"));
        }
        held.pop().expect("slot").record(LoadSignal::Overload); // limit 2, owed 1
        let mut state = limiter.state.lock();
        assert_eq!((state.limit.limit(), state.owed), (2, 1));
        limiter.resize(&mut state, 2, 3);
        assert_eq!(state.owed, 0);
        drop(state);
        assert_eq!(limiter.semaphore.available_permits(), 0, "repaid, nothing added");
    }
}
