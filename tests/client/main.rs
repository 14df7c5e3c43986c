//! The calling side: the retry layer.
//!
//! One scenario per module; each module's docs say what it guards.

#[path = "../common/mod.rs"]
mod common;

mod call_span;
mod call_span_attached_key;
mod concurrency_limit;
mod concurrency_wait;
mod exactly_once;
mod http_sink;
mod rate_limit_deadline;
mod rate_limit_reset;
mod retry_policy;
