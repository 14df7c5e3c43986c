//! The calling side: the retry layer.
//!
//! One scenario per module; each module's docs say what it guards.

#[path = "../common/mod.rs"]
mod common;

mod exactly_once;
mod http_sink;
mod retry_policy;
