//! A payments service whose `POST /payments` is made retry-safe by the
//! idempotency layer, over a real store directory or, for a fleet, a Redis
//! server or Cluster. A payment is two steps with an outside effect each:
//! a charge at a payment provider (a ledger file, with its own idempotency
//! key derived from ours, so double charges are visible) and an order
//! written to `orders.txt`. A checkpoint after the charge lets a run
//! that takes over from one that crashed between the steps write the order
//! without calling the provider again.
//!
//! ```text
//! cargo run --example payments --features tower -- /tmp/payments 127.0.0.1:3000
//! curl -si -X POST localhost:3000/payments -H 'X-Account: acct-1' -H 'Idempotency-Key: order-1' -d '{"amount":10}'
//! curl -si -X POST localhost:3000/payments -H 'X-Account: acct-1' -H 'Idempotency-Key: order-1' -d '{"amount":10}'  # replayed
//! cat /tmp/payments/ledger.txt                                                            # one line
//! curl -s localhost:3000/metrics | grep idempo_                                           # counters
//! ```
//!
//! A payment may run as a long operation: `Prefer: respond-async` is
//! answered `202 Accepted` with `Location: /operations/<id>`, where its
//! answer is told once it is done — or `operation-abandoned` if the server
//! died while it ran, until the payment is sent again with its key.
//!
//! Two instances behind a load balancer share one store on Redis (feature
//! `redis`; `--redis-cluster URL,URL,...` for a Cluster). Given the same
//! directory they also share the ledger, so a retry that reached the other
//! instance and charged again would show as a second line:
//!
//! ```text
//! cargo build --example payments --features tower,redis
//! target/debug/examples/payments /tmp/payments 127.0.0.1:3001 --redis redis://127.0.0.1:6379 &
//! target/debug/examples/payments /tmp/payments 127.0.0.1:3002 --redis redis://127.0.0.1:6379 &
//! curl -si -X POST localhost:3001/payments -H 'X-Account: acct-1' -H 'Idempotency-Key: order-1' -d '{"amount":10}'
//! curl -si -X POST localhost:3002/payments -H 'X-Account: acct-1' -H 'Idempotency-Key: order-1' -d '{"amount":10}'  # replayed
//! cat /tmp/payments/ledger.txt                                                            # one line
//! ```
//!
//! On PostgreSQL (feature `postgres`, `--postgres URL`) the charge is a row
//! of `payments_charges` and the key's completion commits in the same
//! transaction (see `postgres.rs`):
//!
//! ```text
//! cargo run --example payments --features tower,postgres -- /tmp/payments 127.0.0.1:3000 --postgres postgres://localhost/shop
//! ```
//!
//! Usage: `payments [DIR] [ADDR] [--redis URL | --redis-cluster URL,URL,... | --postgres URL]`
//! (DIR defaults to `payments-data`, ADDR to `127.0.0.1:3000`). An address
//! with port 0 picks a free port; the line printed at start names it.

use axum::routing::{get, post};
use axum::{body::Bytes, extract::State, http::StatusCode, Extension, Router};
use idemkv::http::{Attempt, Checkpoints, IdempotencyLayer, LayerConfig, NotSpent};
use idemkv::{backend::AnyBackend, Config, Store};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "postgres")]
mod postgres;

const USAGE: &str = "usage: payments [DIR] [ADDR] [--redis URL | --redis-cluster URL,URL,... | --postgres URL]";

/// Where the idempotency records live.
#[cfg_attr(
    not(all(feature = "redis", feature = "postgres")),
    allow(dead_code, reason = "refused without the redis or postgres feature")
)]
enum Records {
    /// A store in `DIR/idempotency`.
    Directory,
    /// A Redis server.
    Redis(String),
    /// A Redis Cluster, through these nodes.
    Cluster(Vec<String>),
    /// A PostgreSQL database.
    Postgres(String),
}

/// The command line: the directory (ledger, and store if there is one),
/// the address to listen on, and where the records live.
struct Arguments {
    dir: PathBuf,
    address: String,
    records: Records,
}

/// Reads the command line; a mistake is one line of error.
fn arguments(mut args: impl Iterator<Item = OsString>) -> Result<Arguments, String> {
    let mut positional: Vec<OsString> = Vec::new();
    let mut records = Records::Directory;
    while let Some(arg) = args.next() {
        let Some(text) = arg.to_str().filter(|text| text.starts_with("--")) else {
            positional.push(arg);
            continue;
        };
        let (option, inline) = match text.split_once('=') {
            Some((option, value)) => (option.to_string(), Some(OsString::from(value))),
            None => (text.to_string(), None),
        };
        if option != "--redis" && option != "--redis-cluster" && option != "--postgres" {
            return Err(format!("unknown option {option} ({USAGE})"));
        }
        let value = inline.or_else(|| args.next()).ok_or_else(|| format!("{option} needs a value ({USAGE})"))?;
        let value = value.into_string().map_err(|_| format!("{option}: the URL is not UTF-8"))?;
        if !matches!(records, Records::Directory) {
            return Err(format!("give one of --redis, --redis-cluster, --postgres, once ({USAGE})"));
        }
        records = match option.as_str() {
            "--redis" => Records::Redis(value),
            "--postgres" => Records::Postgres(value),
            _ => Records::Cluster(value.split(',').map(str::to_string).collect()),
        };
    }
    let mut positional = positional.into_iter();
    let dir = PathBuf::from(positional.next().unwrap_or_else(|| "payments-data".into()));
    let address = match positional.next() {
        Some(address) => address.into_string().map_err(|_| "the address is not UTF-8".to_string())?,
        None => "127.0.0.1:3000".into(),
    };
    if positional.next().is_some() {
        return Err(format!("too many arguments ({USAGE})"));
    }
    Ok(Arguments { dir, address, records })
}

