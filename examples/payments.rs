//! A payments service whose `POST /payments` is made retry-safe by the
//! idempotency layer over a real store directory. "Charging" appends a line
//! to a ledger file, so double charges are visible.
//!
//! ```text
//! cargo run --example payments --features tower -- /tmp/payments 127.0.0.1:3000
//! curl -si -X POST localhost:3000/payments -H 'X-Account: acct-1' -H 'Idempotency-Key: order-1' -d '{"amount":10}'
//! curl -si -X POST localhost:3000/payments -H 'X-Account: acct-1' -H 'Idempotency-Key: order-1' -d '{"amount":10}'  # replayed
//! cat /tmp/payments/ledger.txt                                                            # one line
//! curl -s localhost:3000/metrics | grep idempo_                                           # counters
//! ```
//!
//! An address with port 0 picks a free port; the line printed at start
//! names it.

use axum::routing::{get, post};
use axum::{body::Bytes, extract::State, http::StatusCode, Router};
use idemkv::http::{IdempotencyLayer, LayerConfig};
use idemkv::{Config, Store};
use metrics_exporter_prometheus::PrometheusBuilder;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Appends the charge to the ledger and answers 201 with its number.
async fn charge(
    State(ledger): State<Arc<PathBuf>>,
    body: Bytes,
) -> (StatusCode, [(&'static str, &'static str); 1], String) {
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&*ledger).expect("ledger");
    let line = String::from_utf8_lossy(&body).replace('\n', " ");
    writeln!(file, "{line}").expect("ledger write");
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
    let dir = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "payments-data".into()));
    let address = std::env::args().nth(2).unwrap_or_else(|| "127.0.0.1:3000".into());
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
    std::fs::create_dir_all(&dir).map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
    let store = Store::open(dir.join("idempotency"), Config::new()).map_err(|error| error.to_string())?;
    let app = Router::new()
        .route("/payments", post(charge))
        .with_state(Arc::new(dir.join("ledger.txt")))
        .layer(IdempotencyLayer::new(store, LayerConfig::scoped(account)))
        // Added after the layer, so not guarded (a GET is not anyway).
        .route(
            "/metrics",
            get(move || {
                metrics.run_upkeep();
                std::future::ready(metrics.render())
            }),
        );
    println!("payments on http://{address}, store and ledger in {}", dir.display());
    axum::serve(listener, app).await.map_err(|error| format!("serving on {address}: {error}"))
}
