//! The HTTP layer's scenarios as functions over any [`IdempotencyBackend`]
//! (feature `conformance-http`): each serves routes behind
//! [`IdempotencyLayer`](crate::http::IdempotencyLayer) over the backend on
//! a real axum server on 127.0.0.1 and drives them with a real HTTP client
//! (reqwest), so that a backend — the embedded [`Store`](crate::Store),
//! Redis, PostgreSQL, or one of your own — is held to what
//! [the HTTP contract](crate::http) promises over it: double and
//! concurrent sends, refused keys, a restart, a released 5xx, a dropped
//! request, a client that hangs up, a panicking handler, `NotSpent`, key
//! parsing, lease keep-alives, what is not kept (and a handler's own 404,
//! which is), quotas, replayed headers, the response budget, streamed
//! pass-through, tenant scopes (and tenants named like idemkv's own
//! records), 500 waiters on one key, the draft's public conformance
//! vectors, conditional writes, one request at a time per resource, long
//! operations and, with `webhooks`, signed webhooks.
//!
//! It has the shape of the backend-level suite ([`conformance`](super)):
//! each scenario is a `pub async fn` that panics, with a message naming
//! what broke, when the backend breaks the contract; [`run_all`] runs
//! them in turn, names the failing scenario in front of its message, and
//! returns a [`Report`] of what ran and what was skipped, given the same
//! [`Capabilities`]. A scenario that needs what the backend lacks is
//! skipped, not passed: the lease keep-alives and a dead holder's takeover
//! need [`Capability::RealTime`] (renewals run in real time), the quota
//! scenario [`Capability::Quotas`], the restart [`Capability::Persistence`]
//! (and its expiry after the restart [`Capability::MovableClock`]).
//!
//! # Targets
//!
//! A scenario serves a [`Fixture`] — routes whose answers are functions
//! of the request — on a [`ServeTarget`], which puts the contract in
//! front of it. Each scenario named here runs on [`Tower`] (the tower
//! layer, router-wide on axum) over the backend it is given; its twin
//! ending in `_on` (`double_send_on`, `waiters_on`, ...) runs the same
//! steps and assertions on any target, such as the actix-web middleware
//! of the crate `idemkv-actix`, whose tests run them; [`run_all_on`] runs
//! them all on a target, and [`run_all`] runs them on [`Tower`] and then
//! those that stay there.
//!
//! Four stay on the tower layer, for what they drive that no target
//! offers: `restart` and `restart_ttl` restart the backend under a served
//! layer (a target is bound to one backend for its life);
//! `dropped_request` drops the layer's own future mid-call, a tower
//! `Service` call that no HTTP server exposes (over a real server the
//! same promise is [`client_disconnect`]'s, which runs everywhere);
//! `keepalive_blocking` blocks its worker inside tokio's
//! `block_in_place`, which a server of current-thread workers (actix-web)
//! refuses with a panic. The webhook scenarios stay too: they test
//! `WebhookLayer`, a tower layer of its own, not the `Idempotency-Key`
//! contract.
//!
//! The scenarios keep their keys under the run's prefix
//! ([`Capabilities::key_prefix`]), bind free loopback ports, take a
//! minute or more in all (they sleep through leases, and a backend on a
//! [`ManualClock`](crate::ManualClock) has its clock moved instead where
//! the scenario allows), and want a multi-threaded runtime with four
//! workers (one scenario blocks a worker for seconds, as a handler may).
//! The server and the client they run on are public in [`harness`], for
//! tests of your own, and so are the fixture and the targets.
//!
//! # Examples
//!
//! A third party's backend runs the suite from its own test; here the
//! embedded store stands for it (`no_run`: the suite takes a minute or
//! more; `tests/fleets/conformance.rs` runs it on every backend):
//!
//! ```no_run
//! use idemkv::conformance::{self, Capabilities, Capability};
//! use idemkv::{Config, Durability, Store};
//!
//! # fn main() {
//! # let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
//! # runtime.block_on(async {
//! let dir = tempfile::tempdir().expect("tempdir");
//! let config = Config::new().durability(Durability::Buffered).response_bytes_max(4096);
//! let store = Store::open(dir.path(), config).expect("open");
//!
//! // On real time, without quotas, not restarted here: the scenarios that
//! // need either are skipped, and say so.
//! let report = conformance::http::run_all(store, Capabilities::new()).await;
//! assert_eq!(report.skipped, [("quota", Capability::Quotas), ("restart", Capability::Persistence)]);
//! assert!(report.passed.contains(&"draft_vectors"));
//! # });
//! # }
//! ```

