//! The same requests to the tower layer (an axum server) and to the
//! middleware (an actix server), over stores of their own, get the same
//! statuses, the same headers of the contract and the same bodies.

use crate::server::{start, store};
use axum::routing::post as axum_post;
use idemkv::conformance::http::harness::{client, post, send, Counter, Reply, Served};
use idemkv::http::LayerConfig;

/// The headers a comparison reads (not `date`, nor what each server adds
/// of its own).
const HEADERS: [&str; 6] =
    ["content-type", "idempotency-replay", "retry-after", "x-run", "idempotency-stored", "content-length"];

fn axum_routes(runs: Counter) -> axum::Router {
    let payment = |axum::extract::State(runs): axum::extract::State<Counter>, body: axum::body::Bytes| async move {
        let run = runs.bump();
        (
            axum::http::StatusCode::CREATED,
            [("x-run", run.to_string())],
            format!("payment {run} of {} bytes", body.len()),
        )
    };
    axum::Router::new().route("/payments", axum_post(payment)).with_state(runs)
}

fn seen(reply: &Reply) -> (u16, Vec<Option<String>>, String) {
    (reply.status, HEADERS.iter().map(|name| reply.header(name).map(str::to_owned)).collect(), reply.body.clone())
}

#[actix_web::test]
async fn the_middleware_answers_as_the_tower_layer() {
    let actix = start(LayerConfig::global()).await;
    let (tower_store, _dir) = store();
    let tower = Served::start(&tower_store, LayerConfig::global(), axum_routes(Counter::default())).await;
    let client = client();
    let sends: [(Option<&str>, &str); 6] = [
        (Some("same-1"), "amount=10"),
        (Some("same-1"), "amount=10"),
        (Some("same-1"), "amount=11"),
        (None, "amount=10"),
        (Some(""), "amount=10"),
        (Some("same-2"), ""),
    ];
    for (key, body) in sends {
        let to = |url: String| match key {
            Some(key) => post(&client, &url, key, body),
            None => client.post(url).body(body.to_owned()),
        };
        let from_tower = send(to(tower.url("/payments"))).await;
        let from_actix = send(to(actix.url("/payments"))).await;
        assert_eq!(seen(&from_actix), seen(&from_tower), "key {key:?}, body {body:?}");
    }
    tower.stop().await;
    actix.stop().await;
}
