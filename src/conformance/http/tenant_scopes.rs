//! Guards chosen scopes: keys scoped by an `X-Account` header are per
//! tenant, so two tenants with the same key and body each get their own
//! run and answer; a request that names no tenant is refused.

use super::fixture::{Fixture, FixtureAnswer};
use super::harness::key;
use super::harness::{client, post as post_to, send, Counter};
use super::target::{ServeTarget, Server, Tower};
use crate::backend::IdempotencyBackend;
use crate::conformance::Setting;
use crate::http::LayerConfig;
use http::header::LOCATION;
use http::{HeaderValue, Method, StatusCode};

fn create(runs: &Counter) -> std::future::Ready<FixtureAnswer> {
    let run = runs.bump();
    let location = HeaderValue::from_str(&format!("/payments/{run}")).unwrap_or(HeaderValue::from_static("/"));
    std::future::ready(FixtureAnswer::text(StatusCode::CREATED, format!("payment {run}")).header(LOCATION, location))
}

/// Keys scoped by an `X-Account` header are per tenant: two tenants with
/// one key and body each get their own run and answer, and their retries
/// their own replay; a request that names no tenant is 400 `scope-missing`.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn tenant_scopes<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    tenant_scopes_on(&Tower(backend), setting).await;
}

/// [`tenant_scopes`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn tenant_scopes_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let runs = Counter::default();
    let counted = runs.clone();
    let fixture = Fixture::new().route(Method::POST, "/payments", move |_| create(&counted));
    let layer =
        LayerConfig::scoped(|request| request.headers.get("x-account").map(|account| account.as_bytes().to_vec()));
    let server = Server::start(target, layer, fixture).await;
    let client = client();
    let url = server.url("/payments");
    let order = key(setting, "order-1");
    let as_tenant = |account: &str| post_to(&client, &url, &order, "amount=10").header("X-Account", account);

    let alice = send(as_tenant("alice")).await;
    let bob = send(as_tenant("bob")).await;
    assert_eq!((alice.status, alice.replayed()), (201, false), "{alice:?}");
    assert_eq!((bob.status, bob.replayed()), (201, false), "{bob:?}");
    assert_eq!(runs.get(), 2, "each tenant's request ran");
    let (alice_at, bob_at) = (alice.header("location").expect("location"), bob.header("location").expect("location"));
    assert_ne!(alice_at, bob_at, "two tenants got one answer");

    let alice_again = send(as_tenant("alice")).await;
    let bob_again = send(as_tenant("bob")).await;
    assert_eq!((alice_again.replayed(), alice_again.header("location")), (true, Some(alice_at)), "{alice_again:?}");
    assert_eq!((bob_again.replayed(), bob_again.header("location")), (true, Some(bob_at)), "{bob_again:?}");
    assert_eq!(runs.get(), 2, "each tenant's retry replayed");

    let nobody = send(post_to(&client, &url, &order, "amount=10")).await;
    assert!(nobody.is_problem(400, "scope-missing"), "{nobody:?}");
    assert_eq!(runs.get(), 2, "a request without a tenant did not run");
    server.stop().await;
}
