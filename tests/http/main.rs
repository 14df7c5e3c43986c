//! The HTTP layer over a real server and a real client.
//!
//! One scenario per module; each module's docs say what it guards.

#[path = "../common/mod.rs"]
mod common;

mod http_blocking_handler;
mod http_payments_abandoned;
mod http_payments_example;
mod http_payments_postgres;
mod http_payments_resume;
mod http_payments_two_instances;
mod http_problem_details;
mod http_store_failure;
mod http_wait_many_waiters;
