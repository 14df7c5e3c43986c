//! Time, injected: the store never reads the system clock directly. The
//! rules for leases, TTLs and restarts are on [`Clock`] (public); this is
//! the argument for the one floor the store keeps.
//!
//! # The TTL floor
//!
//! Each shard's wall clock for TTL never runs backwards: it is the largest
//! wall-clock value seen (at open, at least the newest time written to any
//! shard). An expired record must stay expired: once a read answered
//! "absent" (or a fresh claim ran over an expired key), the same record
//! must not reappear because the clock stepped back. The price is only that
//! records are kept longer, by at most the size of the backward step, and a
//! record kept longer never weakens idempotency (a replay for longer is
//! still the first answer). Leases use no such floor: they count elapsed
//! time, so nothing that guards a side effect freezes when the wall clock
//! steps back. The monotonic reading is held at its largest value too, but
//! a correct [`Clock`] never needs that.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// A source of time: the wall clock and an elapsed-time counter.
///
/// The store reads time only through this trait, so tests (yours and ours)
/// can move time without sleeping.
///
/// - **Leases count elapsed time** ([`monotonic_ms`](Clock::monotonic_ms)).
///   Within a process a lease lasts its duration of elapsed time: a wall
///   clock that jumps forward an hour does not end it (no second holder can
///   run), one that steps back does not freeze it. The record on disk still
///   carries the lease end in wall-clock ms, which is what
///   [`Lease::deadline_ms`](crate::Lease::deadline_ms) reports.
/// - **TTLs count wall-clock time** ([`now_ms`](Clock::now_ms)): a Completed
///   or Failed record expires when the wall clock reaches completion + TTL.
///   A Processing record whose holder never came back expires once its
///   lease has ended (elapsed time) and the wall clock has reached the
///   written lease end + TTL. Each shard never lets TTL time run backwards
///   (the largest wall-clock value seen counts), so a clock stepping back
///   cannot revive an expired record; it only keeps records longer.
/// - **Across a restart** no elapsed time survives. A Processing record
///   found at open gets as its remaining lease the time left by the wall
///   clock at open (never earlier than the newest time written to the
///   store), clamped to `[0, the lease's length]`, the length being what its
///   last claim or renewal granted. A clock set back across a restart thus
///   gives a lease at most its full length again, never "until the clock
///   catches up"; a clock set forward across a restart ends leases early,
///   which is acceptable because a restart ends the holders' process too. A
///   holder that outlives a close and reopen inside one process is fenced
///   like any other: renew to keep the key.
///
/// # Examples
///
/// ```
/// use idemkv::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new(1_000);
/// clock.advance(Duration::from_secs(2));
/// assert_eq!((clock.now_ms(), clock.monotonic_ms()), (3_000, 2_000));
/// clock.set_wall_ms(0); // the wall clock steps back; no time elapses
/// assert_eq!((clock.now_ms(), clock.monotonic_ms()), (0, 2_000));
/// ```
pub trait Clock: Send + Sync + Debug {
    /// Milliseconds since the Unix epoch (the wall clock; may jump).
    fn now_ms(&self) -> u64;

    /// Milliseconds elapsed since an arbitrary origin fixed for the life of
    /// the clock. It must never go backwards and must not follow changes of
    /// the wall clock ([`std::time::Instant`] for a real clock). A value
    /// that does go backwards is held at the largest one seen.
    fn monotonic_ms(&self) -> u64;
}

/// The system's wall clock and [`Instant`] (the default).
///
/// On Linux the wall clock is read as the kernel kept it at its last tick
/// (`CLOCK_REALTIME_COARSE`), in a few nanoseconds where the precise
/// reading takes tens, as Redis reads its clock once an event loop for
/// key expiry: TTLs then count in steps of one tick (4 ms at the usual
/// 250 Hz; 1–10 ms), the reading never ahead of the precise one. Leases
/// count elapsed time read precisely ([`Instant`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        wall_ms()
    }

    fn monotonic_ms(&self) -> u64 {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        let origin = *ORIGIN.get_or_init(Instant::now);
        u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// The wall clock at the kernel's last tick, in ms since the epoch; a
/// clock set before 1970 reads as 0 (the shard's TTL floor keeps TTL time
/// from going backwards anyway).
#[cfg(target_os = "linux")]
fn wall_ms() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
    match (u64::try_from(now.tv_sec), u64::try_from(now.tv_nsec)) {
        (Ok(seconds), Ok(nanos)) => seconds.saturating_mul(1_000).saturating_add(nanos / 1_000_000),
        _ => 0,
    }
}

