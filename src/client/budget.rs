//! The retry budget: retries may add at most a fraction of the requests
//! over a sliding window (plus a small floor, so that a quiet route can
//! still retry), so that during an outage retries cannot multiply the load.
//!
//! `tower::retry::budget::TpsBudget` keeps the same account, but reads
//! `std::time::Instant::now()` itself; this one is told the time, so the
//! layer runs it on tokio's clock (paused in tests and simulations) and
//! its unit tests are plain functions of their inputs.

use std::time::{Duration, Instant};

/// How many slots the window is cut into: it slides one slot at a time.
const SLOTS: usize = 10;
/// `SLOTS` as the divisor of a `Duration`.
const SLOTS_U32: u32 = 10;
const _: () = assert!(SLOTS == SLOTS_U32 as usize);

/// The settings of a [`RetryBudget`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetConfig {
    /// The window the account covers (default 10 s).
    pub window: Duration,
    /// Retries allowed per request in the window (default 0.2: at most
    /// one retry for five requests).
    pub ratio: f64,
    /// Retries allowed in the window whatever the requests (default 10).
    pub min_retries: u32,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig { window: Duration::from_secs(10), ratio: 0.2, min_retries: 10 }
    }
}

/// One route's account of requests and retries over a sliding window.
///
/// # Examples
///
/// ```
/// use idemkv::client::{BudgetConfig, RetryBudget};
/// use std::time::{Duration, Instant};
///
/// let config = BudgetConfig { window: Duration::from_secs(10), ratio: 0.5, min_retries: 0 };
/// let now = Instant::now();
/// let mut budget = RetryBudget::new(config, now);
/// for _ in 0..4 {
///     budget.deposit(now);
/// }
/// assert!(budget.withdraw(now));
/// assert!(budget.withdraw(now));
/// assert!(!budget.withdraw(now), "2 retries for 4 requests is the most at 0.5");
/// // Once the window has passed, the account is empty again.
/// assert!(!budget.withdraw(now + Duration::from_secs(11)));
/// ```
#[derive(Debug, Clone)]
pub struct RetryBudget {
    config: BudgetConfig,
    slot_length: Duration,
    /// Requests and retries per slot; slot `current` is the newest.
    requests: [u64; SLOTS],
    retries: [u64; SLOTS],
    current: usize,
    /// When slot `current` began.
    current_start: Instant,
}

impl RetryBudget {
    /// An empty account that starts at `now`.
    #[must_use]
    pub fn new(config: BudgetConfig, now: Instant) -> Self {
        let ratio = if config.ratio.is_finite() { config.ratio.max(0.0) } else { 0.0 };
        let window = config.window.max(Duration::from_millis(u64::from(SLOTS_U32)));
        let config = BudgetConfig { window, ratio, ..config };
        RetryBudget {
            config,
            slot_length: window / SLOTS_U32,
            requests: [0; SLOTS],
            retries: [0; SLOTS],
            current: 0,
            current_start: now,
        }
    }

    /// Counts one request (a first attempt).
    pub fn deposit(&mut self, now: Instant) {
        self.slide(now);
        self.requests[self.current] = self.requests[self.current].saturating_add(1);
    }

    /// Takes one retry out of the budget if it allows one: `false` when
    /// the retries in the window have reached the allowance.
    pub fn withdraw(&mut self, now: Instant) -> bool {
        self.slide(now);
        if self.retries_in_window() >= self.allowance() {
            return false;
        }
        self.retries[self.current] = self.retries[self.current].saturating_add(1);
        true
    }

    /// The share of the allowance spent, from 0 (nothing) to 1 (all); 1
    /// when the allowance is zero.
    #[must_use]
    pub fn used(&mut self, now: Instant) -> f64 {
        self.slide(now);
        let allowance = self.allowance();
        if allowance == 0 {
            return 1.0;
        }
        #[expect(clippy::cast_precision_loss, reason = "a ratio for a gauge")]
        let used = self.retries_in_window() as f64 / allowance as f64;
        used.min(1.0)
    }

