//! What each HTTP face of the contract costs beside the same route
//! without it, in one run, every row taking turns in short slices (each
//! slice starting at another row) so that a shared machine's noise falls
//! on all of them alike.
//!
//! In process (no network; the tower layer alone, `CLIENTS` calls in
//! flight on a two-thread runtime, every call a POST of a ~300-byte JSON
//! payment with a new key, answered `201` with a short JSON body):
//!
//! - the bare axum route;
//! - the layer with its default settings (`LayerConfig::global()`: the
//!   key from `Idempotency-Key`, the fingerprint of the bytes as sent);
//! - the same with a subscriber that records the layer's
//!   `idempotent_request` span (a `tracing_subscriber` registry with the
//!   `fmt` layer writing to `io::sink`: each span's fields are formatted
//!   as a service's log would, then dropped), and the bare route under
//!   that subscriber, so that what the subscriber costs every poll is
//!   told apart from what the span costs;
//! - the layer with the canonical JSON fingerprint
//!   (`RequestFingerprint::json()`);
//! - the layer with a natural key, the body's `/external_payment_id`
//!   (`NaturalKey::json`), alone and with the JSON fingerprint.
//!
//! Over loopback (an HTTP client and the servers in one process): the
//! bare axum route and the tower layer in front of it, and the bare
//! actix-web route and the `idemkv-actix` middleware in front of it (its
//! server on actix's own two workers), each with new keys and with
//! replays (one key per client, sent again and again).
//!
//! Beside each rate, the CPU time the whole process spent per request
//! (all its threads, from `/proc/self/task/*/schedstat`: server, layer
//! and client), its ratio to the bare route's and what it adds to it.
//! The bench prints how many request spans the subscriber saw, one a
//! request of its row (and one before the rows). On a shared
//! machine the rates move with other work; the CPU a request moves much
//! less, and is the figure to read.
//!
//! ```text
//! cargo bench -p idemkv-bench --bench faces            # 5 s per row
//! IDEMKV_BENCH_SECONDS=0.2 cargo bench -p idemkv-bench --bench faces
//! ```

mod support;

use actix_web::{web, App, HttpResponse, HttpServer};
use axum::{body::Bytes, routing::post, Router};
use idemkv::fingerprint::{NaturalKey, RequestFingerprint};
use idemkv::http::{IdempotencyLayer, LayerConfig};
use idemkv::{Config, Durability, Store};
use idemkv_actix::Idempotency;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::ratio;
use tracing::instrument::WithSubscriber;
use tracing_subscriber::layer::SubscriberExt;

/// Requests in flight.
const CLIENTS: usize = 32;
/// The slices each row's time is cut into.
const SLICES: u32 = 10;
/// What the route answers: a payment's id and status.
const ANSWER: &str = r#"{"id":"pay_3MtwBwLkdIwHu7ix","object":"payment","status":"succeeded"}"#;
/// The name of the layer's request span.
const SPAN: &str = "idempotent_request";

/// A payment request of ~300 bytes whose `external_payment_id` is `id`.
fn payment(id: &str) -> String {
    const REST: &str = concat!(
        r#"","amount":{"value":"1999.00","currency":"EUR"},"#,
        r#""customer":{"id":"cus_8e03978e40d5","email":"ana.silva@example.com"},"#,
        r#""description":"Order 81723: 3 items","#,
        r#""metadata":{"channel":"web","campaign":"winter-2026","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"},"#,
        r#""capture":true}"#
    );
    format!(r#"{{"external_payment_id":"{id}{REST}"#)
}

/// The key of request `n` of client `task` in `slice`: new each time, or
/// the client's one key when it replays.
fn key(replay: bool, slice: u32, task: usize, n: u64) -> String {
    if replay {
        format!("replay-{task}")
    } else {
        format!("pay-{slice}-{task}-{n}")
    }
}

async fn handler(_body: Bytes) -> (axum::http::StatusCode, [(&'static str, &'static str); 1], &'static str) {
    (axum::http::StatusCode::CREATED, [("content-type", "application/json")], ANSWER)
}

async fn actix_handler(_body: web::Bytes) -> HttpResponse {
    HttpResponse::Created().content_type("application/json").body(ANSWER)
}

fn bare() -> Router {
    Router::new().route("/payments", post(handler))
}

/// The route behind a layer of `config` over a new Buffered store.
fn layered(config: LayerConfig) -> (Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), Config::new().durability(Durability::Buffered)).expect("open");
    (bare().layer(IdempotencyLayer::new(store, config)), dir)
}

