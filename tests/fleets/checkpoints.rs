//! Checkpoints on real Redis and PostgreSQL servers, one body over both:
//! one stored before the server stops hard (Redis killed with SIGKILL, AOF
//! with `appendfsync always`; PostgreSQL `pg_ctl stop -m immediate`, no
//! checkpoint) is handed to the holder that takes the key over after the
//! restart, and the stale holder's is refused; and a record written before
//! records had a checkpoint (Redis: the record without its field 13;
//! PostgreSQL: a table of schema version 1 with a row in it, refused by
//! `connect` and upgraded in place by the migration, the claim of version
//! 1 still answering beside the new one) reads as one without a
//! checkpoint, is taken over, and then stores one.

#![cfg(any(feature = "redis", feature = "postgres"))]

use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Checkpoint, Fingerprint, LeaseToken, State,
};
use std::future::Future;
use std::time::Duration;

const LEASE: Duration = Duration::from_millis(300);

fn options() -> ClaimOptions {
    ClaimOptions::new().lease(LEASE).ttl(Duration::from_secs(60))
}

/// Claims `key`, which must be acquired: its token, attempt, whether it
/// recovered, and the checkpoint handed over.
async fn acquire<B: IdempotencyBackend>(backend: &B, key: &[u8]) -> (LeaseToken, u32, bool, Option<Checkpoint>) {
    match backend.claim(b"", key, Fingerprint::of(b"body"), options()).await.expect("claim") {
        BackendClaim::Acquired { token, attempt, recovered, checkpoint } => (token, attempt, recovered, checkpoint),
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// A checkpoint stored, then `restart` (a hard stop and a start, and the
/// backend connected again): after the lease the takeover resumes from it,
/// and the stale holder may store none.
async fn a_recovery_point_survives_a_hard_stop<B, F, Fut>(backend: B, restart: F)
where
    B: IdempotencyBackend,
    F: FnOnce(B) -> Fut,
    Fut: Future<Output = B>,
{
    let (first, _, _, _) = acquire(&backend, b"order-1").await;
    backend.checkpoint(&first, "charged", b"ch_1").await.expect("checkpoint");
    let backend = restart(backend).await;
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
    let (second, attempt, recovered, resumed) = acquire(&backend, b"order-1").await;
    assert_eq!((attempt, recovered), (2, true));
    assert_eq!(resumed, Some(Checkpoint::new("charged", b"ch_1".to_vec())));
    assert!(second.token > first.token);
    assert!(matches!(backend.checkpoint(&first, "late", b"x").await, Err(idemkv::Error::LeaseLost { .. })));
}

/// The record of `key`, held by `first` and as an earlier version wrote it
/// (without a checkpoint), reads as one without a checkpoint; after the
/// lease it is taken over with none, then stores one and completes.
async fn an_earlier_record_is_taken_over_and_stores_one<B: IdempotencyBackend>(
    backend: &B,
    key: &[u8],
    first: &LeaseToken,
) {
    let record = backend.get(b"", key).await.expect("get").expect("the record is kept");
    assert_eq!((record.state, record.token, record.checkpoint), (State::Processing, first.token, None));
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
    let (second, attempt, recovered, resumed) = acquire(backend, key).await;
    assert_eq!((attempt, recovered, resumed), (2, true, None));
    backend.checkpoint(&second, "ordered", b"o_2").await.expect("checkpoint");
    let record = backend.get(b"", key).await.expect("get").expect("present");
    assert_eq!(record.checkpoint, Some(Checkpoint::new("ordered", b"o_2".to_vec())));
    backend.complete(&second, b"201").await.expect("complete");
}

#[cfg(feature = "redis")]
mod redis {
    use super::{a_recovery_point_survives_a_hard_stop, acquire, an_earlier_record_is_taken_over_and_stores_one};
    use crate::common::redis::RedisServer;
    use idemkv::backend::redis::RedisBackend;
    use idemkv::{backend::IdempotencyBackend, Config};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_recovery_point_survives_a_kill() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut server = RedisServer::start(dir.path());
        let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
        a_recovery_point_survives_a_hard_stop(backend, |backend| {
            drop(backend);
            server.kill();
            server.restart();
            let url = server.url();
            async move { RedisBackend::connect(&url, Config::new()).await.expect("reconnect") }
        })
        .await;
    }

    /// Drops field 13 (the checkpoint) of every record, keeping its
    /// expiry: the records as an earlier version wrote them.
    const WITHOUT_FIELD_13: &str = r"
for _, name in ipairs(redis.call('KEYS', 'idemkv:{*}:r')) do
  local r = cmsgpack.unpack(redis.call('GET', name))
  r[13] = nil
  redis.call('SET', name, cmsgpack.pack(r), 'PX', redis.call('PTTL', name))
end
return 1
";

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_record_of_an_earlier_version_has_no_recovery_point() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = RedisServer::start(dir.path());
        let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
        let (first, _, _, _) = acquire(&backend, b"order-2").await;
        backend.checkpoint(&first, "charged", b"ch_2").await.expect("checkpoint");
        assert_eq!(server.cli(&["EVAL", WITHOUT_FIELD_13, "0"]).as_deref().map(str::trim), Some("1"));
        an_earlier_record_is_taken_over_and_stores_one(&backend, b"order-2", &first).await;
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::{a_recovery_point_survives_a_hard_stop, acquire, an_earlier_record_is_taken_over_and_stores_one};
    use super::{options, LEASE};
    use crate::common::postgres::PostgresServer;
    use idemkv::backend::postgres::PostgresBackend;
    use idemkv::{
        backend::{BackendClaim, IdempotencyBackend},
        Config, Fingerprint,
    };

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_recovery_point_survives_an_immediate_stop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut server = PostgresServer::start(dir.path());
        let backend = PostgresBackend::connect(&server.url(), Config::new()).await.expect("connect");
        a_recovery_point_survives_a_hard_stop(backend, |backend| {
            drop(backend);
            server.stop_immediate();
            server.restart();
            let url = server.url();
            async move { PostgresBackend::connect(&url, Config::new()).await.expect("reconnect") }
        })
        .await;
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
        an_earlier_record_is_taken_over_and_stores_one(&backend, b"order-2", &first).await;

        // An instance of the earlier build calls the claim of version 1.
        let fingerprint = Fingerprint::of(b"body");
        let fingerprint = &fingerprint.as_bytes()[..];
        let lease = i64::try_from(LEASE.as_millis()).expect("a lease in ms");
        let (scope, key, ttl, wait) = (&b""[..], &b"order-3"[..], 60_000_i64, false);
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
}
