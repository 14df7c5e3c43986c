//! A handler's error status is kept and replayed whole: code, message,
//! details (google.rpc `ErrorInfo` here) and its metadata (trailers),
//! marked replayed; the handler runs once.

use crate::server::{by_run, charge, client, face, replayed, request_id, serve};
use idemkv::backend::AnyBackend;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The handler's answer: the card declined, with an `ErrorInfo` and the
/// `x-decline-code` metadata.
fn declined() -> Status {
    let details = ErrorDetails::with_error_info("CARD_DECLINED", "payments.example", HashMap::<String, String>::new());
    let mut status = Status::with_error_details(Code::FailedPrecondition, "card declined", details);
    status.metadata_mut().insert("x-decline-code", "insufficient_funds".parse().expect("ascii"));
    status
}

/// The scenario over `backend`.
pub async fn scenario(backend: AnyBackend) {
    let runs = Arc::new(AtomicU64::new(0));
    let served = serve(face(backend), by_run(&runs, |_| Err(declined()))).await;
    let id = request_id();
    let first = client(&served.url).await.charge(charge(&id, 1000)).await.expect_err("declined");
    let retry = client(&served.url).await.charge(charge(&id, 1000)).await.expect_err("declined again");
    assert_eq!((first.code(), retry.code()), (Code::FailedPrecondition, Code::FailedPrecondition));
    assert_eq!(retry.message(), "card declined");
    assert_eq!(retry.details(), first.details());
    assert_eq!(retry.get_details_error_info().map(|info| info.reason).as_deref(), Some("CARD_DECLINED"));
    assert_eq!(
        retry.metadata().get("x-decline-code").map(tonic::metadata::MetadataValue::as_bytes),
        Some(&b"insufficient_funds"[..])
    );
    assert_eq!(replayed(first.metadata()), None);
    assert_eq!(replayed(retry.metadata()).as_deref(), Some("true"));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran once");
}

embedded_store!(scenario);
