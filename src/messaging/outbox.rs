//! [`Outbox`]: messages staged atomically with the completion that
//! produced them, on any backend.
//!
//! The messages travel inside the completion itself: the stored answer is
//! an envelope — the response, then the messages, each with the id it is
//! delivered under — written by the one transition that completes the
//! key. The embedded store writes it in one log append (one fsync under
//! [`Durability::Sync`](crate::Durability::Sync)), Redis in the completion's
//! script on the record's own key, PostgreSQL in the row the completion
//! updates (inside the caller's transaction with `complete_in` and
//! [`envelope`]). A completion and its messages are never apart: a crash
//! leaves both or neither.
//!
//! A [`Relay`](super::Relay) delivers them; a replay of the key answers
//! the response alone ([`Outbox::run`], [`response_of`]).
//!
//! The envelope's layout is in `envelope.rs`.

use super::envelope::{envelope, response_of, OutboxMessage};
use super::relay::RelayHandle;
use crate::backend::run_once::RunOnce;
use crate::backend::{ClaimOptions, IdempotencyBackend};
use crate::error::Result;
use crate::store::{Once, Outcome};
use crate::{Fingerprint, LeaseToken};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// What a producer's closure says its run came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Produced {
    /// Done: store `response` and stage `messages` with it.
    Complete {
        /// The replayed answer.
        response: Vec<u8>,
        /// The messages to publish.
        messages: Vec<OutboxMessage>,
    },
    /// A terminal failure (see [`Outcome::Fail`]); nothing is published.
    Fail(Vec<u8>),
    /// Not processed (see [`Outcome::Release`]).
    Release,
}

/// Runs a producer once per key, staging its messages with its completion
/// (see the module docs); a [`Relay`](super::Relay) publishes them.
///
/// # Examples
///
/// ```
/// use idemkv::{backend::ClaimOptions, Config, Fingerprint, messaging::{Outbox, OutboxMessage, Produced}, Once, Store};
/// # fn main() -> Result<(), idemkv::Error> {
/// # let runtime = tokio::runtime::Runtime::new().unwrap();
/// # runtime.block_on(async {
/// # let dir = tempfile::tempdir().unwrap();
/// let outbox = Outbox::new(Store::open(dir.path(), Config::new())?);
/// let order = |_attempt| async {
///     Produced::Complete {
///         response: b"201 order 7".to_vec(),
///         messages: vec![OutboxMessage::new("orders", b"{\"order\":7,\"event\":\"placed\"}".to_vec())],
///     }
/// };
/// let answer = outbox.run(b"shop", b"order-7", Fingerprint::of(b"order 7"), ClaimOptions::new(), order).await?;
/// assert_eq!(answer.response(), Some(&b"201 order 7"[..]));
/// // A retry replays the response alone; nothing is staged twice.
/// let again = outbox.run(b"shop", b"order-7", Fingerprint::of(b"order 7"), ClaimOptions::new(), order).await?;
/// assert_eq!(again, Once::Replayed(b"201 order 7".to_vec()));
/// # Ok(()) })
/// # }
/// ```
pub struct Outbox<B> {
    once: RunOnce<B>,
    relay: Option<RelayHandle>,
    retention: Duration,
}

impl<B> Clone for Outbox<B> {
    fn clone(&self) -> Self {
        Outbox { once: self.once.clone(), relay: self.relay.clone(), retention: self.retention }
    }
}

/// How long a completion that stages messages lives at least, by default:
/// a week.
pub const RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

impl<B> std::fmt::Debug for Outbox<B> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Outbox")
            .field("once", &self.once)
            .field("relay", &self.relay.is_some())
            .field("retention", &self.retention)
            .finish()
    }
}

impl<B: IdempotencyBackend> Outbox<B> {
    /// An outbox over `backend`.
    #[must_use]
    pub fn new(backend: B) -> Self {
        Outbox::shared(Arc::new(backend))
    }

    /// As [`new`](Outbox::new), for a backend shared with others (the
    /// relay's).
    #[must_use]
    pub fn shared(backend: Arc<B>) -> Self {
        Outbox { once: RunOnce::shared(backend), relay: None, retention: RETENTION }
    }

