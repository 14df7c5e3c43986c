//! The adaptive concurrency limit over real HTTP: sixteen callers keep a
//! server on loopback busy through one layer; the server counts the
//! requests it holds at once. While it answers 503 the layer's limit
//! falls and the server sees fewer requests at once than when it was
//! healthy; once it answers 200 again the limit climbs back and so does
//! what the server sees. The gauge `concurrency_limit` follows the limit.
#![cfg(all(feature = "client", feature = "metrics"))]

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idemkv::client::{ConcurrencyConfig, RetryLayer, RetryPolicy, RetryService};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::{Layer, ServiceExt};

const CALLERS: usize = 16;
/// How long the server holds each request.
const HOLD: Duration = Duration::from_millis(30);

/// The server's load: requests held now, the most held at once since the
/// last reset, and whether it is failing.
#[derive(Default)]
struct Load {
    held: AtomicU32,
    most: AtomicU32,
    failing: AtomicBool,
}

impl Load {
    /// The most held at once since the last call.
    fn take_most(&self) -> u32 {
        self.most.swap(self.held.load(Ordering::SeqCst), Ordering::SeqCst)
    }
}

async fn work(State(load): State<Arc<Load>>) -> StatusCode {
    let held = load.held.fetch_add(1, Ordering::SeqCst) + 1;
    load.most.fetch_max(held, Ordering::SeqCst);
    tokio::time::sleep(HOLD).await;
    load.held.fetch_sub(1, Ordering::SeqCst);
    if load.failing.load(Ordering::SeqCst) {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

type Http = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// Callers sending one POST after another until `stop`.
fn callers(client: &RetryService<Http>, url: &str, stop: &Arc<AtomicBool>) -> tokio::task::JoinSet<()> {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CALLERS {
        let (client, url, stop) = (client.clone(), url.to_owned(), Arc::clone(stop));
        tasks.spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let request = http::Request::post(url.as_str()).body(Full::new(Bytes::from_static(b"work")));
                // A 503 handed back is an answer too; no call may fail.
                client.clone().oneshot(request.expect("request")).await.expect("an answer");
            }
        });
    }
    tasks
}

/// Waits (100 s at most) until `until` holds of the destination's limit.
async fn limit_until(client: &RetryService<Http>, destination: &str, until: impl Fn(u32) -> bool) -> u32 {
    for _ in 0..10_000 {
        if let Some(limit) = client.concurrency_limit(destination).filter(|limit| until(*limit)) {
            return limit;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the limit of {destination} stayed at {:?}", client.concurrency_limit(destination));
}

/// The most requests the server held at once over the next 500 ms, once
/// those sent before have drained.
async fn most_held(load: &Load) -> u32 {
    tokio::time::sleep(HOLD * 10).await;
    load.take_most();
    tokio::time::sleep(Duration::from_millis(500)).await;
    load.take_most()
}

#[test]
fn the_limit_falls_while_5xx_rise_and_recovers_after() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let (destination, limit) = metrics::with_local_recorder(&recorder, || runtime.block_on(rise_and_fall()));
    let mut gauge = None;
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let labelled = key.labels().any(|label| label.key() == "destination" && label.value() == destination);
        if let (true, true, DebugValue::Gauge(value)) = (key.name() == "concurrency_limit", labelled, value) {
            gauge = Some(value.into_inner());
        }
    }
    assert_eq!(gauge, Some(f64::from(limit)), "the gauge shows the limit");
}

/// Runs the three phases; the destination and its limit at the end.
async fn rise_and_fall() -> (String, u32) {
    let load = Arc::new(Load::default());
    let app = Router::new().route("/work", post(work)).with_state(Arc::clone(&load));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let destination = listener.local_addr().expect("address").to_string();
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });

    let concurrency = ConcurrencyConfig { initial_limit: 16, min_limit: 1, max_limit: 16, backoff_ratio: 0.5 };
    // One attempt a call: this is about the limit, not the retries.
    let policy = RetryPolicy::new().max_attempts(1).budget(None).breaker(None).concurrency(Some(concurrency));
    let client = RetryLayer::new(policy).layer(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>());
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = callers(&client, &format!("http://{destination}/work"), &stop);

    let healthy = most_held(&load).await;
    load.failing.store(true, Ordering::SeqCst);
    let fallen = limit_until(&client, &destination, |limit| limit <= 2).await;
    let failing = most_held(&load).await;
    load.failing.store(false, Ordering::SeqCst);
    let recovered = limit_until(&client, &destination, |limit| limit >= 12).await;
    let after = most_held(&load).await;
    stop.store(true, Ordering::SeqCst);
    tasks.join_all().await;

    println!(
        "held at once: {healthy} healthy, {failing} failing (limit {fallen}), {after} recovered (limit {recovered})"
    );
    assert!(healthy >= 8, "sixteen callers kept the healthy server busy: {healthy}");
    assert!(failing <= 2, "the server held at most the fallen limit at once: {failing}");
    assert!(failing < healthy && after > failing, "{healthy} → {failing} → {after}");
    let limit = client.concurrency_limit(&destination).expect("a limit");
    (destination, limit)
}
