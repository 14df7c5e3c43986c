//! The PostgreSQL backend's plain statements, checked on a real server by
//! taking away the functions they stand in for: a role that may no longer
//! run `idemkv_claim` and `idemkv_finish` still claims a fresh key, is
//! told it is in progress or mismatched, completes it and gets its
//! replay; a takeover, which is the function's, is then refused, and runs
//! once the role may run the function again.

#![cfg(feature = "postgres")]

use crate::common::postgres::PostgresServer;
use idemkv::backend::postgres::PostgresBackend;
use idemkv::{
    backend::{BackendClaim, BackendFailure, ClaimOptions, IdempotencyBackend},
    Config, Error, Fingerprint,
};
use std::time::Duration;

const LEASE: Duration = Duration::from_millis(300);
const FUNCTIONS: &str = "FUNCTION idemkv_claim(bytea, bytea, bytea, bigint, bigint, boolean, text), \
                         idemkv_finish(bytea, bytea, bigint, text, bytea)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_calls_of_a_request_run_without_the_functions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = PostgresServer::start(dir.path());
    let (admin, connection) = idemkv::backend::postgres::tokio_postgres::connect(
        &server.url(),
        idemkv::backend::postgres::tokio_postgres::NoTls,
    )
    .await
    .expect("connect");
    tokio::spawn(connection);
    admin
        .batch_execute(
            "CREATE ROLE app LOGIN;
             REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA public FROM PUBLIC;
             GRANT SELECT, INSERT, UPDATE, DELETE ON idempo_store TO app;
             GRANT SELECT ON idemkv_schema_version TO app;
             GRANT USAGE ON SEQUENCE idemkv_tokens TO app;
             GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO app;",
        )
        .await
        .expect("the role");
    let backend = PostgresBackend::connect(&server.url_as("app"), Config::new()).await.expect("connect as app");
    admin.batch_execute(&format!("REVOKE EXECUTE ON {FUNCTIONS} FROM app")).await.expect("revoke");

    let options = ClaimOptions::new().lease(LEASE).ttl(Duration::from_secs(60));
    let body = Fingerprint::of(b"body");
    let claimed = backend.claim(b"shop", b"k1", body, options).await.expect("a fresh claim");
    let BackendClaim::Acquired { token, attempt: 1, recovered: false, checkpoint: None } = claimed else {
        panic!("expected a first attempt, got {claimed:?}");
    };
    let again = backend.claim(b"shop", b"k1", body, options).await.expect("in progress");
    assert!(matches!(again, BackendClaim::InProgress { .. }), "{again:?}");
    let other = backend.claim(b"shop", b"k1", Fingerprint::of(b"other"), options).await.expect("mismatch");
    assert!(matches!(other, BackendClaim::Mismatch), "{other:?}");
    backend.complete(&token, b"201").await.expect("complete");
    let replay = backend.claim(b"shop", b"k1", body, options).await.expect("replay");
    assert!(matches!(&replay, BackendClaim::Replay(response) if response == b"201"), "{replay:?}");

    // A takeover is the function's: refused without it.
    let Ok(BackendClaim::Acquired { token: first, .. }) = backend.claim(b"shop", b"k2", body, options).await else {
        panic!("expected Acquired");
    };
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
    let refused = backend.claim(b"shop", b"k2", body, options).await;
    assert!(
        matches!(refused, Err(Error::Backend { failure: BackendFailure::Refused, .. })),
        "a takeover without idemkv_claim: {refused:?}"
    );
    admin.batch_execute(&format!("GRANT EXECUTE ON {FUNCTIONS} TO app")).await.expect("grant");
    let taken = backend.claim(b"shop", b"k2", body, options).await.expect("takeover");
    let BackendClaim::Acquired { token: second, attempt: 2, recovered: true, .. } = taken else {
        panic!("expected a takeover, got {taken:?}");
    };
    assert!(second.token > first.token);
    assert!(matches!(backend.complete(&first, b"late").await, Err(Error::LeaseLost { .. })));
    backend.complete(&second, b"201").await.expect("complete");
}
