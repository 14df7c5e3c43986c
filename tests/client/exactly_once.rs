//! Exactly once through a lossy network: the retry layer over hyper-util's
//! client, a loopback TCP proxy that drops a seeded share of connections
//! (closed before anything is forwarded) and of responses (the request
//! reaches the server and runs, the answer never comes back), and a real
//! axum server behind `IdempotencyLayer` over a real store. N logical
//! requests must run N side effects, each caller getting its own answer.
#![cfg(all(feature = "client", feature = "conformance-http"))]

use crate::common::http::Server;
use axum::{body::Bytes, extract::State, http::StatusCode, routing::post, Router};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idemkv::client::{Backoff, BudgetConfig, Jitter, RetryInfo, RetryLayer, RetryPolicy};
use idemkv::http::LayerConfig;
use idemkv::{Config, Durability};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tower::{Layer, ServiceExt};

const REQUESTS: u32 = 200;
const CONCURRENCY: usize = 20;
const SEED: u64 = 0x1de3_4b01;
/// Shares of connections closed at once, and of responses swallowed.
const DROP_CONNECTION: f64 = 0.2;
const DROP_RESPONSE: f64 = 0.4;

/// Side effects per request body.
type Effects = Arc<Mutex<HashMap<String, u32>>>;

async fn order(State(effects): State<Effects>, body: Bytes) -> (StatusCode, String) {
    let body = String::from_utf8_lossy(&body).into_owned();
    *effects.lock().entry(body.clone()).or_default() += 1;
    (StatusCode::CREATED, format!("done {body}"))
}

/// What the proxy did to each connection.
#[derive(Default)]
struct ProxyCounts {
    connections: AtomicU64,
    dropped_connections: AtomicU64,
    dropped_responses: AtomicU64,
}

/// Serves a proxy to `upstream` on a fresh port; returns its address.
async fn start_proxy(upstream: String, counts: Arc<ProxyCounts>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
    let address = listener.local_addr().expect("proxy address").to_string();
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else { return };
            let index = counts.connections.fetch_add(1, Ordering::SeqCst);
            let draw = fastrand::Rng::with_seed(SEED ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15)).f64();
            let counts = Arc::clone(&counts);
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if draw < DROP_CONNECTION {
                    counts.dropped_connections.fetch_add(1, Ordering::SeqCst);
                    drop(client);
                } else if draw < DROP_CONNECTION + DROP_RESPONSE {
                    counts.dropped_responses.fetch_add(1, Ordering::SeqCst);
                    swallow_response(client, &upstream).await;
                } else {
                    forward(client, &upstream).await;
                }
            });
        }
    });
    address
}

/// Forwards the request, waits until the server starts answering (the
/// handler has run and its answer is kept), then closes both sides
/// without a byte of the answer.
async fn swallow_response(client: TcpStream, upstream: &str) {
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    let (mut client_read, _client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upload = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
    });
    let mut first = [0_u8; 1];
    let _ = server_read.read(&mut first).await;
    upload.abort();
}