/// The CPU time this process's threads have spent so far, in seconds, to
/// the nanosecond: the sum of each thread's time on a CPU
/// (`/proc/self/task/*/schedstat`), where `/proc/self/stat` counts in
/// ticks of 10 ms, too coarse for a slice. A thread that ended is no
/// longer counted: the threads here (the runtimes' workers, the stores',
/// the layers' keepers) live as long as the bench.
fn cpu_seconds() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return support::cpu_seconds() };
    let nanos: u64 = tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    support::as_f64(nanos) / 1e9
}

/// The order of `rows` rows in `slice`: all of them, from row `slice`
/// on, round.
fn turns(slice: u32, rows: usize) -> impl Iterator<Item = usize> {
    let first = usize::try_from(slice).unwrap_or(0);
    (0..rows).map(move |offset| (first + offset) % rows)
}

/// Requests, wall time and the process's CPU time of one row, summed
/// over its slices.
#[derive(Default, Clone, Copy)]
struct Tally {
    requests: u64,
    seconds: f64,
    cpu_seconds: f64,
}

impl Tally {
    fn add(&mut self, requests: u64, started: Instant, cpu_started: f64) {
        self.requests += requests;
        self.seconds += started.elapsed().as_secs_f64();
        self.cpu_seconds += cpu_seconds() - cpu_started;
    }

    fn rate(&self) -> f64 {
        support::as_f64(self.requests) / self.seconds.max(f64::MIN_POSITIVE)
    }

    /// CPU a request, µs, every thread of the process.
    fn cpu_micros(&self) -> f64 {
        self.cpu_seconds * 1e6 / support::as_f64(self.requests.max(1))
    }

    /// This row beside `bare`'s: its rate and its ratio, its CPU a
    /// request, the ratio and what it adds.
    fn beside(&self, bare: &Tally) -> String {
        format!(
            "{:>8.0} req/s  ×bare {:.2}  CPU {:>6.2} µs/req  ×bare {:.2}  {:>+7.2} µs",
            self.rate(),
            ratio(self.rate(), bare.rate()),
            self.cpu_micros(),
            ratio(self.cpu_micros(), bare.cpu_micros()),
            self.cpu_micros() - bare.cpu_micros()
        )
    }
}

/// One in-process row: its name, its app, and the subscriber its calls
/// run under (none: no subscriber at all).
struct Face {
    name: &'static str,
    app: Router,
    dispatch: Option<tracing::Dispatch>,
}

/// Calls `face` in process for `seconds`, `CLIENTS` calls in flight, each
/// a new key; adds to `tally`.
async fn in_process(face: &Face, seconds: f64, slice: u32, tally: &mut Tally) {
    use tower::ServiceExt;
    let count = Arc::new(AtomicU64::new(0));
    let (started, cpu_started) = (Instant::now(), cpu_seconds());
    let until = started + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|task| {
            let (app, count) = (face.app.clone(), Arc::clone(&count));
            let calls = async move {
                let mut n = 0u64;
                // Each task watches the time itself: a call that is always
                // ready never lets a timer fire.
                while Instant::now() < until {
                    let key = key(false, slice, task, n);
                    let request = axum::http::Request::post("/payments")
                        .header("idempotency-key", &key)
                        .header("content-type", "application/json")
                        .body(axum::body::Body::from(payment(&key)))
                        .expect("request");
                    let response = app.clone().oneshot(request).await.expect("infallible");
                    assert_eq!(response.status(), axum::http::StatusCode::CREATED);
                    axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("body");
                    count.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            };
            match face.dispatch.clone() {
                Some(dispatch) => tokio::spawn(calls.with_subscriber(dispatch)),
                None => tokio::spawn(calls),
            }
        })
        .collect();
    for task in tasks {
        task.await.expect("client task");
    }
    tally.add(count.load(Ordering::Relaxed), started, cpu_started);
}

