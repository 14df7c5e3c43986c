//! Counters through `metrics`, events through `tracing`.
//!
//! One scenario per module; each module's docs say what it guards.

#[path = "../common/mod.rs"]
mod common;

mod counters;
mod events;
mod quota_metrics;
mod wait;