/// The service's files: the payment provider's ledger (one line per
/// charge, deduplicated by the provider's own idempotency key), every call
/// made to the provider, and the orders written.
struct Files {
    ledger: PathBuf,
    provider_calls: PathBuf,
    orders: PathBuf,
    /// `PAYMENTS_CRASH_AFTER=charged`: the process aborts between the two
    /// steps, as a crash or a kill would stop it (for the tests).
    crash_after: Option<String>,
    /// `PAYMENTS_HOLD_MS`: how long a payment waits between its two steps
    /// (for the tests: a run to kill while it runs).
    hold: Option<Duration>,
}

type Answer = (StatusCode, [(&'static str, &'static str); 1], String);

fn json(status: StatusCode, body: String) -> Answer {
    (status, [("content-type", "application/json")], body)
}

/// Appends one line in one write: appends of two instances sharing the
/// files do not interleave.
fn append(path: &Path, line: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    file.write_all(format!("{line}\n").as_bytes())
}

/// The payment provider: charges once per provider key, whatever the
/// number of calls, and answers the charge's number (its ledger line).
fn provider_charge(files: &Files, provider_key: &str, line: &str) -> std::io::Result<usize> {
    append(&files.provider_calls, provider_key)?;
    let ledger = std::fs::read_to_string(&files.ledger).unwrap_or_default();
    if let Some(found) = ledger.lines().position(|charge| charge.split(' ').next() == Some(provider_key)) {
        return Ok(found + 1);
    }
    append(&files.ledger, &format!("{provider_key} {line}"))?;
    Ok(ledger.lines().count() + 1)
}

/// `POST /payments` in two steps with an outside effect each: charge at the
/// provider, then write the order. A checkpoint after the charge lets
/// a run that takes over from a crashed one skip straight to the order.
async fn pay(
    State(files): State<Arc<Files>>,
    Extension(attempt): Extension<Attempt>,
    Extension(points): Extension<Checkpoints>,
    body: Bytes,
) -> Answer {
    let line = String::from_utf8_lossy(&body).replace('\n', " ");
    let resumed = points.last().filter(|point| point.step == "charged");
    let charge = if let Some(point) = &resumed {
        String::from_utf8_lossy(&point.payload).parse::<usize>().unwrap_or(0)
    } else {
        // The provider's own idempotency key, derived from ours: even
        // a repeated call could not charge twice there.
        let provider_key =
            format!("pay:{}:{}", String::from_utf8_lossy(&attempt.scope), String::from_utf8_lossy(&attempt.key));
        let charge = match provider_charge(&files, &provider_key, &line) {
            Ok(charge) => charge,
            Err(error) => {
                // Nothing was charged: say so, and the key is kept as
                // this 500 (or freed, under another failure policy).
                return json(StatusCode::INTERNAL_SERVER_ERROR, format!("{{\"error\":\"ledger: {error}\"}}"));
            }
        };
        if let Err(error) = points.checkpoint("charged", charge.to_string().as_bytes()).await {
            // Not fatal: the provider's key still stops a second charge.
            eprintln!("payments: checkpoint not stored: {error}");
        }
        charge
    };
    if let Some(hold) = files.hold {
        tokio::time::sleep(hold).await;
    }
    if files.crash_after.as_deref() == Some("charged") {
        std::process::abort();
    }
    if let Err(error) = append(&files.orders, &format!("charge {charge} {line}")) {
        return json(StatusCode::INTERNAL_SERVER_ERROR, format!("{{\"error\":\"orders: {error}\"}}"));
    }
    let (resumed, attempt) = (resumed.is_some(), points.attempt());
    json(
        StatusCode::CREATED,
        format!("{{\"payment\":{charge},\"attempt\":{attempt},\"resumed\":{resumed},\"charged\":{line}}}"),
    )
}

/// Keys are kept per account (the `X-Account` header stands in for what an
/// authentication middleware would establish); a request without one is
/// refused with 400.
fn account(request: &axum::http::request::Parts) -> Option<Vec<u8>> {
    request.headers.get("x-account").map(|account| account.as_bytes().to_vec())
}