/// One call of `app`, before the rows.
async fn warm_up(app: &Router) {
    use tower::ServiceExt;
    let request = axum::http::Request::post("/payments")
        .header("idempotency-key", "warm-up")
        .body(axum::body::Body::from(payment("warm-up")))
        .expect("request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    assert_eq!(response.status(), axum::http::StatusCode::CREATED);
}

/// Counts the layer's request spans the subscriber sees: proof that the
/// span is recorded, not skipped. Its interest in every callsite is
/// `sometimes`, as a filtering subscriber's is: each span then asks the
/// subscriber of its own thread whether it is wanted, so that the calls
/// run without a subscriber skip the span at once, while those under
/// this one record it.
#[derive(Clone, Default)]
struct SpansSeen(Arc<AtomicU64>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for SpansSeen {
    fn register_callsite(&self, _metadata: &'static tracing::Metadata<'static>) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }

    fn on_new_span(
        &self,
        attributes: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _context: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if attributes.metadata().name() == SPAN {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A subscriber that records spans as a service's log does (the `fmt`
/// layer formats each span's fields), writing nowhere; and its count of
/// request spans.
fn recording() -> (tracing::Dispatch, SpansSeen) {
    let seen = SpansSeen::default();
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::sink);
    let subscriber = tracing_subscriber::registry().with(fmt).with(seen.clone());
    (tracing::Dispatch::new(subscriber), seen)
}

/// The in-process rows, measured in turns, then printed.
async fn in_process_rows(seconds: f64) {
    let (dispatch, seen) = recording();
    let json = || RequestFingerprint::json().build().expect("JSON fingerprint");
    let natural = || NaturalKey::json("/external_payment_id").expect("pointer");
    let (default_app, _default) = layered(LayerConfig::global());
    let (json_app, _json) = layered(LayerConfig::global().fingerprint(json()));
    let (natural_app, _natural) = layered(LayerConfig::global().natural_key(natural()));
    let (both_app, _both) = layered(LayerConfig::global().natural_key(natural()).fingerprint(json()));
    let faces = [
        Face { name: "bare route", app: bare(), dispatch: None },
        Face { name: "layer, default settings", app: default_app.clone(), dispatch: None },
        Face { name: "bare route, span subscriber", app: bare(), dispatch: Some(dispatch.clone()) },
        Face { name: "layer, span recorded", app: default_app, dispatch: Some(dispatch) },
        Face { name: "layer, JSON fingerprint", app: json_app, dispatch: None },
        Face { name: "layer, natural key (JSON field)", app: natural_app, dispatch: None },
        Face { name: "layer, natural key + JSON fp", app: both_app, dispatch: None },
    ];
    // A callsite asks for its interest once, of the subscriber of the
    // thread that reaches it first (while one subscriber exists), and
    // keeps the answer: the span's is asked here, under the subscriber.
    warm_up(&faces[1].app).with_subscriber(faces[3].dispatch.clone().expect("a subscriber")).await;
    let mut tallies = [Tally::default(); 7];
    let slice_seconds = seconds / f64::from(SLICES);
    for slice in 0..SLICES {
        // Each slice starts at another row, so that no row always follows
        // the same one.
        for index in turns(slice, faces.len()) {
            in_process(&faces[index], slice_seconds, slice, &mut tallies[index]).await;
        }
    }
    println!(
        "in process (no network), {CLIENTS} calls in flight, new keys, a {}-byte JSON body; \
         {seconds} s a row in {SLICES} interleaved slices",
        payment(&key(false, 0, 0, 0)).len()
    );
    for (face, tally) in faces.iter().zip(&tallies) {
        println!("{:<36} {}", face.name, tally.beside(&tallies[0]));
    }
    let [route, layer, route_traced, layer_traced, ..] = tallies;
    let span = (layer_traced.cpu_micros() - layer.cpu_micros()) - (route_traced.cpu_micros() - route.cpu_micros());
    println!(
        "  the span's own cost, recorded: {span:+.2} µs a request (the subscriber's cost on the bare route taken \
         off); {} spans recorded, for {} requests (and one before the rows)",
        seen.0.load(Ordering::Relaxed),
        layer_traced.requests
    );
}

/// Drives `url` from `CLIENTS` tasks for `seconds`; adds to `tally`.
async fn over_loopback(client: &reqwest::Client, url: &str, seconds: f64, slice: u32, replay: bool, tally: &mut Tally) {
    let count = Arc::new(AtomicU64::new(0));
    let (started, cpu_started) = (Instant::now(), cpu_seconds());
    let until = started + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|task| {
            let (client, url, count) = (client.clone(), url.to_string(), Arc::clone(&count));
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < until {
                    let key = key(replay, slice, task, n);
                    let response = client
                        .post(&url)
                        .header("idempotency-key", &key)
                        .header("content-type", "application/json")
                        .body(payment(&key))
                        .send()
                        .await
                        .expect("send");
                    assert_eq!(response.status().as_u16(), 201);
                    response.bytes().await.expect("body");
                    count.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("client task");
    }
    tally.add(count.load(Ordering::Relaxed), started, cpu_started);
}

/// Serves `app` on a loopback port of this runtime; its URL.
async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/payments", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    url
}

/// Serves the actix-web route — bare, or behind the middleware over
/// `layer` — on a loopback port, on actix's runtime in a thread of its
/// own (two workers); its URL and handle.
fn actix(layer: Option<IdempotencyLayer<Store>>) -> (String, actix_web::dev::ServerHandle) {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let route = || web::post().to(actix_handler);
            let (address, server) = match layer {
                None => {
                    let server = HttpServer::new(move || App::new().route("/payments", route()));
                    let server = server.workers(2).disable_signals().bind(("127.0.0.1", 0)).expect("bind");
                    (server.addrs()[0], server.run())
                }
                Some(layer) => {
                    let app =
                        move || App::new().wrap(Idempotency::from_layer(layer.clone())).route("/payments", route());
                    let server =
                        HttpServer::new(app).workers(2).disable_signals().bind(("127.0.0.1", 0)).expect("bind");
                    (server.addrs()[0], server.run())
                }
            };
            sender.send((format!("http://{address}/payments"), server.handle())).expect("the bench waits");
            server.await.expect("actix server");
        });
    });
    receiver.recv().expect("actix server started")
}

