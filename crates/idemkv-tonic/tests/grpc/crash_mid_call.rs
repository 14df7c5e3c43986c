//! A server that dies mid-handler (its runtime stopped, every task
//! dropped where it stands) does not free its key: a retry meanwhile is
//! told the key is in progress. Once the lease has run out, a retry on
//! another server runs the handler again as attempt 2, `recovered`.

use crate::server::{charge, client, face, first_call, handler, request_id, serve, until_not_aborted, Gate, Process};
use idemkv::backend::AnyBackend;
use idemkv_tonic::Attempt;
use std::sync::Arc;
use std::time::Duration;
use tonic::{Code, Response};

/// The lease of the calls: short, so that the takeover comes soon.
const LEASE: Duration = Duration::from_secs(1);

/// The scenario over `backend`.
pub async fn scenario(backend: AnyBackend) {
    let gate = Arc::new(Gate::default());
    let held = Arc::clone(&gate);
    let hangs = handler(move |_request| {
        let held = Arc::clone(&held);
        async move {
            held.entered.notify_one();
            held.open.notified().await;
            Err(tonic::Status::internal("never reached: the process dies first"))
        }
    });
    let mut process = Process::start(face(backend.clone()).lease(LEASE), hangs).await;
    let id = request_id();
    let cut = first_call(&process.url, &id, &gate).await;
    process.crash();
    let cut = tokio::time::timeout(Duration::from_secs(10), cut).await.expect("the call ended with its server");
    assert!(cut.expect("the client's task").is_err(), "the dead server answered");

    let attempts: Arc<tokio::sync::Mutex<Vec<(u32, bool)>>> = Arc::default();
    let recorded = Arc::clone(&attempts);
    let recovers = handler(move |request| {
        let recorded = Arc::clone(&recorded);
        async move {
            let attempt = request.extensions().get::<Attempt>().cloned().expect("an attempt");
            recorded.lock().await.push((attempt.attempt, attempt.recovered));
            Ok(Response::new(crate::api::ChargeReply { charge_id: "ch_recovered".into(), amount_cents: 1000 }))
        }
    });
    let served = serve(face(backend).lease(LEASE), recovers).await;
    let mut client = client(&served.url).await;
    let in_progress = client.charge(charge(&id, 1000)).await.expect_err("still in progress");
    assert_eq!(in_progress.code(), Code::Aborted, "{in_progress:?}");
    let reply = until_not_aborted(&mut client, &id, LEASE / 5, "no takeover: ").await;
    assert_eq!(reply.get_ref().charge_id, "ch_recovered");
    assert_eq!(*attempts.lock().await, vec![(2, true)]);
}

embedded_store!(scenario);
