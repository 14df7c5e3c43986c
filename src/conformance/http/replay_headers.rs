//! Guards what a replay carries: the stored headers (`ETag`,
//! `x-request-id`, a custom header, both `set-cookie` fields) but not the
//! first answer's `Date`, and no header on the `replay_deny` list; and what
//! a waited replay says of its preference.

use super::fixture::{Fixture, FixtureAnswer};
use super::harness::key;
use super::harness::{client, post as post_to, send, Counter};
use super::target::{ServeTarget, Server, Tower};
use crate::backend::IdempotencyBackend;
use crate::conformance::Setting;
use crate::http::LayerConfig;
use http::header::{HeaderName, DATE, ETAG, SET_COOKIE};
use http::{HeaderValue, Method, StatusCode};

/// A `Date` no server would send today, to tell the first answer's from a
/// fresh one.
const OLD_DATE: &str = "Mon, 01 Jan 2001 00:00:00 GMT";

fn create(runs: &Counter) -> std::future::Ready<FixtureAnswer> {
    let run = runs.bump();
    let request_id = HeaderValue::from_str(&format!("req-{run}")).unwrap_or(HeaderValue::from_static("req-?"));
    let answer = FixtureAnswer::text(StatusCode::CREATED, format!("payment {run}"))
        .header(ETAG, HeaderValue::from_static("\"v1\""))
        .header(HeaderName::from_static("x-request-id"), request_id)
        .header(HeaderName::from_static("x-payment-region"), HeaderValue::from_static("eu-west"))
        .append(SET_COOKIE, HeaderValue::from_static("session=abc; Path=/"))
        .append(SET_COOKIE, HeaderValue::from_static("theme=dark; Path=/"))
        .header(DATE, HeaderValue::from_static(OLD_DATE))
        .header(HeaderName::from_static("x-internal-trace"), HeaderValue::from_static("node-7"));
    std::future::ready(answer)
}

/// A replay carries the stored headers (`ETag`, `x-request-id`, a custom
/// header, both `set-cookie` fields) but not the first answer's `Date`, nor
/// a header on the `replay_deny` list.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn replay_headers<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    replay_headers_on(&Tower(backend), setting).await;
}

/// [`replay_headers`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn replay_headers_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let runs = Counter::default();
    let counted = runs.clone();
    let fixture = Fixture::new().route(Method::POST, "/payments", move |_| create(&counted));
    let layer = LayerConfig::global().replay_deny(vec![HeaderName::from_static("x-internal-trace")]);
    let server = Server::start(target, layer, fixture).await;
    let client = client();
    let url = server.url("/payments");
    let order = key(setting, "order-h");

    let first = send(post_to(&client, &url, &order, "amount=1")).await;
    assert_eq!((first.status, first.replayed()), (201, false), "{first:?}");
    assert_eq!(first.header("date"), Some(OLD_DATE), "the handler's own Date goes out the first time");
    assert_eq!(first.header("x-internal-trace"), Some("node-7"), "a denied header still goes out the first time");

    let replay = send(post_to(&client, &url, &order, "amount=1")).await;
    assert_eq!((replay.status, replay.replayed(), &replay.body), (201, true, &first.body), "{replay:?}");
    assert_eq!(runs.get(), 1);
    assert_eq!(replay.header("etag"), Some("\"v1\""));
    assert_eq!(replay.header("x-request-id"), Some("req-1"));
    assert_eq!(replay.header("x-payment-region"), Some("eu-west"));
    assert_eq!(replay.header_all("set-cookie"), ["session=abc; Path=/", "theme=dark; Path=/"]);
    assert_ne!(replay.header("date"), Some(OLD_DATE), "the first answer's Date was replayed");
    assert_eq!(replay.header("x-internal-trace"), None, "a header in replay_deny was replayed");
    server.stop().await;
}

/// Takes 1 s, so that duplicates arrive while it runs.
async fn slow(runs: Counter) -> FixtureAnswer {
    let run = runs.bump();
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    FixtureAnswer::text(StatusCode::CREATED, format!("payment {run}"))
}

/// A duplicate that waited (`Prefer: wait=N`) is told `Preference-Applied:
/// wait=N` (RFC 7240), N capped by `wait_max`; one that did not wait is
/// told to look again within a second, not when the lease would end.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn waited_replay<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    waited_replay_on(&Tower(backend), setting).await;
}

/// [`waited_replay`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn waited_replay_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let runs = Counter::default();
    let counted = runs.clone();
    let fixture = Fixture::new().route(Method::POST, "/payments", move |_| slow(counted.clone()));
    let layer = LayerConfig::global().wait_max(std::time::Duration::from_secs(20));
    let server = Server::start(target, layer, fixture).await;
    let client = client();
    let url = server.url("/payments");
    let order = key(setting, "order-wait");
    let first = tokio::spawn(send(post_to(&client, &url, &order, "amount=1")));
    runs.reach(1, std::time::Duration::from_secs(10), "the first started").await;
    let at_once = send(post_to(&client, &url, &order, "amount=1")).await;
    assert!(at_once.is_problem(409, "in-progress"), "{at_once:?}");
    assert_eq!(at_once.header("retry-after"), Some("1"), "{at_once:?}");
    assert_eq!(at_once.header("preference-applied"), None, "{at_once:?}");
    let waited = send(post_to(&client, &url, &order, "amount=1").header("Prefer", "wait=60")).await;
    assert_eq!((waited.status, waited.body.as_str(), waited.replayed()), (201, "payment 1", true), "{waited:?}");
    assert_eq!(waited.header("preference-applied"), Some("wait=20"), "{waited:?}");
    assert_eq!(first.await.expect("join").body, "payment 1");
    assert_eq!(runs.get(), 1);
    server.stop().await;
}
