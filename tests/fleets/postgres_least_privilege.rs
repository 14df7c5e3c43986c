//! Least privilege on a real PostgreSQL server: `connect` runs no DDL and
//! refuses a schema that holds no store or an older one (naming both
//! versions); the migration, run by the owner, creates the store and
//! upgrades versions 1 and 2 in place; a role holding only USAGE on the
//! schema and the table, sequence and function privileges runs every call
//! (claim, complete, replay, a waiting claim, renew, checkpoint, remove,
//! reap); a role without them is refused at connect with the list of what
//! it lacks, and cannot migrate; two stores in two schemas of one database
//! (one named to break out of its quotes) share no key.

#![cfg(feature = "postgres")]

use crate::common::postgres::PostgresServer;
use idemkv::backend::postgres::{PostgresBackend, PostgresOptions, Reaping};
use idemkv::{
    backend::{BackendClaim, BackendFailure, ClaimOptions, IdempotencyBackend},
    Config, Error, Fingerprint, LeaseToken,
};
use std::time::{Duration, Instant};

/// The functions version 3 binds to their schema.
const BOUND: [&str; 7] = [
    "idemkv_claim(bytea, bytea, bytea, bigint, bigint, boolean, text)",
    "idemkv_claim(bytea, bytea, bytea, bigint, bigint, boolean)",
    "idemkv_finish(bytea, bytea, bigint, text, bytea)",
    "idemkv_renew(bytea, bytea, bigint, bigint)",
    "idemkv_checkpoint(bytea, bytea, bigint, bytea)",
    "idemkv_remove(bytea, bytea)",
    "idemkv_reap(integer)",
];

/// A superuser session on the server.
async fn admin(server: &PostgresServer) -> idemkv::backend::postgres::tokio_postgres::Client {
    session(&server.url()).await
}

async fn session(url: &str) -> idemkv::backend::postgres::tokio_postgres::Client {
    let (client, connection) =
        idemkv::backend::postgres::tokio_postgres::connect(url, idemkv::backend::postgres::tokio_postgres::NoTls)
            .await
            .expect("connect");
    tokio::spawn(connection);
    client
}

fn options(schema: &str) -> PostgresOptions {
    PostgresOptions::new().schema(schema).pool_size(4).reaping(Reaping::every(Duration::from_millis(100)))
}

async fn connect(url: &str, schema: &str) -> idemkv::Result<PostgresBackend> {
    PostgresBackend::connect_with_options(url.parse().expect("url"), Config::new(), options(schema)).await
}

