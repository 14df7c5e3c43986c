//! A call whose answer the store cannot keep for a moment: the disk fills
//! after the handler ran and has room again a second later. The caller
//! gets the handler's answer marked `idempotent-stored: false`; a retry
//! meanwhile is `ABORTED` (the answer is tried again while the lease is
//! held); then the retry gets the replay, and the handler ran once. The
//! face once gave up at the first failure: the lease lapsed and the retry
//! ran the handler again.

use crate::api::ChargeReply;
use crate::server::{charge, client, face, handler, replayed, request_id, serve, until_not_aborted};
use idemkv::backend::AnyBackend;
use idemkv::io::{Fault, FaultyStorage, StdStorage};
use idemkv::{Config, Store};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tonic::{Code, Response};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_refused_by_a_full_disk_is_stored_later_and_replayed() {
    let storage = FaultyStorage::new(Arc::new(StdStorage));
    let dir = tempfile::tempdir().expect("tempdir");
    // Sync (the default): a full disk refuses the completion's pwrite.
    let store = Store::open(dir.path(), Config::new().storage(Arc::new(storage.clone()))).expect("open");
    let runs = Arc::new(AtomicU64::new(0));
    let (counted, disk) = (Arc::clone(&runs), storage.clone());
    let fills_the_disk = handler(move |_request| {
        let run = counted.fetch_add(1, Ordering::SeqCst) + 1;
        // The charge is made; the disk fills before its answer is kept,
        // and has room again a second later.
        disk.fail_after(0, Fault::NoSpace);
        let room = disk.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            room.clear();
        });
        async move { Ok(Response::new(ChargeReply { charge_id: format!("ch_{run}"), amount_cents: 1000 })) }
    });
    let served = serve(face(AnyBackend::new(store)).lease(Duration::from_secs(3)), fills_the_disk).await;
    let (mut client, id) = (client(&served.url).await, request_id());

    let first = client.charge(charge(&id, 1000)).await.expect("the handler's answer");
    assert_eq!(first.get_ref().charge_id, "ch_1");
    let stored = first.metadata().get(idemkv_tonic::STORED_METADATA).and_then(|value| value.to_str().ok());
    assert_eq!(stored, Some("false"), "the disk was full when it answered: {first:?}");
    assert!(storage.faults_fired() > 0, "the full disk refused a write");
    let meanwhile = client.charge(charge(&id, 1000)).await.expect_err("in progress");
    assert_eq!(meanwhile.code(), Code::Aborted, "the key must stay in progress: {meanwhile:?}");

    let replay = until_not_aborted(&mut client, &id, Duration::from_millis(100), "the retry: ").await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran twice: {replay:?}");
    assert_eq!((replay.get_ref().charge_id.as_str(), replayed(replay.metadata()).as_deref()), ("ch_1", Some("true")));
}
