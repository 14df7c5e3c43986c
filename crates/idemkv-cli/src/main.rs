//! `idemkv`: inspect, verify, compact and load-test a store directory —
//! and, built with the `redis` feature, load-test a Redis server or Cluster
//! (`idemkv load --redis URL`); built with the `postgres` feature, create
//! or upgrade the store's schema on a PostgreSQL server (`idemkv migrate
//! --postgres URL`); move a store's live records to Redis, PostgreSQL or
//! another store (`export`, `import`); list, re-drive or drop an inbox's
//! dead letters (`dead-letters`) and an outbox's stuck keys (`outbox`).
//!
//! `stats`, `get`, `list` and `export` open the store read-only
//! ([`idemkv::Store::open_read_only`]): they change nothing on disk, work
//! for a user who may read the store but not write it, share the lock with
//! each other and are refused while a live writer holds the store (the
//! message names its process). `verify` opens every file read-only and
//! takes no lock. `compact`, `repair` and `load` write; `migrate` runs the
//! PostgreSQL schema's DDL as its owner.
//!
//! Exit codes: 0 clean, 1 damage (and `get` of an absent key, `load`
//! finding a key held twice), 2 usage or any other error — clap's own
//! usage errors exit 2 too.

mod dead_letters;
mod inspect;
mod load;
mod migrate;
mod outbox;
mod output;
mod stats;
mod target;
mod transfer;

use clap::{Parser, Subcommand, ValueEnum};
use idemkv::Keyspace;
use output::Failure;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "idemkv", version, about = "Inspect, verify, compact and load-test an idemkv store directory")]
#[command(after_help = "Exit status: 0 clean, 1 damage (also: `get` of an absent key, `load` finding a key held \
                        twice), 2 usage or other errors.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// What is on disk: shards, segments, bytes, records by state, age of
    /// the oldest record, torn tail (read-only open).
    Stats {
        /// The store directory.
        dir: PathBuf,
        /// Output format: text for people, json, or prometheus (the text
        /// exposition format, every fact a gauge).
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// One record: state, attempt, token, times and response (read-only
    /// open); exits 1 if the key has no live record.
    Get {
        /// The store directory.
        dir: PathBuf,
        /// The idempotency key (as UTF-8 text).
        key: String,
        /// The key's scope (tenant); empty by default.
        #[arg(long, default_value = "")]
        scope: String,
        /// The record's keyspace: caller (the default: a service's own
        /// keys), or one of idemkv's own: hold, version, inbox,
        /// dead-letter, redrive, relay, operation.
        #[arg(long, default_value_t = Keyspace::Caller)]
        keyspace: Keyspace,
    },
    /// Live records, one a line (read-only open); a record of idemkv's own
    /// keyspaces starts with `keyspace=`.
    List {
        /// The store directory.
        dir: PathBuf,
        /// Show only records in this state.
        #[arg(long, value_enum)]
        state: Option<StateFilter>,
        /// Show only records of this keyspace (caller, hold, version,
        /// inbox, dead-letter, redrive, relay, operation).
        #[arg(long)]
        keyspace: Option<Keyspace>,
        /// Show at most this many records.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// CRC-check every record of every segment, reading the files only and
    /// taking no lock; exits 1 on damage.
    Verify {
        /// The store directory.
        dir: PathBuf,
    },
    /// Run one compaction pass and print its report (opens the store for
    /// writing).
    Compact {
        /// The store directory.
        dir: PathBuf,
    },
    /// Repair a damaged store: keep every whole record, drop only what
    /// cannot be read and list every record dropped (never done
    /// automatically; the store must not be open).
    Repair {
        /// The store directory.
        dir: PathBuf,
    },
    /// Generate load: claims from many threads on a store directory
    /// (created if it does not exist), or from many tasks on Redis
    /// (--redis, --redis-cluster; needs the `redis` feature), then latency
    /// and answers.
    Load(load::LoadArgs),
    /// Create or upgrade the store's schema on a PostgreSQL server, as the
    /// role that is to own it (needs the `postgres` feature); the services
    /// then connect with a role that cannot run DDL.
    Migrate(migrate::MigrateArgs),
    /// Write every live record of a store (opened read-only) to a new
    /// file of JSON lines, for `import`.
    Export {
        /// The store directory.
        dir: PathBuf,
        /// The file to create (never overwritten).
        file: PathBuf,
    },
    /// Import an `export` file into Redis, PostgreSQL or another store:
    /// every record as a claim and its finish would make it; keys the
    /// target already holds are kept. The whole file is checked first.
    Import(ImportArgs),
    /// The inbox's dead letters of one consumer: list, re-drive or drop
    /// them, on a store directory, Redis or PostgreSQL.
    #[command(subcommand)]
    DeadLetters(dead_letters::Action),
    /// An outbox's staged messages in one scope: where each key's delivery
    /// stands (pending, in flight, dead, delivered); re-drive or give up a
    /// key stopped at a dead message.
    #[command(subcommand)]
    Outbox(outbox::Action),
}

/// Where `import` writes.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["redis", "redis_cluster", "postgres", "store"])))]
struct ImportArgs {
    /// The file `export` wrote.
    file: PathBuf,
    #[command(flatten)]
    remote: target::Remote,
    /// Another store directory (created if missing).
    #[arg(long, value_name = "DIR")]
    store: Option<PathBuf>,
}

/// How `stats` prints.
#[derive(Clone, Copy, ValueEnum)]
enum Format {
    /// Aligned lines for people, with byte units and times.
    Text,
    /// One JSON object.
    Json,
    /// The Prometheus text exposition format.
    Prometheus,
}

/// The states `list` can filter on.
#[derive(Clone, Copy, ValueEnum)]
enum StateFilter {
    /// Claimed, not finished.
    Processing,
    /// Finished with `complete`.
    Completed,
    /// Finished with `fail` (a replayed failure).
    Failed,
}

/// `import`, to the target its arguments name.
fn import(args: &ImportArgs) -> Result<ExitCode, Failure> {
    if let Some(dir) = &args.store {
        return transfer::import_into_store(&args.file, dir);
    }
    target::runtime()?.block_on(async {
        let (backend, label) = args.remote.connect().await?.ok_or_else(|| Failure::other("no target named"))?;
        transfer::import(&backend, &args.file, &label).await
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Stats { dir, format } => stats::stats(&dir, format),
        Command::Get { dir, key, scope, keyspace } => inspect::get(&dir, keyspace, &scope, &key),
        Command::List { dir, state, keyspace, limit } => inspect::list(&dir, (state, keyspace), limit),
        Command::Verify { dir } => inspect::verify(&dir),
        Command::Compact { dir } => inspect::compact(&dir),
        Command::Repair { dir } => inspect::repair(&dir),
        Command::Load(args) => load::load(&args),
        Command::Migrate(args) => migrate::migrate(&args),
        Command::Export { dir, file } => transfer::export(&dir, &file),
        Command::Import(args) => import(&args),
        Command::DeadLetters(action) => dead_letters::dead_letters(&action),
        Command::Outbox(action) => outbox::outbox(&action),
    };
    match outcome {
        Ok(code) => code,
        Err(Failure { code, message }) => {
            output::warn(&message);
            ExitCode::from(code)
        }
    }
}
