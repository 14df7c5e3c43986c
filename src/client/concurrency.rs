//! The adaptive concurrency limit of one destination, as arithmetic told
//! each attempt's outcome: additive increase, multiplicative decrease
//! (AIMD), the way TCP's congestion window and Netflix's
//! `concurrency-limits` (`AIMDLimit`) move. The permits themselves are a
//! `tokio::sync::Semaphore` that the layer resizes to this limit.

/// The settings of a [`ConcurrencyLimit`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConcurrencyConfig {
    /// The limit a destination starts with (default 20, kept within
    /// `min_limit..=max_limit`).
    pub initial_limit: u32,
    /// The limit never goes below this (default 1; at least 1).
    pub min_limit: u32,
    /// The limit never goes above this (default 200).
    pub max_limit: u32,
    /// The factor, in `(0, 1)`, the limit is multiplied by on overload
    /// (default 0.75; out of range or not a number: 0.75).
    pub backoff_ratio: f64,
}

impl Default for ConcurrencyConfig {
    fn default() -> Self {
        ConcurrencyConfig { initial_limit: 20, min_limit: 1, max_limit: 200, backoff_ratio: 0.75 }
    }
}

/// What an attempt says about the destination's load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadSignal {
    /// An answer of a server that is coping (2xx, 3xx, most 4xx).
    Success,
    /// A sign of overload: a timeout, a 5xx, 408 or 429.
    Overload,
    /// Says nothing of the load (a refused or reset connection, another
    /// transport error short of a timeout): the limit does not move.
    Ignore,
}

/// One finished attempt, as the limit sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadSample {
    /// The limit's [`generation`](ConcurrencyLimit::generation) when the
    /// attempt started.
    pub generation: u64,
    /// Attempts in flight when it started, itself included.
    pub in_flight: u32,
    /// What its outcome says.
    pub signal: LoadSignal,
}

/// One destination's adaptive concurrency limit.
///
/// - On [`Overload`](LoadSignal::Overload) the limit is multiplied by
///   `backoff_ratio`, at most once a round: an attempt that started
///   before the last decrease (it was sent under the old limit, so its
///   failure is old news) does not lower it again, as TCP lowers its
///   window once per window of losses.
/// - On [`Success`](LoadSignal::Success) of an attempt that started while
///   at least half the limit was in use, the limit grows by `1 / limit`:
///   one more slot for each limit's worth of successes, about one a round
///   trip. A limit the caller does not use does not grow.
///
/// The limit is kept as a fraction; [`limit`](Self::limit) is its whole
/// part, within `min_limit..=max_limit`.
///
/// # Examples
///
/// ```
/// use idemkv::client::{ConcurrencyConfig, ConcurrencyLimit, LoadSample, LoadSignal};
///
/// let config = ConcurrencyConfig { initial_limit: 16, min_limit: 1, max_limit: 32, backoff_ratio: 0.5 };
/// let mut limit = ConcurrencyLimit::new(config);
/// let sent = limit.generation();
/// let overload = LoadSample { generation: sent, in_flight: 16, signal: LoadSignal::Overload };
/// assert_eq!(limit.record(overload), Some(8));
/// // Another failure of the same round does not lower it again.
/// assert_eq!(limit.record(overload), None);
/// // Successes at a busy limit raise it by one per limit's worth.
/// let later = limit.generation();
/// let success = LoadSample { generation: later, in_flight: 8, signal: LoadSignal::Success };
/// let raised: Vec<_> = (0..9).filter_map(|_| limit.record(success)).collect();
/// assert_eq!(raised, [9]);
/// ```
#[derive(Debug, Clone)]
pub struct ConcurrencyLimit {
    config: ConcurrencyConfig,
    limit: f64,
    generation: u64,
}

impl ConcurrencyLimit {
    /// A limit at `config.initial_limit`, the settings made sane (at
    /// least 1, `min <= initial <= max`, the ratio in `(0, 1)`).
    #[must_use]
    pub fn new(config: ConcurrencyConfig) -> Self {
        let min_limit = config.min_limit.max(1);
        let max_limit = config.max_limit.max(min_limit);
        let ratio = config.backoff_ratio;
        let backoff_ratio = if ratio.is_finite() && ratio > 0.0 && ratio < 1.0 { ratio } else { 0.75 };
        let initial_limit = config.initial_limit.clamp(min_limit, max_limit);
        let config = ConcurrencyConfig { initial_limit, min_limit, max_limit, backoff_ratio };
        ConcurrencyLimit { config, limit: f64::from(initial_limit), generation: 0 }
    }

    /// The settings in force.
    #[must_use]
    pub fn config(&self) -> ConcurrencyConfig {
        self.config
    }

    /// How many attempts may be in flight.
    #[must_use]
    pub fn limit(&self) -> u32 {
        whole(self.limit).clamp(self.config.min_limit, self.config.max_limit)
    }

