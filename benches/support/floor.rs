//! The least a layer in front of a route can do and still answer retries
//! from a store: read the `Idempotency-Key` header and the request's
//! body, claim the key with the body's fingerprint (so that a retry with
//! another body is told apart), run the route on the body read, gather its
//! answer's body, complete the key with those bytes and answer; a replay
//! answers the stored bytes with a bare 200. No status or header is kept,
//! neither method nor path is in the fingerprint, nothing is validated,
//! and there are no metrics, spans, deadlines, lease renewals or checks
//! for a client gone away.
//!
//! The HTTP bench runs it beside `idemkv::http::IdempotencyLayer` as a
//! floor: what any layer over the same store pays (the request's body read
//! and hashed, the store's claim and completion, a boxed future, the
//! answer's body gathered), so that the real layer's figure splits into
//! that floor and its own work.

use axum::body::Body;
use axum::response::Response;
use idemkv::{Claim, ClaimRequest, Fingerprint, Store};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// See the module docs.
#[derive(Clone)]
pub struct FloorLayer {
    store: Store,
}

impl FloorLayer {
    pub fn new(store: Store) -> FloorLayer {
        FloorLayer { store }
    }
}

impl<S> tower::Layer<S> for FloorLayer {
    type Service = Floor<S>;

    fn layer(&self, inner: S) -> Floor<S> {
        Floor { inner, store: self.store.clone() }
    }
}

/// The service [`FloorLayer`] wraps a route in.
#[derive(Clone)]
pub struct Floor<S> {
    inner: S,
    store: Store,
}

impl<S> tower::Service<axum::extract::Request> for Floor<S>
where
    S: tower::Service<axum::extract::Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: axum::extract::Request) -> Self::Future {
        // The route was made ready for this call; the clone takes its place.
        let ready = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, ready);
        let store = self.store.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let key = parts.headers.get("idempotency-key").expect("every bench request has a key").clone();
            let body = axum::body::to_bytes(body, usize::MAX).await.expect("the request's body");
            let claimed = ClaimRequest::new(key.as_bytes(), Fingerprint::of(&body));
            match store.claim_async(&claimed).await.expect("claim") {
                Claim::Acquired(lease) => {
                    let request = axum::extract::Request::from_parts(parts, Body::from(body));
                    let (parts, body) = inner.call(request).await?.into_parts();
                    let bytes = axum::body::to_bytes(body, usize::MAX).await.expect("the route's body");
                    lease.complete_async(&bytes).await.expect("complete");
                    Ok(Response::from_parts(parts, Body::from(bytes)))
                }
                Claim::Replay(record) => Ok(Response::new(Body::from(record.response))),
                other => panic!("the bench's keys are never shared in flight: {other:?}"),
            }
        })
    }
}
