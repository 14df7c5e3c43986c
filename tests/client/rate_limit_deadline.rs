//! The rate-limit wait against the deadline and the cap, on tokio's
//! paused clock with a scripted service: a reset within both is slept
//! exactly (or the backoff, if longer); one past the deadline ends the
//! retries at once and hands the 429 back; one past
//! `rate_limit_wait_max` is ignored and the retry follows the backoff;
//! `Retry-After` takes precedence over the fields; a 500 with a spent
//! quota is not read for one.
#![cfg(feature = "client")]

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use idemkv::client::{Backoff, BoxError, Jitter, RetryInfo, RetryLayer, RetryPolicy};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

type Inner = tower::util::BoxCloneService<Request<Full<Bytes>>, Response<Full<Bytes>>, BoxError>;

/// When the inner service was called.
type Seen = Arc<Mutex<Vec<Instant>>>;

/// Answers `status` with `fields` once, then 200; the times it was called.
fn throttled(status: u16, fields: &'static [(&'static str, &'static str)]) -> (Inner, Seen) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let service = tower::service_fn(move |_: Request<Full<Bytes>>| {
        let log = Arc::clone(&log);
        async move {
            let mut log = log.lock();
            log.push(Instant::now());
            let mut response = Response::builder().status(if log.len() == 1 { status } else { 200 });
            if log.len() == 1 {
                for (name, value) in fields {
                    response = response.header(*name, *value);
                }
            }
            Ok::<_, BoxError>(response.body(Full::default()).expect("response"))
        }
    });
    (tower::util::BoxCloneService::new(service), seen)
}

/// Backoff 100 ms, no jitter, budget or breaker, a 30 s deadline, a 20 s cap.
fn policy() -> RetryPolicy {
    RetryPolicy::new()
        .deadline(Duration::from_secs(30))
        .rate_limit_wait_max(Duration::from_secs(20))
        .backoff(Backoff::new(Duration::from_millis(100), Duration::from_millis(100)).jitter(Jitter::None))
        .budget(None)
        .breaker(None)
}

/// Sends a POST; its status, attempts, and the gap between the first two
/// calls (if there was a second).
async fn send(status: u16, fields: &'static [(&'static str, &'static str)]) -> (u16, u32, Option<Duration>) {
    let (inner, seen) = throttled(status, fields);
    let request = Request::post("http://api.test/charges").body(Full::new(Bytes::from_static(b"x"))).expect("request");
    let response = RetryLayer::new(policy()).layer(inner).oneshot(request).await.expect("an answer");
    let attempts = response.extensions().get::<RetryInfo>().expect("retry info").attempts;
    let seen = seen.lock();
    (response.status().as_u16(), attempts, seen.get(1).map(|second| *second - seen[0]))
}

#[tokio::test(start_paused = true)]
async fn a_reset_within_the_deadline_and_the_cap_is_slept() {
    let secs = |seconds| Some(Duration::from_secs(seconds));
    assert_eq!(send(429, &[("ratelimit", r#""a";r=0;t=7"#)]).await, (200, 2, secs(7)));
    assert_eq!(send(503, &[("ratelimit-reset", "3")]).await, (200, 2, secs(3)));
    let from_policy = send(429, &[("ratelimit-policy", r#""a";q=5;w=12"#), ("ratelimit", r#""a";r=0"#)]).await;
    assert_eq!(from_policy, (200, 2, secs(12)));
    // Quota left: the backoff alone.
    let left = send(429, &[("x-ratelimit-remaining", "4"), ("x-ratelimit-reset", "9")]).await;
    assert_eq!(left, (200, 2, Some(Duration::from_millis(100))));
}

#[tokio::test(start_paused = true)]
async fn a_reset_past_the_deadline_ends_the_retries_at_once() {
    // 15 s is within the 20 s cap, but past the 10 s deadline.
    let (inner, seen) = throttled(429, &[("ratelimit-reset", "15")]);
    let policy = policy().deadline(Duration::from_secs(10));
    let request = Request::post("http://api.test/charges").body(Full::new(Bytes::from_static(b"x"))).expect("request");
    let started = Instant::now();
    let response = RetryLayer::new(policy).layer(inner).oneshot(request).await.expect("an answer");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS, "handed back");
    assert_eq!(seen.lock().len(), 1, "no retry");
    assert_eq!(Instant::now(), started, "no sleep");
}

#[tokio::test(start_paused = true)]
async fn a_reset_past_the_cap_is_ignored_and_the_backoff_follows() {
    let backoff = Some(Duration::from_millis(100));
    assert_eq!(send(429, &[("ratelimit-reset", "21")]).await, (200, 2, backoff));
    assert_eq!(send(429, &[("x-ratelimit-reset", "99999999999999")]).await, (200, 2, backoff), "a far timestamp");
    assert_eq!(send(429, &[("ratelimit", "garbage;;")]).await, (200, 2, backoff), "malformed");
}

#[tokio::test(start_paused = true)]
async fn retry_after_takes_precedence_and_only_429_and_503_are_read() {
    let both = send(429, &[("retry-after", "2"), ("ratelimit", r#""a";r=0;t=9"#)]).await;
    assert_eq!(both, (200, 2, Some(Duration::from_secs(2))));
    assert_eq!(send(500, &[("ratelimit-reset", "9")]).await, (200, 2, Some(Duration::from_millis(100))));
}
