//! What the PostgreSQL backend's pages read, on a real server, by the
//! index statistics (`pg_stat_user_indexes.idx_tup_read`), with every
//! statement on a generic plan (`plan_cache_mode = force_generic_plan`,
//! what a prepared statement gets after its fifth run) over an analyzed
//! table: a scan's page reads a range of the primary key from its cursor
//! on, the same wherever it starts, not the scope's rows before it (a page
//! used to filter `$2 IS NULL OR key > $2`, which a generic plan cannot
//! bound); a relay's sweep reads the partial index of the rows with staged
//! messages (schema version 6), none of the other completions. A row
//! staged before version 6 is marked by its migration.

#![cfg(all(feature = "postgres", feature = "messaging"))]

use crate::common::postgres::PostgresServer;
use idemkv::backend::postgres::tokio_postgres::{self, Client, NoTls};
use idemkv::backend::postgres::PostgresBackend;
use idemkv::messaging::{Outbox, OutboxMessage};
use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Config, Fingerprint, LeaseToken,
};
use std::time::Duration;

async fn admin(server: &PostgresServer) -> Client {
    let (client, connection) = tokio_postgres::connect(&server.url(), NoTls).await.expect("admin");
    tokio::spawn(connection);
    client
}

/// Index entries read from `index` so far, once every session but this
/// one has ended (a session reports its counts as it ends).
async fn read_from(client: &Client, index: &str) -> i64 {
    let others =
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()";
    for _ in 0..200 {
        if client.query_one(others, &[]).await.expect("pg_stat_activity").get::<_, i64>(0) == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.batch_execute("SELECT pg_stat_clear_snapshot()").await.expect("a fresh snapshot");
    let sql = "SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelname = $1";
    client.query_one(sql, &[&index]).await.expect("pg_stat_user_indexes").get(0)
}

/// The entries `work` read from each of `indexes`, on a backend of its own
/// whose every statement runs on a generic plan (what a prepared
/// statement gets after its fifth run), closed before they are counted.
async fn reads<T, F, Fut>(server: &PostgresServer, client: &Client, indexes: [&str; 2], work: F) -> (T, [i64; 2])
where
    F: FnOnce(PostgresBackend) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let before = [read_from(client, indexes[0]).await, read_from(client, indexes[1]).await];
    let url = format!("{}?options=-c%20plan_cache_mode%3Dforce_generic_plan", server.url());
    let backend = PostgresBackend::connect(&url, Config::new()).await.expect("connect");
    let answer = work(backend).await;
    let after = [read_from(client, indexes[0]).await, read_from(client, indexes[1]).await];
    (answer, [after[0] - before[0], after[1] - before[1]])
}