/// The loopback rows, measured in turns, then printed.
async fn loopback_rows(seconds: f64) {
    let client = reqwest::Client::builder().pool_max_idle_per_host(CLIENTS).build().expect("client");
    let (tower_app, _tower_dir) = layered(LayerConfig::global());
    let (axum_bare, axum_layered) = (serve(bare()).await, serve(tower_app).await);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), Config::new().durability(Durability::Buffered)).expect("open");
    let (actix_bare, bare_handle) = actix(None);
    let (actix_guarded, guarded_handle) = actix(Some(IdempotencyLayer::new(store, LayerConfig::global())));
    // Bare routes have no replays: both of their rows' keys are new.
    let rows = [
        ("axum, bare route", &axum_bare, false),
        ("axum + tower layer, new keys", &axum_layered, false),
        ("axum + tower layer, replays", &axum_layered, true),
        ("actix-web, bare route", &actix_bare, false),
        ("actix-web + middleware, new keys", &actix_guarded, false),
        ("actix-web + middleware, replays", &actix_guarded, true),
    ];
    let mut tallies = [Tally::default(); 6];
    let slice_seconds = seconds / f64::from(SLICES);
    for slice in 0..SLICES {
        for index in turns(slice, rows.len()) {
            let (_, url, replay) = rows[index];
            over_loopback(&client, url, slice_seconds, slice, replay, &mut tallies[index]).await;
        }
    }
    println!(
        "over loopback, {CLIENTS} requests in flight, client and servers in one process (axum on the client's \
         two-thread runtime, actix-web on two workers of its own); {seconds} s a row in {SLICES} interleaved slices"
    );
    for (index, ((name, _, _), tally)) in rows.iter().zip(&tallies).enumerate() {
        let bare = if index < 3 { &tallies[0] } else { &tallies[3] };
        println!("{name:<36} {}", tally.beside(bare));
    }
    bare_handle.stop(false).await;
    guarded_handle.stop(false).await;
}

fn main() {
    let seconds = support::seconds(5.0);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(async {
        in_process_rows(seconds).await;
        loopback_rows(seconds).await;
    });
}
