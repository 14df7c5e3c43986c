//! A client that gives up mid-call (its future dropped: tonic's server
//! sees the stream reset and drops the call's future) does not cut the
//! handler short: it runs to its end in its own task, its answer is kept,
//! and the retry gets it without a second run.

use crate::server::{client, counting, face, first_call, replayed, request_id, serve, until_not_aborted, Gate};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_runs_to_its_end_and_the_retry_replays_it() {
    let (_dir, store) = crate::backends::embedded();
    let (runs, gate) = (Arc::new(AtomicU64::new(0)), Arc::new(Gate::default()));
    let served = serve(face(store), counting(&runs, Some(Arc::clone(&gate)))).await;
    let id = request_id();
    let gave_up = first_call(&served.url, &id, &gate).await;
    gave_up.abort();
    assert!(gave_up.await.is_err(), "the call was not cancelled");
    // The gate opens only once the server has dropped the call: the
    // handler then outlives its call.
    let dropped = tokio::time::timeout(Duration::from_secs(10), served.cancelled.notified()).await;
    dropped.expect("the server dropped the cancelled call");
    gate.open.notify_one();

    let mut client = client(&served.url).await;
    let retry = until_not_aborted(&mut client, &id, Duration::from_millis(20), "").await;
    assert_eq!(replayed(retry.metadata()).as_deref(), Some("true"));
    assert_eq!(retry.get_ref().charge_id, "ch_1");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
