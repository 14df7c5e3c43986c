//! `outbox list | retry | drop`: the messages an outbox staged in one
//! scope, and where each key's delivery stands (pending, in flight, dead,
//! delivered); a key stopped at a dead message re-driven or given up.

use crate::output::{text_or_hex, Failure, Out, EXIT_DAMAGE};
use crate::target::{runtime, Where};
use clap::{Args, Subcommand, ValueEnum};
use idemkv::messaging::{drop_dead_key, outbox_status, retry_dead_key, KeyState, KeyStatus};
use std::process::ExitCode;

/// `outbox`'s actions.
#[derive(Subcommand)]
pub enum Action {
    /// The keys of a scope with staged messages, one a line: how many
    /// messages, and pending (the next to go, its refusals, the last
    /// error), in flight, dead, or delivered.
    List {
        #[command(flatten)]
        target: Target,
        /// Show only keys in this state.
        #[arg(long, value_enum)]
        state: Option<StateFilter>,
        /// Read at most this many keys with messages.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Re-drive a key stopped at a dead message: the relay's next pass
    /// delivers from it, its attempts counted anew. Exits 1 if the key is
    /// not stopped at a dead message.
    Retry {
        #[command(flatten)]
        target: Target,
        /// The key (as UTF-8 text).
        key: String,
    },
    /// Give up on the rest of a key stopped at a dead message: those
    /// messages are never delivered. Exits 1 if the key is not stopped at
    /// a dead message.
    Drop {
        #[command(flatten)]
        target: Target,
        /// The key (as UTF-8 text).
        key: String,
    },
}

/// The states `list` can filter on.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StateFilter {
    /// Not all delivered yet.
    Pending,
    /// Being delivered now.
    InFlight,
    /// Stopped at a dead message.
    Dead,
    /// All delivered, by a relay that stopped before it dropped them from
    /// the completion (its next pass does; a compacted key is not listed).
    Delivered,
}

/// Which scope, and where.
#[derive(Args)]
pub struct Target {
    /// The scope the producer's keys are in.
    #[arg(long)]
    scope: String,
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
pub fn outbox(action: &Action) -> Result<ExitCode, Failure> {
    runtime()?.block_on(async {
        let target = action.target();
        let backend = target.at.connect(!matches!(action, Action::List { .. })).await?;
        let scope = target.scope.as_bytes();
        let (done, key) = match action {
            Action::List { state, limit, .. } => {
                let mut out = Out::default();
                for status in outbox_status(&backend, scope, None, *limit).await? {
                    if state.is_none_or(|wanted| wanted == filter(&status.state)) {
                        out.line(describe(&status))?;
                    }
                    if out.is_closed() {
                        break;
                    }
                }
                return Ok(ExitCode::SUCCESS);
            }
            Action::Retry { key, .. } => (retry_dead_key(&backend, scope, key.as_bytes()).await?, key),
            Action::Drop { key, .. } => (drop_dead_key(&backend, scope, key.as_bytes()).await?, key),
        };
        if !done {
            return Err(Failure {
                code: EXIT_DAMAGE,
                message: format!("key {key:?} is not stopped at a dead message"),
            });
        }
        let said = if matches!(action, Action::Retry { .. }) { "re-driven" } else { "given up" };
        Out::default().line(format!("{key:?}: {said}"))?;
        Ok(ExitCode::SUCCESS)
    })
}

fn filter(state: &KeyState) -> StateFilter {
    match state {
        KeyState::InFlight => StateFilter::InFlight,
        KeyState::Dead { .. } => StateFilter::Dead,
        KeyState::Delivered => StateFilter::Delivered,
        _ => StateFilter::Pending,
    }
}

/// One key on one line.
fn describe(status: &KeyStatus) -> String {
    let state = match &status.state {
        KeyState::Pending { next, attempts: 0, .. } => format!("pending next={next}"),
        KeyState::Pending { next, attempts, error } => {
            format!("pending next={next} attempts={attempts} error={error:?}")
        }
        KeyState::InFlight => "in-flight".to_owned(),
        KeyState::Dead { index, attempts, error } => format!("dead at={index} attempts={attempts} error={error:?}"),
        KeyState::Delivered => "delivered".to_owned(),
        _ => "unknown".to_owned(),
    };
    format!("key={:?} messages={} {state}", text_or_hex(&status.key), status.messages.len())
}
