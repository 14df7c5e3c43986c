//! The ledger: the store-wide usage of every limited scope that holds live
//! records, in stripes so that scopes of different stripes never wait for
//! one another, and the schedule of the sweeps before refusals.

use crate::error::Result;
use crate::quota::{Quota, Quotas, ScopeUsage};
use parking_lot::{Mutex, MutexGuard};
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Stripes of the ledger.
const STRIPES: usize = 16;

/// Indexed records per millisecond of pause between two sweeps.
const SWEEP_RECORDS_PER_MS: u64 = 1000;

/// One stripe: the usage of each counted scope that holds records.
type Stripe = HashMap<Box<[u8]>, ScopeUsage>;

/// The store-wide usage of every limited scope that holds live records.
#[derive(Debug)]
pub(crate) struct Ledger {
    quotas: Quotas,
    stripes: Box<[Mutex<Stripe>]>,
    /// Seeds the choice of stripe, so that it differs from store to store.
    stripe_seed: u64,
    /// Scopes near their limit: where a new record of the largest key
    /// could be refused. While there are none, a claim skips the look at
    /// its scope before it is decided (the engine's `make_room`).
    near_limit: AtomicU64,
    /// The largest frame of a new (Processing) record, scope excluded.
    new_frame_max: u64,
    /// Monotonic ms before which no sweep runs; `u64::MAX` while one runs.
    next_sweep_ms: AtomicU64,
}

impl Ledger {
    /// The ledger for `quotas` with keys of up to `key_bytes_max`, or
    /// `None` when no scope is limited.
    pub(crate) fn new(quotas: &Quotas, key_bytes_max: usize) -> Option<Arc<Ledger>> {
        quotas.any().then(|| {
            Arc::new(Ledger {
                quotas: quotas.clone(),
                stripes: (0..STRIPES).map(|_| Mutex::default()).collect(),
                stripe_seed: RandomState::new().hash_one(0u8) | 1,
                near_limit: AtomicU64::new(0),
                new_frame_max: crate::format::frame_bytes(0, key_bytes_max, 0),
                next_sweep_ms: AtomicU64::new(0),
            })
        })
    }

    /// The stripe of `scope`, locked. The stripe is chosen by a cheap hash
    /// keyed with the map's random state (its maps hash with `SipHash`, so
    /// a chosen scope can at worst crowd one stripe, never slow a lookup).
    fn stripe(&self, scope: &[u8]) -> MutexGuard<'_, Stripe> {
        let mut hash = self.stripe_seed;
        for &byte in scope {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        let stripe = (hash >> 60) as usize % STRIPES; // the top bits mix best
        self.stripes[stripe].lock()
    }

    /// Whether `scope` is counted.
    pub(crate) fn counts(&self, scope: &[u8]) -> bool {
        self.quotas.of(scope).is_some()
    }

    /// Whether a scope using `used` of `quota` could refuse a new record.
    fn is_near(&self, quota: &Quota, scope: &[u8], used: ScopeUsage) -> bool {
        quota.refusal(used, self.new_frame_max + scope.len() as u64).is_some()
    }

    /// Changes the usage of `scope` by `change` (under its stripe's lock),
    /// keeping the count of scopes near their limit, and forgets a scope
    /// left with no record. Does nothing for a scope not counted.
    fn update(&self, scope: &[u8], change: impl FnOnce(&mut ScopeUsage)) {
        let Some(quota) = self.quotas.of(scope) else { return };
        let mut stripe = self.stripe(scope);
        // One lookup in the common case: the scope is there and stays.
        let (before, after) = if let Some(usage) = stripe.get_mut(scope) {
            let before = *usage;
            change(usage);
            (before, *usage)
        } else {
            let mut after = ScopeUsage::default();
            change(&mut after);
            if after.records > 0 {
                stripe.insert(scope.into(), after);
            }
            (ScopeUsage::default(), after)
        };
        if before.records > 0 && after.records == 0 {
            stripe.remove(scope);
            // Memory follows the scopes that hold records, not the most
            // there ever were.
            if stripe.capacity() > 4 * stripe.len().max(64) {
                let len = stripe.len();
                stripe.shrink_to(2 * len);
            }
        }
        match (self.is_near(quota, scope, before), self.is_near(quota, scope, after)) {
            (false, true) => self.near_limit.fetch_add(1, Ordering::Relaxed),
            (true, false) => self.near_limit.fetch_sub(1, Ordering::Relaxed),
            _ => 0,
        };
    }

