//! Where the HTTP scenarios run: a [`ServeTarget`] serves a scenario's
//! [`Fixture`] behind the contract configured by a [`LayerConfig`], on a
//! free loopback port. [`Tower`] is the tower layer on axum; the crate
//! `idemkv-actix` serves the same fixture with actix-web handlers behind
//! its middleware, and a server of your own may too. Every scenario whose
//! name ends in `_on` runs on any target; its plain-named form runs it on
//! [`Tower`].
//!
//! # Examples
//!
//! ```
//! use http::{Method, StatusCode};
//! use idemkv::conformance::http::harness::{client, post, send};
//! use idemkv::conformance::http::{Fixture, FixtureAnswer, Server, Tower};
//! use idemkv::http::LayerConfig;
//! use idemkv::{Config, Durability, Store};
//!
//! # fn main() {
//! # let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
//! # runtime.block_on(async {
//! let dir = tempfile::tempdir().expect("tempdir");
//! let store = Store::open(dir.path(), Config::new().durability(Durability::Buffered)).expect("open");
//! let fixture = Fixture::new()
//!     .route(Method::POST, "/payments", |_| async { FixtureAnswer::text(StatusCode::CREATED, "charged") });
//! let target = Tower(&store);
//! let server = Server::start(&target, LayerConfig::global(), fixture).await;
//! let client = client();
//! let first = send(post(&client, &server.url("/payments"), "order-1", "amount=10")).await;
//! let again = send(post(&client, &server.url("/payments"), "order-1", "amount=10")).await;
//! assert_eq!((first.status, again.replayed(), again.body.as_str()), (201, true, "charged"));
//! server.stop().await;
//! # });
//! # }
//! ```

use super::fixture::{Fixture, FixtureAnswer, FixtureBody, FixtureRequest, FIXTURE_BODY_BYTES_MAX};
use super::harness::Served;
use crate::backend::IdempotencyBackend;
use crate::http::{Attempt, IdempotencyLayer, LayerConfig, NotSpent, ResourceHold};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::any;
use axum::Router;
use http::StatusCode;
use std::future::Future;
use std::sync::Arc;

/// A server of the contract: serves a [`Fixture`] behind it, over one
/// backend.
///
/// What a target promises, so that a scenario means the same on each:
/// every request that reaches the server is counted
/// ([`Fixture::arrive`]) before the contract sees it; the contract
/// (configured with the [`LayerConfig`] given) wraps the whole fixture,
/// as a router-wide layer does; a request it lets through goes to
/// [`Fixture::answer`] with its method, URI, header fields, its body read
/// whole (up to [`FIXTURE_BODY_BYTES_MAX`]) and the [`Attempt`] and
/// [`ResourceHold`] the contract gave its run; the answer goes out with
/// its status, its header fields in order, its body (streamed when it
/// streams) and, when it is marked so, [`NotSpent`] in the response's
/// extensions. A handler that panics is the target's to answer, as its
/// server does.
pub trait ServeTarget {
    /// The backend behind the contract.
    type Backend: IdempotencyBackend + Clone;
    /// What stops a served fixture.
    type Running;

    /// The backend behind the contract (a scenario reads its limits,
    /// stores bytes of its own, frees a key as an operator would).
    fn backend(&self) -> &Self::Backend;

    /// Serves `fixture` behind the contract configured with `config`, on
    /// a free loopback port; its base URL (`http://127.0.0.1:<port>`) and
    /// what stops it.
    fn serve(&self, config: LayerConfig, fixture: Fixture) -> impl Future<Output = (String, Self::Running)>;

    /// Stops a fixture [`ServeTarget::serve`] served, and lets the
    /// connections a client pool may hold close.
    fn stop(&self, running: Self::Running) -> impl Future<Output = ()>;
}

/// A served fixture: its base URL, stopped by [`Server::stop`] (or by
/// dropping what the target returned, as the target does).
pub struct Server<'t, T: ServeTarget> {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    running: T::Running,
    target: &'t T,
}

impl<T: ServeTarget> std::fmt::Debug for Server<'_, T> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Server").field("base", &self.base).finish_non_exhaustive()
    }
}

impl<'t, T: ServeTarget> Server<'t, T> {
    /// Serves `fixture` on `target` behind the contract configured with
    /// `config`.
    pub async fn start(target: &'t T, config: LayerConfig, fixture: Fixture) -> Server<'t, T> {
        let (base, running) = target.serve(config, fixture).await;
        Server { base, running, target }
    }

    /// The URL of `path` on this server.
    #[must_use]
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Stops serving.
    pub async fn stop(self) {
        self.target.stop(self.running).await;
    }
}

/// The tower layer ([`IdempotencyLayer`]) over a backend, router-wide on
/// an axum server ([`Served`]).
#[derive(Debug)]
pub struct Tower<'a, B>(pub &'a B);

impl<B: IdempotencyBackend + Clone> ServeTarget for Tower<'_, B> {
    type Backend = B;
    type Running = Served;

    fn backend(&self) -> &B {
        self.0
    }

    async fn serve(&self, config: LayerConfig, fixture: Fixture) -> (String, Served) {
        let fixture = Arc::new(fixture);
        let app = Router::new()
            .route("/", any(answer))
            .route("/{*path}", any(answer))
            .with_state(Arc::clone(&fixture))
            .layer(IdempotencyLayer::new(self.0.clone(), config))
            .layer(middleware::from_fn_with_state(fixture, arrive));
        let served = Served::serve(app).await;
        (served.base.clone(), served)
    }

    async fn stop(&self, running: Served) {
        running.stop().await;
    }
}

/// Counts a request that reached the server, before the layer.
async fn arrive(State(fixture): State<Arc<Fixture>>, request: Request, next: Next) -> Response {
    fixture.arrive();
    next.run(request).await
}

/// The fixture's answer to `request`, as an axum response.
async fn answer(State(fixture): State<Arc<Fixture>>, request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, FIXTURE_BODY_BYTES_MAX).await else {
        return response_of(FixtureAnswer::text(StatusCode::PAYLOAD_TOO_LARGE, "the body is over the fixture's limit"));
    };
    let mut request = FixtureRequest::new(parts.method, parts.uri, body);
    request.headers = parts.headers;
    request.attempt = parts.extensions.remove::<Attempt>();
    request.hold = parts.extensions.remove::<ResourceHold>();
    response_of(fixture.answer(request).await)
}

/// `answer` as an axum response.
fn response_of(answer: FixtureAnswer) -> Response {
    let body = match answer.body {
        FixtureBody::Full(bytes) => Body::from(bytes),
        FixtureBody::Streamed(chunks) => Body::from_stream(chunks),
    };
    let mut response = Response::new(body);
    *response.status_mut() = answer.status;
    *response.headers_mut() = answer.headers;
    if answer.not_spent {
        response.extensions_mut().insert(NotSpent);
    }
    response
}
