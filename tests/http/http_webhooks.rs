//! Signed webhooks over a real server and client: verified before anything
//! runs (a tampered body, a stale timestamp, missing headers, an unknown
//! secret are 400/401 problems and run nothing), then run once per
//! webhook id — redelivered, re-signed, reordered or sent eight times at
//! once, each id's handler runs once; a failing handler's webhook is
//! retried, then a dead letter; a secret rotation verifies both secrets;
//! Stripe's scheme the same; and the outbox's HTTP sink signs what it
//! sends, which the layer verifies and deduplicates.

#![cfg(feature = "webhooks")]

use crate::common::http::{client, open_store, send, Reply};
use axum::extract::Extension;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use idemkv::http::{WebhookAttempt, WebhookLayer};
use idemkv::webhook::{StandardWebhooks, StripeSignature, WebhookVerifier};
use idemkv::{Config, Durability, Inbox, Store};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

const OLD: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const NEW: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The handler's runs, by webhook id, with the attempt each saw.
type Runs = Arc<Mutex<HashMap<String, Vec<u32>>>>;

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after the epoch").as_secs()
}

/// Records the run; a body that says `fail` answers 500.
async fn hook(
    Extension(runs): Extension<Runs>,
    Extension(attempt): Extension<WebhookAttempt>,
    body: Bytes,
) -> (StatusCode, String) {
    runs.lock().entry(attempt.id.clone()).or_default().push(attempt.attempt);
    if body.as_ref() == b"fail" {
        return (StatusCode::INTERNAL_SERVER_ERROR, "down".into());
    }
    (StatusCode::OK, format!("recorded {}", attempt.id))
}

struct Receiver {
    base: String,
    runs: Runs,
    store: Store,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    fn ran(&self, id: &str) -> usize {
        self.runs.lock().get(id).map_or(0, Vec::len)
    }
}

