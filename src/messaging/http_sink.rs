//! [`HttpSink`]: each message a `POST` to a URL of its destination, its id
//! the `Idempotency-Key` (features `messaging` and `client`).

use super::envelope::Staged;
use super::relay::{Sink, SinkError};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use std::fmt::Display;
use tower::{Service, ServiceExt};

/// Posts each message to `<base>/<destination>` with its id as the
/// `Idempotency-Key` and its payload as the body, through any tower HTTP
/// service — put `idemkv::client::RetryLayer` around the connection (as
/// the example does) for backoff with jitter, a retry budget and a circuit
/// breaker: every retry sends the same key, so a receiver behind
/// `IdempotencyLayer` (or an [`Inbox`](super::Inbox)) runs it once.
///
/// A 2xx answer delivers the message. 408, 409, 425, 429, a 5xx, or a
/// transport error is a transient failure (the relay tries again at a
/// later pass); any other answer is permanent (a dead letter at once).
///
/// # Examples
///
/// ```no_run
/// use hyper_util::{client::legacy::Client, rt::TokioExecutor};
/// use idemkv::client::{RetryLayer, RetryPolicy};
/// use idemkv::{Config, messaging::{HttpSink, Relay, RelayConfig}, Store};
/// use std::sync::Arc;
/// use tower::Layer;
///
/// # async fn run() -> Result<(), idemkv::Error> {
/// let http = Client::builder(TokioExecutor::new()).build_http();
/// let sink = HttpSink::new("http://billing.internal/hooks", RetryLayer::new(RetryPolicy::new()).layer(http));
/// let store = Arc::new(Store::open("orders.idemkv", Config::new())?);
/// Relay::new(store, sink, RelayConfig::new(["shop"])).run(std::future::pending()).await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct HttpSink<S> {
    base: String,
    service: S,
    #[cfg(feature = "webhooks")]
    signer: Option<crate::webhook::StandardWebhooks>,
}

impl<S> HttpSink<S> {
    /// Posts to `base` (`http://host/path`) through `service`.
    #[must_use]
    pub fn new(base: impl Into<String>, service: S) -> Self {
        HttpSink {
            base: base.into().trim_end_matches('/').to_owned(),
            service,
            #[cfg(feature = "webhooks")]
            signer: None,
        }
    }

    /// Signs every message as a Standard Webhook (feature `webhooks`):
    /// `webhook-id` its id, `webhook-timestamp` the time of the attempt,
    /// `webhook-signature` under each of `signer`'s secrets — what a
    /// receiver's `http::WebhookLayer` verifies,
    /// then deduplicates by the id.
    #[cfg(feature = "webhooks")]
    #[must_use]
    pub fn signed(mut self, signer: crate::webhook::StandardWebhooks) -> Self {
        self.signer = Some(signer);
        self
    }
}

impl<S, B> Sink for HttpSink<S>
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone + Send + Sync + 'static,
    S::Future: Send,
    S::Error: Display,
    B: Send,
{
    async fn deliver(&self, message: &Staged) -> Result<(), SinkError> {
        let url = format!("{}/{}", self.base, message.destination);
        #[cfg_attr(not(feature = "webhooks"), expect(unused_mut, reason = "signed with webhooks"))]
        let mut request = Request::post(&url)
            .header("idempotency-key", &message.id)
            .header("content-type", "application/octet-stream")
            .body(Full::new(Bytes::from(message.payload.clone())))
            .map_err(|error| SinkError::permanent(format!("POST {url}: {error}")))?;
        #[cfg(feature = "webhooks")]
        if let Some(signer) = &self.signer {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            let timestamp = now.map_or(0, |since| since.as_secs());
            request.headers_mut().extend(signer.headers(&message.id, timestamp, &message.payload));
        }
        let status = match self.service.clone().oneshot(request).await {
            Ok(response) => response.status(),
            Err(error) => return Err(SinkError::transient(format!("POST {url}: {error}"))),
        };
        let transient =
            [StatusCode::REQUEST_TIMEOUT, StatusCode::CONFLICT, StatusCode::TOO_EARLY, StatusCode::TOO_MANY_REQUESTS];
        match status {
            status if status.is_success() => Ok(()),
            status if status.is_server_error() || transient.contains(&status) => {
                Err(SinkError::transient(format!("POST {url}: {status}")))
            }
            status => Err(SinkError::permanent(format!("POST {url}: {status}"))),
        }
    }
}