/// The wall clock in ms since the epoch; before 1970 it reads as 0.
#[cfg(not(target_os = "linux"))]
fn wall_ms() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
}

/// A clock that only moves when told to. Clones share the same time.
///
/// [`advance`](ManualClock::advance) lets time pass (both readings move);
/// [`set_wall_ms`](ManualClock::set_wall_ms) jumps only the wall clock, as
/// an operator or NTP stepping the system clock would. The monotonic
/// reading starts at 0.
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
/// assert_eq!((clock.now_ms(), clock.monotonic_ms()), (5, 5));
/// clock.set_wall_ms(3_600_000);
/// assert_eq!((shared.now_ms(), shared.monotonic_ms()), (3_600_000, 5));
/// ```
#[derive(Debug, Default, Clone)]
pub struct ManualClock {
    now_ms: Arc<AtomicU64>,
    monotonic_ms: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock whose wall clock reads `now_ms` and whose monotonic reading
    /// is 0, until moved.
    #[must_use]
    pub fn new(now_ms: u64) -> Self {
        ManualClock { now_ms: Arc::new(AtomicU64::new(now_ms)), monotonic_ms: Arc::new(AtomicU64::new(0)) }
    }

    /// Lets `by` pass: both the wall clock and the monotonic reading move
    /// forward (saturating).
    pub fn advance(&self, by: Duration) {
        let by_ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        add_saturating(&self.monotonic_ms, by_ms);
        add_saturating(&self.now_ms, by_ms);
    }

    /// Sets the wall clock, forwards or backwards, without any time
    /// passing: the monotonic reading stays where it is (a clock jump).
    pub fn set_wall_ms(&self, now_ms: u64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }
}

fn add_saturating(value: &AtomicU64, by: u64) {
    let mut current = value.load(Ordering::SeqCst);
    loop {
        let next = current.saturating_add(by);
        match value.compare_exchange(current, next, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => return,
            Err(seen) => current = seen,
        }
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }

    fn monotonic_ms(&self) -> u64 {
        self.monotonic_ms.load(Ordering::SeqCst)
    }
}

/// Both readings a decision needs, taken together: the wall clock for TTL
/// (never earlier than any seen by the shard) and elapsed time for leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Now {
    pub wall_ms: u64,
    pub monotonic_ms: u64,
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

    /// The tick's reading is never ahead of the precise clock read after
    /// it, and behind it by no more than a tick and a scheduling delay
    /// (a second allows for a loaded machine; a unit mistake is 1,000×).
    #[test]
    fn system_clock_is_the_precise_wall_clock_to_a_tick() {
        use std::time::{SystemTime, UNIX_EPOCH};
        for _ in 0..1_000 {
            let ticked = SystemClock.now_ms();
            let precise = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_millis();
            let precise = u64::try_from(precise).expect("fits");
            assert!(ticked <= precise, "{ticked} ahead of {precise}");
            assert!(precise - ticked < 1_000, "{ticked} a second behind {precise}");
        }
    }

    #[test]
    fn system_monotonic_clock_moves_forward() {
        let before = SystemClock.monotonic_ms();
        std::thread::sleep(Duration::from_millis(3));
        assert!(SystemClock.monotonic_ms() >= before + 2);
    }

    #[test]
    fn manual_clock_saturates() {
        let clock = ManualClock::new(u64::MAX - 1);
        clock.advance(Duration::from_secs(10));
        assert_eq!((clock.now_ms(), clock.monotonic_ms()), (u64::MAX, 10_000));
    }

    #[test]
    fn a_wall_jump_is_not_elapsed_time() {
        let clock = ManualClock::new(1_000);
        clock.set_wall_ms(10);
        clock.advance(Duration::from_millis(5));
        assert_eq!((clock.now_ms(), clock.monotonic_ms()), (15, 5));
    }

    #[test]
    fn duration_rounds_up() {
        assert_eq!(duration_ms(Duration::from_micros(1)), 1);
        assert_eq!(duration_ms(Duration::from_millis(7)), 7);
        assert_eq!(duration_ms(Duration::from_micros(7_001)), 8);
        assert_eq!(duration_ms(Duration::MAX), u64::MAX);
    }
}