async fn forward(mut client: TcpStream, upstream: &str) {
    let Ok(mut server) = TcpStream::connect(upstream).await else { return };
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
    let _ = client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_logical_request_runs_once_through_a_lossy_proxy() {
    tokio::time::timeout(Duration::from_secs(120), run()).await.expect("the run ends within two minutes");
}

async fn run() {
    let effects = Effects::default();
    let routes = Router::new().route("/orders", post(order)).with_state(Arc::clone(&effects));
    let config = Config::new().durability(Durability::Buffered);
    let server = Server::start(config, LayerConfig::global(), routes).await;
    let counts = Arc::new(ProxyCounts::default());
    let proxy = start_proxy(server.base.trim_start_matches("http://").to_string(), Arc::clone(&counts)).await;

    // One connection per attempt, so that each attempt meets the proxy's
    // draw afresh.
    let http = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(0).build_http::<Full<Bytes>>();
    let policy = RetryPolicy::new()
        .max_attempts(30)
        .deadline(Duration::from_secs(60))
        .attempt_timeout(Some(Duration::from_secs(5)))
        .backoff(Backoff::new(Duration::from_millis(2), Duration::from_millis(50)).jitter(Jitter::Full))
        // A budget generous enough for a 60 % loss, and no breaker: this
        // test is about exactly-once, not about giving up.
        .budget(Some(BudgetConfig { ratio: 10.0, ..BudgetConfig::default() }))
        .breaker(None)
        .seed(SEED);
    let client = RetryLayer::new(policy).layer(http);

    let limit = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let retries = Arc::new(AtomicU32::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for number in 0..REQUESTS {
        let (client, limit, retries) = (client.clone(), Arc::clone(&limit), Arc::clone(&retries));
        let url = format!("http://{proxy}/orders");
        tasks.spawn(async move {
            let _slot = limit.acquire_owned().await.expect("semaphore");
            let body = format!("order-{number}");
            let request = http::Request::post(url).body(Full::new(Bytes::from(body.clone()))).expect("request");
            let response = client.oneshot(request).await.unwrap_or_else(|error| panic!("{body}: {error:?}"));
            let info = response.extensions().get::<RetryInfo>().cloned().expect("retry info");
            retries.fetch_add(info.attempts - 1, Ordering::SeqCst);
            let status = response.status();
            let text = response.into_body().collect().await.expect("answer body").to_bytes();
            assert_eq!(status, http::StatusCode::CREATED, "{body}");
            assert_eq!(text, format!("done {body}").as_bytes(), "{body} got another caller's answer");
            info.idempotency_key.expect("a POST carries a key")
        });
    }
    let mut keys = HashSet::new();
    while let Some(key) = tasks.join_next().await {
        assert!(keys.insert(key.expect("request task")), "one key per logical request");
    }

    let effects = effects.lock();
    let retries = retries.load(Ordering::SeqCst);
    println!(
        "{REQUESTS} requests, {retries} retries; proxy: {} connections, {} dropped before forwarding, {} \
         answers swallowed; {} side effects",
        counts.connections.load(Ordering::SeqCst),
        counts.dropped_connections.load(Ordering::SeqCst),
        counts.dropped_responses.load(Ordering::SeqCst),
        effects.values().sum::<u32>(),
    );
    assert_eq!(effects.len(), REQUESTS as usize, "every logical request ran");
    assert!(effects.values().all(|count| *count == 1), "no request ran twice: {effects:?}");
    assert!(retries > REQUESTS / 2, "the loss made most requests retry: {retries} retries");
    assert!(counts.dropped_responses.load(Ordering::SeqCst) > u64::from(REQUESTS / 4));
}

/// hyper-util's client over plain TCP.
type Http = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// Takes 1.5 s, so that a duplicate arrives while it runs.
async fn slow_order(State(effects): State<Effects>, body: Bytes) -> (StatusCode, String) {
    let body = String::from_utf8_lossy(&body).into_owned();
    *effects.lock().entry(body.clone()).or_default() += 1;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    (StatusCode::CREATED, format!("done {body}"))
}

/// The two halves with their defaults (`RetryPolicy::new()`,
/// `LayerConfig` with its 30 s lease): a duplicate sent while the first
/// request runs gets the first's answer. The server once said
/// `Retry-After: 30` (what was left of the lease) and the client, whose
/// deadline is 30 s, handed the 409 back after one attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_duplicate_during_the_first_run_gets_its_answer_with_both_defaults() {
    let effects = Effects::default();
    let routes = Router::new().route("/orders", post(slow_order)).with_state(Arc::clone(&effects));
    let server = Server::start(Config::new().durability(Durability::Buffered), LayerConfig::global(), routes).await;
    let http = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let client = RetryLayer::new(RetryPolicy::new()).layer(http);
    let send = |client: idemkv::client::RetryService<Http>| {
        let request = http::Request::post(server.url("/orders")).header("idempotency-key", "order-dup");
        let request = request.body(Full::new(Bytes::from_static(b"order-dup"))).expect("request");
        async move {
            let response = client.oneshot(request).await.expect("an answer");
            let headers = response.headers();
            let replayed = headers.contains_key("idempotency-replay");
            let waited = headers.get("preference-applied").map(|value| value.to_str().expect("ascii").to_owned());
            let status = response.status();
            let body = response.into_body().collect().await.expect("body").to_bytes();
            (status, replayed, waited.is_some_and(|waited| waited.starts_with("wait=")), body)
        }
    };
    let first = tokio::spawn(send(client.clone()));
    while effects.lock().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let duplicate = send(client.clone()).await;
    let first = first.await.expect("first");
    assert_eq!(first, (StatusCode::CREATED, false, false, Bytes::from_static(b"done order-dup")));
    // Replayed after a wait the server honoured: the retry after the 409
    // carried `Prefer: wait`, and the server answered when the first was
    // stored.
    let answer = (StatusCode::CREATED, true, true, Bytes::from_static(b"done order-dup"));
    assert_eq!(duplicate, answer, "the duplicate");
    assert_eq!(effects.lock().get("order-dup"), Some(&1), "it ran once");
}
