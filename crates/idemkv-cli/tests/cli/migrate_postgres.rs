//! `idemkv migrate --postgres` run as a user would, against a real server
//! started here: it creates the store in the schema given (a backend then
//! connects to it without running DDL), says so, is a no-op the second
//! time, and a bad URL, an unreachable server or a role that may not run
//! DDL is a one-line error with exit 2, never a panic.
#![cfg(feature = "postgres")]

use crate::common::postgres::{free_port, PostgresServer};
use crate::support::{assert_fails, idemkv, scratch, stderr, stdout};
use idemkv::backend::postgres::{PostgresBackend, PostgresOptions};
use idemkv::{Config, Error};

/// What `connect` answers for `schema` of the server.
fn connect(server: &PostgresServer, schema: &str) -> idemkv::Result<PostgresBackend> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let options = PostgresOptions::new().schema(schema);
    runtime.block_on(PostgresBackend::connect_with_options(server.url().parse().expect("url"), Config::new(), options))
}

#[test]
fn migrate_creates_the_schema_once() {
    let dir = scratch();
    let server = PostgresServer::start_empty(&dir.path().join("postgres"));
    let url = server.url();
    assert!(matches!(connect(&server, "shop"), Err(Error::SchemaVersion { found: 0, .. })));

    let output = idemkv(&["migrate", "--postgres", &url, "--schema", "shop"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "schema \"shop\": migrated from version 0 to 6\n");
    connect(&server, "shop").expect("a backend connects to the migrated schema");

    let output = idemkv(&["migrate", "--postgres", &url, "--schema", "shop"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "schema \"shop\": at version 6, nothing to do\n");
    // Without --schema: `public`.
    let output = idemkv(&["migrate", "--postgres", &url]);
    assert_eq!(stdout(&output), "schema \"public\": migrated from version 0 to 6\n");
}

#[test]
fn migrate_failures_are_one_line() {
    let dir = scratch();
    let server = PostgresServer::start_empty(&dir.path().join("postgres"));
    let unreachable = format!("postgres://postgres@127.0.0.1:{}/postgres", free_port());
    assert_fails(&idemkv(&["migrate", "--postgres", &unreachable]), 2, "postgres", "an unreachable server");
    assert_fails(&idemkv(&["migrate", "--postgres", "postgres://a:b:c@"]), 2, "invalid configuration", "a bad URL");
    let bad_schema = idemkv(&["migrate", "--postgres", &server.url(), "--schema", "pg_mine"]);
    assert_fails(&bad_schema, 2, "reserved", "a reserved schema name");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let (client, connection) = idemkv::backend::postgres::tokio_postgres::connect(
            &server.url(),
            idemkv::backend::postgres::tokio_postgres::NoTls,
        )
        .await
        .expect("connect");
        tokio::spawn(connection);
        client.batch_execute("CREATE ROLE app LOGIN; REVOKE CREATE ON SCHEMA public FROM PUBLIC").await.expect("role");
    });
    let refused = idemkv(&["migrate", "--postgres", &server.url_as("app")]);
    assert_fails(&refused, 2, "permission denied", "a role that may not run DDL");
    assert!(matches!(connect(&server, "public"), Err(Error::SchemaVersion { found: 0, .. })), "nothing was made");
}
