//! The HTTP layer's scenarios over any backend: a real axum server on
//! 127.0.0.1 behind `IdempotencyLayer` over the backend, driven by a real
//! HTTP client — double and concurrent sends, refused keys, a restart, a
//! released 5xx, a dropped request, a client that hangs up, a panicking
//! handler, `NotSpent`, key parsing, lease keep-alives, what is not kept
//! (and a handler's own 404, which is), quotas, replayed headers, the
//! response budget (an answer over it reaches its caller whole and is
//! kept without its body), streamed pass-through, tenant scopes (and
//! tenants named like idemkv's own records) and 500 waiters; the draft's
//! public conformance vectors; conditional writes (every method of a
//! versioned resource checked, 304 on reads), one request at a time per
//! resource, long operations (that always end: abandoned runs, answers
//! not kept, no route) and signed webhooks.
//!
//! They live with the tests rather than in `idemkv::conformance`: they
//! need a server and a client (axum, hyper, reqwest), which the library
//! does not depend on, and what they ask of a backend is what the public
//! suite already holds it to. Each takes the same [`Capabilities`] as the
//! public suite, and [`run_all`] skips, and says so, what a backend lacks.

mod client_disconnect;
mod conditional;
mod draft_vectors;
mod handler_panic;
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
mod tenant_scopes;
mod versioned_methods;
mod wait_many_waiters;
#[cfg(feature = "webhooks")]
mod webhooks;

use axum::Router;
use idemkv::backend::IdempotencyBackend;
use idemkv::conformance::{Capabilities, Capability, Setting};
use idemkv::http::{IdempotencyLayer, LayerConfig};
use std::future::Future;
use std::time::Duration;

/// A served app: an axum server on a free loopback port.
pub struct Served {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    task: tokio::task::JoinHandle<()>,
}

impl Served {
    /// Puts the whole of `routes` behind the layer over `backend`
    /// (router-wide, as services do) and serves it.
    pub async fn start<B: IdempotencyBackend + Clone>(backend: &B, layer: LayerConfig, routes: Router) -> Served {
        Served::serve(routes.layer(IdempotencyLayer::new(backend.clone(), layer))).await
    }

