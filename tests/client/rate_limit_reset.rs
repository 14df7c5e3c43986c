//! The rate-limit fields as backoff, over real HTTP: a server on loopback
//! answers 429 with a spent quota (`RateLimit-Reset`, the draft's
//! `RateLimit` and `RateLimit-Policy`, `X-RateLimit-Reset` as a Unix
//! timestamp), then 200; the retry reaches it no sooner than the reset.
//! A hostile reset (far past the cap) and a malformed remaining are
//! ignored, counted by field and reason, and the retry goes on with its
//! backoff. No upper bound on any time is asserted.
#![cfg(all(feature = "client", feature = "metrics"))]

use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idemkv::client::{Backoff, Jitter, RetryInfo, RetryLayer, RetryPolicy};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tower::{Layer, ServiceExt};

/// What the server answers first: the 429's fields, made when the request
/// comes (so that a timestamp can be counted from then).
type Fields = fn() -> Vec<(&'static str, String)>;

/// When each request came, on the monotonic and on the wall clock.
#[derive(Clone)]
struct Throttled {
    fields: Fields,
    seen: Arc<Mutex<Vec<(Instant, SystemTime)>>>,
}

async fn payments(State(server): State<Throttled>) -> (StatusCode, HeaderMap) {
    let mut seen = server.seen.lock();
    seen.push((Instant::now(), SystemTime::now()));
    if seen.len() > 1 {
        return (StatusCode::CREATED, HeaderMap::new());
    }
    let mut headers = HeaderMap::new();
    for (name, value) in (server.fields)() {
        headers.append(HeaderName::from_static(name), HeaderValue::from_str(&value).expect("field value"));
    }
    (StatusCode::TOO_MANY_REQUESTS, headers)
}

/// Serves `fields` then 201 on loopback; its address and what it saw.
async fn serve(fields: Fields) -> (String, Arc<Mutex<Vec<(Instant, SystemTime)>>>) {
    let server = Throttled { fields, seen: Arc::default() };
    let seen = Arc::clone(&server.seen);
    let app = Router::new().route("/payments", post(payments)).with_state(server);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    (base, seen)
}

/// Sends one POST through the layer (a 10 ms backoff, far shorter than
/// any reset here); the status and attempts it ends with.
async fn call(base: &str) -> (u16, u32) {
    let policy = RetryPolicy::new()
        .deadline(Duration::from_secs(20))
        .backoff(Backoff::new(Duration::from_millis(10), Duration::from_millis(10)).jitter(Jitter::None))
        .budget(None)
        .breaker(None);
    let client = RetryLayer::new(policy).layer(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>());
    let request = http::Request::post(format!("{base}/payments")).body(Full::new(Bytes::from_static(b"amount=10")));
    let response = client.oneshot(request.expect("request")).await.expect("an answer");
    let attempts = response.extensions().get::<RetryInfo>().expect("retry info").attempts;
    (response.status().as_u16(), attempts)
}

/// The gap between the first two requests the server saw.
fn gap(seen: &Mutex<Vec<(Instant, SystemTime)>>) -> Duration {
    let seen = seen.lock();
    assert_eq!(seen.len(), 2, "one retry");
    seen[1].0 - seen[0].0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_ratelimit_reset_is_retried_after_the_reset() {
    let (base, seen) =
        serve(|| vec![("ratelimit-remaining", "0".to_owned()), ("ratelimit-reset", "1".to_owned())]).await;
    assert_eq!(call(&base).await, (201, 2));
    let gap = gap(&seen);
    assert!(gap >= Duration::from_secs(1), "retried after {gap:?}, before the reset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_the_drafts_ratelimit_is_retried_after_its_window() {
    let fields: Fields = || {
        vec![
            ("ratelimit-policy", r#""burst";q=10;w=1, "daily";q=1000;w=86400"#.to_owned()),
            ("ratelimit", r#""burst";r=0;t=1, "daily";r=990;t=40000"#.to_owned()),
        ]
    };
    let (base, seen) = serve(fields).await;
    assert_eq!(call(&base).await, (201, 2));
    let gap = gap(&seen);
    assert!(gap >= Duration::from_secs(1), "retried after {gap:?}, before the spent quota's window");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_window_stands_in_for_a_missing_t() {
    let fields: Fields =
        || vec![("ratelimit-policy", r#""burst";q=10;w=1"#.to_owned()), ("ratelimit", r#""burst";r=0"#.to_owned())];
    let (base, seen) = serve(fields).await;
    assert_eq!(call(&base).await, (201, 2));
    let gap = gap(&seen);
    assert!(gap >= Duration::from_secs(1), "retried after {gap:?}, before the policy's window");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timestamp_reset_is_waited_for_on_the_wall_clock() {
    // Two whole seconds ahead: the server's `Date` has whole seconds, so
    // the client counts from up to a second before now.
    let fields: Fields = || {
        let reset = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs() + 2;
        vec![("x-ratelimit-remaining", "0".to_owned()), ("x-ratelimit-reset", reset.to_string())]
    };
    let (base, seen) = serve(fields).await;
    assert_eq!(call(&base).await, (201, 2));
    let seen = seen.lock();
    let first = seen[0].1.duration_since(UNIX_EPOCH).expect("after 1970").as_secs();
    let retried = seen[1].1.duration_since(UNIX_EPOCH).expect("after 1970");
    assert!(retried >= Duration::from_secs(first + 2), "retried at {retried:?}, before the reset at {}", first + 2);
}

#[test]
fn a_hostile_reset_and_a_malformed_remaining_are_ignored_and_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let (status, attempts) = metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let fields: Fields = || {
                vec![
                    ("ratelimit-reset", "99999999999999999999".to_owned()),
                    ("x-ratelimit-remaining", "plenty".to_owned()),
                    ("x-ratelimit-reset", "2".to_owned()),
                    ("ratelimit", r#""default";r=0;t=-1"#.to_owned()),
                ]
            };
            let (base, _seen) = serve(fields).await;
            call(&base).await
        })
    });
    // The 2 s of `X-RateLimit-Reset` stand (its remaining, unreadable,
    // counts as absent); had the far reset been taken for a wait, the
    // layer would have handed the 429 back instead of retrying.
    assert_eq!((status, attempts), (201, 2));
    let mut ignored = Vec::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        if key.name() == "rate_limit_ignored_total" {
            let labels: Vec<String> = key.labels().map(|label| format!("{}={}", label.key(), label.value())).collect();
            let DebugValue::Counter(count) = value else { panic!("a counter") };
            ignored.push((labels.join(","), count));
        }
    }
    ignored.sort();
    let expected = [
        ("field=ratelimit,reason=malformed".to_owned(), 1),
        ("field=ratelimit-reset,reason=too_long".to_owned(), 1),
        ("field=x-ratelimit-remaining,reason=malformed".to_owned(), 1),
    ];
    assert_eq!(ignored, expected);
}
