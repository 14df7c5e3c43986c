//! [`WebhookLayer`]: a signed webhook verified before anything runs, then
//! run once per webhook id through an [`Inbox`] (feature `webhooks`).
//!
//! Webhooks are `POST`s: any other request passes through untouched.
//!
//! | the webhook | the answer |
//! |---|---|
//! | a body over the limit | 413 `body-too-large`; nothing runs |
//! | a signature header missing or with no signature the scheme can read (an unreadable entry beside a good signature is passed over), no id | 400 `webhook-unsigned`; nothing runs |
//! | an id longer than the store's keys | 400 `webhook-id-too-long`; nothing runs |
//! | a signature that matches no secret | 401 `webhook-signature-invalid`; nothing runs |
//! | a good signature, its timestamp outside the window (a replayed capture) | 401 `webhook-stale`; nothing runs |
//! | verified, its id new (or its earlier attempts failed) | the handler runs; its answer; a 2xx marks the id processed, a 408, 409, 425, 429 or 5xx counts a failed attempt, any other status releases the id untouched |
//! | verified, its id processed | 200 `{"webhook":"duplicate"}` and `Idempotency-Replay: true`; the handler does not run |
//! | verified, its id being handled now | 409 `in-progress` with `Retry-After` |
//! | its id seen with another body | 422 `webhook-id-reused`; never run |
//! | its last attempt failed, or it was a dead letter already | 202 `{"webhook":"dead-lettered"}`: kept with its last error for an operator's re-drive (`Inbox::dead_letters`, `idemkv dead-letters`); the sender may stop |
//! | the store did not answer before the handler ran | 503 `store-unavailable` with `Retry-After` |
//!
//! The handler gets the request as it came (the body buffered) with a
//! [`WebhookAttempt`] extension. It runs on a task of its own: a sender
//! that hangs up does not stop it half-way. Its lease is kept alive while
//! it runs ([`RunOnce`](crate::backend::RunOnce)); if its process dies, a
//! redelivery after the lease runs it again with
//! [`WebhookAttempt::recovered`] set.

use super::body::buffered;
use super::problem::{self, in_progress, store_unavailable, Problem};
use super::{BoxError, LayerBody};
use crate::backend::IdempotencyBackend;
use crate::error::Result;
use crate::events::event;
use crate::messaging::{check_consumer, Delivery, Handled, Inbox};
use crate::webhook::{WebhookError, WebhookVerifier};
use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Either, Full, Limited};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

/// The largest webhook body read by default: 1 MiB.
pub const WEBHOOK_BODY_BYTES_MAX: usize = 1 << 20;

/// The request extension a webhook's handler gets.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WebhookAttempt {
    /// The webhook's id (`webhook-id`; Stripe's event id).
    pub id: String,
    /// 1 for the first run, one more for each failed or unfinished one.
    pub attempt: u32,
    /// Whether an earlier run stopped half-way (its process died): its
    /// side effects may have happened.
    pub recovered: bool,
}

/// Verifies webhooks with `V`, then runs each id once through an
/// [`Inbox`] over `K` (see the module docs).
///
/// # Examples
///
/// ```no_run
/// use axum::{routing::post, Router};
/// use idemkv::http::WebhookLayer;
/// use idemkv::webhook::StandardWebhooks;
/// use idemkv::{Config, messaging::Inbox, Store};
///
/// # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
/// let store = Store::open("/var/lib/billing/idempotency", Config::new())?;
/// let verifier = StandardWebhooks::new(["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"])?;
/// let app: Router = Router::new()
///     .route("/hooks/payments", post(|| async { "recorded" }))
///     .layer(WebhookLayer::new(verifier, Inbox::new(store), "payment-hooks")?);
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
/// axum::serve(listener, app).await?;
/// # Ok(()) }
/// ```
pub struct WebhookLayer<V, K> {
    shared: Arc<Shared<V, K>>,
}

struct Shared<V, K> {
    verifier: V,
    inbox: Inbox<K>,
    consumer: String,
    body_bytes_max: usize,
}

impl<V, K> Clone for WebhookLayer<V, K> {
    fn clone(&self) -> Self {
        WebhookLayer { shared: Arc::clone(&self.shared) }
    }
}

impl<V, K> std::fmt::Debug for WebhookLayer<V, K> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("WebhookLayer")
            .field("consumer", &self.shared.consumer)
            .field("body_bytes_max", &self.shared.body_bytes_max)
            .finish_non_exhaustive()
    }
}

