//! Signed webhooks over a real server and client: verified before anything
//! runs (a tampered body, a stale timestamp, missing headers, an unknown
//! secret are 400/401 problems and run nothing), then run once per
//! webhook id — redelivered, re-signed, reordered or sent eight times at
//! once, each id's handler runs once; a failing handler's webhook is
//! retried, then a dead letter; a secret rotation verifies both secrets;
//! an unreadable signature beside a good one does not refuse it;
//! Stripe's scheme the same; and the outbox's HTTP sink signs what it
//! sends, which the layer verifies and deduplicates.

use super::harness::{client, send, Reply};
use super::harness::{key, Served};
use crate::conformance::Setting;
use crate::http::{WebhookAttempt, WebhookLayer};
use crate::webhook::{StandardWebhooks, StripeSignature, WebhookVerifier};
use crate::{backend::IdempotencyBackend, messaging::Inbox};
use axum::extract::Extension;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
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

struct Receiver<B> {
    server: Served,
    runs: Runs,
    inbox: Inbox<B>,
    consumer: String,
}

impl<B> Receiver<B> {
    fn ran(&self, id: &str) -> usize {
        self.runs.lock().get(id).map_or(0, Vec::len)
    }
}

async fn receiver<B: IdempotencyBackend + Clone, V: WebhookVerifier>(
    backend: &B,
    setting: &Setting,
    verifier: V,
) -> Receiver<B> {
    let runs = Runs::default();
    let inbox = Inbox::new(backend.clone()).max_attempts(3);
    let consumer = key(setting, "hooks");
    let layer = WebhookLayer::new(verifier, inbox.clone(), &consumer).expect("layer");
    let app = Router::new().route("/hooks", post(hook)).layer(layer).layer(Extension(Arc::clone(&runs)));
    Receiver { server: Served::serve(app).await, runs, inbox, consumer }
}

async fn deliver<B>(receiver: &Receiver<B>, headers: &axum::http::HeaderMap, body: &[u8]) -> Reply {
    let mut request = client().post(receiver.server.url("/hooks")).body(body.to_vec());
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_bytes());
    }
    send(request).await
}

/// A signed webhook (Standard Webhooks) runs once however often and in
/// whatever order it comes — redelivered, re-signed, reordered, eight at
/// once — and its id with another body is 422 `webhook-id-reused`.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn webhooks_once<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let receiver = receiver(backend, setting, StandardWebhooks::new([OLD]).expect("secret")).await;
    let sender = StandardWebhooks::new([OLD]).expect("secret");
    let id = |name: &str| key(setting, name);
    let body = br#"{"type":"invoice.paid","invoice":"in_1"}"#;
    let first = deliver(&receiver, &sender.headers(&id("a"), now(), body), body).await;
    assert_eq!((first.status, first.body.clone()), (200, format!("recorded {}", id("a"))));
    // Redelivered as sent, and re-signed later as a sender's retry is.
    for headers in [sender.headers(&id("a"), now(), body), sender.headers(&id("a"), now() + 1, body)] {
        let again = deliver(&receiver, &headers, body).await;
        assert_eq!((again.status, again.body.as_str()), (200, r#"{"webhook":"duplicate"}"#));
        assert!(again.replayed());
    }
    // Reordered: b, c, b, a, c — each id runs once.
    for name in ["b", "c", "b", "a", "c"] {
        let reply = deliver(&receiver, &sender.headers(&id(name), now(), body), body).await;
        assert_eq!(reply.status, 200, "{reply:?}");
    }
    // Eight at once.
    let headers = sender.headers(&id("d"), now(), body);
    let replies = futures_util::future::join_all((0..8).map(|_| deliver(&receiver, &headers, body))).await;
    assert!(replies.iter().all(|reply| reply.status == 200 || reply.is_problem(409, "in-progress")), "{replies:?}");
    for name in ["a", "b", "c", "d"] {
        assert_eq!(receiver.ran(&id(name)), 1, "{name}");
    }
    // The same id with another body: never run.
    let other = br#"{"type":"invoice.voided"}"#;
    let reused = deliver(&receiver, &sender.headers(&id("a"), now(), other), other).await;
    assert!(reused.is_problem(422, "webhook-id-reused"), "{reused:?}");
    assert_eq!(receiver.ran(&id("a")), 1);
    receiver.server.stop().await;
}

/// An unverified webhook — a tampered body, a stale or future timestamp, an
/// unknown secret, a missing header, an over-long id — is a 400 or 401
/// problem and runs nothing; a refusal spends nothing.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn webhooks_refused<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let receiver = receiver(backend, setting, StandardWebhooks::new([OLD]).expect("secret")).await;
    let sender = StandardWebhooks::new([OLD]).expect("secret");
    let id = |name: &str| key(setting, name);
    let body = br#"{"type":"invoice.paid"}"#;
    let tampered = deliver(&receiver, &sender.headers(&id("1"), now(), body), br#"{"type":"invoice.PAID"}"#).await;
    assert!(tampered.is_problem(401, "webhook-signature-invalid"), "{tampered:?}");
    let stale = deliver(&receiver, &sender.headers(&id("2"), now() - 600, body), body).await;
    assert!(stale.is_problem(401, "webhook-stale"), "{stale:?}");
    let future = deliver(&receiver, &sender.headers(&id("3"), now() + 600, body), body).await;
    assert!(future.is_problem(401, "webhook-stale"), "{future:?}");
    let stranger = StandardWebhooks::new([NEW]).expect("secret");
    let forged = deliver(&receiver, &stranger.headers(&id("4"), now(), body), body).await;
    assert!(forged.is_problem(401, "webhook-signature-invalid"), "{forged:?}");
    for name in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
        let mut headers = sender.headers(&id("5"), now(), body);
        headers.remove(name);
        assert!(deliver(&receiver, &headers, body).await.is_problem(400, "webhook-unsigned"), "{name}");
    }
    let long = "m".repeat(3000);
    let too_long = deliver(&receiver, &sender.headers(&long, now(), body), body).await;
    assert!(too_long.is_problem(400, "webhook-id-too-long"), "{too_long:?}");
    let not_a_post = send(client().get(receiver.server.url("/hooks"))).await;
    assert_eq!(not_a_post.status, 405, "anything but a POST passes through to the router: {not_a_post:?}");
    assert!(receiver.runs.lock().is_empty(), "nothing ran");
    // Verified afterwards, the id is still new: a refusal spent nothing.
    assert_eq!(deliver(&receiver, &sender.headers(&id("1"), now(), body), body).await.status, 200);
    receiver.server.stop().await;
}

