//! `migrate --postgres URL`: creates or upgrades the store's schema on a
//! PostgreSQL server ([`idemkv::backend::postgres::PostgresBackend::migrate`]), the
//! one step that runs DDL. It is run by the role that is to own the
//! objects, once per release, before the services connect with a role
//! that holds only the privileges their calls need.

use crate::output::Failure;
use std::process::ExitCode;

/// The arguments of `migrate`.
#[derive(clap::Args)]
#[command(after_help = "Safe to run again: a schema at this build's version is left as it is. The services' role \
                        then needs USAGE on the schema, SELECT, INSERT, UPDATE, DELETE on its table idempo_store, \
                        SELECT on idemkv_schema_version, USAGE on the sequence idemkv_tokens and EXECUTE on its \
                        functions.")]
pub struct MigrateArgs {
    /// The server, as the objects' owner (`postgres://owner@host:port/db`
    /// or `host=... user=... dbname=...`). Needs idemkv built with the
    /// `postgres` feature.
    #[arg(long, value_name = "URL")]
    postgres: String,
    /// The PostgreSQL schema holding the store (created if missing): one
    /// per store, so that several share a database.
    #[arg(long, value_name = "NAME", default_value = "public")]
    schema: String,
}

#[cfg(feature = "postgres")]
pub fn migrate(args: &MigrateArgs) -> Result<ExitCode, Failure> {
    use crate::output::Out;
    use idemkv::backend::postgres::{PostgresBackend, PostgresOptions};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| Failure::other(format!("cannot start the tokio runtime: {error}")))?;
    let options = PostgresOptions::new().schema(&args.schema);
    let done = runtime.block_on(PostgresBackend::migrate(&args.postgres, &options))?;
    let mut out = Out::default();
    if done.from == done.to {
        out.line(format!("schema {:?}: at version {}, nothing to do", done.schema, done.to))?;
    } else {
        out.line(format!("schema {:?}: migrated from version {} to {}", done.schema, done.from, done.to))?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(not(feature = "postgres"))]
pub fn migrate(_args: &MigrateArgs) -> Result<ExitCode, Failure> {
    Err(Failure::other(
        "migrate needs idemkv built with the `postgres` feature (cargo install idemkv-cli --features postgres)",
    ))
}
