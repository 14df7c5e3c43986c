//! Requests per second through the idempotency layer against the same route
//! without it, on loopback, in one run: an axum server and a pooled HTTP
//! client in one process, `CLIENTS` requests in flight, every request a POST
//! with a fresh key (so each runs the handler and stores its answer), and a
//! row of replays (one key per client, sent again and again). In process,
//! two rows more: each request also holding its resource
//! (`LayerConfig::resource`; one resource per client, so no request waits
//! for another), and holding it with a version checked and stepped
//! (`LayerConfig::versioned_resource`). And signed webhooks: each call a
//! Standard Webhook with a fresh id (signed by the caller, in both rows),
//! to the bare route and through `WebhookLayer` (verify, then the inbox).
//!
//! And a floor, over loopback and in process: the same route behind the
//! least a layer can do over the same store (`support::floor`: the key
//! and the request's body read, the key claimed with the body's
//! fingerprint, the route run, its answer's body gathered and stored; no
//! headers kept, no metrics or spans), so that the layer's cost splits
//! into what any layer over this store pays and its own work.
//!
//! Beside each rate, the CPU time the whole process spent per call (all
//! its threads, from `/proc/self/stat`), and how much more that is than
//! the bare route's: on a shared machine, where other work slows the
//! rates down, the CPU a call moves much less. The in-process `+µs` of the
//! fresh-key row is the layer's own cost of a new key, its store's
//! claim and completion included.
//!
//! ```text
//! cargo bench -p idemkv-bench --bench http_layer            # 5 s per row
//! IDEMKV_BENCH_SECONDS=0.5 cargo bench -p idemkv-bench --bench http_layer
//! IDEMKV_BENCH_ONE_ROW=layer-replay cargo bench -p idemkv-bench --bench http_layer
//! ```
//!
//! `IDEMKV_BENCH_ONE_ROW` runs one loopback row alone (`bare`,
//! `layer-fresh`, `layer-replay`, `floor-fresh` or `floor-replay`), so
//! that `perf record` or `perf stat` sees that row only.

mod support;

use axum::{body::Bytes, routing::post, Router};
use hdrhistogram::Histogram;
use idemkv::http::{IdempotencyLayer, LayerConfig, WebhookLayer};
use idemkv::webhook::StandardWebhooks;
use idemkv::{messaging::Inbox, Config, Durability, Store};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{floor::FloorLayer, ratio};

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

/// Requests, time and latencies of one row, summed over its slices.
struct Tally {
    requests: u64,
    seconds: f64,
    /// CPU time of the whole process, server and client.
    cpu_seconds: f64,
    latencies: Histogram<u64>,
}

impl Tally {
    fn new() -> Self {
        Tally { requests: 0, seconds: 0.0, cpu_seconds: 0.0, latencies: support::histogram() }
    }

    /// CPU a request, µs, server and client together.
    #[expect(clippy::cast_precision_loss, reason = "a mean")]
    fn cpu_micros(&self) -> f64 {
        self.cpu_seconds * 1e6 / (self.requests.max(1) as f64)
    }

    #[expect(clippy::cast_precision_loss, reason = "a rate")]
    fn rate(&self) -> f64 {
        self.requests as f64 / self.seconds.max(f64::MIN_POSITIVE)
    }
}

