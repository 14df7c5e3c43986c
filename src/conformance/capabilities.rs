//! What a backend offers besides the contract, and what a scenario is
//! given to run in.

use crate::{store::Quota, ManualClock};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Restarts a backend: takes the running one and gives back one over the
/// same records, as after a process or server restart (see
/// [`Capabilities::persistence`]).
pub type Restart<B> = Box<dyn FnMut(B) -> Pin<Box<dyn Future<Output = B> + Send>> + Send>;

/// Something a scenario needs that not every backend offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Capability {
    /// The backend reads its time from a [`ManualClock`] the suite may
    /// move, so that lease ends and expiries are met to the millisecond.
    MovableClock,
    /// The backend's time is the wall clock: what a scenario sleeps through
    /// passes for the backend too (lease keep-alives run in real time).
    RealTime,
    /// Per-scope quotas on live records.
    Quotas,
    /// Records that survive a restart of the backend.
    Persistence,
}

impl fmt::Display for Capability {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            Capability::MovableClock => "movable clock",
            Capability::RealTime => "real time",
            Capability::Quotas => "quotas",
            Capability::Persistence => "persistence across a restart",
        })
    }
}

/// A scope with a quota on its live records, for the quota scenarios:
/// no other scenario uses it, and each leaves it as empty as it found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaScope {
    scope: Vec<u8>,
    records: u64,
    retry_after: Duration,
}

impl QuotaScope {
    /// The limited scope.
    #[must_use]
    pub fn scope(&self) -> &[u8] {
        &self.scope
    }

    /// How many live records it may hold.
    #[must_use]
    pub fn records(&self) -> u64 {
        self.records
    }

    /// How long a refused caller is told to wait.
    #[must_use]
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }
}

/// What a backend offers besides the contract, for [`run_all`](super::run_all):
/// each scenario that needs more is skipped, and reported so.
///
/// By default: real time, no quotas, no restart, and keys under a prefix
/// new to this run.
pub struct Capabilities<B> {
    prefix: String,
    clock: Option<ManualClock>,
    quota: Option<QuotaScope>,
    restart: Option<Restart<B>>,
}

impl<B> fmt::Debug for Capabilities<B> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Capabilities")
            .field("prefix", &self.prefix)
            .field("clock", &self.clock)
            .field("quota", &self.quota)
            .field("restart", &self.restart.is_some())
            .finish()
    }
}

impl<B> Default for Capabilities<B> {
    fn default() -> Self {
        Capabilities { prefix: fresh_prefix(), clock: None, quota: None, restart: None }
    }
}

impl<B> Capabilities<B> {
    /// A backend on real time, without quotas, that is not restarted.
    #[must_use]
    pub fn new() -> Self {
        Capabilities::default()
    }

    /// Every key of the run starts with `prefix` (default: a prefix made
    /// of the time and a counter, new to each run), so that runs sharing a
    /// backend, or meeting the records of earlier runs, keep apart.
    #[must_use]
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The backend reads its time from `clock`, which the suite may move:
    /// the scenarios advance it instead of sleeping, and those that meet
    /// lease ends and expiries to the millisecond run. A scenario that
    /// needs [`Capability::RealTime`] (a lease keep-alive, which renews in
    /// real time) is then skipped.
    #[must_use]
    pub fn movable_clock(mut self, clock: ManualClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// `scope` has `quota` (whose record limit the scenarios fill; a quota
    /// on bytes alone is not exercised) and no other scenario's records.
    ///
    /// # Panics
    /// When `quota` sets no record limit.
    #[must_use]
    pub fn quota(mut self, scope: impl AsRef<[u8]>, quota: Quota) -> Self {
        let records = quota.records_max().expect("the quota scenarios fill a record limit");
        let retry_after = quota.retry_after_duration();
        self.quota = Some(QuotaScope { scope: scope.as_ref().to_vec(), records, retry_after });
        self
    }

    /// The backend's records survive a restart, and `restart` performs one:
    /// it takes the running backend (every other handle on it is idle by
    /// then) and returns a new one over the same records — a store
    /// reopened on its directory, a client reconnected to a server that
    /// was stopped hard and started again.
    #[must_use]
    pub fn persistence<F, Fut>(mut self, mut restart: F) -> Self
    where
        F: FnMut(B) -> Fut + Send + 'static,
        Fut: Future<Output = B> + Send + 'static,
    {
        self.restart = Some(Box::new(move |backend| Box::pin(restart(backend))));
        self
    }

    /// The clock the suite may move, if any.
    #[must_use]
    pub fn clock(&self) -> Option<&ManualClock> {
        self.clock.as_ref()
    }

    /// The scope with a quota, if any.
    #[must_use]
    pub fn quota_scope(&self) -> Option<&QuotaScope> {
        self.quota.as_ref()
    }

    /// The restart, if the backend's records survive one.
    pub fn restarter(&mut self) -> Option<&mut Restart<B>> {
        self.restart.as_mut()
    }

    /// The setting of the run: its key prefix and its time.
    #[must_use]
    pub fn setting(&self) -> Setting {
        Setting { prefix: self.prefix.clone(), clock: self.clock.clone() }
    }
}

/// What a scenario runs in besides its backend: the prefix that keeps its
/// keys apart from every other scenario's, and how time passes for the
/// backend.
#[derive(Debug, Clone)]
pub struct Setting {
    prefix: String,
    clock: Option<ManualClock>,
}

impl Setting {
    /// Keys under `prefix`, on real time.
    #[must_use]
    pub fn new(prefix: impl Into<String>) -> Self {
        Setting { prefix: prefix.into(), clock: None }
    }

    /// The backend's time is `clock`: [`Setting::pass`] advances it.
    #[must_use]
    pub fn movable_clock(mut self, clock: ManualClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The setting of scenario `name` in this one: its keys under a prefix
    /// of their own.
    #[must_use]
    pub fn of(&self, name: &str) -> Setting {
        Setting { prefix: format!("{}-{name}", self.prefix), clock: self.clock.clone() }
    }

    /// The key `name` of this setting.
    #[must_use]
    pub fn key(&self, name: &str) -> Vec<u8> {
        format!("{}-{name}", self.prefix).into_bytes()
    }

    /// The clock the scenario may move, if any.
    #[must_use]
    pub fn clock(&self) -> Option<&ManualClock> {
        self.clock.as_ref()
    }

    /// Lets `duration` pass for the backend: moves its clock, or sleeps.
    pub async fn pass(&self, duration: Duration) {
        match &self.clock {
            Some(clock) => {
                clock.advance(duration);
                tokio::task::yield_now().await;
            }
            None => tokio::time::sleep(duration).await,
        }
    }
}

/// A key prefix no other run of this process, nor an earlier process,
/// used: the wall-clock time in microseconds and a counter.
fn fresh_prefix() -> String {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let micros = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_micros());
    format!("conformance-{micros}-{}", RUNS.fetch_add(1, Ordering::Relaxed))
}