mod client_disconnect;
mod conditional;
mod draft_vectors;
mod fixture;
mod handler_panic;
pub mod harness;
mod hostile_tenants;
mod key_parsing;
mod layer;
mod lease_keepalive;
mod not_kept;
mod operations;
mod quota;
mod replay_headers;
mod response_budget;
mod streaming_passthrough;
mod target;
mod tenant_scopes;
mod versioned_methods;
mod waiters;
#[cfg(feature = "webhooks")]
mod webhooks;

pub use client_disconnect::{client_disconnect, client_disconnect_on};
pub use conditional::{etags, hold_takeover, one_per_resource, racing_writers};
pub use conditional::{etags_on, hold_takeover_on, one_per_resource_on, racing_writers_on};
pub use draft_vectors::{draft_vectors, draft_vectors_on};
pub use fixture::{Fixture, FixtureAnswer, FixtureBody, FixtureRequest, FIXTURE_BODY_BYTES_MAX};
pub use handler_panic::{handler_panic, handler_panic_on, not_spent, not_spent_on};
pub use hostile_tenants::{hostile_tenants, hostile_tenants_on};
pub use key_parsing::{key_parameters, key_parameters_on, sf_string, sf_string_on, two_key_fields, two_key_fields_on};
pub use layer::{concurrent_sends, double_send, dropped_request, refused_keys, release_5xx, restart, restart_ttl};
pub use layer::{concurrent_sends_on, double_send_on, refused_keys_on, release_5xx_on};
pub use lease_keepalive::{keepalive, keepalive_blocking, keepalive_on, keepalive_streaming, keepalive_streaming_on};
pub use not_kept::{kept_handler_404, kept_validation, not_kept_routing, not_kept_validation};
pub use not_kept::{kept_handler_404_on, kept_validation_on, not_kept_routing_on, not_kept_validation_on};
pub use operations::{
    async_abandoned, async_after, async_no_route, async_not_kept, respond_async, status_reads_answers,
};
pub use operations::{
    async_abandoned_on, async_after_on, async_no_route_on, async_not_kept_on, respond_async_on, status_reads_answers_on,
};
pub use quota::{quota, quota_on};
pub use replay_headers::{replay_headers, replay_headers_on, waited_replay, waited_replay_on};
pub use response_budget::{edge_of_budget, edge_of_budget_on, headers_over_budget, headers_over_budget_on};
pub use response_budget::{over_budget, over_budget_on};
pub use streaming_passthrough::{streamed_get, streamed_get_on};
pub use target::{ServeTarget, Server, Tower};
pub use tenant_scopes::{tenant_scopes, tenant_scopes_on};
pub use versioned_methods::{every_method_checked, not_modified, unconditional_writers};
pub use versioned_methods::{every_method_checked_on, not_modified_on, unconditional_writers_on};
pub use waiters::{waiters, waiters_on};
#[cfg(all(feature = "webhooks", feature = "client"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "webhooks", feature = "client"))))]
pub use webhooks::webhooks_signed_sink;
#[cfg(feature = "webhooks")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhooks")))]
pub use webhooks::{
    webhooks_dead, webhooks_mixed, webhooks_once, webhooks_refused, webhooks_rotation, webhooks_stripe,
};

use super::{scenario, skip, Capabilities, Capability, Report, Setting};
use crate::backend::IdempotencyBackend;

/// Runs each scenario named, in turn, on `$backend` with the setting of
/// its name in `$run`, into `$report`.
macro_rules! run {
    ($report:expr, $backend:expr, $run:expr; $($name:ident),+ $(,)?) => {
        $(scenario($report, stringify!($name), $name($backend, &$run.of(stringify!($name)))).await;)+
    };
}

/// Runs every HTTP scenario on `backend`, in turn, with what
/// `capabilities` says the backend offers; what ran and what was skipped.
///
/// These are [`run_all_on`] on [`Tower`] over the backend, then the
/// scenarios that stay on the tower layer (see
/// [Targets](crate::conformance::http#targets)). The restart scenario
/// runs last: it restarts the backend (through
/// [`Capabilities::persistence`]) and drops the restarted one at its end.
///
/// # Panics
/// When a scenario fails: the message names the scenario and what broke.
/// The scenarios after a failed one do not run.
pub async fn run_all<B: IdempotencyBackend + Clone>(backend: B, mut capabilities: Capabilities<B>) -> Report {
    let mut report = run_all_on(&Tower(&backend), &capabilities).await;
    let run = capabilities.setting();
    tower_only(&mut report, &backend, &run).await;
    restarts(&mut report, backend, &mut capabilities, &run).await;
    report
}

