//! The client's span of a logical request, over real HTTP: every call
//! through the retry layer runs in a `tracing` span `idempotent_call` with
//! its key, method, authority and path (never the query), the attempt,
//! the outcome (`success`, `replayed`, `rejected`, ...) and the status;
//! what the inner service logs sits in that span, on every attempt. The
//! server behind `IdempotencyLayer` logs in its own span
//! `idempotent_request` with the same key, so the two sides' lines meet.
//! The subscriber is the thread's default and the runtime has one thread,
//! so that the server's tasks report to it too; the test runs in a
//! process of its own, since tracing caches whether a span's callsite is
//! wanted for the whole process, and a test on another thread that made
//! a call first (with no subscriber) would have it cached as unwanted.
#![cfg(all(feature = "client", feature = "conformance-http", feature = "tracing"))]

use crate::common::http::Server;
use crate::common::spans::KeepSpans;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idemkv::client::{Backoff, BoxError, Jitter, RetryInfo, RetryLayer, RetryPolicy};
use idemkv::http::LayerConfig;
use idemkv::Config;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::{Layer as _, ServiceExt};
use tracing_subscriber::layer::SubscriberExt;

const CALL: &str = "idempotent_call";
const REQUEST: &str = "idempotent_request";

type Inner = tower::util::BoxCloneService<http::Request<Full<Bytes>>, http::Response<Full<Bytes>>, BoxError>;

/// The inner service: logs "sending", then sends through hyper-util's
/// client (and reads the answer whole), except that the first attempt of
/// a call to `/flaky` fails with a reset before anything is sent.
fn inner() -> Inner {
    let http = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let flaky = Arc::new(AtomicU32::new(0));
    let service = tower::service_fn(move |request: http::Request<Full<Bytes>>| {
        let (http, flaky) = (http.clone(), Arc::clone(&flaky));
        async move {
            tracing::info!("sending");
            if request.uri().path() == "/flaky" && flaky.fetch_add(1, Ordering::SeqCst) == 0 {
                return Err(Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionReset)) as BoxError);
            }
            send_whole(&http, request).await
        }
    });
    tower::util::BoxCloneService::new(service)
}

/// Sends `request` through hyper-util's client and reads the answer whole.
pub async fn send_whole(
    http: &Client<HttpConnector, Full<Bytes>>,
    request: http::Request<Full<Bytes>>,
) -> Result<http::Response<Full<Bytes>>, BoxError> {
    let (parts, body) = http.request(request).await?.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(http::Response::from_parts(parts, Full::new(body)))
}

#[test]
fn a_call_runs_in_a_span_with_its_key_attempts_and_outcome() {
    crate::common::own_process(module_path!(), "a_call_runs_in_a_span_with_its_key_attempts_and_outcome", || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(calls_in_spans());
    });
}

async fn calls_in_spans() {
    let keep = KeepSpans::new(&[CALL, REQUEST]);
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(keep.clone()));
    let charge = || async {
        tracing::info!("charging");
        (StatusCode::CREATED, "charged")
    };
    let refuse = || async { (StatusCode::UNPROCESSABLE_ENTITY, "no such account") };
    let routes =
        Router::new().route("/payments", post(charge)).route("/flaky", post(charge)).route("/refused", post(refuse));
    let server = Server::start(Config::new(), LayerConfig::global(), routes).await;
    let policy = RetryPolicy::new()
        .backoff(Backoff::new(Duration::from_millis(5), Duration::from_millis(5)).jitter(Jitter::None))
        .budget(None)
        .breaker(None);
    let client = RetryLayer::new(policy).layer(inner());
    let send = |path: &str, key: &'static str| {
        let request = http::Request::post(server.url(path)).header("idempotency-key", key);
        let request = request.body(Full::new(Bytes::from_static(b"amount=10"))).expect("request");
        let client = client.clone();
        async move {
            let response = client.oneshot(request).await.expect("an answer");
            let info = response.extensions().get::<RetryInfo>().cloned().expect("retry info");
            (response.status().as_u16(), info.attempts, info.replayed)
        }
    };

    assert_eq!(send("/payments?token=secret", "pay-1").await, (201, 1, false));
    assert_eq!(send("/payments?token=secret", "pay-1").await, (201, 1, true), "the server's replay");
    assert_eq!(send("/flaky", "pay-2").await, (201, 2, false), "a reset, then an answer");
    assert_eq!(send("/refused", "pay-3").await, (422, 1, false));

    let calls = keep.seen(CALL);
    assert_eq!(calls.len(), 4, "one span a call: {calls:?}");
    let fields: Vec<_> = calls
        .iter()
        .map(|span| (span.field("key"), span.field("attempt"), span.field("outcome"), span.field("status")))
        .collect();
    let expected = [
        (Some("pay-1"), Some("1"), Some("success"), Some("201")),
        (Some("pay-1"), Some("1"), Some("replayed"), Some("201")),
        (Some("pay-2"), Some("2"), Some("success"), Some("201")),
        (Some("pay-3"), Some("1"), Some("rejected"), Some("422")),
    ];
    assert_eq!(fields, expected, "{calls:?}");
    let authority = server.base.trim_start_matches("http://");
    for span in &calls {
        assert_eq!((span.field("method"), span.field("authority")), (Some("POST"), Some(authority)), "{span:?}");
        assert!(span.fields.values().all(|value| !value.contains("secret")), "no query in the span: {span:?}");
    }
    assert_eq!(calls[0].field("path"), Some("/payments"));
    let sending: Vec<_> = calls.iter().map(|span| span.lines("sending")).collect();
    assert_eq!(sending, [1, 1, 2, 1], "the inner service's lines sit in their call's span, every attempt's");

    // The server's line sits in its own span, under the same key.
    let requests = keep.seen(REQUEST);
    let charged: Vec<_> =
        requests.iter().filter(|span| span.lines("charging") > 0).map(|span| span.field("key")).collect();
    assert_eq!(charged, [Some("pay-1"), Some("pay-2")], "{requests:?}");
}