    /// Counts a new live record of `bytes` in `scope` if its quota allows;
    /// returns whether the scope is counted at all.
    ///
    /// # Errors
    /// [`crate::Error::QuotaExceeded`]; nothing is counted then.
    pub(crate) fn admit(&self, scope: &[u8], bytes: u64) -> Result<bool> {
        let Some(quota) = self.quotas.of(scope) else {
            return Ok(false);
        };
        // Checked and counted under one hold of the stripe's lock.
        let mut refused = None;
        self.update(scope, |usage| {
            refused = quota.refusal(*usage, bytes);
            if refused.is_none() {
                usage.records += 1;
                usage.bytes = usage.bytes.saturating_add(bytes);
            }
        });
        refused.map_or(Ok(true), Err)
    }

    /// A live record of `scope` changed size (a newer record of its key).
    pub(crate) fn resize(&self, scope: &[u8], old_bytes: u64, new_bytes: u64) {
        if old_bytes != new_bytes {
            self.update(scope, |usage| usage.bytes = usage.bytes.saturating_sub(old_bytes).saturating_add(new_bytes));
        }
    }

    /// A live record of `bytes` left `scope`.
    pub(crate) fn remove(&self, scope: &[u8], bytes: u64) {
        self.update(scope, |usage| {
            usage.records = usage.records.saturating_sub(1);
            usage.bytes = usage.bytes.saturating_sub(bytes);
        });
    }

    /// Counts a live record of `bytes` found in `scope` (at open).
    pub(crate) fn add(&self, scope: &[u8], bytes: u64) {
        self.update(scope, |usage| {
            usage.records += 1;
            usage.bytes = usage.bytes.saturating_add(bytes);
        });
    }

    /// The usage of `scope`, `None` if it holds no record or is not counted.
    pub(crate) fn usage(&self, scope: &[u8]) -> Option<ScopeUsage> {
        self.stripe(scope).get(scope).copied()
    }

    /// Every counted scope's usage.
    #[cfg(feature = "testing")]
    pub(crate) fn snapshot(&self) -> HashMap<Vec<u8>, ScopeUsage> {
        let mut all = HashMap::new();
        for stripe in &*self.stripes {
            all.extend(stripe.lock().iter().map(|(scope, usage)| (scope.to_vec(), *usage)));
        }
        all
    }

    /// Whether a new record of `bytes` in `scope` would be refused now.
    pub(crate) fn would_refuse(&self, scope: &[u8], bytes: u64) -> bool {
        if self.near_limit.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let Some(quota) = self.quotas.of(scope) else { return false };
        quota.refusal(self.usage(scope).unwrap_or_default(), bytes).is_some()
    }

    /// Takes the turn to sweep at monotonic time `now_ms`, if one is due
    /// and none runs.
    pub(crate) fn take_sweep(&self, now_ms: u64) -> bool {
        let next = self.next_sweep_ms.load(Ordering::Acquire);
        now_ms >= next
            && next != u64::MAX
            && self.next_sweep_ms.compare_exchange(next, u64::MAX, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Ends a sweep taken at `now_ms` that left `records` in the index.
    pub(crate) fn swept(&self, now_ms: u64, records: u64) {
        self.next_sweep_ms.store(now_ms.saturating_add(records / SWEEP_RECORDS_PER_MS), Ordering::Release);
    }
}
