//! The circuit breaker of one destination, as a state machine told the
//! time: closed while the failure rate over the last calls stays under a
//! threshold; open (refusing at once) for a cool-down when it passes it;
//! then half-open, letting a few probes through: their success closes it,
//! a failure opens it again.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The settings of a [`CircuitBreaker`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    /// How many of the latest calls the failure rate covers (default 20).
    pub window_calls: u32,
    /// The fewest calls in the window before the breaker may open
    /// (default 10).
    pub min_calls: u32,
    /// The failure rate, in `(0, 1]`, at or past which it opens (default
    /// 0.5).
    pub failure_rate: f64,
    /// How long it stays open before it lets probes through (default 5 s).
    pub open_for: Duration,
    /// How many probes it lets through when half-open, and how many must
    /// succeed to close it (default 1).
    pub probes: u32,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            window_calls: 20,
            min_calls: 10,
            failure_rate: 0.5,
            open_for: Duration::from_secs(5),
            probes: 1,
        }
    }
}

/// A breaker's state: the `to` label of
/// `circuit_breaker_transitions_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through; outcomes are counted.
    Closed,
    /// Calls are refused until the cool-down ends.
    Open,
    /// A few probes go through; the rest are refused.
    HalfOpen,
}

impl BreakerState {
    /// The label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// A refused call: the breaker is open, or half-open with all its probes
/// out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// How long until the breaker lets a probe through (zero when the
    /// probes of a half-open breaker are out).
    pub retry_in: Duration,
}

/// One destination's circuit breaker.
///
/// Every admitted call must end in exactly one of [`record`](Self::record)
/// or [`abandon`](Self::abandon) (the layer does this with a guard that
/// abandons on drop). Each method returns the state it moved to, if it
/// moved, for the caller to count.
///
/// # Examples
///
/// ```
/// use idemkv::client::{BreakerConfig, BreakerState, CircuitBreaker};
/// use std::time::{Duration, Instant};
///
/// let config = BreakerConfig { window_calls: 4, min_calls: 4, failure_rate: 0.5, ..BreakerConfig::default() };
/// let mut breaker = CircuitBreaker::new(config);
/// let now = Instant::now();
/// for success in [true, true, false] {
///     breaker.admit(now).unwrap();
///     breaker.record(now, success);
/// }
/// breaker.admit(now).unwrap();
/// assert_eq!(breaker.record(now, false), Some(BreakerState::Open)); // 2 of 4 failed
/// assert!(breaker.admit(now).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct CircuitBreaker {
    config: BreakerConfig,
    state: BreakerState,
    /// Closed: the outcomes (true: failure) of the latest calls.
    outcomes: VecDeque<bool>,
    /// Open: when the cool-down ends.
    open_until: Option<Instant>,
    /// Half-open: probes admitted and not yet finished, and successes.
    probes_out: u32,
    probe_successes: u32,
}

impl CircuitBreaker {
    /// A closed breaker with no history.
    #[must_use]
    pub fn new(config: BreakerConfig) -> Self {
        let config = BreakerConfig {
            window_calls: config.window_calls.max(1),
            min_calls: config.min_calls.clamp(1, config.window_calls.max(1)),
            probes: config.probes.max(1),
            ..config
        };
        CircuitBreaker {
            config,
            state: BreakerState::Closed,
            outcomes: VecDeque::new(),
            open_until: None,
            probes_out: 0,
            probe_successes: 0,
        }
    }

    /// The state, without moving it.
    #[must_use]
    pub fn state(&self) -> BreakerState {
        self.state
    }

    /// Lets a call through, or refuses it. An open breaker whose cool-down
    /// has ended turns half-open here (the second value).
    ///
    /// # Errors
    ///
    /// [`Refused`] while open, or while half-open with every probe out.
    pub fn admit(&mut self, now: Instant) -> Result<Option<BreakerState>, Refused> {
        let mut moved = None;
        if self.state == BreakerState::Open {
            let until = self.open_until.unwrap_or(now);
            if now < until {
                return Err(Refused { retry_in: until - now });
            }
            moved = self.enter(BreakerState::HalfOpen, now);
        }
        if self.state == BreakerState::HalfOpen {
            if self.probes_out + self.probe_successes >= self.config.probes {
                return Err(Refused { retry_in: Duration::ZERO });
            }
            self.probes_out += 1;
        }
        Ok(moved)
    }

    /// The outcome of an admitted call.
    pub fn record(&mut self, now: Instant, success: bool) -> Option<BreakerState> {
        match self.state {
            BreakerState::Closed => {
                self.outcomes.push_back(!success);
                while self.outcomes.len() > self.config.window_calls as usize {
                    self.outcomes.pop_front();
                }
                self.tripped().then(|| self.enter(BreakerState::Open, now)).flatten()
            }
            BreakerState::HalfOpen => {
                self.probes_out = self.probes_out.saturating_sub(1);
                if !success {
                    return self.enter(BreakerState::Open, now);
                }
                self.probe_successes += 1;
                (self.probe_successes >= self.config.probes).then(|| self.enter(BreakerState::Closed, now)).flatten()
            }
            // A call admitted before the breaker opened: the breaker has
            // already decided.
            BreakerState::Open => None,
        }
    }

    /// An admitted call that ended without an outcome (its future was
    /// dropped): a half-open breaker's probe slot is freed.
    pub fn abandon(&mut self) {
        if self.state == BreakerState::HalfOpen {
            self.probes_out = self.probes_out.saturating_sub(1);
        }
    }