/// A webhook whose handler fails is retried, then a dead letter (202) once
/// its attempts are spent, listed by the inbox.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn webhooks_dead<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let receiver = receiver(backend, setting, StandardWebhooks::new([OLD]).expect("secret")).await;
    let sender = StandardWebhooks::new([OLD]).expect("secret");
    let id = key(setting, "f");
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(deliver(&receiver, &sender.headers(&id, now(), b"fail"), b"fail").await.status);
    }
    assert_eq!(statuses, [500, 500, 202, 202], "two failures answered, the third a dead letter, then quarantined");
    assert_eq!(receiver.runs.lock()[&id], [1, 2, 3], "three attempts, counted");
    let dead = receiver.inbox.dead_letters(&receiver.consumer, None, 10).await.expect("dead letters");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message_id, id.as_bytes());
    receiver.server.stop().await;
}

/// During a secret rotation, webhooks signed with the old secret, the new
/// one or both verify, each run once.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn webhooks_rotation<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let receiver = receiver(backend, setting, StandardWebhooks::new([NEW, OLD]).expect("secrets")).await;
    let body = br#"{"type":"invoice.paid"}"#;
    let id = |name: &str| key(setting, name);
    for (name, secret) in [("old", OLD), ("new", NEW)] {
        let sender = StandardWebhooks::new([secret]).expect("secret");
        assert_eq!(deliver(&receiver, &sender.headers(&id(name), now(), body), body).await.status, 200, "{name}");
    }
    // A sender mid-rotation signs with both.
    let both = StandardWebhooks::new([NEW, OLD]).expect("secrets");
    assert_eq!(deliver(&receiver, &both.headers(&id("both"), now(), body), body).await.status, 200);
    assert_eq!((receiver.ran(&id("old")), receiver.ran(&id("new")), receiver.ran(&id("both"))), (1, 1, 1));
    receiver.server.stop().await;
}