    /// Retries allowed in the window as it stands.
    fn allowance(&self) -> u64 {
        let requests: u64 = self.requests.iter().fold(0, |sum, count| sum.saturating_add(*count));
        #[expect(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a non-negative allowance, rounded down; a float past u64 saturates"
        )]
        let share = (requests as f64 * self.config.ratio) as u64;
        share.saturating_add(u64::from(self.config.min_retries))
    }

    fn retries_in_window(&self) -> u64 {
        self.retries.iter().fold(0, |sum, count| sum.saturating_add(*count))
    }

    /// Moves the newest slot forward to `now`, clearing the slots that
    /// fell out of the window (at most all of them). A `now` before the
    /// newest slot (a caller's clock that stepped back) counts in it.
    fn slide(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.current_start);
        let steps = elapsed.as_nanos() / self.slot_length.as_nanos().max(1);
        if steps == 0 {
            return;
        }
        let clear = usize::try_from(steps).unwrap_or(SLOTS).min(SLOTS);
        for _ in 0..clear {
            self.current = (self.current + 1) % SLOTS;
            self.requests[self.current] = 0;
            self.retries[self.current] = 0;
        }
        let advance = u32::try_from(steps).map_or(elapsed, |steps| self.slot_length.saturating_mul(steps));
        self.current_start = self.current_start.checked_add(advance).unwrap_or(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(ratio: f64, min_retries: u32) -> BudgetConfig {
        BudgetConfig { window: Duration::from_secs(10), ratio, min_retries }
    }

    #[test]
    fn floor_allows_retries_without_requests() {
        let now = Instant::now();
        let mut budget = RetryBudget::new(config(0.2, 3), now);
        assert!((0..3).all(|_| budget.withdraw(now)));
        assert!(!budget.withdraw(now));
        assert!((budget.used(now) - 1.0).abs() < f64::EPSILON);
    }

    #[test]
    fn deposits_raise_the_allowance_by_the_ratio() {
        let now = Instant::now();
        let mut budget = RetryBudget::new(config(0.2, 0), now);
        for _ in 0..100 {
            budget.deposit(now);
        }
        let granted = (0..100).filter(|_| budget.withdraw(now)).count();
        assert_eq!(granted, 20);
        // Each new deposit of five requests allows one more.
        for _ in 0..5 {
            budget.deposit(now);
        }
        assert!(budget.withdraw(now));
        assert!(!budget.withdraw(now));
    }

    #[test]
    fn the_window_slides_slot_by_slot() {
        let start = Instant::now();
        let mut budget = RetryBudget::new(config(1.0, 0), start);
        for _ in 0..10 {
            budget.deposit(start);
        }
        // 9.5 s later the deposits still count; spend half of them.
        let later = start + Duration::from_millis(9_500);
        assert!((0..5).all(|_| budget.withdraw(later)));
        assert!((budget.used(later) - 0.5).abs() < 1e-9);
        // At 10 s the first slot (the deposits) leaves the window; the
        // retries taken at 9.5 s stay and exceed an allowance of zero.
        let after = start + Duration::from_secs(10);
        assert!(!budget.withdraw(after));
        // At 20 s everything has left: empty again.
        let empty = start + Duration::from_secs(20);
        assert!(!budget.withdraw(empty));
        budget.deposit(empty);
        assert!(budget.withdraw(empty));
    }

    #[test]
    fn odd_settings_and_times_do_not_panic() {
        let start = Instant::now();
        for ratio in [f64::NAN, f64::INFINITY, -1.0, 0.0, 1e300] {
            let window = Duration::ZERO;
            let mut budget = RetryBudget::new(BudgetConfig { window, ratio, min_retries: u32::MAX }, start);
            budget.deposit(start);
            let _ = budget.withdraw(start + Duration::from_secs(1_000_000));
            let _ = budget.withdraw(start);
            let _ = budget.used(start);
        }
    }

    #[test]
    fn zero_ratio_and_floor_refuse_every_retry() {
        let now = Instant::now();
        let mut budget = RetryBudget::new(config(0.0, 0), now);
        budget.deposit(now);
        assert!(!budget.withdraw(now));
        assert!((budget.used(now) - 1.0).abs() < f64::EPSILON);
    }
}