    /// The number of decreases so far: an attempt notes it when it starts,
    /// and hands it back in its [`LoadSample`].
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Moves the limit by one finished attempt; returns the new
    /// [`limit`](Self::limit) if it changed.
    pub fn record(&mut self, sample: LoadSample) -> Option<u32> {
        let before = self.limit();
        let max = f64::from(self.config.max_limit);
        let min = f64::from(self.config.min_limit);
        match sample.signal {
            LoadSignal::Ignore => return None,
            LoadSignal::Overload => {
                if sample.generation != self.generation {
                    return None;
                }
                self.generation = self.generation.wrapping_add(1);
                self.limit = (self.limit * self.config.backoff_ratio).max(min);
            }
            LoadSignal::Success => {
                if f64::from(sample.in_flight) * 2.0 < self.limit {
                    return None;
                }
                self.limit = (self.limit + 1.0 / self.limit.max(1.0)).min(max);
            }
        }
        let after = self.limit();
        (after != before).then_some(after)
    }
}

/// The whole part of a limit kept within `1..=u32::MAX` as a float.
fn whole(limit: f64) -> u32 {
    if !limit.is_finite() || limit < 1.0 {
        return 1;
    }
    if limit >= f64::from(u32::MAX) {
        return u32::MAX;
    }
    #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "in 1..u32::MAX, rounded down")]
    let whole = limit.floor() as u32;
    whole
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(limit: &ConcurrencyLimit, in_flight: u32, signal: LoadSignal) -> LoadSample {
        LoadSample { generation: limit.generation(), in_flight, signal }
    }

    fn config(initial: u32, min: u32, max: u32, ratio: f64) -> ConcurrencyConfig {
        ConcurrencyConfig { initial_limit: initial, min_limit: min, max_limit: max, backoff_ratio: ratio }
    }

    #[test]
    fn overload_multiplies_once_a_round_down_to_the_minimum() {
        let mut limit = ConcurrencyLimit::new(config(20, 2, 100, 0.5));
        let mut seen = Vec::new();
        for _ in 0..6 {
            let round = sample(&limit, 20, LoadSignal::Overload);
            seen.push(limit.record(round));
            // The rest of the round's failures change nothing.
            assert_eq!(limit.record(round), None);
        }
        assert_eq!(seen, [Some(10), Some(5), Some(2), None, None, None]);
        assert_eq!(limit.limit(), 2);
    }

    #[test]
    fn success_grows_one_slot_per_limit_of_successes_up_to_the_maximum() {
        let mut limit = ConcurrencyLimit::new(config(4, 1, 6, 0.5));
        let mut successes = 0;
        while limit.limit() < 6 {
            let busy = sample(&limit, limit.limit(), LoadSignal::Success);
            limit.record(busy);
            successes += 1;
            assert!(successes < 100, "grows");
        }
        // About a limit's worth of successes per slot: 5 from 4 to 5, 5 or 6
        // from 5 to 6 (each adds 1 / limit of the limit it raises).
        assert!((9..=12).contains(&successes), "{successes}");
        for _ in 0..100 {
            assert_eq!(limit.record(sample(&limit, 6, LoadSignal::Success)), None);
        }
        assert_eq!(limit.limit(), 6);
    }

    #[test]
    fn an_idle_limit_does_not_grow_and_ignored_outcomes_do_nothing() {
        let mut limit = ConcurrencyLimit::new(ConcurrencyConfig::default());
        for _ in 0..1_000 {
            assert_eq!(limit.record(sample(&limit, 9, LoadSignal::Success)), None);
            assert_eq!(limit.record(sample(&limit, 20, LoadSignal::Ignore)), None);
        }
        assert_eq!((limit.limit(), limit.generation()), (20, 0));
    }

    #[test]
    fn odd_settings_are_made_sane() {
        for ratio in [f64::NAN, f64::INFINITY, -1.0, 0.0, 1.0, 7.0] {
            let limit = ConcurrencyLimit::new(config(0, 0, 0, ratio));
            assert_eq!((limit.limit(), limit.config().backoff_ratio), (1, 0.75));
        }
        let limit = ConcurrencyLimit::new(config(500, 10, 3, 0.5));
        assert_eq!((limit.config().min_limit, limit.config().max_limit, limit.limit()), (10, 10, 10));
        let mut huge = ConcurrencyLimit::new(config(u32::MAX, u32::MAX, u32::MAX, 0.5));
        assert_eq!(huge.record(sample(&huge, u32::MAX, LoadSignal::Success)), None);
        assert_eq!(huge.record(sample(&huge, u32::MAX, LoadSignal::Overload)), None, "held at the minimum");
        assert_eq!(whole(f64::NAN), 1);
        assert_eq!(whole(1e300), u32::MAX);
    }
}
