//! A payments service whose `POST /payments` is made retry-safe by the
//! idempotency layer, over a real store directory or, for a fleet, a Redis
//! server or Cluster. "Charging" appends a line to a ledger file, so
//! double charges are visible.
//!
//! ```text
//! cargo run --example payments --features tower -- /tmp/payments 127.0.0.1:3000
//! curl -si -X POST localhost:3000/payments -H 'X-Account: acct-1' -H 'Idempotency-Key: order-1' -d '{"amount":10}'
//! curl -si -X POST localhost:3000/payments -H 'X-Account: acct-1' -H 'Idempotency-Key: order-1' -d '{"amount":10}'  # replayed
//! cat /tmp/payments/ledger.txt                                                            # one line
//! curl -s localhost:3000/metrics | grep idempo_                                           # counters
//! ```
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
use axum::{body::Bytes, extract::State, http::StatusCode, Router};
use idemkv::http::{IdempotencyLayer, LayerConfig};
use idemkv::{Config, IdempotencyBackend, Store};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

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

/// Appends the charge to the ledger and answers 201 with its number (500
/// if the ledger cannot be written: nothing was charged).
async fn charge(
    State(ledger): State<Arc<PathBuf>>,
    body: Bytes,
) -> (StatusCode, [(&'static str, &'static str); 1], String) {
    let line = String::from_utf8_lossy(&body).replace('\n', " ");
    // One write of the whole line: appends of two instances sharing the
    // ledger do not interleave.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&*ledger)
        .and_then(|mut file| file.write_all(format!("{line}\n").as_bytes()));
    if let Err(error) = written {
        let problem = format!("{{\"error\":\"ledger: {error}\"}}");
        return (StatusCode::INTERNAL_SERVER_ERROR, [("content-type", "application/json")], problem);
    }
    let charges = std::fs::read_to_string(&*ledger).map_or(0, |text| text.lines().count());
    (
        StatusCode::CREATED,
        [("content-type", "application/json")],
        format!("{{\"payment\":{charges},\"charged\":{line}}}"),
    )
}

/// Keys are kept per account (the `X-Account` header stands in for what an
/// authentication middleware would establish); a request without one is
/// refused with 400.
fn account(request: &axum::http::request::Parts) -> Option<Vec<u8>> {
    request.headers.get("x-account").map(|account| account.as_bytes().to_vec())
}

/// The service on any backend: `/payments` behind the layer, `/metrics`
/// beside it.
fn app<B: IdempotencyBackend>(backend: B, ledger: PathBuf, metrics: PrometheusHandle) -> Router {
    let guarded = Router::new()
        .route("/payments", post(charge))
        .with_state(Arc::new(ledger))
        .layer(IdempotencyLayer::new(backend, LayerConfig::scoped(account)));
    // Added after the layer, so not guarded (a GET is not anyway).
    with_metrics(guarded, metrics)
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
async fn redis(records: &Records) -> Result<idemkv::redis::RedisBackend, String> {
    use idemkv::redis::RedisBackend;
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
    let ledger = dir.join("ledger.txt");
    #[cfg(feature = "redis")]
    if let Some(backend) = backend {
        println!("payments on http://{address}, store on Redis, ledger in {}", dir.display());
        let app = app(backend, ledger, metrics);
        return axum::serve(listener, app).await.map_err(|error| format!("serving on {address}: {error}"));
    }
    let store = Store::open(dir.join("idempotency"), Config::new()).map_err(|error| error.to_string())?;
    println!("payments on http://{address}, store and ledger in {}", dir.display());
    let app = app(store, ledger, metrics);
    axum::serve(listener, app).await.map_err(|error| format!("serving on {address}: {error}"))
}
