//! The contract's scenarios as functions over any [`IdempotencyBackend`]
//! (feature `conformance`), so that every backend — the embedded
//! [`Store`](crate::Store), Redis, PostgreSQL, or one of your own — is held
//! to the same table of answers, fencing, TTLs, waits, checkpoints and
//! reuse policies.
//!
//! ```
//! use idemkv::conformance::{self, Capabilities, Capability};
//! use idemkv::{Config, Durability, ManualClock, Store, store::Quota};
//! use std::sync::Arc;
//!
//! # fn main() {
//! # let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
//! # runtime.block_on(async {
//! let dir = tempfile::tempdir().expect("tempdir");
//! let clock = ManualClock::new(1_767_225_600_000);
//! let config = Config::new()
//!     .durability(Durability::Buffered)
//!     .response_bytes_max(4096)
//!     .clock(Arc::new(clock.clone()))
//!     .scope_quota("quota-scope", Quota::new().records(2));
//! let store = Store::open(dir.path(), config).expect("open");
//!
//! // What this backend offers besides the contract: a clock the suite may
//! // move, and a quota on one scope. It cannot be restarted here, so the
//! // persistence scenario is skipped, and says so.
//! let capabilities = Capabilities::new()
//!     .movable_clock(clock)
//!     .quota("quota-scope", Quota::new().records(2));
//! let report = conformance::run_all(store, capabilities).await;
//! assert_eq!(report.skipped, [("survives_restart", Capability::Persistence)]);
//! # });
//! # }
//! ```
//!
//! Each scenario is a `pub async fn` that drives the backend and asserts
//! what the contract says; a backend that breaks the contract makes it
//! panic with a message naming what broke, as a test would. [`run_all`]
//! runs every scenario in turn and panics with the failing scenario's name
//! in front of that message; it returns a [`Report`] of what ran and what
//! was skipped. A scenario that needs what a backend lacks (a clock the
//! test can move, quotas, records that survive a restart) is skipped, not
//! passed: the report lists it with the [`Capability`] it needed, and
//! [`run_all`] prints it.
//!
//! The scenarios use keys that start with a prefix of their own run (see
//! [`Capabilities::key_prefix`]), so that a backend shared with other runs
//! or with earlier ones keeps them apart. Time passes for real unless the
//! backend reads a [`ManualClock`] that the suite may move
//! ([`Capabilities::movable_clock`]); leases and TTLs are then advanced
//! instead of slept through. Waits ([`ClaimOptions::wait`]) are always
//! real.
//!
//! These scenarios are for tests: they panic, they sleep, and they leave
//! records behind (with TTLs of a minute or less where they can).
//!
//! # Examples
//!
//! A third party's backend runs the suite from its own test, on a
//! multi-threaded runtime (the scenarios spawn tasks):
//!

mod capabilities;
mod contract;
#[cfg(feature = "conformance-http")]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance-http")))]
pub mod http;
#[cfg(feature = "messaging")]
mod inbox;
mod keyspaces;
mod listing;
mod once;
#[cfg(feature = "messaging")]
mod outbox;
mod real_time;
mod recovery;
mod replace;
mod restart;
mod versions;

pub use capabilities::{Capabilities, Capability, QuotaScope, Restart, Setting};
pub use contract::{
    claim_wait, duplicates, fencing, late_finish, lease_boundaries, limits, quota_refusals, renew_get_remove, scopes,
    state_table, ttl,
};
#[cfg(feature = "messaging")]
pub use inbox::inbox;
pub use keyspaces::keyspaces;
pub use listing::{scan, scan_staged};
pub use once::run_once;
#[cfg(feature = "messaging")]
pub use outbox::outbox;
pub use real_time::lease_ends;
pub use recovery::{recovery_point_limits, recovery_points, recovery_points_dropped, reuse_policies};
pub use replace::replace;
pub use restart::survives_restart;
pub use versions::versions;

use crate::backend::IdempotencyBackend;
#[cfg(doc)]
use crate::{backend::ClaimOptions, ManualClock};
use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

/// What [`run_all`] did: the scenarios that ran and passed, in order, and
/// those it skipped with the capability each needed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// Scenarios that ran and passed.
    pub passed: Vec<&'static str>,
    /// Scenarios skipped, each with the capability the backend lacks.
    pub skipped: Vec<(&'static str, Capability)>,
}

