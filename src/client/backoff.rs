//! How long to wait before retry `n`: capped exponential backoff with the
//! jitter formulas of the AWS Architecture Blog ("Exponential Backoff And
//! Jitter", 2015). The formulas are pure: the caller draws the random
//! number, so tests and simulations replay from a seed.

use std::time::Duration;

/// How a delay is spread around its exponential ceiling
/// `min(max, base × 2ⁿ)` for retry `n` (0 for the first retry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Jitter {
    /// Exactly the ceiling. Clients that failed together retry together.
    None,
    /// Uniform in `[0, ceiling]`. The default: the least total work.
    #[default]
    Full,
    /// Half the ceiling plus uniform in `[0, ceiling / 2]`: never shorter
    /// than half the ceiling.
    Equal,
    /// `min(max, uniform in [base, 3 × previous delay])`, the first
    /// previous delay being `base`: grows from the last delay rather than
    /// from the retry number.
    Decorrelated,
}

/// Capped exponential backoff.
///
/// # Examples
///
/// ```
/// use idemkv::client::{Backoff, Jitter};
/// use std::time::Duration;
///
/// let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2)).jitter(Jitter::None);
/// assert_eq!(backoff.ceiling(0), Duration::from_millis(100));
/// assert_eq!(backoff.ceiling(3), Duration::from_millis(800));
/// assert_eq!(backoff.ceiling(10), Duration::from_secs(2)); // capped
/// assert_eq!(backoff.delay(3, Duration::ZERO, 0.5), Duration::from_millis(800));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    jitter: Jitter,
}

impl Default for Backoff {
    /// Base 100 ms, max 10 s, full jitter.
    fn default() -> Self {
        Backoff::new(Duration::from_millis(100), Duration::from_secs(10))
    }
}

impl Backoff {
    /// Backoff from `base`, capped at `max` (raised to `base` if smaller),
    /// with full jitter.
    #[must_use]
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff { base, max: max.max(base), jitter: Jitter::Full }
    }

    /// The jitter (default [`Jitter::Full`]).
    #[must_use]
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// The first delay's ceiling.
    #[must_use]
    pub fn base(&self) -> Duration {
        self.base
    }

    /// The cap on every delay.
    #[must_use]
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The jitter in use.
    #[must_use]
    pub fn jitter_kind(&self) -> Jitter {
        self.jitter
    }

    /// `min(max, base × 2^retry)`, without overflow for any `retry`.
    #[must_use]
    pub fn ceiling(&self, retry: u32) -> Duration {
        let factor = 1_u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX);
        self.base.checked_mul(factor).map_or(self.max, |delay| delay.min(self.max))
    }

    /// The delay before retry `retry` (0 for the first), given the delay
    /// before the previous one (`Duration::ZERO` for the first; only
    /// [`Jitter::Decorrelated`] reads it) and `unit`, a random number in
    /// `[0, 1)` (clamped into it).
    #[must_use]
    pub fn delay(&self, retry: u32, previous: Duration, unit: f64) -> Duration {
        let unit = if unit.is_finite() { unit.clamp(0.0, 1.0) } else { 0.0 };
        let ceiling = self.ceiling(retry);
        match self.jitter {
            Jitter::None => ceiling,
            Jitter::Full => scale(ceiling, unit),
            Jitter::Equal => (ceiling / 2).saturating_add(scale(ceiling / 2, unit)),
            Jitter::Decorrelated => {
                let previous = if previous < self.base { self.base } else { previous };
                let high = previous.saturating_mul(3).min(self.max);
                let spread = high.saturating_sub(self.base);
                self.base.saturating_add(scale(spread, unit)).min(self.max)
            }
        }
    }
}

