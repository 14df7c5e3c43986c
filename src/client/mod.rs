//! The calling side (feature `client`): a `tower` layer for outgoing HTTP
//! requests that retries what is worth retrying, and makes the retries of
//! a POST safe with one `Idempotency-Key` per logical request.
//!
//! ```no_run
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use idemkv::client::{Backoff, Jitter, RetryLayer, RetryPolicy};
//! use std::time::Duration;
//! use tower::{Layer, ServiceExt};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let policy = RetryPolicy::new()
//!     .max_attempts(5)
//!     .deadline(Duration::from_secs(10))
//!     .backoff(Backoff::new(Duration::from_millis(50), Duration::from_secs(2)).jitter(Jitter::Full));
//! let client = RetryLayer::new(policy).layer(Client::builder(TokioExecutor::new()).build_http());
//! let request = http::Request::post("http://127.0.0.1:3000/payments")
//!     .header("x-account", "a1")
//!     .body(Full::new(Bytes::from_static(br#"{"amount":10}"#)))?;
//! let response = client.oneshot(request).await?;
//! # Ok(()) }
//! ```
//!
//! [`RetryLayer`] wraps any `tower::Service<http::Request<Full<Bytes>>>`
//! that answers `http::Response<_>`, such as hyper-util's legacy
//! `Client`. For each request it:
//!
//! - buffers the body (up to [`RetryPolicy::body_bytes_max`]) so that
//!   every attempt sends the same bytes;
//! - keeps the caller's `Idempotency-Key`, or attaches a fresh UUID v7 to
//!   a POST or PATCH; every retry carries the same key. Idempotent methods
//!   are retried as they are; other methods without a key are sent once;
//! - classifies each attempt ([`classify_status`], [`transport_reason`]):
//!
//! | outcome | retried? |
//! |---|---|
//! | transport error: refused, reset, closed, timed out | yes |
//! | 408, 425, 429, 500, 502, 503, 504 and every other 5xx | yes |
//! | 409 with `Retry-After` (an idempotency server's "in progress") | yes: at once with `Prefer: wait=N` (the default, [`RetryPolicy::prefer_wait`]), or after `Retry-After` |
//! | 400, 401, 403, 404, 409 without `Retry-After`, 422, every other 4xx | no |
//! | 1xx, 2xx, 3xx | no |
//!
//! - waits [`Backoff`] (capped exponential with [`Jitter`]), at least the
//!   answer's [`retry_after`], never past the [deadline](RetryPolicy::deadline);
//! - on a 429 or 503 without `Retry-After`, waits at least until the
//!   spent quota resets, as the rate-limit fields say ([`rate_limit_wait`]):
//!
//!   | field | read as |
//!   |---|---|
//!   | `RateLimit: "default";r=0;t=30` (the IETF httpapi draft) | `r=0`: spent; wait `t` seconds, or without `t` the `w` of the same-named `RateLimit-Policy` item |
//!   | `RateLimit-Remaining: 0` + `RateLimit-Reset: 30` (the older drafts) | remaining `0` or absent: wait until the reset |
//!   | `X-RateLimit-Remaining: 0` + `X-RateLimit-Reset: 1767225600` | the same; a reset of at least 10⁹ is a Unix timestamp, counted from the answer's `Date` |
//!
//!   A field that does not parse, or asks for more than
//!   [`rate_limit_wait_max`](RetryPolicy::rate_limit_wait_max), is ignored
//!   and counted (`rate_limit_ignored_total{field,reason}`);
//! - spends a [`RetryBudget`] per route: retries stop when they would add
//!   more than a fraction of the route's recent requests;
//! - asks the destination's [`CircuitBreaker`], which opens when too many
//!   recent calls failed and then refuses at once with
//!   [`ClientError::CircuitOpen`];
//! - with [`RetryPolicy::concurrency`] (off by default), keeps the
//!   attempts in flight to each destination under an adaptive
//!   [`ConcurrencyLimit`]: it falls as timeouts, 5xx, 408 and 429 come back
//!   and rises as they stop ([`RetryLayer::concurrency_limit`] reads it,
//!   the gauge `concurrency_limit{destination}` shows it); an attempt over
//!   the limit waits, until the deadline at most
//!   ([`ClientError::ConcurrencyLimited`]);
//! - runs in a `tracing` span `idempotent_call` (feature `tracing`) with
//!   the key, method, authority, path, attempt, outcome and status, so
//!   that every line logged for the call, the inner service's included,
//!   can be tied to its key (the server layer's span is
//!   `idempotent_request`, with the same `key`);
//! - counts all of it through `metrics` (the names are in the table of
//!   the `metrics` module source, and in `docs/operations.md`).
//!
//! A retryable answer after the last attempt is handed back as it is (the
//! caller sees the 503); a transport error after it is
//! [`ClientError::Transport`]. Each response carries [`RetryInfo`] in its
//! extensions: the attempts made, the key used, and whether the server
//! said the answer is a replay.
//!

// Module map: classify, backoff, retry_after, rate_limit, budget, breaker
// and concurrency are pure (told the time, the outcomes and the random
// numbers); limiter holds a destination's permits to its concurrency
// limit; key attaches the key; policy is the builder; state holds the
// budgets, breakers and limiters a layer shares; span is the call's
// tracing span; layer runs the attempts; metrics names what is counted;
// error is the caller's.

mod backoff;
mod breaker;
mod budget;
mod classify;
mod concurrency;
mod error;
mod key;
mod layer;
mod limiter;
mod metrics;
mod policy;
mod rate_limit;
mod retry_after;
mod span;
mod state;

pub use backoff::{Backoff, Jitter};
pub use breaker::{BreakerConfig, BreakerState, CircuitBreaker, Refused};
pub use budget::{BudgetConfig, RetryBudget};
pub use classify::{classify_status, transport_reason, RetryReason, Verdict};
pub use concurrency::{ConcurrencyConfig, ConcurrencyLimit, LoadSample, LoadSignal};
pub use error::{BoxError, ClientError};
pub use key::IDEMPOTENCY_KEY;
pub use layer::{RetryInfo, RetryLayer, RetryService};
pub use policy::{KeyKind, RetryPolicy};
pub use rate_limit::{rate_limit_wait, IgnoredReason, RateLimitField, RateLimitWait};
pub use retry_after::retry_after;
