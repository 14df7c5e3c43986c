//! Time, injected: the store never reads the system clock directly.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in milliseconds since the Unix epoch.
///
/// The store reads time only through this trait, so tests (yours and ours)
/// can move time without sleeping. The store never trusts a clock to be
/// monotonic: each shard keeps the largest value it has seen, so a wall clock
/// that jumps backwards makes time stand still instead of reviving expired
/// records or letting a lease run out early. After a restart the floor is the
/// newest timestamp written to any shard's log (reads write nothing), so a
/// clock set back across a restart can show a Completed record again that
/// had expired after the last write; it can never shorten a lease.
///
/// # Examples
///
/// ```
/// use idemkv::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new(1_000);
/// clock.advance(Duration::from_secs(2));
/// assert_eq!(clock.now_ms(), 3_000);
/// ```
pub trait Clock: Send + Sync + Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The system's wall clock (the default).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        // A clock set before 1970 reads as 0; the shard's monotonic floor
        // keeps time from going backwards anyway.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that only moves when told to. Clones share the same time.
///
/// # Examples
///
/// ```
/// use idemkv::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new(0);
/// let shared = clock.clone();
/// shared.advance(Duration::from_millis(5));
/// assert_eq!(clock.now_ms(), 5);
/// clock.set_ms(1);
/// assert_eq!(shared.now_ms(), 1);
/// ```
#[derive(Debug, Default, Clone)]
pub struct ManualClock {
    now_ms: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock that reads `now_ms` until moved.
    #[must_use]
    pub fn new(now_ms: u64) -> Self {
        ManualClock { now_ms: Arc::new(AtomicU64::new(now_ms)) }
    }

    /// Moves time forward by `by` (saturating).
    pub fn advance(&self, by: Duration) {
        let by_ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let mut current = self.now_ms.load(Ordering::SeqCst);
        loop {
            let next = current.saturating_add(by_ms);
            match self.now_ms.compare_exchange(current, next, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    /// Sets the time, forwards or backwards.
    pub fn set_ms(&self, now_ms: u64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

/// Converts a duration to whole milliseconds, rounding up so that a
/// sub-millisecond lease is never zero, saturating at `u64::MAX`.
pub(crate) fn duration_ms(duration: Duration) -> u64 {
    let ms = duration.as_millis() + u128::from(!duration.subsec_nanos().is_multiple_of(1_000_000));
    u64::try_from(ms).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
    }

    #[test]
    fn manual_clock_saturates() {
        let clock = ManualClock::new(u64::MAX - 1);
        clock.advance(Duration::from_secs(10));
        assert_eq!(clock.now_ms(), u64::MAX);
    }

    #[test]
    fn duration_rounds_up() {
        assert_eq!(duration_ms(Duration::from_micros(1)), 1);
        assert_eq!(duration_ms(Duration::from_millis(7)), 7);
        assert_eq!(duration_ms(Duration::from_micros(7_001)), 8);
        assert_eq!(duration_ms(Duration::MAX), u64::MAX);
    }
}