    /// Keeps every completion this outbox writes at least `retention`
    /// ([`RETENTION`], a week, by default), whatever TTL its claim asks:
    /// its messages wait that long for a relay that is down. Once they
    /// are delivered the relay drops them from the completion, which then
    /// answers replays as any other until it expires. At least a second.
    #[must_use]
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention.max(Duration::from_secs(1));
        self
    }

    /// `options` with its TTL raised to the [`retention`](Outbox::retention):
    /// what [`run`](Outbox::run) claims with, and what a caller that
    /// claims a key itself and stages with [`complete`](Outbox::complete)
    /// (or PostgreSQL's `complete_in` and [`envelope`]) should claim with.
    #[must_use]
    pub fn claim_options(&self, mut options: ClaimOptions) -> ClaimOptions {
        options.ttl = Some(options.ttl.map_or(self.retention, |ttl| ttl.max(self.retention)));
        options
    }

    /// Tells `relay` (a [`Relay`](super::Relay) of this process) of each
    /// completion with messages as soon as it is stored, so it delivers
    /// them at once rather than at its next sweep.
    #[must_use]
    pub fn relay_to(mut self, relay: RelayHandle) -> Self {
        self.relay = Some(relay);
        self
    }

    fn notify(&self, token: &LeaseToken, messages: usize) {
        if let (Some(relay), true) = (&self.relay, messages > 0) {
            relay.notify(&token.scope, &token.key);
        }
    }

    /// The lease of a running producer (see [`RunOnce::lease`]).
    #[must_use]
    pub fn lease(mut self, lease: std::time::Duration) -> Self {
        self.once = self.once.lease(lease);
        self
    }

    /// Completes `token` with `response`, staging `messages` in the same
    /// transition.
    ///
    /// # Errors
    /// As [`IdempotencyBackend::complete`]: [`Error::ResponseTooLarge`](crate::Error::ResponseTooLarge)
    /// counts the whole envelope.
    pub async fn complete(&self, token: &LeaseToken, response: &[u8], messages: &[OutboxMessage]) -> Result<()> {
        self.once.backend().complete(token, &envelope(token, response, messages)?).await?;
        self.notify(token, messages.len());
        Ok(())
    }

    /// [`RunOnce::run`] for a producer: a [`Produced::Complete`] stores
    /// its response with its messages staged; a replay answers the
    /// response alone.
    ///
    /// # Errors
    /// As [`RunOnce::run`].
    pub async fn run<F, Fut>(
        &self,
        scope: &[u8],
        key: &[u8],
        fingerprint: Fingerprint,
        options: ClaimOptions,
        f: F,
    ) -> Result<Once>
    where
        F: FnOnce(crate::backend::run_once::Attempt) -> Fut,
        Fut: Future<Output = Produced>,
    {
        let mut staged = None;
        let once = self
            .once
            .run(scope, key, fingerprint, self.claim_options(options), |attempt| {
                let token = attempt.token.clone();
                let staged = &mut staged;
                let produced = f(attempt);
                async move {
                    match produced.await {
                        Produced::Complete { response, messages } => match envelope(&token, &response, &messages) {
                            Ok(stored) => {
                                *staged = Some((token, messages.len()));
                                Outcome::Complete(stored)
                            }
                            // Only a part over 4 GiB: the backend refuses
                            // the whole as too large in the same way.
                            Err(_) => Outcome::Complete(response),
                        },
                        Produced::Fail(response) => Outcome::Fail(response),
                        Produced::Release => Outcome::Release,
                    }
                }
            })
            .await?;
        if let (Once::Ran(Outcome::Complete(_)), Some((token, messages))) = (&once, &staged) {
            self.notify(token, *messages);
        }
        Ok(match once {
            Once::Ran(Outcome::Complete(stored)) => Once::Ran(Outcome::Complete(response_of(&stored).to_vec())),
            Once::Replayed(stored) => Once::Replayed(response_of(&stored).to_vec()),
            other => other,
        })
    }
}
