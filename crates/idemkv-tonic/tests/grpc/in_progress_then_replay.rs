//! A duplicate sent while the first call runs gets `ABORTED` with a
//! `RetryInfo` delay (and the handler runs once); a retry after the first
//! call answered gets its message and metadata back, marked replayed.

use crate::server::{charge, client, counting, face, first_call, replayed, request_id, serve, Gate};
use idemkv::backend::AnyBackend;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tonic::Code;
use tonic_types::StatusExt;

/// The scenario over `backend`.
pub async fn scenario(backend: AnyBackend) {
    let (runs, gate) = (Arc::new(AtomicU64::new(0)), Arc::new(Gate::default()));
    let served = serve(face(backend), counting(&runs, Some(Arc::clone(&gate)))).await;
    let id = request_id();
    let first = first_call(&served.url, &id, &gate).await;

    let duplicate = client(&served.url).await.charge(charge(&id, 1000)).await.expect_err("in progress");
    assert_eq!(duplicate.code(), Code::Aborted, "{duplicate:?}");
    let retry_delay = duplicate.get_details_retry_info().and_then(|info| info.retry_delay).expect("RetryInfo");
    assert!(retry_delay > Duration::ZERO && retry_delay <= Duration::from_secs(1), "{retry_delay:?}");
    let reason = duplicate.get_details_error_info().map(|info| info.reason);
    assert_eq!(reason.as_deref(), Some("IDEMPOTENCY_KEY_IN_PROGRESS"));

    gate.open.notify_one();
    let first = first.await.expect("first call's task").expect("first call answered");
    assert_eq!(replayed(first.metadata()), None);
    let retry = client(&served.url).await.charge(charge(&id, 1000)).await.expect("replayed");
    assert_eq!(retry.get_ref(), first.get_ref());
    assert_eq!(retry.metadata().get("x-ledger-entry"), first.metadata().get("x-ledger-entry"));
    assert_eq!(replayed(retry.metadata()).as_deref(), Some("true"));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran once");
}

embedded_store!(scenario);
