//! Only the handler's word frees a key: a status it marks `NotSpent`, and
//! `INVALID_ARGUMENT` (validation) under the default policy, let a retry
//! run; an `UNAVAILABLE` it does not mark is kept and replayed; a handler
//! that panics answers `INTERNAL` and leaves its key in progress.

use crate::server::{by_run, charge, client, face, replayed, request_id, serve};
use idemkv_tonic::NotSpent;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tonic::{Code, Status};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_marked_not_spent_and_a_validation_failure_free_the_key() {
    let (_dir, store) = crate::backends::embedded();
    let runs = Arc::new(AtomicU64::new(0));
    let served = serve(
        face(store),
        by_run(&runs, |run| match run {
            1 => Err(NotSpent::status(Status::unavailable("card network unreachable"))),
            2 => Err(Status::invalid_argument("currency not supported")),
            _ => Ok(()),
        }),
    )
    .await;
    let (mut client, id) = (client(&served.url).await, request_id());
    assert_eq!(client.charge(charge(&id, 1000)).await.expect_err("first").code(), Code::Unavailable);
    assert_eq!(client.charge(charge(&id, 1000)).await.expect_err("second").code(), Code::InvalidArgument);
    let third = client.charge(charge(&id, 1000)).await.expect("third ran");
    assert_eq!(third.get_ref().charge_id, "ch_3");
    let fourth = client.charge(charge(&id, 1000)).await.expect("replayed");
    assert_eq!((fourth.get_ref().charge_id.as_str(), replayed(fourth.metadata()).as_deref()), ("ch_3", Some("true")));
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmarked_unavailable_is_kept_and_replayed() {
    let (_dir, store) = crate::backends::embedded();
    let runs = Arc::new(AtomicU64::new(0));
    let served = serve(face(store), by_run(&runs, |_| Err(Status::unavailable("ledger timed out")))).await;
    let (mut client, id) = (client(&served.url).await, request_id());
    client.charge(charge(&id, 1000)).await.expect_err("first");
    let again = client.charge(charge(&id, 1000)).await.expect_err("replayed");
    assert_eq!((again.code(), again.message()), (Code::Unavailable, "ledger timed out"));
    assert_eq!(replayed(again.metadata()).as_deref(), Some("true"));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_answers_internal_and_keeps_its_key() {
    let (_dir, store) = crate::backends::embedded();
    let runs = Arc::new(AtomicU64::new(0));
    let served = serve(face(store), by_run(&runs, |_| panic!("the handler's bug"))).await;
    let (mut client, id) = (client(&served.url).await, request_id());
    assert_eq!(client.charge(charge(&id, 1000)).await.expect_err("panicked").code(), Code::Internal);
    assert_eq!(client.charge(charge(&id, 1000)).await.expect_err("in progress").code(), Code::Aborted);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