/// `duration × unit` for `unit` in `[0, 1]`, never above `duration` (the
/// float product of a huge duration may round past it).
fn scale(duration: Duration, unit: f64) -> Duration {
    Duration::try_from_secs_f64(duration.as_secs_f64() * unit).map_or(duration, |scaled| scaled.min(duration))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(5);

    fn units() -> impl Iterator<Item = f64> {
        let mut rng = fastrand::Rng::with_seed(7);
        (0..200).map(move |_| rng.f64()).chain([0.0, 0.999_999_9, 1.0, -1.0, 2.0, f64::NAN, f64::INFINITY])
    }

    #[test]
    fn ceiling_grows_doubles_and_caps() {
        let backoff = Backoff::new(BASE, MAX);
        let mut last = Duration::ZERO;
        for retry in 0..200 {
            let ceiling = backoff.ceiling(retry);
            assert!(ceiling >= last, "monotone at {retry}");
            assert!(ceiling <= MAX);
            if ceiling < MAX {
                assert_eq!(ceiling, BASE * 2_u32.pow(retry));
            }
            last = ceiling;
        }
        assert_eq!(backoff.ceiling(6), Duration::from_secs(5));
        assert_eq!(backoff.ceiling(u32::MAX), MAX);
    }

    #[test]
    fn no_jitter_is_the_ceiling() {
        let backoff = Backoff::new(BASE, MAX).jitter(Jitter::None);
        for retry in 0..40 {
            for unit in units() {
                assert_eq!(backoff.delay(retry, Duration::ZERO, unit), backoff.ceiling(retry));
            }
        }
    }

    #[test]
    fn full_jitter_is_within_zero_and_the_ceiling() {
        let backoff = Backoff::new(BASE, MAX).jitter(Jitter::Full);
        for retry in 0..40 {
            for unit in units() {
                assert!(backoff.delay(retry, Duration::ZERO, unit) <= backoff.ceiling(retry));
            }
        }
        assert_eq!(backoff.delay(2, Duration::ZERO, 0.0), Duration::ZERO);
        assert_eq!(backoff.delay(2, Duration::ZERO, 0.5), Duration::from_millis(200));
    }

    #[test]
    fn equal_jitter_is_within_half_and_the_ceiling() {
        let backoff = Backoff::new(BASE, MAX).jitter(Jitter::Equal);
        for retry in 0..40 {
            let ceiling = backoff.ceiling(retry);
            for unit in units() {
                let delay = backoff.delay(retry, Duration::ZERO, unit);
                assert!(delay >= ceiling / 2 && delay <= ceiling, "{retry} {unit}: {delay:?}");
            }
        }
        assert_eq!(backoff.delay(1, Duration::ZERO, 0.0), Duration::from_millis(100));
    }

    #[test]
    fn decorrelated_jitter_is_within_base_and_three_times_the_previous() {
        let backoff = Backoff::new(BASE, MAX).jitter(Jitter::Decorrelated);
        let mut previous = Duration::ZERO;
        for unit in units() {
            let delay = backoff.delay(0, previous, unit);
            let high = previous.max(BASE).saturating_mul(3).min(MAX);
            assert!(delay >= BASE && delay <= high, "after {previous:?}: {delay:?}");
            previous = delay;
        }
        // From the start, the range is [base, 3 × base].
        assert_eq!(backoff.delay(0, Duration::ZERO, 0.0), BASE);
        assert_eq!(backoff.delay(0, Duration::ZERO, 1.0), BASE * 3);
        // The cap holds for any previous delay.
        assert_eq!(backoff.delay(0, Duration::from_secs(1_000), 1.0), MAX);
        assert_eq!(backoff.delay(0, Duration::MAX, 1.0), MAX);
    }

    #[test]
    fn extreme_settings_do_not_panic() {
        for jitter in [Jitter::None, Jitter::Full, Jitter::Equal, Jitter::Decorrelated] {
            for (base, max) in [(Duration::ZERO, Duration::ZERO), (Duration::MAX, Duration::MAX), (MAX, BASE)] {
                let backoff = Backoff::new(base, max).jitter(jitter);
                for retry in [0, 1, 31, 32, 64, u32::MAX] {
                    let _ = backoff.delay(retry, Duration::MAX, 0.99);
                    assert!(backoff.ceiling(retry) <= backoff.max());
                }
            }
        }
    }
}
