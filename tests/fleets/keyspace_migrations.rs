//! The remote backends' move of an earlier build's records of idemkv's own
//! into their keyspaces, on real servers. An earlier build kept a hold, a
//! version, an inbox entry, a dead letter, a re-drive mark and relay
//! progress as caller's records under `idemkv.hold/`-style scopes — stored
//! exactly as a caller's record of that scope is stored now, which is how
//! these tests write them. PostgreSQL: the migration to schema version 5
//! (here run again after its version row is taken out, as on a store of
//! version 4) moves each to its keyspace, and a caller's scope that starts
//! with a zero byte keeps answering. Redis: the first call of a backend on
//! a server without the keyspaces mark moves each; a near miss stays the
//! caller's.

use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Fingerprint, Keyspace, State,
};

/// One of idemkv's own records as an earlier build kept it: keyspace,
/// scope and key, answer.
type Own = (Keyspace, &'static [u8], &'static [u8], &'static [u8]);

/// idemkv's own records as an earlier build kept them.
const OWN: [Own; 6] = [
    (Keyspace::Hold, b"idemkv.hold/acct-7", b"order-1", b"held"),
    (Keyspace::Version, b"idemkv.version/acct-7", b"order-1", b"IDKVVER1\x03\x00\x00\x00\x00\x00\x00\x00"),
    (Keyspace::Inbox, b"idemkv.inbox/ledger", b"msg-1", b"P"),
    (Keyspace::DeadLetter, b"idemkv.dead/ledger", b"msg-2", b"letter"),
    (Keyspace::Redrive, b"idemkv.redrive/ledger", b"msg-3", b"letter"),
    (Keyspace::Relay, b"idemkv.relay/shop", b"order-9", b"C"),
];

/// Caller's records that must stay where they are: a near miss of a
/// prefix, and a scope that starts with a zero byte.
const CALLERS: [(&[u8], &[u8]); 2] = [(b"idemkv.hol/near", b"miss"), (b"\x00\x01acct-7", b"order-1")];

async fn put<B: IdempotencyBackend>(backend: &B, scope: &[u8], key: &[u8], answer: &[u8]) {
    let claimed = backend.claim(scope, key, Fingerprint::of(key), ClaimOptions::new()).await.expect("claim");
    let BackendClaim::Acquired { token, .. } = claimed else { panic!("{scope:?}: {claimed:?}") };
    backend.complete(&token, answer).await.expect("complete");
}

async fn write_earlier_layout<B: IdempotencyBackend>(backend: &B) {
    for (_, scope, key, answer) in OWN {
        put(backend, scope, key, answer).await;
    }
    for (scope, key) in CALLERS {
        put(backend, scope, key, b"a caller's").await;
    }
}

async fn assert_moved<B: IdempotencyBackend>(backend: &B) {
    for (keyspace, scope, key, answer) in OWN {
        let (_, rest) = Keyspace::from_legacy_scope(scope);
        let record = backend.get_in(keyspace, rest, key).await.expect("get_in").unwrap_or_else(|| panic!("{keyspace}"));
        assert_eq!((record.keyspace, record.state, record.response.as_slice()), (keyspace, State::Completed, answer));
        assert_eq!(record.scope, rest);
        assert_eq!(backend.get(scope, key).await.expect("get"), None, "{keyspace}: left the caller's");
        // A claim in its keyspace replays it: the record is whole there.
        let again = backend.claim_in(keyspace, rest, key, Fingerprint::of(key), ClaimOptions::new()).await;
        assert!(matches!(again.expect("claim_in"), BackendClaim::Replay(found) if found == answer), "{keyspace}");
    }
    for (scope, key) in CALLERS {
        let record = backend.get(scope, key).await.expect("get").unwrap_or_else(|| panic!("{scope:?} stays"));
        assert_eq!((record.keyspace, record.response.as_slice()), (Keyspace::Caller, &b"a caller's"[..]));
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_version_5_moves_idemkvs_records_to_their_keyspaces() {
    use crate::common::postgres::PostgresServer;
    use idemkv::backend::postgres::PostgresBackend;
    use idemkv::Config;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = PostgresServer::start(dir.path());
    let backend = PostgresBackend::connect(&server.url(), Config::new()).await.expect("connect");
    write_earlier_layout(&backend).await;
    // Rows of the caller's scope that starts with a zero byte, as version
    // 4 stored them: its scope as it is.
    let (client, connection) = idemkv::backend::postgres::tokio_postgres::connect(
        &server.url(),
        idemkv::backend::postgres::tokio_postgres::NoTls,
    )
    .await
    .expect("admin");
    tokio::spawn(connection);
    client
        .batch_execute(
            "UPDATE idempo_store SET scope = substr(scope, 2) WHERE substr(scope, 1, 2) = '\\x0000'::bytea;
             DELETE FROM idemkv_schema_version WHERE version >= 5;",
        )
        .await
        .expect("back to version 4");
    let migration = server.migrate(idemkv::backend::postgres::SCHEMA_DEFAULT);
    assert_eq!((migration.from, migration.to), (4, 6));
    assert_moved(&backend).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_moves_idemkvs_records_to_their_keyspaces_before_its_first_call() {
    use crate::common::redis::RedisServer;
    use idemkv::backend::redis::RedisBackend;
    use idemkv::Config;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let earlier = RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
    write_earlier_layout(&earlier).await;
    assert_eq!(server.cli(&["DEL", "idemkv:keyspaces"]).as_deref().map(str::trim), Some("1"));
    let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
    assert_moved(&backend).await;
    assert_eq!(server.cli(&["GET", "idemkv:keyspaces"]).as_deref().map(str::trim), Some("1"));
}
