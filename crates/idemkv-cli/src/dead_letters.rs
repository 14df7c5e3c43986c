//! `dead-letters list | retry | drop`: the inbox's quarantined messages of
//! one consumer, on a store directory (which the service must not hold
//! open: the tool takes its lock), a Redis server or Cluster, or a
//! PostgreSQL schema.

use crate::inspect::{open_existing, open_read_only};
use crate::output::{relative, text_or_hex, Failure, Out, EXIT_DAMAGE};
use clap::{Args, Subcommand, ValueEnum};
use idemkv::{AnyBackend, DeadLetter, IdempotencyBackend, Inbox};
use std::path::PathBuf;
use std::process::ExitCode;

/// `dead-letters`' actions.
#[derive(Subcommand)]
pub enum Action {
    /// A consumer's dead letters, in message-id order: id, attempts, when,
    /// last error, payload size.
    List {
        #[command(flatten)]
        target: Target,
        /// Start after this message id (the last one of the page before).
        #[arg(long)]
        after: Option<String>,
        /// Show at most this many letters.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// text for people, or json (one object a line, with the payload).
        #[arg(long, value_enum, default_value_t = ListFormat::Text)]
        format: ListFormat,
    },
    /// Queue a dead letter to be re-driven: the consumer's next
    /// `Inbox::redrive` runs its handler on the payload with fresh attempts.
    /// Exits 1 if there is no such letter.
    Retry {
        #[command(flatten)]
        target: Target,
        /// The message id.
        message_id: String,
    },
    /// Drop a dead letter for good (the message stays quarantined: a
    /// redelivery is still not run). Exits 1 if there is no such letter.
    Drop {
        #[command(flatten)]
        target: Target,
        /// The message id.
        message_id: String,
    },
}

/// How `list` prints.
#[derive(Clone, Copy, ValueEnum)]
pub enum ListFormat {
    /// One line a letter.
    Text,
    /// One JSON object a line.
    Json,
}

/// Whose dead letters, and where.
#[derive(Args)]
pub struct Target {
    /// The consumer whose inbox quarantined them.
    #[arg(long)]
    consumer: String,
    #[command(flatten)]
    at: Where,
}

/// Where the records are: a store directory, a Redis server, a PostgreSQL
/// schema.
#[derive(Args)]
#[command(group(clap::ArgGroup::new("where").required(true).args(["dir", "redis", "postgres"])))]
pub struct Where {
    /// A store directory.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// A Redis / Valkey server's URL (`redis://host:port/db`).
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// The key prefix of the Redis backend (default `idemkv`).
    #[arg(long, requires = "redis")]
    prefix: Option<String>,
    /// A PostgreSQL connection URL.
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// The PostgreSQL schema of the store (default `public`).
    #[arg(long, requires = "postgres")]
    schema: Option<String>,
}

impl Where {
    /// The backend it names: a store opened read-only unless `write`.
    pub async fn connect(&self, write: bool) -> Result<AnyBackend, Failure> {
        if let Some(dir) = &self.dir {
            return Ok(AnyBackend::new(if write { open_existing(dir)? } else { open_read_only(dir)? }));
        }
        #[cfg(feature = "redis")]
        if let Some(url) = &self.redis {
            let mut backend = idemkv::redis::RedisBackend::connect(url, idemkv::Config::new()).await?;
            if let Some(prefix) = &self.prefix {
                backend = backend.prefix(prefix);
            }
            return Ok(AnyBackend::new(backend));
        }
        #[cfg(feature = "postgres")]
        if let Some(url) = &self.postgres {
            use idemkv::postgres::{PostgresBackend, PostgresOptions, Reaping};
            let client = url.parse().map_err(|error| Failure::other(format!("postgres: {error}")))?;
            let schema = self.schema.as_deref().unwrap_or(idemkv::postgres::SCHEMA_DEFAULT);
            let options = PostgresOptions::new().schema(schema).reaping(Reaping::Off);
            let backend = PostgresBackend::connect_with_options(client, idemkv::Config::new(), options).await?;
            return Ok(AnyBackend::new(backend));
        }
        Err(Failure::other("this idemkv was built without the feature of that target (redis, postgres)"))
    }
}

/// A current-thread runtime for one command.
pub fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| Failure::other(error.to_string()))
}

impl Action {
    fn target(&self) -> &Target {
        match self {
            Action::List { target, .. } | Action::Retry { target, .. } | Action::Drop { target, .. } => target,
        }
    }
}

/// Runs `action` on the backend its target names.
pub fn dead_letters(action: &Action) -> Result<ExitCode, Failure> {
    runtime()?.block_on(async {
        let write = !matches!(action, Action::List { .. });
        let inbox = Inbox::new(action.target().at.connect(write).await?);
        run(&inbox, action).await
    })
}

async fn run<B: IdempotencyBackend>(inbox: &Inbox<B>, action: &Action) -> Result<ExitCode, Failure> {
    let consumer = &action.target().consumer;
    let found = match action {
        Action::List { after, limit, format, .. } => {
            let letters = inbox.dead_letters(consumer, after.as_deref().map(str::as_bytes), *limit).await?;
            let mut out = Out::default();
            for letter in &letters {
                out.line(match format {
                    ListFormat::Text => describe(letter),
                    ListFormat::Json => json(letter),
                })?;
                if out.is_closed() {
                    break;
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
        Action::Retry { message_id, .. } => inbox.retry_dead_letter(consumer, message_id.as_bytes()).await?,
        Action::Drop { message_id, .. } => inbox.drop_dead_letter(consumer, message_id.as_bytes()).await?,
    };
    let mut out = Out::default();
    match (action, found) {
        (Action::Retry { message_id, .. }, true) => {
            out.line(format!("queued {message_id:?} to be re-driven by consumer {consumer:?}"))?;
        }
        (Action::Drop { message_id, .. }, true) => out.line(format!("dropped {message_id:?}"))?,
        (Action::Retry { message_id, .. } | Action::Drop { message_id, .. }, false) => {
            return Err(Failure {
                code: EXIT_DAMAGE,
                message: format!("consumer {consumer:?} has no dead letter {message_id:?}"),
            });
        }
        (Action::List { .. }, _) => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// One letter on one line.
fn describe(letter: &DeadLetter) -> String {
    format!(
        "id={:?} attempts={} dead={} payload={} error={:?}",
        text_or_hex(&letter.message_id),
        letter.attempts,
        relative(letter.dead_at_ms, crate::output::now_ms()),
        letter.payload.as_ref().map_or_else(|| "not kept".to_owned(), |payload| format!("{} bytes", payload.len())),
        letter.error,
    )
}

/// One letter as a JSON object.
fn json(letter: &DeadLetter) -> String {
    serde_json::json!({
        "consumer": letter.consumer,
        "message_id": text_or_hex(&letter.message_id),
        "attempts": letter.attempts,
        "dead_at_ms": letter.dead_at_ms,
        "error": letter.error,
        "payload": letter.payload.as_deref().map(text_or_hex),
    })
    .to_string()
}
