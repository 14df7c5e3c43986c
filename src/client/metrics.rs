//! What the retry layer counts, through the `metrics` facade (feature
//! `metrics`; without it these record nothing).
//!
//! | name | kind | labels |
//! |---|---|---|
//! | `retries_total` | counter | `reason` ([`RetryReason::as_str`](super::RetryReason::as_str)) |
//! | `backoff_seconds` | histogram | – |
//! | `retry_budget_used` | gauge, 0 to 1 | `route` |
//! | `retry_budget_exhausted_total` | counter | `route` |
//! | `circuit_breaker_transitions_total` | counter | `to` (`open`, `half_open`, `closed`) |
//! | `circuit_breaker_refused_total` | counter | – |
//! | `rate_limit_ignored_total` | counter | `field` ([`RateLimitField::as_str`](super::RateLimitField::as_str)), `reason` ([`IgnoredReason::as_str`](super::IgnoredReason::as_str)) |
//! | `concurrency_limit` | gauge | `destination` (the URI's authority) |

#![cfg_attr(not(feature = "metrics"), expect(unused_variables, reason = "the values are for the exporter"))]

use super::breaker::BreakerState;
use super::classify::RetryReason;
use super::rate_limit::{IgnoredReason, RateLimitField};
use std::time::Duration;

#[cfg(feature = "metrics")]
const RETRIES_TOTAL: &str = "retries_total";
#[cfg(feature = "metrics")]
const BACKOFF_SECONDS: &str = "backoff_seconds";
#[cfg(feature = "metrics")]
const RETRY_BUDGET_USED: &str = "retry_budget_used";
#[cfg(feature = "metrics")]
const RETRY_BUDGET_EXHAUSTED_TOTAL: &str = "retry_budget_exhausted_total";
#[cfg(feature = "metrics")]
const BREAKER_TRANSITIONS_TOTAL: &str = "circuit_breaker_transitions_total";
#[cfg(feature = "metrics")]
const BREAKER_REFUSED_TOTAL: &str = "circuit_breaker_refused_total";
#[cfg(feature = "metrics")]
const RATE_LIMIT_IGNORED_TOTAL: &str = "rate_limit_ignored_total";
#[cfg(feature = "metrics")]
const CONCURRENCY_LIMIT: &str = "concurrency_limit";

/// Describes the metrics once, for exporters that print help text.
pub(super) fn describe() {
    #[cfg(feature = "metrics")]
    {
        metrics::describe_counter!(RETRIES_TOTAL, "Retries sent by the client retry layer, by reason");
        metrics::describe_histogram!(BACKOFF_SECONDS, metrics::Unit::Seconds, "Delays slept before retries");
        metrics::describe_gauge!(RETRY_BUDGET_USED, "Share of the route's retry budget spent in its window");
        metrics::describe_counter!(RETRY_BUDGET_EXHAUSTED_TOTAL, "Retries refused by the route's retry budget");
        metrics::describe_counter!(BREAKER_TRANSITIONS_TOTAL, "Circuit breaker transitions, by the state entered");
        metrics::describe_counter!(BREAKER_REFUSED_TOTAL, "Calls refused by an open circuit breaker");
        metrics::describe_counter!(
            RATE_LIMIT_IGNORED_TOTAL,
            "Rate-limit fields ignored by the retry layer, by field and reason"
        );
        metrics::describe_gauge!(CONCURRENCY_LIMIT, "Attempts the retry layer lets be in flight to the destination");
    }
}

/// A retry for `reason`, after sleeping `delay`.
pub(super) fn retry(reason: RetryReason, delay: Duration) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!(RETRIES_TOTAL, "reason" => reason.as_str()).increment(1);
        metrics::histogram!(BACKOFF_SECONDS).record(delay.as_secs_f64());
    }
}

/// The share of `route`'s budget spent, after a withdrawal.
pub(super) fn budget_used(route: &str, used: f64) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(RETRY_BUDGET_USED, "route" => route.to_owned()).set(used);
}

/// A retry `route`'s budget refused.
pub(super) fn budget_exhausted(route: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(RETRY_BUDGET_EXHAUSTED_TOTAL, "route" => route.to_owned()).increment(1);
}

/// A breaker moved to `state`.
pub(super) fn transition(state: BreakerState) {
    #[cfg(feature = "metrics")]
    metrics::counter!(BREAKER_TRANSITIONS_TOTAL, "to" => state.as_str()).increment(1);
}

/// A call a breaker refused.
pub(super) fn refused() {
    #[cfg(feature = "metrics")]
    metrics::counter!(BREAKER_REFUSED_TOTAL).increment(1);
}

/// A rate-limit field ignored, and why.
pub(super) fn rate_limit_ignored(field: RateLimitField, reason: IgnoredReason) {
    #[cfg(feature = "metrics")]
    metrics::counter!(RATE_LIMIT_IGNORED_TOTAL, "field" => field.as_str(), "reason" => reason.as_str()).increment(1);
}

/// The concurrency limit of `destination`, when it is made or moves.
pub(super) fn concurrency_limit(destination: &str, limit: u32) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(CONCURRENCY_LIMIT, "destination" => destination.to_owned()).set(f64::from(limit));
}
