//! What the face refuses before anything runs, each a gRPC status with
//! its details: a malformed or missing `request_id`, a call with no
//! scope, a repeated `idempotency-key` metadata value (`INVALID_ARGUMENT`
//! with `BadRequest`), a scope at its quota (`RESOURCE_EXHAUSTED` with
//! `RetryInfo` and `QuotaFailure`), a closed store (`UNAVAILABLE` with
//! `RetryInfo`). The key in metadata works as the `request_id` does.

use crate::api::CHARGE;
use crate::server::{charge, client, counting, face, replayed, request_id, serve, serve_method};
use idemkv::backend::AnyBackend;
use idemkv::store::Quota;
use idemkv::{Config, Durability, Store};
use idemkv_tonic::Method;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tonic::{Code, Status};
use tonic_types::StatusExt;

fn reason(status: &Status) -> Option<String> {
    status.get_details_error_info().map(|info| info.reason)
}

fn bad_field(status: &Status) -> Option<String> {
    status.get_details_bad_request()?.field_violations.first().map(|violation| violation.field.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_missing_and_unscoped_calls_are_refused_before_the_handler() {
    let (_dir, store) = crate::backends::embedded();
    let runs = Arc::new(AtomicU64::new(0));
    let served = serve(face(store), counting(&runs, None)).await;
    let mut client = client(&served.url).await;

    let malformed = client.charge(charge("order-1", 1000)).await.expect_err("malformed");
    assert_eq!(malformed.code(), Code::InvalidArgument);
    assert_eq!(reason(&malformed).as_deref(), Some("IDEMPOTENCY_KEY_INVALID"));
    assert_eq!(bad_field(&malformed).as_deref(), Some("request_id"));

    let missing = client.charge(charge("", 1000)).await.expect_err("missing");
    assert_eq!(missing.code(), Code::InvalidArgument);
    assert_eq!(reason(&missing).as_deref(), Some("IDEMPOTENCY_KEY_MISSING"));

    let mut unscoped = charge(&request_id(), 1000);
    unscoped.metadata_mut().remove("x-account");
    let unscoped = client.charge(unscoped).await.expect_err("no scope");
    assert_eq!(unscoped.code(), Code::InvalidArgument);
    assert_eq!(reason(&unscoped).as_deref(), Some("IDEMPOTENCY_SCOPE_MISSING"));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_in_metadata_is_one_value() {
    let (_dir, store) = crate::backends::embedded();
    let runs = Arc::new(AtomicU64::new(0));
    let served = serve_method(face(store), Method::new(CHARGE), counting(&runs, None)).await;
    let mut client = client(&served.url).await;
    let keyed = |values: &[&'static str]| {
        let mut request = charge("", 1000);
        for value in values {
            request.metadata_mut().append("idempotency-key", tonic::metadata::MetadataValue::from_static(value));
        }
        request
    };
    let first = client.charge(keyed(&["order-7"])).await.expect("charged");
    let again = client.charge(keyed(&["order-7"])).await.expect("replayed");
    assert_eq!((first.get_ref(), replayed(again.metadata()).as_deref()), (again.get_ref(), Some("true")));
    let repeated = client.charge(keyed(&["order-8", "order-9"])).await.expect_err("repeated");
    assert_eq!(repeated.code(), Code::InvalidArgument);
    assert_eq!(bad_field(&repeated).as_deref(), Some("idempotency-key"));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_at_its_quota_is_resource_exhausted_with_when_to_retry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let quota = Quota::new().records(1).retry_after(Duration::from_secs(7));
    let config = Config::new().durability(Durability::Buffered).scope_quota("acme", quota);
    let store = AnyBackend::new(Store::open(dir.path(), config).expect("open"));
    let runs = Arc::new(AtomicU64::new(0));
    let served = serve(face(store), counting(&runs, None)).await;
    let mut client = client(&served.url).await;
    client.charge(charge(&request_id(), 1000)).await.expect("the quota's one record");
    let refused = client.charge(charge(&request_id(), 1000)).await.expect_err("over quota");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let delay = refused.get_details_retry_info().and_then(|info| info.retry_delay);
    assert_eq!(delay, Some(Duration::from_secs(7)));
    assert!(refused.get_details_quota_failure().is_some_and(|failure| !failure.violations.is_empty()));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_store_is_unavailable_and_nothing_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), Config::new().durability(Durability::Buffered)).expect("open");
    let runs = Arc::new(AtomicU64::new(0));
    let served = serve(face(AnyBackend::new(store.clone())), counting(&runs, None)).await;
    store.close().expect("close");
    let refused = client(&served.url).await.charge(charge(&request_id(), 1000)).await.expect_err("closed");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert_eq!(refused.get_details_retry_info().and_then(|info| info.retry_delay), Some(Duration::from_secs(1)));
    assert_eq!(reason(&refused).as_deref(), Some("IDEMPOTENCY_STORE_UNAVAILABLE"));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}
