//! The application a scenario serves, written once for every target: a
//! [`Fixture`] is a list of routes (a method and a path pattern) whose
//! answers are functions of the request ([`FixtureRequest`] in, a
//! [`FixtureAnswer`] out), plus the router's own answers when no route
//! matches. A [`ServeTarget`](super::ServeTarget) serves it behind the
//! contract — the tower layer on axum, an actix-web middleware, a server
//! of your own — by handing every request that reaches it to
//! [`Fixture::answer`], so that every target runs the same handlers.
//!
//! # Examples
//!
//! ```
//! use http::{Method, StatusCode};
//! use idemkv::conformance::http::harness::Counter;
//! use idemkv::conformance::http::{Fixture, FixtureAnswer, FixtureRequest};
//!
//! # fn main() {
//! # let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! # runtime.block_on(async {
//! let runs = Counter::default();
//! let counted = runs.clone();
//! let fixture = Fixture::new().route(Method::POST, "/payments/{id}", move |request: FixtureRequest| {
//!     let run = counted.bump();
//!     async move { FixtureAnswer::text(StatusCode::CREATED, format!("payment {run}: {}", request.text())) }
//! });
//! let request = |method: Method, path: &str| FixtureRequest::new(method, path.parse().unwrap(), "amount=1");
//! let created = fixture.answer(request(Method::POST, "/payments/p-1")).await;
//! assert_eq!((created.status, created.body_bytes()), (StatusCode::CREATED, Some(&b"payment 1: amount=1"[..])));
//! assert_eq!(fixture.answer(request(Method::PUT, "/payments/p-1")).await.status, StatusCode::METHOD_NOT_ALLOWED);
//! assert_eq!(fixture.answer(request(Method::POST, "/nowhere")).await.status, StatusCode::NOT_FOUND);
//! assert_eq!(runs.get(), 1);
//! # });
//! # }
//! ```

use super::harness::Counter;
use crate::http::{Attempt, ResourceHold};
use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Method, StatusCode, Uri};
use std::future::Future;
use std::sync::Arc;

/// The most a target reads of a request's body for the fixture (the
/// layer refuses a guarded body past its own limit, 1 MiB by default,
/// before the fixture sees it).
pub const FIXTURE_BODY_BYTES_MAX: usize = 4 << 20;

/// A request as the fixture sees it: its head in `http` 1 types, its body
/// read whole, and what the contract gave the run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FixtureRequest {
    /// Its method.
    pub method: Method,
    /// Its path and query.
    pub uri: Uri,
    /// Its header fields.
    pub headers: HeaderMap,
    /// Its body.
    pub body: Bytes,
    /// The run's [`Attempt`], when the contract guards the request.
    pub attempt: Option<Attempt>,
    /// The run's [`ResourceHold`], when the request holds its resource.
    pub hold: Option<ResourceHold>,
}

impl FixtureRequest {
    /// A request of `method` to `uri` with `body`, no header fields and
    /// nothing of the contract (a target adds what it has).
    pub fn new(method: Method, uri: Uri, body: impl Into<Bytes>) -> Self {
        FixtureRequest { method, uri, headers: HeaderMap::new(), body: body.into(), attempt: None, hold: None }
    }

    /// Its path.
    #[must_use]
    pub fn path(&self) -> &str {
        self.uri.path()
    }

    /// Its body as text (invalid UTF-8 replaced).
    #[must_use]
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The value of the query parameter `name`, if any.
    #[must_use]
    pub fn query(&self, name: &str) -> Option<&str> {
        self.uri.query()?.split('&').find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
    }
}

/// An answer's body: whole, or a stream of chunks.
pub enum FixtureBody {
    /// The whole body.
    Full(Bytes),
    /// Chunks as they are produced, the length unknown until the end.
    Streamed(BoxStream<'static, Result<Bytes, std::io::Error>>),
}

impl std::fmt::Debug for FixtureBody {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FixtureBody::Full(bytes) => formatter.debug_tuple("Full").field(&bytes.len()).finish(),
            FixtureBody::Streamed(_) => formatter.write_str("Streamed"),
        }
    }
}

/// What the fixture answers: a status, header fields, a body, and
/// whether the handler says nothing happened
/// ([`NotSpent`](crate::http::NotSpent), which a target puts in the
/// response's extensions).
#[derive(Debug)]
#[non_exhaustive]
pub struct FixtureAnswer {
    /// Its status.
    pub status: StatusCode,
    /// Its header fields, in order (a name may repeat).
    pub headers: HeaderMap,
    /// Its body.
    pub body: FixtureBody,
    /// Marked [`NotSpent`](crate::http::NotSpent).
    pub not_spent: bool,
}

impl FixtureAnswer {
    /// `status` with an empty body and no header field.
    #[must_use]
    pub fn empty(status: StatusCode) -> Self {
        FixtureAnswer { status, headers: HeaderMap::new(), body: FixtureBody::Full(Bytes::new()), not_spent: false }
    }