async fn acquire(backend: &PostgresBackend, scope: &[u8], key: &[u8]) -> LeaseToken {
    let claimed = backend.claim(scope, key, Fingerprint::of(key), ClaimOptions::new()).await.expect("claim");
    let BackendClaim::Acquired { token, .. } = claimed else { panic!("a fresh key: {claimed:?}") };
    token
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_read_the_range_they_return_and_a_sweep_the_staged_rows_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = PostgresServer::start(dir.path());
    let backend = PostgresBackend::connect(&server.url(), Config::new()).await.expect("connect");
    let outbox = Outbox::new(backend.clone());
    for n in 0..400 {
        let key = format!("k-{n:04}");
        for scope in [&b"shop"[..], b"other"] {
            let token = acquire(&backend, scope, key.as_bytes()).await;
            backend.complete(&token, b"201").await.expect("complete");
        }
    }
    for key in [&b"order-1"[..], b"order-2"] {
        let token = acquire(&backend, b"shop", key).await;
        outbox.complete(&token, b"201", &[OutboxMessage::new("orders", key.to_vec())]).await.expect("stage");
    }
    drop((outbox, backend));
    let client = admin(&server).await;
    // As autovacuum leaves a table that grew: its statistics taken.
    client.batch_execute("ANALYZE idempo_store").await.expect("analyze");
    let indexes = ["idempo_store_pkey", "idempo_store_staged"];

    let mut read = Vec::new();
    for after in ["k-0010", "k-0390"] {
        let page = |backend: PostgresBackend| async move { backend.scan(b"shop", Some(after.as_bytes()), 5).await };
        let (page, [primary, _]) = reads(&server, &client, indexes, page).await;
        let keys: Vec<Vec<u8>> = page.expect("scan").into_iter().map(|record| record.key).collect();
        let first: usize = after[2..].parse::<usize>().expect("a number") + 1;
        assert_eq!(keys, (first..first + 5).map(|n| format!("k-{n:04}").into_bytes()).collect::<Vec<_>>());
        read.push(primary);
    }
    // The planner's probes of the index's ends apart, the 5 entries of
    // the page: the same wherever the page starts.
    assert!(read[0] == read[1] && read[1] < 40, "pages after 11 and 391 keys read {read:?} entries");

    let sweep = |backend: PostgresBackend| async move { backend.scan_staged(b"shop", None, 256).await };
    let (staged, [primary, marked]) = reads(&server, &client, indexes, sweep).await;
    let keys: Vec<Vec<u8>> = staged.expect("scan_staged").into_iter().map(|record| record.key).collect();
    assert_eq!(keys, [b"order-1".to_vec(), b"order-2".to_vec()]);
    assert_eq!((marked, primary), (2, 0), "the staged rows alone, none of the 800 other completions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_staged_before_version_6_are_marked_by_its_migration() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = PostgresServer::start(dir.path());
    let backend = PostgresBackend::connect(&server.url(), Config::new()).await.expect("connect");
    let token = acquire(&backend, b"shop", b"order-1").await;
    Outbox::new(backend.clone())
        .complete(&token, b"201", &[OutboxMessage::new("orders", b"placed".to_vec())])
        .await
        .expect("stage");
    let token = acquire(&backend, b"shop", b"plain").await;
    backend.complete(&token, b"201").await.expect("complete");
    // As version 5 left the table: no mark, no index.
    admin(&server)
        .await
        .batch_execute(
            "DROP INDEX idempo_store_staged; ALTER TABLE idempo_store DROP COLUMN staged;
             DELETE FROM idemkv_schema_version WHERE version = 6;",
        )
        .await
        .expect("back to version 5");
    let migration = server.migrate(idemkv::backend::postgres::SCHEMA_DEFAULT);
    assert_eq!((migration.from, migration.to), (5, 6));
    let backend = PostgresBackend::connect(&server.url(), Config::new()).await.expect("connect");
    let staged = backend.scan_staged(b"shop", None, 10).await.expect("scan_staged");
    assert_eq!(staged.iter().map(|record| record.key.as_slice()).collect::<Vec<_>>(), [&b"order-1"[..]]);
}

/// What a page read from the primary key on a table without statistics,
/// on a backend as a service connects it (every plan the server's choice).
async fn page_reads(server: &PostgresServer, client: &Client, after: &str) -> i64 {
    let before = read_from(client, "idempo_store_pkey").await;
    let backend = PostgresBackend::connect(&server.url(), Config::new()).await.expect("connect");
    let page = backend.scan(b"shop", Some(after.as_bytes()), 5).await.expect("scan");
    let keys: Vec<Vec<u8>> = page.into_iter().map(|record| record.key).collect();
    let first: usize = after[2..].parse::<usize>().expect("a number") + 1;
    assert_eq!(keys, (first..first + 5).map(|n| format!("k-{n:04}").into_bytes()).collect::<Vec<_>>());
    drop(backend);
    read_from(client, "idempo_store_pkey").await - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_reads_its_range_on_a_table_not_yet_analyzed() {
    // A table just filled, before autovacuum has taken its statistics: the
    // plan a prepared statement's first runs get there gathered every row
    // of the scope after the cursor and sorted them, so a scan of a scope
    // read it again and again.
    let dir = tempfile::tempdir().expect("tempdir");
    let server = PostgresServer::start(dir.path());
    drop(PostgresBackend::connect(&server.url(), Config::new()).await.expect("connect: the schema"));
    let client = admin(&server).await;
    client.batch_execute("ALTER TABLE idempo_store SET (autovacuum_enabled = false)").await.expect("no analyze");
    let fill = "INSERT INTO idempo_store (scope, key, fingerprint, state, token, attempt, recovered, waited, \
                lease_end, ttl, response, created_at, updated_at, finished_at, expires_at, checkpoint, reap_at) \
                SELECT scope, convert_to('k-' || lpad(n::text, 4, '0'), 'UTF8'), decode(repeat('00', 32), 'hex'), 'C', n, 1, false, false, \
                now(), interval '1 hour', '\\x323031', now(), now(), now(), now() + interval '1 hour', NULL, \
                now() + interval '1 hour' \
                FROM generate_series(0, 1999) AS n, (VALUES ('\\x73686f70'::bytea), ('\\x6f74686572'::bytea)) AS s(scope)";
    client.batch_execute(fill).await.expect("fill");
    let stats = "SELECT count(*) FROM pg_stats WHERE tablename = 'idempo_store'";
    assert_eq!(client.query_one(stats, &[]).await.expect("pg_stats").get::<_, i64>(0), 0, "no statistics");
    let near_start = page_reads(&server, &client, "k-0010").await;
    let near_end = page_reads(&server, &client, "k-1990").await;
    assert!(
        near_start < 40 && near_end < 40,
        "pages of 5 after 11 and 1,991 of 2,000 keys read {near_start} and {near_end} index entries"
    );
}