impl<V: WebhookVerifier, K: IdempotencyBackend> WebhookLayer<V, K> {
    /// Verifies with `verifier`, then deduplicates through `inbox` as
    /// `consumer` (its attempts and dead letters are `inbox`'s).
    ///
    /// # Errors
    /// [`Error::InvalidConsumer`](crate::Error::InvalidConsumer).
    pub fn new(verifier: V, inbox: Inbox<K>, consumer: &str) -> Result<Self> {
        check_consumer(consumer)?;
        let consumer = consumer.to_owned();
        Ok(WebhookLayer {
            shared: Arc::new(Shared { verifier, inbox, consumer, body_bytes_max: WEBHOOK_BODY_BYTES_MAX }),
        })
    }

    /// Sets the largest body read ([`WEBHOOK_BODY_BYTES_MAX`]); a larger
    /// one is answered 413 and runs nothing.
    ///
    /// # Panics
    /// When the layer has been cloned already (set it first).
    #[must_use]
    pub fn body_bytes_max(mut self, max: usize) -> Self {
        Arc::get_mut(&mut self.shared).expect("set before the layer is cloned").body_bytes_max = max;
        self
    }
}

impl<S, V, K> tower::Layer<S> for WebhookLayer<V, K> {
    type Service = WebhookService<S, V, K>;

    fn layer(&self, inner: S) -> Self::Service {
        WebhookService { inner, shared: Arc::clone(&self.shared) }
    }
}

/// The service [`WebhookLayer`] wraps around an inner service.
pub struct WebhookService<S, V, K> {
    inner: S,
    shared: Arc<Shared<V, K>>,
}

impl<S: Clone, V, K> Clone for WebhookService<S, V, K> {
    fn clone(&self) -> Self {
        WebhookService { inner: self.inner.clone(), shared: Arc::clone(&self.shared) }
    }
}

impl<S, V, K> std::fmt::Debug for WebhookService<S, V, K> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("WebhookService").finish_non_exhaustive()
    }
}

type ResponseFuture<R, E> = Pin<Box<dyn Future<Output = std::result::Result<Response<LayerBody<R>>, E>> + Send>>;

impl<S, V, K, B, R> tower::Service<Request<B>> for WebhookService<S, V, K>
where
    S: tower::Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    V: WebhookVerifier,
    K: IdempotencyBackend,
    B: Body<Data = Bytes> + From<Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    R: Body<Data = Bytes> + Send + 'static,
    R::Error: Into<BoxError>,
{
    type Response = Response<LayerBody<R>>;
    type Error = S::Error;
    type Future = ResponseFuture<R, S::Error>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<std::result::Result<(), Self::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if request.method() != http::Method::POST {
            // Webhooks are POSTs: anything else streams through untouched
            // (the router's 405 or 404).
            let answer = self.inner.call(request);
            return Box::pin(async move { answer.await.map(|response| response.map(Either::Left)) });
        }
        // The ready inner service goes to this call; a clone stays for the next.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let (body, id) = match verified(&shared, &parts.headers, body).await {
                Ok(verified) => verified,
                Err(refusal) => return Ok(refusal.map(buffered)),
            };
            // On a task of its own: a sender that hangs up does not stop
            // a handler half-way.
            let run = tokio::spawn(async move {
                let mut answer = None;
                let delivery = shared
                    .inbox
                    .handle(&shared.consumer, id.as_bytes(), &body, |message| {
                        let mut request = Request::from_parts(parts, B::from(body.clone()));
                        let attempt =
                            WebhookAttempt { id: id.clone(), attempt: message.attempt, recovered: message.recovered };
                        request.extensions_mut().insert(attempt);
                        let answer = &mut answer;
                        let mut inner = inner;
                        async move {
                            let result = inner.call(request).await;
                            let handled = match &result {
                                Ok(response) => handled(response.status()),
                                Err(_) => Handled::Failed("the handler returned an error".into()),
                            };
                            *answer = Some(result);
                            handled
                        }
                    })
                    .await;
                (delivery, answer)
            });
            let Ok((delivery, answer)) = run.await else {
                // The handler panicked: its id stays in progress until
                // its lease ends; a redelivery then runs it as recovered.
                return Ok(Problem::HandlerFailed.response().map(buffered));
            };
            answer_of(delivery, answer)
        })
    }
}

/// The webhook's body, read up to the limit, and its id, once its
/// signature is verified; else the problem answer that refuses it.
async fn verified<V: WebhookVerifier, K, B>(
    shared: &Shared<V, K>,
    headers: &http::HeaderMap,
    body: B,
) -> std::result::Result<(Bytes, String), Response<Full<Bytes>>>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let Ok(body) = Limited::new(body, shared.body_bytes_max).collect().await.map(http_body_util::Collected::to_bytes)
    else {
        refused("body_too_large");
        return Err(Problem::BodyTooLarge.response());
    };
    match shared.verifier.verify(headers, &body, SystemTime::now()) {
        Ok(verified) => Ok((body, verified.id)),
        Err(error) => Err(refusal(&error)),
    }
}

