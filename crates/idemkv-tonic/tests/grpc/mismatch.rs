//! The same `request_id` with another message is refused with
//! `FAILED_PRECONDITION` and a `PreconditionFailure`, and never sees the
//! first answer; the handler does not run for it.

use crate::server::{charge, client, counting, face, request_id, serve};
use idemkv::backend::AnyBackend;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tonic::Code;
use tonic_types::StatusExt;

/// The scenario over `backend`.
pub async fn scenario(backend: AnyBackend) {
    let runs = Arc::new(AtomicU64::new(0));
    let served = serve(face(backend), counting(&runs, None)).await;
    let id = request_id();
    let mut client = client(&served.url).await;
    client.charge(charge(&id, 1000)).await.expect("charged");
    let reused = client.charge(charge(&id, 1100)).await.expect_err("key reused");
    assert_eq!(reused.code(), Code::FailedPrecondition, "{reused:?}");
    let violations = reused.get_details_precondition_failure().map(|failure| failure.violations).unwrap_or_default();
    assert_eq!(violations.len(), 1, "{reused:?}");
    assert_eq!(reused.get_details_error_info().map(|info| info.reason).as_deref(), Some("IDEMPOTENCY_KEY_REUSED"));
    assert!(reused.metadata().get("x-ledger-entry").is_none(), "the first answer leaked");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

embedded_store!(scenario);