/// A signature header with an entry the verifier cannot read (a version to
/// come, bad base64 or hex, Stripe's `v0=`) beside a good signature is
/// accepted and run once, not refused whole; with nothing readable in it,
/// it is 400, and with only wrong signatures 401.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn webhooks_mixed<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let standard = receiver(backend, setting, StandardWebhooks::new([OLD]).expect("secret")).await;
    let sender = StandardWebhooks::new([OLD]).expect("secret");
    let (id, body) = (key(setting, "mixed"), br#"{"type":"invoice.paid"}"#);
    let mut headers = sender.headers(&id, now(), body);
    let good = headers["webhook-signature"].to_str().expect("ascii").to_owned();
    let mixed = format!("v1a,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= v1,not+base64! {good}");
    headers.insert("webhook-signature", mixed.parse().expect("value"));
    for _ in 0..2 {
        let reply = deliver(&standard, &headers, body).await;
        assert_eq!(reply.status, 200, "{reply:?}");
    }
    assert_eq!(standard.ran(&id), 1);
    headers.insert("webhook-signature", "v1a,AAAA v1,not+base64!".parse().expect("value"));
    assert!(deliver(&standard, &headers, body).await.is_problem(400, "webhook-unsigned"));
    headers.insert("webhook-signature", "v1a,AAAA v1,AAAA".parse().expect("value"));
    assert!(deliver(&standard, &headers, body).await.is_problem(401, "webhook-signature-invalid"));
    standard.server.stop().await;

    let stripes = receiver(backend, setting, StripeSignature::new(["whsec_stripe"]).expect("secret")).await;
    let stripe = StripeSignature::new(["whsec_stripe"]).expect("secret");
    let event = key(setting, "evt-mixed");
    let body = format!(r#"{{"id":"{event}","type":"charge.succeeded"}}"#).into_bytes();
    let mut headers = stripe.headers(now(), &body);
    let signed = headers["stripe-signature"].to_str().expect("ascii").to_owned();
    let (t, v1) = signed.split_once(',').expect("t and v1");
    let mixed = format!("{t},v1=zz,v0=00ff,{v1},garbage");
    headers.insert("stripe-signature", mixed.parse().expect("value"));
    for _ in 0..2 {
        let reply = deliver(&stripes, &headers, &body).await;
        assert_eq!(reply.status, 200, "{reply:?}");
    }
    assert_eq!(stripes.ran(&event), 1);
    stripes.server.stop().await;
}

/// A Stripe event runs once by its event id; a forged or stale signature is
/// 401.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn webhooks_stripe<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let receiver = receiver(backend, setting, StripeSignature::new(["whsec_stripe"]).expect("secret")).await;
    let stripe = StripeSignature::new(["whsec_stripe"]).expect("secret");
    let event = key(setting, "evt");
    let body = format!(r#"{{"id":"{event}","type":"charge.succeeded"}}"#).into_bytes();
    for _ in 0..3 {
        assert_eq!(deliver(&receiver, &stripe.headers(now(), &body), &body).await.status, 200);
    }
    assert_eq!(receiver.ran(&event), 1);
    let forged = StripeSignature::new(["whsec_other"]).expect("secret");
    let refused = deliver(&receiver, &forged.headers(now(), &body), &body).await;
    assert!(refused.is_problem(401, "webhook-signature-invalid"), "{refused:?}");
    let stale = deliver(&receiver, &stripe.headers(now() - 3600, &body), &body).await;
    assert!(stale.is_problem(401, "webhook-stale"), "{stale:?}");
    receiver.server.stop().await;
}

/// A sink that delivers every message twice, as a relay that died after
/// a delivery and before its record of it would.
#[cfg(feature = "client")]
struct Twice<S>(S);

#[cfg(feature = "client")]
impl<S: crate::messaging::Sink + Sync> crate::messaging::Sink for Twice<S> {
    async fn deliver(&self, message: &crate::messaging::Staged) -> Result<(), crate::messaging::SinkError> {
        self.0.deliver(message).await?;
        self.0.deliver(message).await
    }
}

/// The relay's HTTP sink signs each message; the layer verifies it and runs
/// each message once, though it comes twice; unsigned, it is refused for
/// good.
///
/// # Panics
/// When the layer over the backend answers otherwise.
#[cfg(feature = "client")]
pub async fn webhooks_signed_sink<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    use crate::{
        backend::ClaimOptions,
        messaging::{HttpSink, KeyDelivery, Outbox, OutboxMessage, Produced, Relay, RelayConfig},
        Fingerprint,
    };
    use http_body_util::Full;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    let receiver = receiver(backend, setting, StandardWebhooks::new([OLD]).expect("secret")).await;
    let shop = key(setting, "shop").into_bytes();
    let backend = Arc::new(backend.clone());
    let outbox = Outbox::shared(Arc::clone(&backend));
    for order in [&b"order-1"[..], b"order-2"] {
        let produced = Produced::Complete {
            response: b"201".to_vec(),
            messages: vec![OutboxMessage::new("hooks", [b"placed ", order].concat())],
        };
        outbox
            .run(&shop, order, Fingerprint::of(order), ClaimOptions::new(), |_| async { produced })
            .await
            .expect("run");
    }
    let http = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let scheme = StandardWebhooks::new([OLD]).expect("secret");
    let signed = Twice(HttpSink::new(receiver.server.url(""), http.clone()).signed(scheme));
    let relay = Relay::new(Arc::clone(&backend), signed, RelayConfig::new([&shop]));
    assert_eq!(relay.deliver_key(&shop, b"order-1").await.expect("deliver"), Some(KeyDelivery::Done(1)));
    let runs = receiver.runs.lock().clone();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(runs.keys().all(|id| id.starts_with("ob-")), "deduplicated by the message id: {runs:?}");
    assert!(runs.values().all(|attempts| attempts == &[1]), "once: {runs:?}");

    let unsigned =
        Relay::new(Arc::clone(&backend), HttpSink::new(receiver.server.url(""), http), RelayConfig::new([&shop]));
    let answer = unsigned.deliver_key(&shop, b"order-2").await.expect("deliver");
    assert_eq!(answer, Some(KeyDelivery::Dead), "a 400 at once");
    assert_eq!(receiver.runs.lock().len(), 1);
    receiver.server.stop().await;
}