    /// Serves `app`, already layered.
    pub async fn serve(app: Router) -> Served {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve");
        });
        Served { base, task }
    }

    /// The URL of `path` on this server.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Stops serving, and lets the connections the client pool may hold
    /// close, so that nothing holds the layer's backend any more.
    pub async fn stop(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The `Idempotency-Key` value `name` of `setting`.
pub fn key(setting: &Setting, name: &str) -> String {
    String::from_utf8(setting.key(name)).expect("a prefix in UTF-8")
}

/// Runs one scenario, named on stderr first so that a failure shows
/// which one it was.
async fn scenario(name: &str, run: impl Future<Output = ()>) {
    eprintln!("conformance (http): `{name}`");
    run.await;
}

/// Every HTTP scenario on `backend`, in turn; the scenarios skipped, each
/// with the capability the backend lacks.
pub async fn run_all<B: IdempotencyBackend + Clone>(
    backend: B,
    mut capabilities: Capabilities<B>,
) -> Vec<(&'static str, Capability)> {
    let mut skipped = Vec::new();
    let run = capabilities.setting();
    let on = |name: &str| run.of(name);
    let b = &backend;
    scenario("double_send", layer::double_send_charges_once_and_replays(b, &on("double_send"))).await;
    scenario("concurrent_sends", layer::concurrent_sends_execute_once(b, &on("concurrent_sends"))).await;
    scenario("refused_keys", layer::reused_key_missing_key_and_bad_key_are_refused(b, &on("refused_keys"))).await;
    scenario("release_5xx", layer::a_5xx_releases_the_key_when_the_policy_says_so(b, &on("release_5xx"))).await;
    scenario("dropped_request", layer::a_dropped_request_does_not_cancel_the_handler(b, &on("dropped_request"))).await;
    scenario(
        "client_disconnect",
        client_disconnect::a_client_that_hangs_up_gets_the_answer_on_retry(b, &on("hangs_up")),
    )
    .await;
    failures_and_keys(b, &run).await;
    what_is_kept(b, &run).await;
    scenario("streamed_get", streaming_passthrough::a_streamed_get_is_not_buffered(b)).await;
    scenario("tenant_scopes", tenant_scopes::two_tenants_with_the_same_key_each_get_their_own_run(b, &on("tenants")))
        .await;
    scenario("waiters", wait_many_waiters::five_hundred_waiters_share_one_run(b, &on("waiters"))).await;
    scenario("draft_vectors", draft_vectors::the_drafts_vectors_pass_as_claimed(b, &on("draft"))).await;
    beyond_replay(b, &run).await;
    if run.clock().is_none() {
        scenario("keepalive", lease_keepalive::a_handler_twice_as_long_as_its_lease_runs_once(b, &on("long"))).await;
        let died = on("hold_takeover");
        scenario("hold_takeover", conditional::a_hold_whose_holder_died_is_taken_over_as_recovered(b, &died)).await;
        scenario("keepalive_blocking", lease_keepalive::a_handler_that_blocks_its_thread_runs_once(b, &on("blocking")))
            .await;
        scenario(
            "keepalive_streaming",
            lease_keepalive::a_body_that_streams_for_three_leases_runs_once(b, &on("streaming")),
        )
        .await;
    } else {
        for name in ["keepalive", "keepalive_blocking", "keepalive_streaming", "hold_takeover"] {
            skipped.push((name, Capability::RealTime));
        }
    }
    match capabilities.quota_scope().cloned() {
        Some(limited) => scenario("quota", quota::a_tenant_at_its_quota_gets_429(b, &on("quota"), &limited)).await,
        None => skipped.push(("quota", Capability::Quotas)),
    }
    let restart = capabilities.restarter();
    match (restart, run.clock()) {
        (Some(restart), Some(_)) => {
            let restarted = on("restart_ttl");
            scenario("restart_ttl", async {
                drop(layer::replay_survives_a_restart_and_expires_by_ttl(backend, restart, &restarted).await);
            })
            .await;
        }
        (Some(restart), None) => {
            skipped.push(("restart_ttl", Capability::MovableClock));
            let restarted = on("restart");
            scenario("restart", async {
                drop(layer::replay_survives_a_restart(backend, restart, &restarted).await);
            })
            .await;
        }
        (None, _) => skipped.push(("restart", Capability::Persistence)),
    }
    for (name, needs) in &skipped {
        eprintln!("conformance (http): skipped `{name}`: the backend offers no {needs}");
    }
    skipped
}

/// The scenarios of a handler that fails or says `NotSpent`, and of key
/// parsing.
async fn failures_and_keys<B: IdempotencyBackend + Clone>(b: &B, run: &Setting) {
    let on = |name: &str| run.of(name);
    scenario("handler_panic", handler_panic::a_panicked_run_holds_its_key_then_runs_recovered(b, &on("panic"))).await;
    scenario("not_spent", handler_panic::a_not_spent_answer_frees_the_key(b, &on("not_spent"))).await;
    scenario("two_key_fields", key_parsing::two_key_fields_are_refused(b, &on("two_fields"))).await;
    scenario("sf_string", key_parsing::an_sf_string_with_an_escape_is_one_key(b, &on("sf_string"))).await;
    scenario("key_parameters", key_parsing::parameters_on_the_key_are_refused(b, &on("parameters"))).await;
}

/// The scenarios of what is kept and replayed: routing and validation
/// failures, a handler's own 404, replayed headers, the response budget.
async fn what_is_kept<B: IdempotencyBackend + Clone>(b: &B, run: &Setting) {
    let on = |name: &str| run.of(name);
    scenario("not_kept_routing", not_kept::a_mistyped_path_or_method_does_not_spend_the_key(b, &on("routing"))).await;
    scenario("kept_handler_404", not_kept::a_handlers_own_404_is_kept_and_runs_once(b, &on("handler_404"))).await;
    scenario("not_kept_validation", not_kept::validation_failures_are_not_kept_by_default(b, &on("validation"))).await;
    scenario("kept_validation", not_kept::validation_failures_are_kept_on_request(b, &on("kept"))).await;
    scenario("replay_headers", replay_headers::a_replay_carries_the_stored_headers(b, &on("headers"))).await;
    scenario("waited_replay", replay_headers::a_waited_replay_says_its_preference_was_applied(b, &on("wait"))).await;
    scenario(
        "over_budget",
        response_budget::a_response_over_the_budget_reaches_its_caller_and_is_kept_without_its_body(b, &on("over")),
    )
    .await;
    scenario("edge_of_budget", response_budget::responses_at_the_edge_of_the_budget_run_once(b, &on("edge"))).await;
    scenario("headers_over_budget", response_budget::headers_alone_over_the_budget_keep_the_status(b, &on("heads")))
        .await;
}

/// The scenarios of the layer's conditional writes, resource holds, long
/// operations and signed webhooks.
async fn beyond_replay<B: IdempotencyBackend + Clone>(b: &B, run: &Setting) {
    let on = |name: &str| run.of(name);
    scenario("etags", conditional::the_payment_flow_with_etags_and_keys(b, &on("etags"))).await;
    scenario(
        "hostile_tenants",
        hostile_tenants::tenants_named_like_idemkvs_records_reach_nothing_of_it(b, &on("hostile")),
    )
    .await;
    scenario("racing_writers", conditional::racing_writers_lose_no_update(b, &on("racing"))).await;
    scenario("one_per_resource", conditional::one_request_at_a_time_per_account(b, &on("resources"))).await;
    scenario(
        "every_method_checked",
        versioned_methods::put_and_delete_are_checked_and_a_delete_steps_the_version(b, &on("methods")),
    )
    .await;
    scenario(
        "428_before_the_hold",
        versioned_methods::writers_without_if_match_never_hold_off_a_valid_writer(b, &on("unconditional")),
    )
    .await;
    scenario("not_modified", versioned_methods::a_read_with_the_current_tag_is_not_modified(b, &on("not_modified")))
        .await;
    let accepted = on("respond_async");
    scenario(
        "respond_async",
        operations::respond_async_answers_202_and_the_status_resource_follows_the_run(b, &accepted),
    )
    .await;
    scenario("async_after", operations::a_run_past_the_configured_time_is_answered_202(b, &on("async_after"))).await;
    scenario(
        "async_abandoned",
        operations::an_abandoned_operation_says_so_and_its_retry_takes_it_over(b, &on("abandoned")),
    )
    .await;
    scenario("async_not_kept", operations::an_answer_not_kept_is_told_at_its_location(b, &on("told"))).await;
    scenario("async_no_route", operations::respond_async_to_no_route_is_answered_at_once(b, &on("no_route"))).await;
    scenario("status_reads_answers", operations::the_status_resource_reads_answers_only(b, &on("unreadable"))).await;
    #[cfg(feature = "webhooks")]
    {
        let hooks = |name: &str| on(&format!("webhooks-{name}"));
        scenario(
            "webhooks_once",
            webhooks::a_webhook_runs_once_however_often_and_in_whatever_order_it_comes(b, &hooks("once")),
        )
        .await;
        scenario("webhooks_refused", webhooks::an_unverified_webhook_is_refused_and_runs_nothing(b, &hooks("refused")))
            .await;
        scenario("webhooks_dead", webhooks::a_failing_webhook_is_retried_then_a_dead_letter(b, &hooks("dead"))).await;
        scenario("webhooks_rotation", webhooks::a_rotation_verifies_the_old_and_the_new_secret(b, &hooks("rotation")))
            .await;
        scenario("webhooks_stripe", webhooks::a_stripe_event_runs_once_by_its_event_id(b, &hooks("stripe"))).await;
        let mixed = hooks("mixed");
        scenario("webhooks_mixed", webhooks::an_unreadable_signature_beside_a_good_one_runs_once(b, &mixed)).await;
        #[cfg(feature = "client")]
        scenario("webhooks_signed_sink", webhooks::the_http_sink_signs_what_the_layer_verifies(b, &hooks("sink")))
            .await;
    }
}
