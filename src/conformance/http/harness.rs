//! The server and the client the HTTP scenarios run on, public for tests
//! of your own: an axum server on a free loopback port behind
//! [`IdempotencyLayer`] over a backend ([`Served`]), a reqwest
//! [`client`] whose answers are read whole into a [`Reply`], and a
//! [`Counter`] of handler runs.
//!
//! # Examples
//!
//! ```
//! use axum::{extract::State, http::StatusCode, Router};
//! use idemkv::conformance::http::harness::{client, post, send, Counter, Served};
//! use idemkv::http::LayerConfig;
//! use idemkv::{Config, Durability, Store};
//!
//! # fn main() {
//! # let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
//! # runtime.block_on(async {
//! let dir = tempfile::tempdir().expect("tempdir");
//! let store = Store::open(dir.path(), Config::new().durability(Durability::Buffered)).expect("open");
//! let runs = Counter::default();
//! let charge = |State(runs): State<Counter>| async move { (StatusCode::CREATED, format!("payment {}", runs.bump())) };
//! let routes = Router::new().route("/payments", axum::routing::post(charge)).with_state(runs.clone());
//! let server = Served::start(&store, LayerConfig::global(), routes).await;
//!
//! let client = client();
//! let url = server.url("/payments");
//! let first = send(post(&client, &url, "order-1", "amount=10")).await;
//! let again = send(post(&client, &url, "order-1", "amount=10")).await;
//! assert_eq!((first.status, first.replayed()), (201, false));
//! assert_eq!((again.status, again.replayed(), again.body.as_str()), (201, true, "payment 1"));
//! assert_eq!(runs.get(), 1);
//! server.stop().await;
//! # });
//! # }
//! ```

use crate::backend::IdempotencyBackend;
use crate::conformance::Setting;
use crate::http::{IdempotencyLayer, LayerConfig};
use axum::Router;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A served app: an axum server on a free loopback port, stopped when
/// dropped.
#[derive(Debug)]
pub struct Served {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    task: tokio::task::JoinHandle<()>,
}

impl Served {
    /// Puts the whole of `routes` behind the layer over `backend`
    /// (router-wide, as services do) and serves it.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start<B: IdempotencyBackend + Clone>(backend: &B, layer: LayerConfig, routes: Router) -> Served {
        Served::serve(routes.layer(IdempotencyLayer::new(backend.clone(), layer))).await
    }

    /// Serves `app`, already layered.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn serve(app: Router) -> Served {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve");
        });
        Served { base, task }
    }

    /// The URL of `path` on this server.
    #[must_use]
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Stops serving, and lets the connections a client pool may hold
    /// close, so that nothing holds the layer's backend any more.
    pub async fn stop(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The `Idempotency-Key` value `name` of `setting`.
///
/// # Panics
/// When the setting's prefix is not UTF-8.
#[must_use]
pub fn key(setting: &Setting, name: &str) -> String {
    String::from_utf8(setting.key(name)).expect("a prefix in UTF-8")
}

/// A client that ignores proxy settings and gives up on a request after a
/// minute (so that a hung server fails the scenario instead of hanging
/// it).
///
/// # Panics
/// When the client cannot be built.
#[must_use]
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(60)).build().expect("client")
}

/// An answer, read whole.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Its status code.
    pub status: u16,
    /// Its header fields.
    pub headers: reqwest::header::HeaderMap,
    /// Its body, as text.
    pub body: String,
}

impl Reply {
    /// The one value of header `name`, as text.
    ///
    /// # Panics
    /// When the value is not visible ASCII.
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|value| value.to_str().expect("visible ASCII header"))
    }

    /// Every value of header `name`, as text, in order.
    ///
    /// # Panics
    /// When a value is not visible ASCII.
    #[must_use]
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers.get_all(name).iter().map(|value| value.to_str().expect("visible ASCII header")).collect()
    }

    /// Whether the layer marked this answer as a replay.
    #[must_use]
    pub fn replayed(&self) -> bool {
        self.header("idempotency-replay") == Some("true")
    }

    /// The `type` of a problem answer (`urn:idemkv:problem:<slug>`).
    #[must_use]
    pub fn problem_type(&self) -> Option<&str> {
        let start = self.body.find(r#""type":""#)? + r#""type":""#.len();
        let end = self.body[start..].find('"')?;
        Some(&self.body[start..start + end])
    }

    /// Whether this is the problem `slug`, as `application/problem+json`.
    #[must_use]
    pub fn is_problem(&self, status: u16, slug: &str) -> bool {
        self.status == status
            && self.header("content-type") == Some("application/problem+json")
            && self.problem_type() == Some(&format!("urn:idemkv:problem:{slug}"))
    }
}

/// Sends `request` and reads the answer whole.
///
/// # Panics
/// When the request cannot be sent or its answer read.
pub async fn send(request: reqwest::RequestBuilder) -> Reply {
    read(request.send().await.expect("send")).await
}

/// Reads `response` whole.
///
/// # Panics
/// When its body cannot be read.
pub async fn read(response: reqwest::Response) -> Reply {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.text().await.expect("body");
    Reply { status, headers, body }
}

/// A POST of `body` to `url` with `Idempotency-Key: key`.
pub fn post(client: &reqwest::Client, url: &str, key: &str, body: &str) -> reqwest::RequestBuilder {
    client.post(url).header("Idempotency-Key", key).body(body.to_string())
}

/// A count of handler runs, shared by its clones.
#[derive(Debug, Default, Clone)]
pub struct Counter(Arc<AtomicU32>);

impl Counter {
    /// Counts one more; returns the new count.
    #[allow(clippy::must_use_candidate, reason = "the count is the point; the new one is there for whoever wants it")]
    pub fn bump(&self) -> u32 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The count.
    #[must_use]
    pub fn get(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }

    /// Waits until the count reaches `at_least`, for at most `limit`.
    ///
    /// # Panics
    /// Past `limit`, with `what` in the message.
    pub async fn reach(&self, at_least: u32, limit: Duration, what: &str) {
        let deadline = Instant::now() + limit;
        while self.get() < at_least {
            assert!(Instant::now() < deadline, "{what}: count {} < {at_least} after {limit:?}", self.get());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