async fn receiver<V: WebhookVerifier>(verifier: V) -> Receiver {
    let (dir, store) = open_store(Config::new().durability(Durability::Buffered));
    let runs = Runs::default();
    let inbox = Inbox::new(store.clone()).max_attempts(3);
    let layer = WebhookLayer::new(verifier, inbox, "hooks").expect("layer");
    let app = Router::new().route("/hooks", post(hook)).layer(layer).layer(Extension(Arc::clone(&runs)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    let task = tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    Receiver { base, runs, store, _dir: dir, task }
}

async fn deliver(receiver: &Receiver, headers: &axum::http::HeaderMap, body: &[u8]) -> Reply {
    let mut request = client().post(format!("{}/hooks", receiver.base)).body(body.to_vec());
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_bytes());
    }
    send(request).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_runs_once_however_often_and_in_whatever_order_it_comes() {
    let receiver = receiver(StandardWebhooks::new([OLD]).expect("secret")).await;
    let sender = StandardWebhooks::new([OLD]).expect("secret");
    let body = br#"{"type":"invoice.paid","invoice":"in_1"}"#;
    let first = deliver(&receiver, &sender.headers("msg_a", now(), body), body).await;
    assert_eq!((first.status, first.body.as_str()), (200, "recorded msg_a"));
    // Redelivered as sent, and re-signed later as a sender's retry is.
    for headers in [sender.headers("msg_a", now(), body), sender.headers("msg_a", now() + 1, body)] {
        let again = deliver(&receiver, &headers, body).await;
        assert_eq!((again.status, again.body.as_str()), (200, r#"{"webhook":"duplicate"}"#));
        assert!(again.replayed());
    }
    // Reordered: b, c, b, a, c — each id runs once.
    for id in ["msg_b", "msg_c", "msg_b", "msg_a", "msg_c"] {
        let reply = deliver(&receiver, &sender.headers(id, now(), body), body).await;
        assert_eq!(reply.status, 200, "{reply:?}");
    }
    // Eight at once.
    let headers = sender.headers("msg_d", now(), body);
    let replies = futures_util::future::join_all((0..8).map(|_| deliver(&receiver, &headers, body))).await;
    assert!(replies.iter().all(|reply| reply.status == 200 || reply.is_problem(409, "in-progress")), "{replies:?}");
    for id in ["msg_a", "msg_b", "msg_c", "msg_d"] {
        assert_eq!(receiver.ran(id), 1, "{id}");
    }
    // The same id with another body: never run.
    let other = br#"{"type":"invoice.voided"}"#;
    assert!(deliver(&receiver, &sender.headers("msg_a", now(), other), other)
        .await
        .is_problem(422, "webhook-id-reused"));
    assert_eq!(receiver.ran("msg_a"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unverified_webhook_is_refused_and_runs_nothing() {
    let receiver = receiver(StandardWebhooks::new([OLD]).expect("secret")).await;
    let sender = StandardWebhooks::new([OLD]).expect("secret");
    let body = br#"{"type":"invoice.paid"}"#;
    let tampered = deliver(&receiver, &sender.headers("msg_1", now(), body), br#"{"type":"invoice.PAID"}"#).await;
    assert!(tampered.is_problem(401, "webhook-signature-invalid"), "{tampered:?}");
    let stale = deliver(&receiver, &sender.headers("msg_2", now() - 600, body), body).await;
    assert!(stale.is_problem(401, "webhook-stale"), "{stale:?}");
    let future = deliver(&receiver, &sender.headers("msg_3", now() + 600, body), body).await;
    assert!(future.is_problem(401, "webhook-stale"), "{future:?}");
    let stranger = StandardWebhooks::new([NEW]).expect("secret");
    assert!(deliver(&receiver, &stranger.headers("msg_4", now(), body), body)
        .await
        .is_problem(401, "webhook-signature-invalid"));
    for name in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
        let mut headers = sender.headers("msg_5", now(), body);
        headers.remove(name);
        assert!(deliver(&receiver, &headers, body).await.is_problem(400, "webhook-unsigned"), "{name}");
    }
    let long = "m".repeat(2000);
    assert!(deliver(&receiver, &sender.headers(&long, now(), body), body).await.is_problem(400, "webhook-id-too-long"));
    assert!(receiver.runs.lock().is_empty(), "nothing ran");
    // Verified afterwards, the id is still new: a refusal spent nothing.
    assert_eq!(deliver(&receiver, &sender.headers("msg_1", now(), body), body).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_webhook_is_retried_then_a_dead_letter() {
    let receiver = receiver(StandardWebhooks::new([OLD]).expect("secret")).await;
    let sender = StandardWebhooks::new([OLD]).expect("secret");
    let statuses: Vec<u16> = {
        let mut statuses = Vec::new();
        for _ in 0..4 {
            statuses.push(deliver(&receiver, &sender.headers("msg_f", now(), b"fail"), b"fail").await.status);
        }
        statuses
    };
    assert_eq!(statuses, [500, 500, 202, 202], "two failures answered, the third a dead letter, then quarantined");
    assert_eq!(receiver.runs.lock()["msg_f"], [1, 2, 3], "three attempts, counted");
    let inbox = Inbox::new(receiver.store.clone());
    let dead = inbox.dead_letters("hooks", None, 10).await.expect("dead letters");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message_id, b"msg_f");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_verifies_the_old_and_the_new_secret() {
    let receiver = receiver(StandardWebhooks::new([NEW, OLD]).expect("secrets")).await;
    let body = br#"{"type":"invoice.paid"}"#;
    for (id, secret) in [("msg_old", OLD), ("msg_new", NEW)] {
        let sender = StandardWebhooks::new([secret]).expect("secret");
        assert_eq!(deliver(&receiver, &sender.headers(id, now(), body), body).await.status, 200, "{id}");
    }
    // A sender mid-rotation signs with both.
    let both = StandardWebhooks::new([NEW, OLD]).expect("secrets");
    assert_eq!(deliver(&receiver, &both.headers("msg_both", now(), body), body).await.status, 200);
    assert_eq!((receiver.ran("msg_old"), receiver.ran("msg_new"), receiver.ran("msg_both")), (1, 1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stripe_event_runs_once_by_its_event_id() {
    let receiver = receiver(StripeSignature::new(["whsec_stripe"]).expect("secret")).await;
    let stripe = StripeSignature::new(["whsec_stripe"]).expect("secret");
    let body = br#"{"id":"evt_9","type":"charge.succeeded"}"#;
    for _ in 0..3 {
        assert_eq!(deliver(&receiver, &stripe.headers(now(), body), body).await.status, 200);
    }
    assert_eq!(receiver.ran("evt_9"), 1);
    let forged = StripeSignature::new(["whsec_other"]).expect("secret");
    assert!(deliver(&receiver, &forged.headers(now(), body), body).await.is_problem(401, "webhook-signature-invalid"));
    let stale = deliver(&receiver, &stripe.headers(now() - 3600, body), body).await;
    assert!(stale.is_problem(401, "webhook-stale"));
}

/// A sink that delivers every message twice, as a relay that died after
/// a delivery and before its record of it would.
#[cfg(feature = "client")]
struct Twice<S>(S);

#[cfg(feature = "client")]
impl<S: idemkv::Sink + Sync> idemkv::Sink for Twice<S> {
    async fn deliver(&self, message: &idemkv::Staged) -> Result<(), idemkv::SinkError> {
        self.0.deliver(message).await?;
        self.0.deliver(message).await
    }
}

/// The relay's HTTP sink signs each message; the receiver verifies it and
/// runs each message once, though it comes twice; unsigned, it is refused
/// for good.
#[cfg(feature = "client")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_sink_signs_what_the_layer_verifies() {
    use http_body_util::Full;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    use idemkv::{
        ClaimOptions, Fingerprint, HttpSink, KeyDelivery, Outbox, OutboxMessage, Produced, Relay, RelayConfig,
    };

    let receiver = receiver(StandardWebhooks::new([OLD]).expect("secret")).await;
    let (_dir, store) = open_store(Config::new().durability(Durability::Buffered));
    let store = Arc::new(store);
    let outbox = Outbox::shared(Arc::clone(&store));
    for key in [&b"order-1"[..], b"order-2"] {
        let produced = Produced::Complete {
            response: b"201".to_vec(),
            messages: vec![OutboxMessage::new("hooks", [b"placed ", key].concat())],
        };
        outbox.run(b"shop", key, Fingerprint::of(key), ClaimOptions::new(), |_| async { produced }).await.expect("run");
    }
    let http = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let scheme = StandardWebhooks::new([OLD]).expect("secret");
    let signed = Twice(HttpSink::new(receiver.base.clone(), http.clone()).signed(scheme));
    let relay = Relay::new(Arc::clone(&store), signed, RelayConfig::new(["shop"]));
    assert_eq!(relay.deliver_key(b"shop", b"order-1").await.expect("deliver"), Some(KeyDelivery::Done(1)));
    let runs = receiver.runs.lock().clone();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(runs.keys().all(|id| id.starts_with("ob-")), "deduplicated by the message id: {runs:?}");
    assert!(runs.values().all(|attempts| attempts == &[1]), "once: {runs:?}");

    let unsigned =
        Relay::new(Arc::clone(&store), HttpSink::new(receiver.base.clone(), http), RelayConfig::new(["shop"]));
    assert_eq!(
        unsigned.deliver_key(b"shop", b"order-2").await.expect("deliver"),
        Some(KeyDelivery::Dead),
        "a 400 at once"
    );
    assert_eq!(receiver.runs.lock().len(), 1);
}
