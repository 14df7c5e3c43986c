//! Guards the JSON fingerprint over real HTTP: a retry whose body a
//! client re-serialised (other key order, whitespace, `10.0` for `10`,
//! an escaped character) replays the first answer; one whose amount
//! changed is 422 `key-reused`; a field the service leaves out may
//! change; a body that is not JSON is a 400 `body-not-json` problem with
//! its stable `code`, and the handler never runs for it.
#![cfg(feature = "tower")]

use crate::common::http::Server;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use idemkv::conformance::http::harness::{client, post as post_to, send, Counter};
use idemkv::fingerprint::RequestFingerprint;
use idemkv::http::LayerConfig;
use idemkv::Config;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_re_serialised_body_replays_and_a_changed_amount_does_not() {
    let runs = Counter::default();
    let charge = |State(runs): State<Counter>, body: String| async move {
        (StatusCode::CREATED, format!("payment {} of {body}", runs.bump()))
    };
    let routes = Router::new().route("/payments", post(charge)).with_state(runs.clone());
    let fingerprint = RequestFingerprint::json().exclude("/metadata/trace_id").build().expect("rules");
    let server = Server::start(Config::new(), LayerConfig::global().fingerprint(fingerprint), routes).await;
    let (client, url) = (client(), server.url("/payments"));
    let json = |key: &str, body: &str| post_to(&client, &url, key, body).header("content-type", "application/json");

    let body = r#"{"amount":10,"currency":"EUR","payee":{"iban":"DE89","name":"Ann"},"metadata":{"trace_id":"t-1"}}"#;
    let first = send(json("pay-1", body)).await;
    assert_eq!((first.status, first.replayed()), (201, false), "{first:?}");

    let reserialised = "{ \"metadata\": {\"trace_id\": \"t-2\"},\n  \"payee\": {\"name\": \"\\u0041nn\", \"iban\": \"DE89\"},\n  \"currency\": \"EUR\", \"amount\": 10.0 }";
    let again = send(json("pay-1", reserialised)).await;
    assert_eq!((again.status, again.replayed(), &again.body), (201, true, &first.body), "{again:?}");
    // Without its trace id: left out, present or not (the object that
    // held it is still there).
    let exponent =
        send(json("pay-1", r#"{"amount":1e1,"currency":"EUR","payee":{"iban":"DE89","name":"Ann"},"metadata":{}}"#))
            .await;
    assert_eq!((exponent.status, exponent.replayed()), (201, true), "{exponent:?}");

    let changed = body.replace(r#""amount":10"#, r#""amount":11"#);
    let changed = send(json("pay-1", &changed)).await;
    assert!(changed.is_problem(422, "key-reused"), "{changed:?}");
    assert!(changed.body.contains(r#""code":"fingerprint-mismatch""#), "{}", changed.body);

    for not_json in ["amount=10", r#"{"amount":10"#, "", r#"{"amount":10,"amount":11}"#] {
        let refused = send(post_to(&client, &url, "pay-2", not_json)).await;
        assert!(refused.is_problem(400, "body-not-json"), "{not_json:?}: {refused:?}");
        assert!(refused.body.contains(r#""code":"body-not-json""#), "{}", refused.body);
        assert!(refused.body.contains(r#""status":400"#), "{}", refused.body);
    }
    // Nothing was claimed for the refused bodies: the key is still new.
    let later = send(json("pay-2", body)).await;
    assert_eq!((later.status, later.replayed()), (201, false), "{later:?}");
    assert_eq!(runs.get(), 2, "one run per key, none for what was refused");
}