/// The service on the backend chosen at start (one type for any: the
/// layer is built once): `/payments` behind the layer, `/metrics` beside
/// it.
fn app(backend: AnyBackend, dir: &Path, metrics: PrometheusHandle) -> Router {
    let files = Files {
        ledger: dir.join("ledger.txt"),
        provider_calls: dir.join("provider_calls.txt"),
        orders: dir.join("orders.txt"),
        crash_after: std::env::var("PAYMENTS_CRASH_AFTER").ok(),
        hold: milliseconds("PAYMENTS_HOLD_MS"),
    };
    // `PAYMENTS_LEASE_MS`: a shorter lease, so that a run that crashed is
    // taken over sooner (for the tests).
    let config = LayerConfig::scoped(account).operations("/operations");
    let config = match milliseconds("PAYMENTS_LEASE_MS") {
        Some(lease) => config.lease(lease),
        None => config,
    };
    let guarded = Router::new()
        .route("/payments", post(pay))
        // The router's own 404 and 405: no handler ran, the key stays free.
        .fallback(|| async { (StatusCode::NOT_FOUND, Extension(NotSpent)) })
        .method_not_allowed_fallback(|| async { (StatusCode::METHOD_NOT_ALLOWED, Extension(NotSpent)) })
        .with_state(Arc::new(files))
        .layer(IdempotencyLayer::new(backend, config));
    // Added after the layer, so not guarded (a GET is not anyway).
    with_metrics(guarded, metrics)
}

/// The duration in ms the environment variable `name` gives, if any.
fn milliseconds(name: &str) -> Option<Duration> {
    std::env::var(name).ok().and_then(|ms| ms.parse().ok()).map(Duration::from_millis)
}

/// `GET /metrics`: the Prometheus scrape.
fn with_metrics(router: Router, metrics: PrometheusHandle) -> Router {
    router.route(
        "/metrics",
        get(move || {
            metrics.run_upkeep();
            std::future::ready(metrics.render())
        }),
    )
}

#[cfg(feature = "redis")]
async fn redis(records: &Records) -> Result<idemkv::backend::redis::RedisBackend, String> {
    use idemkv::backend::redis::RedisBackend;
    let connected = match records {
        Records::Cluster(nodes) => {
            let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
            RedisBackend::connect_cluster(&nodes, Config::new()).await
        }
        Records::Redis(url) => RedisBackend::connect(url, Config::new()).await,
        Records::Directory | Records::Postgres(_) => return Err("no Redis given".into()),
    };
    // The client's messages may span lines; ours is one.
    let one_line = |text: String| text.split_whitespace().collect::<Vec<_>>().join(" ");
    connected.map_err(|error| match error {
        idemkv::Error::InvalidConfig(message) => one_line(format!("bad Redis URL: {message}")),
        error => one_line(format!("cannot connect to Redis: {error}")),
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    match serve().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("payments: {message}");
            ExitCode::from(2)
        }
    }
}

async fn serve() -> Result<(), String> {
    let Arguments { dir, address, records } = arguments(std::env::args_os().skip(1))?;
    if !cfg!(feature = "redis") && matches!(records, Records::Redis(_) | Records::Cluster(_)) {
        return Err("--redis needs the example built with the `redis` feature".into());
    }
    if !cfg!(feature = "postgres") && matches!(records, Records::Postgres(_)) {
        return Err("--postgres needs the example built with the `postgres` feature".into());
    }
    // The port first: a busy one must not leave a store directory behind.
    let listener = tokio::net::TcpListener::bind(&address)
        .await
        .map_err(|error| format!("cannot listen on {address}: {error}"))?;
    let address = listener.local_addr().map_err(|error| format!("cannot listen on {address}: {error}"))?;
    // The recorder before the store: the store registers its metrics when
    // it opens.
    let metrics = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|error| format!("cannot install the metrics recorder: {error}"))?;
    #[cfg(feature = "postgres")]
    if let Records::Postgres(url) = &records {
        let backend = postgres::connect(url).await?;
        println!("payments on http://{address}, charges and keys in PostgreSQL");
        let app = with_metrics(Router::new().route("/payments", post(postgres::pay)).with_state(backend), metrics);
        return axum::serve(listener, app).await.map_err(|error| format!("serving on {address}: {error}"));
    }
    #[cfg(feature = "redis")]
    let backend = match records {
        Records::Directory | Records::Postgres(_) => None,
        _ => Some(redis(&records).await?),
    };
    std::fs::create_dir_all(&dir).map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
    #[cfg(feature = "redis")]
    if let Some(backend) = backend {
        println!("payments on http://{address}, store on Redis, ledger in {}", dir.display());
        let app = app(AnyBackend::new(backend), &dir, metrics);
        return axum::serve(listener, app).await.map_err(|error| format!("serving on {address}: {error}"));
    }
    let store = Store::open(dir.join("idempotency"), Config::new()).map_err(|error| error.to_string())?;
    println!("payments on http://{address}, store and ledger in {}", dir.display());
    let app = app(AnyBackend::new(store), &dir, metrics);
    axum::serve(listener, app).await.map_err(|error| format!("serving on {address}: {error}"))
}
