//! The schema the crate creates and migrates, and the server-side functions
//! behind every transition (one statement, one round trip each).
//!
//! Every object lives in one PostgreSQL schema (`public` unless
//! [`PostgresOptions::schema`](super::PostgresOptions::schema) says
//! otherwise), so several stores share a database without sharing a key.
//! Migrations are numbered from 1 (their SQL is in `migrations.rs`);
//! `idemkv_schema_version` (in the same schema) holds one row per applied
//! migration. [`migrate`] applies the missing ones in one transaction under an
//! advisory lock, so that owners migrating together migrate once; it is the
//! only code that runs DDL, and it runs as the schema's owner, once per
//! release, not at every connect. [`check`] is what `connect` runs instead: it
//! reads the version and the connecting role's privileges and changes nothing.
//! A database migrated by a newer build (a version this build does not know)
//! is refused rather than used.
//!
//! # Tables
//!
//! `idempo_store`, primary key `(scope, key)`, both `bytea`; from version
//! 5 the `scope` column holds the record's keyspace too (the caller's, or
//! one of idemkv's own: see `keyspace.rs`), so that no caller's scope
//! reaches idemkv's own records:
//! `fingerprint` (32 bytes), `state` (`P` processing, `C` completed, `F`
//! failed), `token` (fencing token, from the global sequence
//! `idemkv_tokens`: never reused for any key, across release and expiry),
//! `attempt`, `recovered`, `waited` (a `claim_wait` waits on the key, so
//! its finish notifies), `lease_end`, `ttl`, `response`, `created_at`,
//! `updated_at`, `finished_at`, `expires_at` (lease end + TTL while
//! processing, finish + TTL after), (from version 4) `reap_at`, a bound
//! of `expires_at` from above, indexed for the reaper, (from version 6)
//! `staged`, true while a completion's response carries staged messages
//! (NULL otherwise), indexed where true for a relay's sweep, and (from
//! version 2) `checkpoint`: the checkpoint of a Processing row, the
//! bytes of [`crate::checkpoint`]'s encoding, `NULL` for none and once
//! finished. A renewal keeps it, a takeover of an ended lease answers it
//! and keeps it, every other claim that writes (absent, expired, or a
//! Failed key run again under
//! [`ReusePolicy::RetryFailed`](crate::ReusePolicy::RetryFailed)) clears
//! it; a release or a removal deletes the row.
//!
//! A table of version 1 is upgraded in place by the migration: the column is
//! added (`ADD COLUMN IF NOT EXISTS`, no default, so no rewrite), rows
//! already there have no checkpoint, and the claim of version 1 stays
//! beside the new one for instances of the earlier build still running.
//!
//! A row past `expires_at` is absent to every call (a claim starts afresh,
//! attempt 1), whether or not the reaper has deleted it yet. Every time is
//! the server's (`clock_timestamp()`), never a client's.

use super::migrations::{migration, BOUND};
use super::options::Schema;
use super::reply::{postgres_error, protocol};
use crate::error::{Error, Result};
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

/// The newest schema version this build knows.
pub(super) const SCHEMA_VERSION: i32 = 6;

/// The advisory lock key held while migrating (`idemkv` in ASCII).
const MIGRATION_LOCK: i64 = 0x6964_656d_6b76;

/// What a migration did: the schema, and its version before and after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    /// The PostgreSQL schema migrated.
    pub schema: String,
    /// Its version before (0: it held no store).
    pub from: i32,
    /// Its version after: the one this build uses.
    pub to: i32,
}

/// The schema missing or too old, as [`Error::SchemaVersion`].
fn version_error(schema: &Schema, found: i32) -> Error {
    Error::SchemaVersion { schema: schema.name().to_owned(), found, expected: SCHEMA_VERSION }
}

/// Creates the schema when missing and brings it to [`SCHEMA_VERSION`],
/// in one transaction under an advisory lock.
pub(super) async fn migrate(client: &mut Client, schema: &Schema) -> Result<Migration> {
    let transaction = client.transaction().await.map_err(postgres_error)?;
    transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await.map_err(postgres_error)?;
    // Looked up first: `CREATE SCHEMA IF NOT EXISTS` needs the database's
    // CREATE privilege even when the schema exists (made by a DBA for the
    // owner, say).
    let exists = transaction
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&schema.name()])
        .await
        .map_err(postgres_error)?;
    transaction.batch_execute(&setup(schema, exists.is_some())).await.map_err(postgres_error)?;
    let found = read_version(&transaction, schema).await.map_err(postgres_error)?;
    if found > SCHEMA_VERSION {
        return Err(version_error(schema, found));
    }
    let record = format!("INSERT INTO {} (version) VALUES ($1)", schema.object("idemkv_schema_version"));
    for version in (found + 1)..=SCHEMA_VERSION {
        transaction.batch_execute(&migration(version, schema)?).await.map_err(postgres_error)?;
        transaction.execute(&record, &[&version]).await.map_err(postgres_error)?;
    }
    transaction.commit().await.map_err(postgres_error)?;
    Ok(Migration { schema: schema.name().to_owned(), from: found, to: SCHEMA_VERSION })
}

