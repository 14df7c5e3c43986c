//! `dead-letters list | retry | drop`: the inbox's quarantined messages of
//! one consumer, on a store directory (which the service must not hold
//! open: the tool takes its lock), a Redis server or Cluster, or a
//! PostgreSQL schema.

use crate::output::{relative, text_or_hex, Failure, Out, EXIT_DAMAGE};
use crate::target::{runtime, Where};
use clap::{Args, Subcommand, ValueEnum};
use idemkv::{
    backend::IdempotencyBackend,
    messaging::{DeadLetter, Inbox},
};
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
