//! The HTTP layer over a real server and a real client.
//!
//! One scenario per module; each module's docs say what it guards.

#[path = "../common/mod.rs"]
mod common;

mod http_client_disconnect;
mod http_handler_panic;
mod http_key_parsing;
mod http_layer;
mod http_lease_keepalive;
mod http_not_kept;
mod http_payments_example;
mod http_payments_postgres;
mod http_payments_resume;
mod http_payments_two_instances;
mod http_problem_details;
mod http_quota;
mod http_replay_headers;
mod http_response_budget;
mod http_store_failure;
mod http_streaming_passthrough;
mod http_tenant_scopes;
mod http_wait_many_waiters;