/// Before the migrations: the schema (unless it `exists`), the migrations'
/// unqualified names pointed into it, the version table.
fn setup(schema: &Schema, exists: bool) -> String {
    let create = if exists { String::new() } else { format!("CREATE SCHEMA {};", schema.quoted()) };
    format!(
        "{create}
        SET LOCAL search_path TO {};
        CREATE TABLE IF NOT EXISTS {} (
            version integer PRIMARY KEY,
            applied_at timestamptz NOT NULL DEFAULT clock_timestamp());",
        schema.quoted(),
        schema.object("idemkv_schema_version")
    )
}

async fn read_version(
    client: &impl tokio_postgres::GenericClient,
    schema: &Schema,
) -> Result<i32, tokio_postgres::Error> {
    let sql = format!("SELECT coalesce(max(version), 0) FROM {}", schema.object("idemkv_schema_version"));
    client.query_one(&sql, &[]).await?.try_get(0)
}

/// What the connecting role needs, beyond USAGE on the schema: `(kind,
/// object, privilege)`, checked one privilege at a time (`has_*_privilege`
/// with a list answers whether *any* is held).
const NEEDED: [(&str, &str, &str); 14] = [
    ("table", "idempo_store", "SELECT"),
    ("table", "idempo_store", "INSERT"),
    ("table", "idempo_store", "UPDATE"),
    ("table", "idempo_store", "DELETE"),
    ("table", "idemkv_schema_version", "SELECT"),
    ("sequence", "idemkv_tokens", "USAGE"),
    ("function", BOUND[0], "EXECUTE"),
    ("function", BOUND[2], "EXECUTE"),
    ("function", BOUND[3], "EXECUTE"),
    ("function", BOUND[4], "EXECUTE"),
    ("function", BOUND[5], "EXECUTE"),
    ("function", BOUND[6], "EXECUTE"),
    ("function", "idemkv_ms(timestamptz)", "EXECUTE"),
    ("function", "idemkv_tag(bytea, bytea)", "EXECUTE"),
];

/// What `connect` checks, changing nothing: the schema exists, the role
/// may use it, the store in it is at [`SCHEMA_VERSION`], and the role holds
/// every privilege the calls need. Refusing here, with the whole list,
/// beats a `permission denied` at the first claim of some request.
pub(super) async fn check(client: &Client, schema: &Schema) -> Result<()> {
    let usage = client
        .query_opt("SELECT has_schema_privilege(oid, 'USAGE') FROM pg_namespace WHERE nspname = $1", &[&schema.name()])
        .await
        .map_err(postgres_error)?;
    match usage.map(|row| row.try_get::<_, bool>(0)) {
        None => return Err(version_error(schema, 0)),
        Some(Ok(true)) => {}
        Some(Ok(false)) => return Err(privileges(client, vec![format!("USAGE on schema {}", schema.quoted())]).await),
        Some(Err(_)) => return Err(protocol("schema privilege")),
    }
    match read_version(client, schema).await {
        Ok(found) if found == SCHEMA_VERSION => {}
        Ok(found) => return Err(version_error(schema, found)),
        Err(error) if error.code() == Some(&SqlState::UNDEFINED_TABLE) => return Err(version_error(schema, 0)),
        // Refused: the list below says which privileges are missing.
        Err(error) if error.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {}
        Err(error) => return Err(postgres_error(error)),
    }
    let missing = missing_privileges(client, schema).await?;
    if missing.is_empty() {
        Ok(())
    } else {
        Err(privileges(client, missing).await)
    }
}

/// The privileges of [`NEEDED`] the role lacks, as `PRIVILEGE on kind
/// object`.
async fn missing_privileges(client: &Client, schema: &Schema) -> Result<Vec<String>> {
    let objects: Vec<String> = NEEDED.iter().map(|(_, object, _)| schema.object(object)).collect();
    let checks: Vec<String> = NEEDED
        .iter()
        .enumerate()
        .map(|(index, (kind, _, privilege))| format!("has_{kind}_privilege(${}, '{privilege}')", index + 1))
        .collect();
    let sql = format!("SELECT ARRAY[{}]", checks.join(", "));
    let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
        objects.iter().map(|object| object as &(dyn tokio_postgres::types::ToSql + Sync)).collect();
    let row = client.query_one(&sql, &params).await.map_err(postgres_error)?;
    let held: Vec<bool> = row.try_get(0).map_err(|_| protocol("privileges"))?;
    Ok(NEEDED
        .iter()
        .zip(&objects)
        .zip(held)
        .filter(|(_, held)| !held)
        .map(|(((kind, _, privilege), object), _)| format!("{privilege} on {kind} {object}"))
        .collect())
}

/// [`Error::MissingPrivileges`] for the connected role.
async fn privileges(client: &Client, missing: Vec<String>) -> Error {
    let role = match client.query_one("SELECT current_user::text", &[]).await {
        Ok(row) => row.try_get(0).unwrap_or_default(),
        Err(_) => String::new(),
    };
    Error::MissingPrivileges { role, missing }
}
