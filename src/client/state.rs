//! What the services of one layer share: a retry budget per route, a
//! circuit breaker and a concurrency limiter per destination, the
//! jitter's random numbers. Every lock is held for a few arithmetic
//! steps, never across an await.

use super::breaker::{BreakerState, CircuitBreaker, Refused};
use super::budget::RetryBudget;
use super::limiter::Limiter;
use super::metrics;
use super::policy::RetryPolicy;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Routes and destinations tracked at most; past it, new routes share one
/// budget and new destinations have no breaker and no concurrency limit,
/// so that a client calling unbounded hosts holds bounded memory.
const TRACKED_MAX: usize = 4_096;

/// The budget new routes share once `TRACKED_MAX` are tracked.
const OVERFLOW_ROUTE: &str = "other";

pub(super) struct Shared {
    pub(super) policy: RetryPolicy,
    budgets: Mutex<HashMap<String, RetryBudget>>,
    breakers: Mutex<HashMap<String, CircuitBreaker>>,
    limiters: Mutex<HashMap<String, Arc<Limiter>>>,
    rng: Mutex<fastrand::Rng>,
}

/// tokio's clock (paused in tests and simulations), as a std `Instant`.
pub(super) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

impl Shared {
    pub(super) fn new(policy: RetryPolicy) -> Self {
        let rng = policy.seed.map_or_else(fastrand::Rng::new, fastrand::Rng::with_seed);
        Shared {
            policy,
            budgets: Mutex::default(),
            breakers: Mutex::default(),
            limiters: Mutex::default(),
            rng: Mutex::new(rng),
        }
    }

    /// A random number in `[0, 1)` for the jitter.
    pub(super) fn unit(&self) -> f64 {
        self.rng.lock().f64()
    }

    /// Counts a first attempt on `route`.
    pub(super) fn deposit(&self, route: &str) {
        if let Some(config) = self.policy.budget {
            let now = now();
            let mut budgets = self.budgets.lock();
            let key = tracked_key(&budgets, route, OVERFLOW_ROUTE);
            budgets.entry(key).or_insert_with(|| RetryBudget::new(config, now)).deposit(now);
        }
    }

    /// Takes a retry out of `route`'s budget; `false` when spent.
    pub(super) fn withdraw(&self, route: &str) -> bool {
        let Some(config) = self.policy.budget else { return true };
        let now = now();
        let mut budgets = self.budgets.lock();
        let key = tracked_key(&budgets, route, OVERFLOW_ROUTE);
        let budget = budgets.entry(key).or_insert_with(|| RetryBudget::new(config, now));
        let granted = budget.withdraw(now);
        let used = budget.used(now);
        drop(budgets);
        metrics::budget_used(route, used);
        if !granted {
            metrics::budget_exhausted(route);
        }
        granted
    }

    /// Admits a call to `destination`, or refuses it.
    pub(super) fn admit(self: &Arc<Self>, destination: &str) -> Result<Permit, Refused> {
        let Some(config) = self.policy.breaker else { return Ok(Permit::untracked()) };
        let mut breakers = self.breakers.lock();
        if !breakers.contains_key(destination) && breakers.len() >= TRACKED_MAX {
            return Ok(Permit::untracked());
        }
        let breaker = breakers.entry(destination.to_owned()).or_insert_with(|| CircuitBreaker::new(config));
        let admitted = breaker.admit(now());
        drop(breakers);
        match admitted {
            Ok(moved) => {
                moved.into_iter().for_each(metrics::transition);
                Ok(Permit { shared: Some(Arc::clone(self)), destination: destination.to_owned() })
            }
            Err(refused) => {
                metrics::refused();
                Err(refused)
            }
        }
    }

    /// The concurrency limiter of `destination`: `None` when the policy
    /// has none, or when too many destinations are tracked.
    pub(super) fn limiter(&self, destination: &str) -> Option<Arc<Limiter>> {
        let config = self.policy.concurrency?;
        let mut limiters = self.limiters.lock();
        if let Some(limiter) = limiters.get(destination) {
            return Some(Arc::clone(limiter));
        }
        if limiters.len() >= TRACKED_MAX {
            return None;
        }
        let limiter = Arc::new(Limiter::new(config, destination));
        limiters.insert(destination.to_owned(), Arc::clone(&limiter));
        drop(limiters);
        metrics::concurrency_limit(destination, limiter.limit());
        Some(limiter)
    }

    /// The concurrency limit of `destination`, if it has one yet.
    pub(super) fn concurrency_limit(&self, destination: &str) -> Option<u32> {
        let limiter = self.limiters.lock().get(destination).map(Arc::clone)?;
        Some(limiter.limit())
    }

    fn finish(&self, destination: &str, outcome: Option<bool>) {
        let mut breakers = self.breakers.lock();
        let Some(breaker) = breakers.get_mut(destination) else { return };
        let moved: Option<BreakerState> = if let Some(success) = outcome {
            breaker.record(now(), success)
        } else {
            breaker.abandon();
            None
        };
        drop(breakers);
        moved.into_iter().for_each(metrics::transition);
    }
}

/// `key` if it is tracked or there is room for it, else `overflow`.
fn tracked_key<V>(map: &HashMap<String, V>, key: &str, overflow: &str) -> String {
    if map.contains_key(key) || map.len() < TRACKED_MAX - 1 {
        key.to_owned()
    } else {
        overflow.to_owned()
    }
}

/// A call a breaker admitted. It reports its outcome with
/// [`record`](Self::record); dropped without one (the caller's future was
/// dropped mid-attempt), it frees its probe slot.
pub(super) struct Permit {
    shared: Option<Arc<Shared>>,
    destination: String,
}

impl Permit {
    fn untracked() -> Self {
        Permit { shared: None, destination: String::new() }
    }

    /// The call's outcome: `success` unless the destination failed.
    pub(super) fn record(mut self, success: bool) {
        if let Some(shared) = self.shared.take() {
            shared.finish(&self.destination, Some(success));
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            shared.finish(&self.destination, None);
        }
    }
}
