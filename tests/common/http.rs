//! The HTTP tests' harness: an axum server on 127.0.0.1 behind
//! `IdempotencyLayer` over a store in a fresh directory, and a reqwest
//! client whose answers are read into a [`Reply`].

use axum::Router;
use idemkv::http::{IdempotencyLayer, LayerConfig};
use idemkv::{Config, Store};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A served app and the store behind its layer.
pub struct Server {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// A handle on the layer's store.
    pub store: Store,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Opens a store with `config` in a fresh directory, puts the whole of
    /// `routes` behind the layer (router-wide, as services do) and serves it.
    pub async fn start(config: Config, layer: LayerConfig, routes: Router) -> Server {
        let (dir, store) = open_store(config);
        let app = routes.layer(IdempotencyLayer::new(store.clone(), layer));
        Server::serve(app, store, dir).await
    }

    /// Serves `app`, already layered over `store` in `dir`.
    pub async fn serve(app: Router, store: Store, dir: tempfile::TempDir) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve");
        });
        Server { base, store, task, _dir: dir }
    }

    /// The URL of `path` on this server.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A store with `config` in a fresh directory.
pub fn open_store(config: Config) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), config).expect("open store");
    (dir, store)
}

/// A client that ignores proxy settings and gives up on a request after a
/// minute (so that a hung server fails the test instead of hanging it).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(60)).build().expect("client")
}

/// An answer, read whole.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Reply {
    /// The one value of header `name`, as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|value| value.to_str().expect("visible ASCII header"))
    }

    /// Every value of header `name`, as text, in order.
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers.get_all(name).iter().map(|value| value.to_str().expect("visible ASCII header")).collect()
    }

    /// Whether the layer marked this answer as a replay.
    pub fn replayed(&self) -> bool {
        self.header("idempotency-replay") == Some("true")
    }

    /// The `type` of a problem answer (`urn:idemkv:problem:<slug>`).
    pub fn problem_type(&self) -> Option<&str> {
        let start = self.body.find(r#""type":""#)? + r#""type":""#.len();
        let end = self.body[start..].find('"')?;
        Some(&self.body[start..start + end])
    }

    /// Whether this is the problem `slug`, as `application/problem+json`.
    pub fn is_problem(&self, status: u16, slug: &str) -> bool {
        self.status == status
            && self.header("content-type") == Some("application/problem+json")
            && self.problem_type() == Some(&format!("urn:idemkv:problem:{slug}"))
    }
}

/// Sends `request` and reads the answer whole.
pub async fn send(request: reqwest::RequestBuilder) -> Reply {
    read(request.send().await.expect("send")).await
}

/// Reads `response` whole.
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

/// A count of handler runs.
#[derive(Debug, Default, Clone)]
pub struct Counter(Arc<AtomicU32>);

impl Counter {
    /// Counts one more; returns the new count.
    pub fn bump(&self) -> u32 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The count.
    pub fn get(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }

    /// Waits until the count reaches `at_least`, for at most `limit`;
    /// panics with `what` past it.
    pub async fn reach(&self, at_least: u32, limit: Duration, what: &str) {
        let deadline = Instant::now() + limit;
        while self.get() < at_least {
            assert!(Instant::now() < deadline, "{what}: count {} < {at_least} after {limit:?}", self.get());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