/// The answer to a verified webhook, from what the inbox did with it
/// (`delivery`) and the handler's own answer, if it ran (see the module
/// docs).
fn answer_of<R, E>(
    delivery: Result<Delivery>,
    answer: Option<std::result::Result<Response<R>, E>>,
) -> std::result::Result<Response<LayerBody<R>>, E> {
    Ok(match (delivery, answer) {
        (Ok(Delivery::Processed | Delivery::Failed { .. } | Delivery::NotProcessed), Some(answer)) => {
            answer?.map(Either::Left)
        }
        (Ok(Delivery::DeadLettered { .. } | Delivery::Quarantined), _) => {
            outcome(StatusCode::ACCEPTED, "dead-lettered", false)
        }
        (Ok(Delivery::Duplicate), _) => outcome(StatusCode::OK, "duplicate", true),
        (Ok(Delivery::InProgress { retry_after }), _) => in_progress(retry_after).map(buffered),
        (Ok(Delivery::Mismatch), _) => id_reused().map(buffered),
        // The handler ran and answered, but its outcome was not stored:
        // the id stays in progress until its lease ends.
        (Err(_), Some(Ok(answer))) => answer.map(Either::Left),
        (Err(_), Some(Err(error))) => return Err(error),
        (Err(crate::Error::KeyTooLong { .. } | crate::Error::KeyEmpty), None) => {
            refused("id_too_long");
            id_too_long().map(buffered)
        }
        #[cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "read by the event"))]
        (Err(error), None) => {
            event!(warn, %error, "webhook: the store did not answer; nothing ran");
            store_unavailable().map(buffered)
        }
        (Ok(_), None) => Problem::HandlerFailed.response().map(buffered),
    })
}

/// What a handler's status says of the webhook (see the module docs).
fn handled(status: StatusCode) -> Handled {
    let retried =
        [StatusCode::REQUEST_TIMEOUT, StatusCode::CONFLICT, StatusCode::TOO_EARLY, StatusCode::TOO_MANY_REQUESTS];
    if status.is_success() {
        Handled::Processed
    } else if status.is_server_error() || retried.contains(&status) {
        Handled::Failed(format!("the handler answered {status}"))
    } else {
        Handled::NotProcessed
    }
}

fn refused(reason: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("idempo_webhook_refused_total", "reason" => reason).increment(1);
    event!(info, reason, "webhook refused before it ran");
}

/// The problem answer of a webhook that did not verify.
fn refusal(error: &WebhookError) -> Response<Full<Bytes>> {
    let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::BAD_REQUEST);
    let (reason, slug, title, detail) = match error {
        WebhookError::Stale { .. } => (
            "stale",
            "webhook-stale",
            "webhook timestamp outside the tolerance",
            "The webhook was signed too long ago, or in the future; nothing was run.",
        ),
        WebhookError::InvalidSignature => (
            "invalid_signature",
            "webhook-signature-invalid",
            "webhook signature invalid",
            "No signature of the webhook matches its body; nothing was run.",
        ),
        WebhookError::MissingId => {
            ("missing_id", "webhook-unsigned", "webhook id missing", "The webhook names no id; nothing was run.")
        }
        _ => (
            "unsigned",
            "webhook-unsigned",
            "webhook signature headers missing or malformed",
            "The webhook lacks its signature headers, or one is malformed; nothing was run.",
        ),
    };
    refused(reason);
    problem::response(status, slug, title, detail)
}

fn id_too_long() -> Response<Full<Bytes>> {
    problem::response(
        StatusCode::BAD_REQUEST,
        "webhook-id-too-long",
        "webhook id too long",
        "The webhook id is longer than the store keeps; nothing was run.",
    )
}

fn id_reused() -> Response<Full<Bytes>> {
    problem::response(
        StatusCode::UNPROCESSABLE_ENTITY,
        "webhook-id-reused",
        "webhook id reused",
        "This webhook id came before with another body; it is never run.",
    )
}

/// 200 or 202 with `{"webhook":"<what>"}`: the handler did not run.
fn outcome<R>(status: StatusCode, what: &str, replayed: bool) -> Response<LayerBody<R>> {
    let mut response = Response::new(buffered(Full::new(Bytes::from(format!(r#"{{"webhook":"{what}"}}"#)))));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if replayed {
        response.headers_mut().insert("idempotency-replay", HeaderValue::from_static("true"));
    }
    response
}