    fn tripped(&self) -> bool {
        let calls = self.outcomes.len();
        if calls < self.config.min_calls as usize {
            return false;
        }
        let failures = self.outcomes.iter().filter(|failed| **failed).count();
        #[expect(clippy::cast_precision_loss, reason = "counts of at most u32::MAX calls")]
        let rate = failures as f64 / calls as f64;
        rate >= self.config.failure_rate
    }

    fn enter(&mut self, state: BreakerState, now: Instant) -> Option<BreakerState> {
        if state == self.state {
            return None;
        }
        self.state = state;
        self.outcomes.clear();
        self.probes_out = 0;
        self.probe_successes = 0;
        self.open_until = (state == BreakerState::Open).then(|| now.checked_add(self.config.open_for).unwrap_or(now));
        Some(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(probes: u32) -> BreakerConfig {
        BreakerConfig { window_calls: 10, min_calls: 5, failure_rate: 0.5, open_for: Duration::from_secs(5), probes }
    }

    fn call(breaker: &mut CircuitBreaker, now: Instant, success: bool) -> Option<BreakerState> {
        breaker.admit(now).expect("admitted");
        breaker.record(now, success)
    }

    /// A breaker driven open at `now`.
    fn opened(probes: u32, now: Instant) -> CircuitBreaker {
        let mut breaker = CircuitBreaker::new(config(probes));
        for _ in 0..4 {
            assert_eq!(call(&mut breaker, now, false), None, "under min_calls");
        }
        assert_eq!(call(&mut breaker, now, false), Some(BreakerState::Open));
        breaker
    }

    #[test]
    fn stays_closed_under_the_threshold_and_min_calls() {
        let now = Instant::now();
        let mut breaker = CircuitBreaker::new(config(1));
        for index in 0..100 {
            // 4 failures in every 10 calls: 40 % < 50 %.
            assert_eq!(call(&mut breaker, now, index % 10 < 6), None);
        }
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[test]
    fn the_window_forgets_old_failures() {
        let now = Instant::now();
        let mut breaker = CircuitBreaker::new(config(1));
        for index in 0..10 {
            assert_eq!(call(&mut breaker, now, index < 6), None, "4 of 10 failed");
        }
        for _ in 0..10 {
            assert_eq!(call(&mut breaker, now, true), None);
        }
        for _ in 0..4 {
            assert_eq!(call(&mut breaker, now, false), None, "4 of the last 10 failed");
        }
        assert_eq!(call(&mut breaker, now, false), Some(BreakerState::Open), "5 of the last 10");
    }

    #[test]
    fn open_refuses_until_the_cool_down_ends() {
        let now = Instant::now();
        let mut breaker = opened(1, now);
        assert_eq!(breaker.admit(now), Err(Refused { retry_in: Duration::from_secs(5) }));
        let later = now + Duration::from_secs(3);
        assert_eq!(breaker.admit(later), Err(Refused { retry_in: Duration::from_secs(2) }));
        assert_eq!(breaker.record(later, true), None, "a late outcome does not move an open breaker");
        assert_eq!(breaker.state(), BreakerState::Open);
    }

    #[test]
    fn half_open_admits_the_probes_only() {
        let now = Instant::now();
        let mut breaker = opened(2, now);
        let after = now + Duration::from_secs(5);
        assert_eq!(breaker.admit(after), Ok(Some(BreakerState::HalfOpen)));
        assert_eq!(breaker.admit(after), Ok(None));
        assert_eq!(breaker.admit(after), Err(Refused { retry_in: Duration::ZERO }));
        // An abandoned probe frees its slot.
        breaker.abandon();
        assert_eq!(breaker.admit(after), Ok(None));
    }

    #[test]
    fn probe_successes_close() {
        let now = Instant::now();
        let mut breaker = opened(2, now);
        let after = now + Duration::from_secs(5);
        breaker.admit(after).expect("probe 1");
        breaker.admit(after).expect("probe 2");
        assert_eq!(breaker.record(after, true), None, "one of two");
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        assert!(breaker.admit(after).is_err(), "a success does not free a probe slot");
        assert_eq!(breaker.record(after, true), Some(BreakerState::Closed));
        // Closed with a fresh window: four failures do not reopen it.
        for _ in 0..4 {
            assert_eq!(call(&mut breaker, after, false), None);
        }
    }

    #[test]
    fn a_probe_failure_reopens() {
        let now = Instant::now();
        let mut breaker = opened(1, now);
        let after = now + Duration::from_secs(6);
        assert_eq!(breaker.admit(after), Ok(Some(BreakerState::HalfOpen)));
        assert_eq!(breaker.record(after, false), Some(BreakerState::Open));
        assert_eq!(breaker.admit(after), Err(Refused { retry_in: Duration::from_secs(5) }), "a new cool-down");
    }

    #[test]
    fn degenerate_settings_do_not_panic() {
        let now = Instant::now();
        let config = BreakerConfig {
            window_calls: 0,
            min_calls: u32::MAX,
            failure_rate: f64::NAN,
            open_for: Duration::MAX,
            probes: 0,
        };
        let mut breaker = CircuitBreaker::new(config);
        for index in 0..10 {
            if breaker.admit(now).is_ok() {
                breaker.record(now, index % 2 == 0);
            }
        }
        breaker.abandon();
    }
}