async fn acquire(backend: &PostgresBackend, key: &[u8], claim: ClaimOptions) -> LeaseToken {
    match backend.claim(b"shop", key, Fingerprint::of(b"body"), claim).await.expect("claim") {
        BackendClaim::Acquired { token, .. } => token,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

async fn replay(backend: &PostgresBackend, key: &[u8]) -> Vec<u8> {
    match backend.claim(b"shop", key, Fingerprint::of(b"body"), ClaimOptions::new()).await.expect("claim") {
        BackendClaim::Replay(response) => response,
        other => panic!("expected Replay, got {other:?}"),
    }
}

/// The tables of the database outside the system schemas.
async fn tables(server: &PostgresServer) -> i64 {
    let sql = "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')";
    admin(server).await.query_one(sql, &[]).await.expect("count").get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_checks_the_version_and_the_migration_upgrades() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = PostgresServer::start_empty(dir.path());
    match connect(&server.url(), "public").await {
        Err(Error::SchemaVersion { schema, found: 0, expected: 6 }) => assert_eq!(schema, "public"),
        other => panic!("connect must refuse a database without a store: {other:?}"),
    }
    let message = connect(&server.url(), "public").await.expect_err("refused").to_string();
    assert!(message.contains("idemkv migrate --postgres"), "{message}");
    assert_eq!(tables(&server).await, 0, "connect created nothing");

    let migration = PostgresBackend::migrate(&server.url(), &PostgresOptions::new()).await.expect("migrate");
    assert_eq!((migration.schema.as_str(), migration.from, migration.to), ("public", 0, 6));
    let again = PostgresBackend::migrate(&server.url(), &PostgresOptions::new()).await.expect("migrate again");
    assert_eq!((again.from, again.to), (6, 6));
    let backend = connect(&server.url(), "public").await.expect("connect");
    let token = acquire(&backend, b"order-1", ClaimOptions::new()).await;
    drop(backend);

    // Back to version 2's shape: its functions resolve names by the
    // caller's search_path.
    let client = admin(&server).await;
    for function in BOUND {
        client.batch_execute(&format!("ALTER FUNCTION {function} RESET search_path")).await.expect("reset");
    }
    client.batch_execute("DELETE FROM idemkv_schema_version WHERE version >= 3").await.expect("version 2");
    match connect(&server.url(), "public").await {
        Err(Error::SchemaVersion { found: 2, expected: 6, .. }) => {}
        other => panic!("connect must refuse a schema of version 2: {other:?}"),
    }
    let migration = PostgresBackend::migrate(&server.url(), &PostgresOptions::new()).await.expect("upgrade");
    assert_eq!((migration.from, migration.to), (2, 6));
    let bound: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_proc WHERE proname LIKE 'idemkv%' \
             AND 'search_path=pg_catalog, public, pg_temp' = ANY (proconfig)",
            &[],
        )
        .await
        .expect("bound")
        .get(0);
    assert_eq!(bound, 7, "every function naming the store's objects is bound to its schema");
    let backend = connect(&server.url(), "public").await.expect("connect after the upgrade");
    backend.complete(&token, b"201").await.expect("the lease taken before the upgrade is still held");
    assert_eq!(replay(&backend, b"order-1").await, b"201");

    // A newer build's schema is refused by the migration and by connect.
    client.batch_execute("INSERT INTO idemkv_schema_version (version) VALUES (7)").await.expect("version 7");
    let newer = PostgresBackend::migrate(&server.url(), &PostgresOptions::new()).await;
    assert!(matches!(newer, Err(Error::SchemaVersion { found: 7, expected: 6, .. })), "{newer:?}");
    let newer = connect(&server.url(), "public").await;
    assert!(matches!(newer, Err(Error::SchemaVersion { found: 7, expected: 6, .. })), "{newer:?}");
}

/// The owner's grants to a role that runs the calls: nothing more.
fn grants(schema: &str, role: &str) -> String {
    format!(
        "GRANT USAGE ON SCHEMA {schema} TO {role};
         GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.idempo_store TO {role};
         GRANT SELECT ON {schema}.idemkv_schema_version TO {role};
         GRANT USAGE ON SEQUENCE {schema}.idemkv_tokens TO {role};
         GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO {role};"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_least_privilege_role_runs_every_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = PostgresServer::start_empty(dir.path());
    admin(&server)
        .await
        .batch_execute(
            "CREATE ROLE store_owner LOGIN; CREATE ROLE app LOGIN; CREATE ROLE stranger LOGIN;
             REVOKE ALL ON DATABASE postgres FROM PUBLIC; GRANT CONNECT ON DATABASE postgres TO app, stranger;
             GRANT CONNECT ON DATABASE postgres TO store_owner;
             REVOKE CREATE ON SCHEMA public FROM PUBLIC;
             CREATE SCHEMA shop AUTHORIZATION store_owner;",
        )
        .await
        .expect("roles");

    // The service's role cannot migrate: the DDL is refused, nothing made.
    let refused = PostgresBackend::migrate(&server.url_as("app"), &PostgresOptions::new().schema("shop")).await;
    assert!(matches!(refused, Err(Error::Backend { failure: BackendFailure::Refused, .. })), "{refused:?}");
    assert!(format!("{refused:?}").contains("permission denied"), "{refused:?}");
    // The owner, without CREATE on the database, migrates into its schema.
    let migration = PostgresBackend::migrate(&server.url_as("store_owner"), &PostgresOptions::new().schema("shop"))
        .await
        .expect("the owner migrates");
    assert_eq!((migration.from, migration.to), (0, 6));

    match connect(&server.url_as("app"), "shop").await {
        Err(Error::MissingPrivileges { role, missing }) => {
            assert_eq!((role.as_str(), missing), ("app", vec!["USAGE on schema \"shop\"".to_owned()]));
        }
        other => panic!("a role without USAGE must be refused: {other:?}"),
    }
    let owner = session(&server.url_as("store_owner")).await;
    owner.batch_execute(&grants("shop", "app")).await.expect("grants");
    owner.batch_execute("REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA shop FROM PUBLIC").await.expect("revoke");
    owner.batch_execute("GRANT USAGE ON SCHEMA shop TO stranger").await.expect("usage only");

    match connect(&server.url_as("stranger"), "shop").await {
        Err(Error::MissingPrivileges { role, missing }) => {
            assert_eq!(role, "stranger");
            for needed in [
                "SELECT on table \"shop\".idempo_store",
                "DELETE on table \"shop\".idempo_store",
                "USAGE on sequence \"shop\".idemkv_tokens",
                "EXECUTE on function \"shop\".idemkv_finish(bytea, bytea, bigint, text, bytea)",
            ] {
                assert!(missing.iter().any(|lacking| lacking == needed), "{needed} missing from {missing:?}");
            }
        }
        other => panic!("a role with USAGE alone must be refused: {other:?}"),
    }

    let backend = connect(&server.url_as("app"), "shop").await.expect("the service's role connects");
    every_call(&backend).await;
    let started = Instant::now();
    while !backend.reaping() && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(backend.reaping(), "the service's role takes the reaper lock");
}

/// Claim, complete, replay, a waiting claim woken by a completion, renew,
/// checkpoint, remove and reap, through the backend.
async fn every_call(backend: &PostgresBackend) {
    let token = acquire(backend, b"order-1", ClaimOptions::new()).await;
    backend.renew(&token, Duration::from_secs(60)).await.expect("renew");
    backend.checkpoint(&token, "charged", b"ch_1").await.expect("checkpoint");
    let waiter = {
        let backend = backend.clone();
        tokio::spawn(async move {
            let wait = ClaimOptions::new().wait(Some(Duration::from_secs(10)));
            backend.claim(b"shop", b"order-1", Fingerprint::of(b"body"), wait).await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    backend.complete(&token, b"201 charged").await.expect("complete");
    let answer = waiter.await.expect("waiter");
    assert!(matches!(&answer, Ok(BackendClaim::Replay(response)) if response == b"201 charged"), "{answer:?}");
    assert_eq!(replay(backend, b"order-1").await, b"201 charged");
    let mut client = backend.pool().get().await.expect("client");
    let token = acquire(backend, b"order-2", ClaimOptions::new()).await;
    let transaction = client.transaction().await.expect("transaction");
    backend.complete_in(&transaction, &token, b"201 in").await.expect("complete_in");
    transaction.commit().await.expect("commit");
    assert_eq!(replay(backend, b"order-2").await, b"201 in");
    assert!(backend.remove(b"shop", b"order-1").await.expect("remove"));
    let short = ClaimOptions::new().lease(Duration::from_millis(50)).ttl(Duration::from_millis(50));
    let token = acquire(backend, b"order-3", short).await;
    backend.complete(&token, b"done").await.expect("complete");
    tokio::time::sleep(Duration::from_millis(150)).await;
    // The elected reaper may have deleted it already; either way it is gone.
    let _deleted = backend.reap(10).await.expect("reap");
    assert!(backend.get(b"shop", b"order-3").await.expect("get").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_schemas_share_no_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = PostgresServer::start_empty(dir.path());
    admin(&server).await.batch_execute("CREATE TABLE keep (n int)").await.expect("a table to keep");
    // A name that would end an unquoted or badly quoted identifier.
    let odd = "b\"; DROP TABLE keep; --";
    for schema in ["tenant_a", odd] {
        PostgresBackend::migrate(&server.url(), &PostgresOptions::new().schema(schema)).await.expect("migrate");
    }
    let (a, b) = (connect(&server.url(), "tenant_a").await.expect("a"), connect(&server.url(), odd).await.expect("b"));
    let first = acquire(&a, b"order-1", ClaimOptions::new()).await;
    a.complete(&first, b"from a").await.expect("complete");
    let second = acquire(&b, b"order-1", ClaimOptions::new()).await;
    assert_eq!(replay(&a, b"order-1").await, b"from a");
    b.complete(&second, b"from b").await.expect("complete");
    assert_eq!((replay(&a, b"order-1").await, replay(&b, b"order-1").await), (b"from a".to_vec(), b"from b".to_vec()));
    assert!(a.remove(b"shop", b"order-1").await.expect("remove"));
    assert_eq!(replay(&b, b"order-1").await, b"from b", "a removal in one store leaves the other's key");
    let client = admin(&server).await;
    let schemas: i64 = client
        .query_one("SELECT count(*) FROM pg_namespace WHERE nspname = ANY ($1)", &[&vec!["tenant_a", odd]])
        .await
        .expect("schemas")
        .get(0);
    assert_eq!(schemas, 2, "the odd name is one schema, spelled as given");
    client.query_one("SELECT count(*) FROM keep", &[]).await.expect("the table named in the schema name is kept");
    for refused in ["", "pg_store", &"x".repeat(64)] {
        let answer = PostgresBackend::migrate(&server.url(), &PostgresOptions::new().schema(refused)).await;
        assert!(matches!(answer, Err(Error::InvalidConfig(_))), "{refused:?}: {answer:?}");
        assert!(matches!(connect(&server.url(), refused).await, Err(Error::InvalidConfig(_))), "{refused:?}");
    }
}