/// Runs each scenario named (its `_on` form), in turn, on `$target` with
/// the setting of its name (without `_on`) in `$run`, into `$report`.
macro_rules! run_on {
    ($report:expr, $target:expr, $run:expr; $($name:ident),+ $(,)?) => {
        $({
            let name = stringify!($name).trim_end_matches("_on");
            scenario($report, name, $name($target, &$run.of(name))).await;
        })+
    };
}

/// Runs every HTTP scenario that runs on any target on `target`, in turn,
/// with what `capabilities` says its backend offers; what ran and what
/// was skipped. The scenarios that stay on the tower layer (see
/// [Targets](crate::conformance::http#targets)) are not among them, nor
/// named in the report.
///
/// # Panics
/// When a scenario fails: the message names the scenario and what broke.
/// The scenarios after a failed one do not run.
pub async fn run_all_on<T: ServeTarget>(target: &T, capabilities: &Capabilities<T::Backend>) -> Report {
    let mut report = Report::default();
    let (run, t) = (capabilities.setting(), target);
    run_on!(&mut report, t, run; double_send_on, concurrent_sends_on, refused_keys_on, release_5xx_on);
    run_on!(&mut report, t, run; client_disconnect_on, handler_panic_on, not_spent_on);
    run_on!(&mut report, t, run; two_key_fields_on, sf_string_on, key_parameters_on);
    run_on!(&mut report, t, run; not_kept_routing_on, kept_handler_404_on, not_kept_validation_on, kept_validation_on);
    run_on!(&mut report, t, run; replay_headers_on, waited_replay_on, over_budget_on, edge_of_budget_on);
    run_on!(&mut report, t, run; headers_over_budget_on, tenant_scopes_on, waiters_on, draft_vectors_on);
    scenario(&mut report, "streamed_get", streamed_get_on(t)).await;
    run_on!(&mut report, t, run; etags_on, hostile_tenants_on, racing_writers_on, one_per_resource_on);
    run_on!(&mut report, t, run; every_method_checked_on, unconditional_writers_on, not_modified_on);
    run_on!(&mut report, t, run; respond_async_on, async_after_on, async_abandoned_on, async_not_kept_on);
    run_on!(&mut report, t, run; async_no_route_on, status_reads_answers_on);
    if run.clock().is_none() {
        run_on!(&mut report, t, run; keepalive_on, hold_takeover_on, keepalive_streaming_on);
    } else {
        for name in ["keepalive", "keepalive_streaming", "hold_takeover"] {
            skip(&mut report, name, Capability::RealTime);
        }
    }
    match capabilities.quota_scope() {
        Some(limited) => scenario(&mut report, "quota", quota_on(t, &run.of("quota"), limited)).await,
        None => skip(&mut report, "quota", Capability::Quotas),
    }
    report
}

/// The restart scenario: on a movable clock with its expiry after the
/// restart, else without it.
async fn restarts<B: IdempotencyBackend + Clone>(
    report: &mut Report,
    backend: B,
    capabilities: &mut Capabilities<B>,
    run: &Setting,
) {
    match (capabilities.restarter(), run.clock()) {
        (Some(restarter), Some(_)) => {
            let setting = run.of("restart_ttl");
            scenario(report, "restart_ttl", async { drop(restart_ttl(backend, restarter, &setting).await) }).await;
        }
        (Some(restarter), None) => {
            skip(report, "restart_ttl", Capability::MovableClock);
            let setting = run.of("restart");
            scenario(report, "restart", async { drop(restart(backend, restarter, &setting).await) }).await;
        }
        (None, _) => skip(report, "restart", Capability::Persistence),
    }
}

/// The scenarios that stay on the tower layer, but for the restart: a
/// dropped layer future, a keep-alive through a blocked worker (on real
/// time) and, with `webhooks`, signed webhooks.
async fn tower_only<B: IdempotencyBackend + Clone>(report: &mut Report, b: &B, run: &Setting) {
    run!(report, b, run; dropped_request);
    if run.clock().is_none() {
        run!(report, b, run; keepalive_blocking);
    } else {
        skip(report, "keepalive_blocking", Capability::RealTime);
    }
    #[cfg(feature = "webhooks")]
    signed_webhooks(report, b, run).await;
}

/// The scenarios of signed webhooks.
#[cfg(feature = "webhooks")]
async fn signed_webhooks<B: IdempotencyBackend + Clone>(report: &mut Report, b: &B, run: &Setting) {
    run!(report, b, run; webhooks_once, webhooks_refused, webhooks_dead, webhooks_rotation, webhooks_stripe);
    run!(report, b, run; webhooks_mixed);
    #[cfg(feature = "client")]
    run!(report, b, run; webhooks_signed_sink);
}
