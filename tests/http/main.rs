//! The HTTP layer over a real server and a real client.
//!
//! One scenario per module; each module's docs say what it guards.

#[path = "../common/mod.rs"]
mod common;

mod blocking_handler;
mod fingerprint_headers_query;
mod fingerprint_json;
mod key_expiry;
mod natural_key;
mod payments_abandoned;
mod payments_example;
mod payments_postgres;
mod payments_resume;
mod payments_two_instances;
mod problem_details;
mod request_span;
mod store_failure;
mod wait_counts;