    /// `status` with `body` as `text/plain; charset=utf-8` (what axum
    /// makes of a `String`).
    #[must_use]
    pub fn text(status: StatusCode, body: impl Into<String>) -> Self {
        let answer = FixtureAnswer { body: FixtureBody::Full(Bytes::from(body.into())), ..Self::empty(status) };
        answer.header(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"))
    }

    /// `status` with `body` and no header field.
    #[must_use]
    pub fn bytes(status: StatusCode, body: impl Into<Bytes>) -> Self {
        FixtureAnswer { body: FixtureBody::Full(body.into()), ..Self::empty(status) }
    }

    /// `status` with a body streamed from `chunks`.
    #[must_use]
    pub fn streamed(status: StatusCode, chunks: BoxStream<'static, Result<Bytes, std::io::Error>>) -> Self {
        FixtureAnswer { body: FixtureBody::Streamed(chunks), ..Self::empty(status) }
    }

    /// Sets the field `name` to `value` alone.
    #[must_use]
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.insert(name, value);
        self
    }

    /// Adds a field `name: value` beside any of that name.
    #[must_use]
    pub fn append(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.append(name, value);
        self
    }

    /// Marks it [`NotSpent`](crate::http::NotSpent): the handler did
    /// nothing, the key is free.
    #[must_use]
    pub fn not_spent(mut self) -> Self {
        self.not_spent = true;
        self
    }

    /// The whole body, unless it streams.
    #[must_use]
    pub fn body_bytes(&self) -> Option<&[u8]> {
        match &self.body {
            FixtureBody::Full(bytes) => Some(bytes),
            FixtureBody::Streamed(_) => None,
        }
    }
}

/// A route's answer.
type Answering = Arc<dyn Fn(FixtureRequest) -> BoxFuture<'static, FixtureAnswer> + Send + Sync>;

#[derive(Clone)]
struct Route {
    method: Method,
    /// Segments; `{name}` matches any one non-empty segment.
    pattern: &'static str,
    answering: Answering,
}

/// Whether `path` matches `pattern` (`/accounts/{id}/transfers`).
fn matches(pattern: &str, path: &str) -> bool {
    let (mut pattern, mut path) = (pattern.split('/'), path.split('/'));
    loop {
        match (pattern.next(), path.next()) {
            (None, None) => return true,
            (Some(wanted), Some(segment)) => {
                let fits = if wanted.starts_with('{') && wanted.ends_with('}') {
                    !segment.is_empty()
                } else {
                    wanted == segment
                };
                if !fits {
                    return false;
                }
            }
            _ => return false,
        }
    }
}

/// The application a scenario serves: routes whose answers are functions
/// of the request, and the router's own 404 (no route's path matches)
/// and 405 (a path matches, no method does), marked
/// [`NotSpent`](crate::http::NotSpent) when
/// [`Fixture::unrouted_not_spent`] says so. A `HEAD` runs the `GET`
/// route of its path when it has none of its own. It also counts every
/// request that reaches the server, before the contract
/// ([`Fixture::arrivals`]). Clones share the routes and the count.
#[derive(Clone, Default)]
pub struct Fixture {
    routes: Vec<Route>,
    unrouted_not_spent: bool,
    arrivals: Counter,
}

impl std::fmt::Debug for Fixture {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let routes: Vec<_> = self.routes.iter().map(|route| (route.method.as_str(), route.pattern)).collect();
        formatter
            .debug_struct("Fixture")
            .field("routes", &routes)
            .field("unrouted_not_spent", &self.unrouted_not_spent)
            .field("arrivals", &self.arrivals.get())
            .finish()
    }
}

impl Fixture {
    /// No route: every request is the router's 404.
    #[must_use]
    pub fn new() -> Self {
        Fixture::default()
    }

    /// Adds the route `method` `pattern` (segments; `{name}` matches any
    /// one non-empty segment), answered by `answering`. The first route
    /// that matches answers.
    #[must_use]
    pub fn route<F, A>(mut self, method: Method, pattern: &'static str, answering: F) -> Self
    where
        F: Fn(FixtureRequest) -> A + Send + Sync + 'static,
        A: Future<Output = FixtureAnswer> + Send + 'static,
    {
        let answering: Answering =
            Arc::new(move |request| -> BoxFuture<'static, FixtureAnswer> { Box::pin(answering(request)) });
        self.routes.push(Route { method, pattern, answering });
        self
    }

    /// The router's own 404 and 405 marked
    /// [`NotSpent`](crate::http::NotSpent), as a router's fallbacks mark
    /// them (docs/http.md, "The router's own 404 and 405"). Default:
    /// unmarked, kept as any answer.
    #[must_use]
    pub fn unrouted_not_spent(mut self) -> Self {
        self.unrouted_not_spent = true;
        self
    }

    /// The requests that reached the server, counted before the contract
    /// saw them.
    #[must_use]
    pub fn arrivals(&self) -> &Counter {
        &self.arrivals
    }

    /// Counts a request that reached the server: a target calls it for
    /// every request, before the contract.
    pub fn arrive(&self) {
        self.arrivals.bump();
    }

    /// The answer to `request`: its route's, or the router's own.
    pub async fn answer(&self, request: FixtureRequest) -> FixtureAnswer {
        let path = request.path();
        let on_path = || self.routes.iter().filter(move |route| matches(route.pattern, path));
        let route = on_path().find(|route| route.method == request.method).or_else(|| {
            let head = request.method == Method::HEAD;
            on_path().find(|route| head && route.method == Method::GET)
        });
        let unrouted = match route {
            Some(route) => return (route.answering)(request).await,
            None if on_path().next().is_none() => FixtureAnswer::empty(StatusCode::NOT_FOUND),
            None => FixtureAnswer::empty(StatusCode::METHOD_NOT_ALLOWED),
        };
        if self.unrouted_not_spent {
            unrouted.not_spent()
        } else {
            unrouted
        }
    }
}
