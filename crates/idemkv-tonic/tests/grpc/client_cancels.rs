//! A client that gives up mid-call (its future dropped: tonic's server
//! sees the stream reset and drops the call's future) does not cut the
//! handler short: it runs to its end in its own task, its answer is kept,
//! and the retry gets it without a second run.

use crate::server::{charge, client, counting, entered, face, replayed, request_id, serve, Gate};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_runs_to_its_end_and_the_retry_replays_it() {
    let (_dir, store) = crate::backends::embedded();
    let (runs, gate) = (Arc::new(AtomicU64::new(0)), Arc::new(Gate::default()));
    let served = serve(face(store), counting(&runs, Some(Arc::clone(&gate)))).await;
    let id = request_id();
    let mut impatient = client(&served.url).await;
    let gave_up_id = id.clone();
    let gave_up = tokio::spawn(async move { impatient.charge(charge(&gave_up_id, 1000)).await });
    entered(&gate).await;
    gave_up.abort();
    assert!(gave_up.await.is_err(), "the call was not cancelled");
    // The gate opens only once the server has dropped the call: the
    // handler then outlives its call.
    let dropped = tokio::time::timeout(Duration::from_secs(10), served.cancelled.notified()).await;
    dropped.expect("the server dropped the cancelled call");
    gate.open.notify_one();

    let mut client = client(&served.url).await;
    let started = Instant::now();
    let retry = loop {
        match client.charge(charge(&id, 1000)).await {
            Ok(reply) => break reply,
            Err(status) if status.code() == Code::Aborted && started.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(status) => panic!("{status:?}"),
        }
    };
    assert_eq!(replayed(retry.metadata()).as_deref(), Some("true"));
    assert_eq!(retry.get_ref().charge_id, "ch_1");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
