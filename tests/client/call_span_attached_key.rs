//! The span of a call that names no key, over real HTTP: a POST sent
//! without an `Idempotency-Key` carries the one the layer attaches (a
//! quoted UUID v7, the same on every attempt), and its `idempotent_call`
//! span's `key` is that key without its quotes: the value `RetryInfo`
//! hands back, unquoted, and the one the server's `idempotent_request`
//! span holds. A GET sent without a key carries none, and its span has
//! no `key`. The test runs in a process of its own, for the reason
//! `call_span.rs` gives.
#![cfg(all(feature = "client", feature = "conformance-http", feature = "tracing"))]

use crate::call_span::send_whole;
use crate::common::http::Server;
use crate::common::spans::KeepSpans;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idemkv::client::{BoxError, RetryInfo, RetryLayer, RetryPolicy};
use idemkv::http::LayerConfig;
use idemkv::Config;
use tower::{Layer as _, ServiceExt};
use tracing_subscriber::layer::SubscriberExt;

const CALL: &str = "idempotent_call";
const REQUEST: &str = "idempotent_request";

type Inner = tower::util::BoxCloneService<http::Request<Full<Bytes>>, http::Response<Full<Bytes>>, BoxError>;

/// The inner service: sends through hyper-util's client and reads the
/// answer whole.
fn inner() -> Inner {
    let http = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let service = tower::service_fn(move |request: http::Request<Full<Bytes>>| {
        let http = http.clone();
        async move { send_whole(&http, request).await }
    });
    tower::util::BoxCloneService::new(service)
}

#[test]
fn a_call_without_a_key_of_its_own_has_the_attached_key_or_none_in_its_span() {
    crate::common::own_process(
        module_path!(),
        "a_call_without_a_key_of_its_own_has_the_attached_key_or_none_in_its_span",
        || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(calls_without_keys());
        },
    );
}

async fn calls_without_keys() {
    let keep = KeepSpans::new(&[CALL, REQUEST]);
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(keep.clone()));
    let charge = || async {
        tracing::info!("charging");
        (StatusCode::CREATED, "charged")
    };
    let list = || async { (StatusCode::OK, "[]") };
    let routes = Router::new().route("/payments", post(charge).get(list));
    let server = Server::start(Config::new(), LayerConfig::global(), routes).await;
    let client = RetryLayer::new(RetryPolicy::new().budget(None).breaker(None)).layer(inner());

    let post = http::Request::post(server.url("/payments")).body(Full::new(Bytes::from_static(b"amount=10")));
    let posted = client.clone().oneshot(post.expect("request")).await.expect("an answer");
    assert_eq!(posted.status(), StatusCode::CREATED);
    let info = posted.extensions().get::<RetryInfo>().cloned().expect("retry info");
    let attached = info.idempotency_key.expect("a key attached to the POST");
    let attached = attached.to_str().expect("ascii");
    let unquoted = attached.strip_prefix('"').and_then(|rest| rest.strip_suffix('"')).expect("an sf-string");
    assert_eq!(uuid::Uuid::parse_str(unquoted).expect("a UUID").get_version_num(), 7, "{attached}");

    let get = http::Request::get(server.url("/payments")).body(Full::new(Bytes::new()));
    let listed = client.clone().oneshot(get.expect("request")).await.expect("an answer");
    assert_eq!(listed.status(), StatusCode::OK);
    let info = listed.extensions().get::<RetryInfo>().cloned().expect("retry info");
    assert_eq!(info.idempotency_key, None, "nothing attached to a GET");

    let calls = keep.seen(CALL);
    let fields: Vec<_> =
        calls.iter().map(|span| (span.field("method"), span.field("key"), span.field("outcome"))).collect();
    let expected = [(Some("POST"), Some(unquoted), Some("success")), (Some("GET"), None, Some("success"))];
    assert_eq!(fields, expected, "{calls:?}");

    // The server read the attached key as the client's span wrote it.
    let requests = keep.seen(REQUEST);
    let charged: Vec<_> =
        requests.iter().filter(|span| span.lines("charging") > 0).map(|span| span.field("key")).collect();
    assert_eq!(charged, [Some(unquoted)], "{requests:?}");
}
