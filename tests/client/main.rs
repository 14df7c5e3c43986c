//! The calling side: the retry layer.
//!
//! One scenario per module; each module's docs say what it guards.

#[path = "../common/mod.rs"]
mod common;

mod client_exactly_once;
mod client_http_sink;
mod client_retry_policy;
