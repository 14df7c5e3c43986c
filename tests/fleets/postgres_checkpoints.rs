//! Checkpoints on a real PostgreSQL server: one stored before the
//! server stops (`pg_ctl stop -m immediate`, no checkpoint) is handed to
//! the holder that takes the key over after the restart; and a table of
//! schema version 1, with a row in it, is refused by `connect` and
//! upgraded in place by the migration: the row keeps its lease and
//! attempt, has no checkpoint, and the claim of version 1 still answers
//! beside the new one.

#![cfg(all(feature = "tokio", feature = "postgres"))]

use crate::common::postgres::PostgresServer;
use idemkv::backend::postgres::PostgresBackend;
use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Checkpoint, Config, Fingerprint, LeaseToken, State,
};
use std::time::Duration;

const LEASE: Duration = Duration::from_millis(300);

fn options() -> ClaimOptions {
    ClaimOptions::new().lease(LEASE).ttl(Duration::from_secs(60))
}

async fn acquire(backend: &PostgresBackend, key: &[u8]) -> (LeaseToken, u32, bool, Option<Checkpoint>) {
    match backend.claim(b"", key, Fingerprint::of(b"body"), options()).await.expect("claim") {
        BackendClaim::Acquired { token, attempt, recovered, checkpoint } => (token, attempt, recovered, checkpoint),
        other => panic!("expected Acquired, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_point_survives_an_immediate_stop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = PostgresServer::start(dir.path());
    let backend = PostgresBackend::connect(&server.url(), Config::new()).await.expect("connect");
    let (first, _, _, _) = acquire(&backend, b"order-1").await;
    backend.checkpoint(&first, "charged", b"ch_1").await.expect("checkpoint");
    drop(backend);
    server.stop_immediate();
    server.restart();
    let backend = PostgresBackend::connect(&server.url(), Config::new()).await.expect("reconnect");
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
    let (second, attempt, recovered, resumed) = acquire(&backend, b"order-1").await;
    assert_eq!((attempt, recovered), (2, true));
    assert_eq!(resumed, Some(Checkpoint::new("charged", b"ch_1".to_vec())));
    assert!(second.token > first.token);
    assert!(matches!(backend.checkpoint(&first, "late", b"x").await, Err(idemkv::Error::LeaseLost { .. })));
}

/// Takes a database of the current schema back to version 1's shape: no
/// checkpoint column, no checkpoint function, the claim of version 1
/// only (a PL/pgSQL stand-in with its signature) and version 1 recorded.
const BACK_TO_VERSION_1: &str = "
DROP FUNCTION idemkv_checkpoint(bytea, bytea, bigint, bytea);
DROP FUNCTION idemkv_claim(bytea, bytea, bytea, bigint, bigint, boolean, text);
CREATE OR REPLACE FUNCTION idemkv_claim(
    p_scope bytea, p_key bytea, p_fingerprint bytea, p_lease_ms bigint, p_ttl_ms bigint, p_wait boolean,
    OUT o_answer text, OUT o_token bigint, OUT o_attempt integer, OUT o_recovered boolean,
    OUT o_left_ms bigint, OUT o_response bytea)
LANGUAGE plpgsql AS $$ BEGIN o_answer := 'M'; END $$;
ALTER TABLE idempo_store DROP COLUMN checkpoint;
ALTER FUNCTION idemkv_finish(bytea, bytea, bigint, text, bytea) RESET search_path;
ALTER FUNCTION idemkv_renew(bytea, bytea, bigint, bigint) RESET search_path;
ALTER FUNCTION idemkv_remove(bytea, bytea) RESET search_path;
ALTER FUNCTION idemkv_reap(integer) RESET search_path;
DELETE FROM idemkv_schema_version WHERE version > 1;
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_table_is_upgraded_in_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = PostgresServer::start(dir.path());
    let backend = PostgresBackend::connect(&server.url(), Config::new()).await.expect("connect");
    let (first, _, _, _) = acquire(&backend, b"order-2").await;
    backend.pool().get().await.expect("client").batch_execute(BACK_TO_VERSION_1).await.expect("back to 1");
    drop(backend);

    match PostgresBackend::connect(&server.url(), Config::new()).await {
        Err(idemkv::Error::SchemaVersion { found: 1, expected, .. }) => {
            assert_eq!(expected, PostgresBackend::schema_version());
        }
        other => panic!("connect must refuse a schema of version 1: {other:?}"),
    }
    let migration = server.migrate("public");
    assert_eq!((migration.from, migration.to), (1, PostgresBackend::schema_version()));
    let backend = PostgresBackend::connect(&server.url(), Config::new()).await.expect("upgraded");
    let client = backend.pool().get().await.expect("client");
    let version: i32 =
        client.query_one("SELECT max(version) FROM idemkv_schema_version", &[]).await.expect("version").get(0);
    assert_eq!(version, PostgresBackend::schema_version());
    let record = backend.get(b"", b"order-2").await.expect("get").expect("the row is kept");
    assert_eq!((record.state, record.token, record.checkpoint), (State::Processing, first.token, None));
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
    let (second, attempt, recovered, resumed) = acquire(&backend, b"order-2").await;
    assert_eq!((attempt, recovered, resumed), (2, true, None));
    backend.checkpoint(&second, "charged", b"ch_2").await.expect("checkpoint");
    let record = backend.get(b"", b"order-2").await.expect("get").expect("present");
    assert_eq!(record.checkpoint, Some(Checkpoint::new("charged", b"ch_2".to_vec())));

    // An instance of the earlier build calls the claim of version 1.
    let fingerprint = Fingerprint::of(b"body");
    let fingerprint = &fingerprint.as_bytes()[..];
    let (scope, key, lease, ttl, wait) = (&b""[..], &b"order-3"[..], 300_i64, 60_000_i64, false);
    let row = client
        .query_one(
            "SELECT o_answer, o_attempt, o_recovered FROM idemkv_claim($1, $2, $3, $4, $5, $6)",
            &[&scope, &key, &fingerprint, &lease, &ttl, &wait],
        )
        .await
        .expect("the claim of version 1");
    let answer: (String, i32, bool) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(answer, ("A".to_owned(), 1, false));
    assert!(matches!(
        backend.claim(b"", b"order-3", Fingerprint::of(b"body"), options()).await,
        Ok(BackendClaim::InProgress { .. })
    ));
}