/// Drives `url` from `CLIENTS` tasks for `seconds` and adds to `tally`;
/// `replay` sends one key per client over and over, otherwise every key is
/// new (`slice` keeps keys of different slices apart).
async fn drive(client: &reqwest::Client, url: &str, seconds: f64, replay: bool, slice: usize, tally: &mut Tally) {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let (started, cpu_started) = (Instant::now(), support::cpu_seconds());
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|task| {
            let (client, url, stop, count) = (client.clone(), url.to_string(), Arc::clone(&stop), Arc::clone(&count));
            tokio::spawn(async move {
                let mut latencies = support::histogram();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = if replay { format!("replay-{task}") } else { format!("fresh-{slice}-{task}-{n}") };
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
    for task in tasks {
        tally.latencies.add(task.await.expect("client task")).expect("same bounds");
    }
    tally.seconds += started.elapsed().as_secs_f64();
    tally.cpu_seconds += support::cpu_seconds() - cpu_started;
    tally.requests += count.load(Ordering::Relaxed);
}

/// The route behind the layer `layer` makes of a store of `durability`
/// in a directory of its own, returned beside it.
fn app_over(durability: Durability, layer: impl FnOnce(Store) -> Router) -> (Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), Config::new().durability(durability)).expect("open");
    (layer(store), dir)
}

/// The route behind the layer with `config`.
fn layered(config: LayerConfig) -> impl FnOnce(Store) -> Router {
    |store| Router::new().route("/payments", post(handler)).layer(IdempotencyLayer::new(store, config))
}

/// The route behind [`FloorLayer`].
fn floored(store: Store) -> Router {
    Router::new().route("/payments", post(handler)).layer(FloorLayer::new(store))
}

async fn guarded(durability: Durability) -> (String, tempfile::TempDir) {
    let (app, dir) = app_over(durability, layered(LayerConfig::global()));
    (serve(app).await, dir)
}

fn print(name: &str, row: &Tally, bare: &Tally) {
    println!(
        "{name:<28} {:>9.0} req/s  p50 {:>8.1?}  p99 {:>8.1?}  ×bare {:.2}  CPU {:>5.1} µs a request, +{:.1} µs",
        row.rate(),
        Duration::from_nanos(row.latencies.value_at_quantile(0.5)),
        Duration::from_nanos(row.latencies.value_at_quantile(0.99)),
        ratio(row.rate(), bare.rate()),
        row.cpu_micros(),
        row.cpu_micros() - bare.cpu_micros()
    );
}

/// Calls per second and CPU per call (µs, every thread of the process,
/// the calling tasks' own work included) of one in-process row.
#[derive(Clone, Copy)]
struct Row {
    rate: f64,
    cpu_micros: f64,
}

impl Row {
    /// This row beside the bare route's `bare`: its rate, its CPU a call
    /// and what it adds to the bare route's.
    fn beside(&self, bare: Row) -> String {
        format!(
            "{:>9.0} calls/s  ×bare {:.2}  CPU {:>5.2} µs a call, +{:.2} µs",
            self.rate,
            ratio(self.rate, bare.rate),
            self.cpu_micros,
            self.cpu_micros - bare.cpu_micros
        )
    }
}

/// Calls `app` in process, with no network between, `CLIENTS` calls in
/// flight: what the layer itself costs per request.
async fn in_process(app: Router, seconds: f64, replay: bool) -> Row {
    in_process_signed(app, seconds, replay, None).await
}

/// As [`in_process`]; with `signer`, each call is a Standard Webhook
/// signed by it, its id the call's key.
async fn in_process_signed(app: Router, seconds: f64, replay: bool, signer: Option<StandardWebhooks>) -> Row {
    use tower::ServiceExt;
    let count = Arc::new(AtomicU64::new(0));
    let (started, cpu_started) = (Instant::now(), support::cpu_seconds());
    let until = started + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|task| {
            let (app, count, signer) = (app.clone(), Arc::clone(&count), signer.clone());
            tokio::spawn(async move {
                let mut n = 0u64;
                // Each task watches the time itself: a call that is always
                // ready never lets a timer fire.
                while Instant::now() < until {
                    let key = if replay { format!("replay-{task}") } else { format!("fresh-{task}-{n}") };
                    let body = r#"{"amount":10,"currency":"EUR"}"#;
                    let mut request = axum::http::Request::post("/payments")
                        .header("Idempotency-Key", &key)
                        .header("x-resource", format!("payment-{task}"))
                        .body(axum::body::Body::from(body))
                        .expect("request");
                    if let Some(signer) = &signer {
                        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("now");
                        request.headers_mut().extend(signer.headers(&key, now.as_secs(), body.as_bytes()));
                    }
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
    let calls = count.load(Ordering::Relaxed) as f64;
    let cpu = support::cpu_seconds() - cpu_started;
    Row { rate: calls / started.elapsed().as_secs_f64(), cpu_micros: cpu * 1e6 / calls.max(1.0) }
}

fn main() {
    let seconds = support::seconds(5.0);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(async {
        if let Ok(row) = std::env::var("IDEMKV_BENCH_ONE_ROW") {
            one_row(&row, seconds).await;
            return;
        }
        if std::env::var_os("IDEMKV_BENCH_IN_PROCESS_ONLY").is_none() {
            over_loopback(seconds).await;
        }
        println!("in process (no network): calls/s, and CPU a call (every thread) beside the bare route's");
        let bare = in_process(Router::new().route("/payments", post(handler)), seconds, false).await;
        layer_in_process(seconds, bare).await;
        webhooks_in_process(seconds).await;
    });
}

/// The loopback rows: the bare route, the layer's, the floor's.
async fn over_loopback(seconds: f64) {
    let client = reqwest::Client::builder().pool_max_idle_per_host(CLIENTS).build().expect("client");
    let bare_url = serve(Router::new().route("/payments", post(handler))).await;
    let (buffered_url, _buffered) = guarded(Durability::Buffered).await;
    let (sync_url, _sync) = guarded(Durability::Sync).await;
    let (floor_app, _floor_dir) = app_over(Durability::Buffered, floored);
    let floor_url = serve(floor_app).await;
    // The rows take turns in short slices, so that a shared machine's
    // noise falls on all of them alike; the `Sync` row runs after them,
    // since its fsyncs slowed whichever row came next.
    let slices = 10;
    let slice_seconds = seconds / f64::from(slices);
    let mut rows: Vec<Tally> = (0..6).map(|_| Tally::new()).collect();
    for slice in 0..10 {
        drive(&client, &bare_url, slice_seconds, false, slice, &mut rows[0]).await;
        drive(&client, &buffered_url, slice_seconds, false, slice, &mut rows[1]).await;
        drive(&client, &buffered_url, slice_seconds, true, slice, &mut rows[2]).await;
        drive(&client, &floor_url, slice_seconds, false, slice, &mut rows[4]).await;
        drive(&client, &floor_url, slice_seconds, true, slice, &mut rows[5]).await;
    }
    drive(&client, &sync_url, seconds, false, 0, &mut rows[3]).await;
    println!("{CLIENTS} requests in flight, {seconds} s per row, loopback, server and client in one process; every row but Sync's in {slices} interleaved slices");
    let names = [
        "bare route",
        "layer, Buffered, fresh keys",
        "layer, Buffered, replays",
        "layer, Sync, fresh keys",
        "floor layer, fresh keys",
        "floor layer, replays",
    ];
    for (name, row) in names.iter().zip(&rows) {
        print(name, row, &rows[0]);
    }
}

/// The layer's rows in process beside `bare`: new keys, replays, the
/// floor's, and resources held.
async fn layer_in_process(seconds: f64, bare: Row) {
    let (app, _dir) = app_over(Durability::Buffered, layered(LayerConfig::global()));
    let fresh = in_process(app.clone(), seconds, false).await;
    let replays = in_process(app, seconds, true).await;
    let (floor, _floor_dir) = app_over(Durability::Buffered, floored);
    let floor_fresh = in_process(floor.clone(), seconds, false).await;
    let floor_replays = in_process(floor, seconds, true).await;
    let resource = |parts: &axum::http::request::Parts| Some(parts.headers.get("x-resource")?.as_bytes().to_vec());
    let (held_app, _held_dir) = app_over(Durability::Buffered, layered(LayerConfig::global().resource(resource)));
    let held = in_process(held_app, seconds, false).await;
    let versioned_config = LayerConfig::global().versioned_resource(resource, idemkv::http::IfMatch::Optional);
    let (versioned_app, _versioned_dir) = app_over(Durability::Buffered, layered(versioned_config));
    let versioned = in_process(versioned_app, seconds, false).await;
    println!("bare route                   {}", bare.beside(bare));
    println!("layer, Buffered, fresh keys  {}", fresh.beside(bare));
    println!("layer, Buffered, replays     {}", replays.beside(bare));
    let floor =
        |row: Row, layer: Row| format!("{}  layer ÷ floor {:.2}", row.beside(bare), ratio(layer.rate, row.rate));
    println!("floor layer, fresh keys      {}", floor(floor_fresh, fresh));
    println!("floor layer, replays         {}", floor(floor_replays, replays));
    println!("  + resource held            {}  ×layer {:.2}", held.beside(bare), ratio(held.rate, fresh.rate));
    println!(
        "  + held, version stepped    {}  ×layer {:.2}",
        versioned.beside(bare),
        ratio(versioned.rate, fresh.rate)
    );
}

/// Signed webhooks in process: the bare route and `WebhookLayer`.
async fn webhooks_in_process(seconds: f64) {
    let signer = StandardWebhooks::new(["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"]).expect("secret");
    let signed_bare =
        in_process_signed(Router::new().route("/payments", post(handler)), seconds, false, Some(signer.clone())).await;
    let hooks_dir = tempfile::tempdir().expect("tempdir");
    let hooks_store = Store::open(hooks_dir.path(), Config::new().durability(Durability::Buffered)).expect("open");
    let webhooks = WebhookLayer::new(signer.clone(), Inbox::new(hooks_store), "bench").expect("layer");
    let hooks_app = Router::new().route("/payments", post(handler)).layer(webhooks);
    let hooked = in_process_signed(hooks_app, seconds, false, Some(signer)).await;
    println!("signed webhooks, bare route  {}", signed_bare.beside(signed_bare));
    println!("signed webhooks, WebhookLayer {}", hooked.beside(signed_bare));
}

/// One loopback row alone, for `seconds` after a warm-up of 0.2 s: its
/// requests, rate and CPU a request.
async fn one_row(row: &str, seconds: f64) {
    let client = reqwest::Client::builder().pool_max_idle_per_host(CLIENTS).build().expect("client");
    let (app, _dir) = match row {
        "bare" => (Router::new().route("/payments", post(handler)), None),
        "layer-fresh" | "layer-replay" => {
            let (app, dir) = app_over(Durability::Buffered, layered(LayerConfig::global()));
            (app, Some(dir))
        }
        "floor-fresh" | "floor-replay" => {
            let (app, dir) = app_over(Durability::Buffered, floored);
            (app, Some(dir))
        }
        _ => panic!("IDEMKV_BENCH_ONE_ROW: bare, layer-fresh, layer-replay, floor-fresh or floor-replay, not {row}"),
    };
    let url = serve(app).await;
    let replay = row.ends_with("replay");
    drive(&client, &url, 0.2, replay, 99, &mut Tally::new()).await;
    let mut tally = Tally::new();
    drive(&client, &url, seconds, replay, 0, &mut tally).await;
    println!(
        "{row}: {} requests in {seconds} s, {:.0} req/s, CPU {:.2} µs a request (server and client)",
        tally.requests,
        tally.rate(),
        tally.cpu_micros()
    );
}
