//! Requests per second through the idempotency layer against the same route
//! without it, on loopback, in one run: an axum server and a pooled HTTP
//! client in one process, `CLIENTS` requests in flight, every request a POST
//! with a fresh key (so each runs the handler and stores its answer), and a
//! row of replays (one key per client, sent again and again).
//!
//! ```text
//! cargo bench --bench http_layer --features tower            # 5 s per row
//! IDEMKV_BENCH_SECONDS=0.5 cargo bench --bench http_layer --features tower
//! ```

mod support;

use axum::{body::Bytes, routing::post, Router};
use hdrhistogram::Histogram;
use idemkv::http::{IdempotencyLayer, LayerConfig};
use idemkv::{Config, Durability, Store};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::ratio;

const CLIENTS: usize = 32;

async fn handler(body: Bytes) -> (axum::http::StatusCode, [(&'static str, &'static str); 1], Bytes) {
    (axum::http::StatusCode::CREATED, [("content-type", "application/json")], body)
}

/// Serves `app` on a loopback port and returns its URL.
async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/payments", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    url
}

struct Row {
    requests_per_second: f64,
    p50: Duration,
    p99: Duration,
}

/// Drives `url` from `CLIENTS` tasks for `seconds`; `replay` sends one key
/// per client over and over instead of a fresh key each time.
async fn drive(url: String, seconds: f64, replay: bool) -> Row {
    let client = reqwest::Client::builder().pool_max_idle_per_host(CLIENTS).build().expect("client");
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|task| {
            let (client, url, stop, count) = (client.clone(), url.clone(), Arc::clone(&stop), Arc::clone(&count));
            tokio::spawn(async move {
                let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("bounds");
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = if replay { format!("replay-{task}") } else { format!("fresh-{task}-{n}") };
                    let sent = Instant::now();
                    let response = client
                        .post(&url)
                        .header("Idempotency-Key", key)
                        .body(r#"{"amount":10,"currency":"EUR"}"#)
                        .send()
                        .await
                        .expect("send");
                    assert!(response.status().is_success(), "{}", response.status());
                    response.bytes().await.expect("body");
                    latencies.saturating_record(u64::try_from(sent.elapsed().as_nanos()).unwrap_or(u64::MAX));
                    count.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
                latencies
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("bounds");
    for task in tasks {
        all.add(task.await.expect("client task")).expect("same bounds");
    }
    let elapsed = started.elapsed().as_secs_f64();
    #[expect(clippy::cast_precision_loss, reason = "a rate")]
    let requests_per_second = count.load(Ordering::Relaxed) as f64 / elapsed;
    Row {
        requests_per_second,
        p50: Duration::from_nanos(all.value_at_quantile(0.5)),
        p99: Duration::from_nanos(all.value_at_quantile(0.99)),
    }
}

async fn guarded(durability: Durability) -> (String, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), Config::new().durability(durability)).expect("open");
    let app =
        Router::new().route("/payments", post(handler)).layer(IdempotencyLayer::new(store, LayerConfig::global()));
    (serve(app).await, dir)
}

fn print(name: &str, row: &Row, bare: &Row) {
    println!(
        "{name:<28} {:>9.0} req/s  p50 {:>8.1?}  p99 {:>8.1?}  ×bare {:.2}",
        row.requests_per_second,
        row.p50,
        row.p99,
        ratio(row.requests_per_second, bare.requests_per_second)
    );
}

/// Calls `app` in process, with no network between, `CLIENTS` calls in
/// flight: what the layer itself costs per request.
async fn in_process(app: Router, seconds: f64, replay: bool) -> f64 {
    use tower::ServiceExt;
    let count = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|task| {
            let (app, count) = (app.clone(), Arc::clone(&count));
            tokio::spawn(async move {
                let mut n = 0u64;
                // Each task watches the time itself: a call that is always
                // ready never lets a timer fire.
                while Instant::now() < until {
                    let key = if replay { format!("replay-{task}") } else { format!("fresh-{task}-{n}") };
                    let request = axum::http::Request::post("/payments")
                        .header("Idempotency-Key", key)
                        .body(axum::body::Body::from(r#"{"amount":10,"currency":"EUR"}"#))
                        .expect("request");
                    let response = app.clone().oneshot(request).await.expect("infallible");
                    assert!(response.status().is_success(), "{}", response.status());
                    axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("body");
                    count.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    #[expect(clippy::cast_precision_loss, reason = "a rate")]
    let rate = count.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    rate
}

fn main() {
    let seconds = support::seconds(5.0);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(async {
        let bare_url = serve(Router::new().route("/payments", post(handler))).await;
        let bare = drive(bare_url, seconds, false).await;
        println!("{CLIENTS} clients in flight, {seconds} s per row, loopback, server and client in one process");
        print("bare route", &bare, &bare);
        let (url, _buffered) = guarded(Durability::Buffered).await;
        print("layer, Buffered, fresh keys", &drive(url.clone(), seconds, false).await, &bare);
        print("layer, Buffered, replays", &drive(url, seconds, true).await, &bare);
        let (url, _sync) = guarded(Durability::Sync).await;
        print("layer, Sync, fresh keys", &drive(url, seconds, false).await, &bare);

        println!("in process (no network): calls/s");
        let bare = in_process(Router::new().route("/payments", post(handler)), seconds, false).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path(), Config::new().durability(Durability::Buffered)).expect("open");
        let app =
            Router::new().route("/payments", post(handler)).layer(IdempotencyLayer::new(store, LayerConfig::global()));
        let fresh = in_process(app.clone(), seconds, false).await;
        let replays = in_process(app, seconds, true).await;
        println!("bare route                   {bare:>9.0} calls/s");
        println!("layer, Buffered, fresh keys  {fresh:>9.0} calls/s  ×bare {:.2}", ratio(fresh, bare));
        println!("layer, Buffered, replays     {replays:>9.0} calls/s  ×bare {:.2}", ratio(replays, bare));
    });
}