/// Runs every scenario on `backend`, in turn, with what `capabilities`
/// says the backend offers; what ran and what was skipped.
///
/// The persistence scenario runs last: it restarts the backend (through
/// [`Capabilities::persistence`]) and drops the restarted one at its end.
///
/// # Panics
/// When a scenario fails: the message names the scenario and what broke.
/// The scenarios after a failed one do not run (the backend's state is no
/// longer known).
pub async fn run_all<B: IdempotencyBackend + Clone>(backend: B, mut capabilities: Capabilities<B>) -> Report {
    let mut report = Report::default();
    let setting = capabilities.setting();
    let run = &setting;
    let backend = &backend;
    scenario(&mut report, "state_table", state_table(backend, &run.of("state_table"))).await;
    scenario(&mut report, "fencing", fencing(backend, &run.of("fencing"))).await;
    scenario(&mut report, "ttl", ttl(backend, &run.of("ttl"))).await;
    scenario(&mut report, "scopes", scopes(backend, &run.of("scopes"))).await;
    scenario(&mut report, "claim_wait", claim_wait(backend, &run.of("claim_wait"))).await;
    scenario(&mut report, "duplicates", duplicates(backend, &run.of("duplicates"))).await;
    scenario(&mut report, "limits", limits(backend, &run.of("limits"))).await;
    scenario(&mut report, "renew_get_remove", renew_get_remove(backend, &run.of("renew_get_remove"))).await;
    scenario(&mut report, "late_finish", late_finish(backend, &run.of("late_finish"))).await;
    scenario(&mut report, "recovery_points", recovery_points(backend, &run.of("recovery_points"))).await;
    let dropped = run.of("recovery_points_dropped");
    scenario(&mut report, "recovery_points_dropped", recovery_points_dropped(backend, &dropped)).await;
    let point_limits = run.of("recovery_point_limits");
    scenario(&mut report, "recovery_point_limits", recovery_point_limits(backend, &point_limits)).await;
    scenario(&mut report, "reuse_policies", reuse_policies(backend, &run.of("reuse_policies"))).await;
    scenario(&mut report, "run_once", run_once(backend, &run.of("run_once"))).await;
    scenario(&mut report, "scan", scan(backend, &run.of("scan"))).await;
    scenario(&mut report, "scan_staged", scan_staged(backend, &run.of("scan_staged"))).await;
    scenario(&mut report, "replace", replace(backend, &run.of("replace"))).await;
    scenario(&mut report, "versions", versions(backend, &run.of("versions"))).await;
    scenario(&mut report, "keyspaces", keyspaces(backend, &run.of("keyspaces"))).await;
    #[cfg(feature = "messaging")]
    scenario(&mut report, "inbox", inbox(backend, &run.of("inbox"))).await;
    #[cfg(feature = "messaging")]
    scenario(&mut report, "outbox", outbox(backend, &run.of("outbox"))).await;
    if run.clock().is_some() {
        scenario(&mut report, "lease_boundaries", lease_boundaries(backend, &run.of("lease_boundaries"))).await;
    } else {
        // The same boundaries on either side, with a margin, on real time.
        scenario(&mut report, "lease_ends", lease_ends(backend, &run.of("lease_ends"))).await;
    }
    match capabilities.quota_scope().cloned() {
        Some(quota) => {
            let quota_run = run.of("quota_refusals");
            scenario(&mut report, "quota_refusals", quota_refusals(backend, &quota_run, &quota)).await;
        }
        None => skip(&mut report, "quota_refusals", Capability::Quotas),
    }
    match capabilities.restarter() {
        Some(restart) => {
            let restart_run = run.of("survives_restart");
            let restarted = survives_restart(backend.clone(), restart, &restart_run);
            scenario(&mut report, "survives_restart", async { drop(restarted.await) }).await;
        }
        None => skip(&mut report, "survives_restart", Capability::Persistence),
    }
    report
}

/// Runs one scenario; a panic in it is raised again with its name first.
async fn scenario(report: &mut Report, name: &'static str, run: impl Future<Output = ()>) {
    if let Err(payload) = (CatchUnwind(Box::pin(run))).await {
        panic!("conformance scenario `{name}` failed: {}", message(payload.as_ref()));
    }
    report.passed.push(name);
}

/// Notes and prints a scenario skipped for want of `needs`.
fn skip(report: &mut Report, name: &'static str, needs: Capability) {
    eprintln!("conformance: skipped `{name}`: the backend offers no {needs}");
    report.skipped.push((name, needs));
}

/// The text of a panic's payload.
fn message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("a panic without a message")
}

/// A future that turns a panic while polling its inner future into an
/// `Err` with the panic's payload, so that [`run_all`] can name the
/// scenario that failed.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = std::thread::Result<F::Output>;

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.as_mut().poll(context))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Err(payload) => Poll::Ready(Err(payload)),
        }
    }
}
