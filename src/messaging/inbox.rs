//! [`Inbox`]: the consumer side of an at-least-once queue. A message runs
//! its handler once however often it is delivered; a message whose handler
//! keeps failing is quarantined as a [`DeadLetter`].
//!
//! Each message is a record `(consumer, message id)` of [`Keyspace::Inbox`](crate::Keyspace::Inbox) with
//! the payload's fingerprint, claimed through [`RunOnce`]; its stored
//! answer says what became of it: `P` processed (Completed), `R` + error a
//! failure to run again (Failed, rerun under
//! [`ReusePolicy::RetryFailed`], which counts the attempt), `D` + error
//! dead-lettered (Completed). Attempts count across redeliveries and
//! consumers: a rerun of a failure and a takeover from a consumer that
//! stopped each add one.

use super::dead::{cut, DeadLetter, DEAD_LETTER_ERROR_BYTES_MAX};
use crate::backend::run_once::RunOnce;
use crate::backend::{ClaimOptions, IdempotencyBackend};
use crate::error::{Error, Result};
use crate::events::event;
use crate::store::{Once, Outcome};
use crate::{Fingerprint, Keyspace, ReusePolicy};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Attempts before a message is quarantined, unless told otherwise.
pub const INBOX_MAX_ATTEMPTS_DEFAULT: u32 = 5;
/// How long a processed message id is remembered by default (a
/// redelivery later than this runs again).
pub const INBOX_RETENTION_DEFAULT: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long a dead letter is kept by default if nobody re-drives or drops
/// it (as long as SQS keeps a message at most).
pub const DEAD_LETTER_RETENTION_DEFAULT: Duration = Duration::from_secs(14 * 24 * 3600);

/// A delivered message, as the handler gets it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Message {
    /// The message id.
    pub id: Vec<u8>,
    /// The payload.
    pub payload: Vec<u8>,
    /// 1 for the first attempt, one more for each failed or unfinished one
    /// before it.
    pub attempt: u32,
    /// Whether an earlier attempt stopped half-way (its consumer died):
    /// its side effects may have happened.
    pub recovered: bool,
}

/// What a handler says of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// Processed: a redelivery is a duplicate and does not run.
    Processed,
    /// Failed with this error: run again at the next delivery, until the
    /// attempts are spent; the last failure quarantines it.
    Failed(String),
    /// Not processed, and nothing happened a rerun must not repeat (a
    /// dependency was down before any effect): the message is released,
    /// and its attempts are not counted.
    NotProcessed,
}

/// What became of a delivery, and whether to acknowledge it to the
/// broker ([`Delivery::ack`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Delivery {
    /// The handler ran now and processed it.
    Processed,
    /// Processed before: the handler did not run.
    Duplicate,
    /// The handler failed; attempts remain, so a redelivery runs it again.
    Failed {
        /// The attempt that failed.
        attempt: u32,
        /// Its error.
        error: String,
    },
    /// The handler failed for the last time, or the message's consumers
    /// stopped during every attempt: it is a dead letter now.
    DeadLettered {
        /// The attempts made.
        attempts: u32,
        /// The last error.
        error: String,
    },
    /// A dead letter already: the handler did not run.
    Quarantined,
    /// The handler released it; a redelivery runs it again.
    NotProcessed,
    /// Another consumer is handling it now; if it stops, a redelivery
    /// after its lease takes over.
    InProgress {
        /// Until that consumer's lease ends, at most.
        retry_after: Duration,
    },
    /// The id was seen with another payload: never run (a producer reused
    /// an id, or the payload was altered).
    Mismatch,
}

impl Delivery {
    /// Whether the broker may forget the message: processed (now or
    /// before), quarantined, or a mismatch that never will run. A failure
    /// with attempts left, a release and a message in progress elsewhere
    /// are left for redelivery.
    #[must_use]
    pub fn ack(&self) -> bool {
        match self {
            Delivery::Processed
            | Delivery::Duplicate
            | Delivery::DeadLettered { .. }
            | Delivery::Quarantined
            | Delivery::Mismatch => true,
            Delivery::Failed { .. } | Delivery::NotProcessed | Delivery::InProgress { .. } => false,
        }
    }

    #[cfg_attr(not(feature = "metrics"), expect(dead_code, reason = "a label for the exporter"))]
    fn label(&self) -> &'static str {
        match self {
            Delivery::Processed => "processed",
            Delivery::Duplicate => "duplicate",
            Delivery::Failed { .. } => "failed",
            Delivery::DeadLettered { .. } => "dead_lettered",
            Delivery::Quarantined => "quarantined",
            Delivery::NotProcessed => "not_processed",
            Delivery::InProgress { .. } => "in_progress",
            Delivery::Mismatch => "mismatch",
        }
    }
}

/// The stored answers of an inbox record.
const PROCESSED: u8 = b'P';
const RETRY: u8 = b'R';
const DEAD: u8 = b'D';

/// What a consumer's re-drive did ([`Inbox::redrive`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Redriven {
    /// Letters whose message was processed now (or had been).
    pub processed: usize,
    /// Letters whose message was quarantined again.
    pub dead_again: usize,
    /// Letters left queued: failed with attempts left, released, or in
    /// progress elsewhere; the next re-drive runs them.
    pub left: usize,
}

/// Deduplicates an at-least-once consumer's messages by `(consumer,
/// message id)` over any backend, counts attempts across redeliveries, and
/// quarantines what keeps failing (see the module docs of `once`).
///
/// # Examples
///
/// ```
/// use idemkv::{Config, messaging::{Delivery, Handled, Inbox}, Store};
/// # fn main() -> Result<(), idemkv::Error> {
/// # let runtime = tokio::runtime::Runtime::new().unwrap();
/// # runtime.block_on(async {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path(), Config::new())?;
/// let inbox = Inbox::new(store).max_attempts(2);
///
/// // The broker delivers message m-1 twice: one effect.
/// let mut credited = 0;
/// for _ in 0..2 {
///     let delivery = inbox
///         .handle("ledger", b"m-1", b"credit 10", |_message| async {
///             credited += 10;
///             Handled::Processed
///         })
///         .await?;
///     assert!(delivery.ack());
/// }
/// assert_eq!(credited, 10);
///
/// // A poison message: two failures, then a dead letter.
/// let poison = |_message| async { Handled::Failed("unparsable".into()) };
/// let first = inbox.handle("ledger", b"m-2", b"%%%", poison).await?;
/// assert_eq!(first, Delivery::Failed { attempt: 1, error: "unparsable".into() });
/// let second = inbox.handle("ledger", b"m-2", b"%%%", poison).await?;
/// assert!(matches!(second, Delivery::DeadLettered { attempts: 2, .. }));
/// let letters = inbox.dead_letters("ledger", None, 10).await?;
/// assert_eq!(letters[0].payload.as_deref(), Some(&b"%%%"[..]));
/// # Ok(()) })
/// # }
/// ```
pub struct Inbox<B> {
    once: RunOnce<B>,
    max_attempts: u32,
    retention: Duration,
    dead_retention: Duration,
}

impl<B> Clone for Inbox<B> {
    fn clone(&self) -> Self {
        Inbox {
            once: self.once.clone(),
            max_attempts: self.max_attempts,
            retention: self.retention,
            dead_retention: self.dead_retention,
        }
    }
}

impl<B> std::fmt::Debug for Inbox<B> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Inbox")
            .field("max_attempts", &self.max_attempts)
            .field("retention", &self.retention)
            .field("dead_retention", &self.dead_retention)
            .finish_non_exhaustive()
    }
}

impl<B: IdempotencyBackend> Inbox<B> {
    /// An inbox over `backend`, with [`INBOX_MAX_ATTEMPTS_DEFAULT`],
    /// [`INBOX_RETENTION_DEFAULT`] and [`DEAD_LETTER_RETENTION_DEFAULT`],
    /// and [`RunOnce`]'s default lease.
    #[must_use]
    pub fn new(backend: B) -> Self {
        Inbox::shared(Arc::new(backend))
    }

    /// As [`new`](Inbox::new), for a backend shared with others.
    #[must_use]
    pub fn shared(backend: Arc<B>) -> Self {
        Inbox {
            once: RunOnce::shared(backend),
            max_attempts: INBOX_MAX_ATTEMPTS_DEFAULT,
            retention: INBOX_RETENTION_DEFAULT,
            dead_retention: DEAD_LETTER_RETENTION_DEFAULT,
        }
    }

    /// Attempts before a message is quarantined (at least 1).
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// How long a processed message id is remembered.
    #[must_use]
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// How long a dead letter is kept unless re-driven or dropped.
    #[must_use]
    pub fn dead_letter_retention(mut self, retention: Duration) -> Self {
        self.dead_retention = retention;
        self
    }

    /// The lease of a running handler: how long a consumer that died keeps
    /// its message from the next one. It is renewed while the handler runs.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.once = self.once.lease(lease);
        self
    }

    /// Handles one delivery of message `message_id` with `payload` for
    /// `consumer`: runs `handler` unless the message was processed,
    /// quarantined, or is being handled elsewhere, and stores what it
    /// said. Acknowledge the delivery to the broker when
    /// [`Delivery::ack`] says so.
    ///
    /// # Errors
    /// [`Error::InvalidConsumer`]; the backend's errors, and the key's
    /// ([`Error::KeyTooLong`] for a message id over the limit). After the
    /// handler ran, the errors of [`RunOnce::run`]: the message then stays
    /// in progress until its lease ends and a redelivery takes it over
    /// (with [`Message::recovered`] set) — never a silent second run.
    pub async fn handle<F, Fut>(
        &self,
        consumer: &str,
        message_id: &[u8],
        payload: &[u8],
        handler: F,
    ) -> Result<Delivery>
    where
        F: FnOnce(Message) -> Fut,
        Fut: Future<Output = Handled>,
    {
        check_consumer(consumer)?;
        let delivery = self.deliver(consumer, message_id, payload, handler).await?;
        count(consumer, &delivery);
        Ok(delivery)
    }

    async fn deliver<F, Fut>(&self, consumer: &str, message_id: &[u8], payload: &[u8], handler: F) -> Result<Delivery>
    where
        F: FnOnce(Message) -> Fut,
        Fut: Future<Output = Handled>,
    {
        let scope = consumer.as_bytes();
        let fingerprint = Fingerprint::of(payload);
        let mut handler = Some(handler);
        let mut reuse = ReusePolicy::ReplayFailure;
        // A failure to run again is first seen replayed; the second claim
        // reruns it. Two claims at most.
        for _ in 0..2 {
            let options = ClaimOptions::new().ttl(self.retention).reuse(reuse);
            let once = self
                .once
                .run_in(Keyspace::Inbox, scope, message_id, fingerprint, options, |attempt| {
                    let handler = handler.take().expect("a handler runs at most once");
                    self.run(consumer, (message_id, payload), (attempt.attempt, attempt.recovered), handler)
                })
                .await?;
            match once {
                Once::Ran(outcome) => return Ok(ran(outcome)),
                Once::Replayed(answer) => match answer.split_first() {
                    Some((&RETRY, _)) => reuse = ReusePolicy::RetryFailed,
                    Some((&DEAD, _)) => return Ok(Delivery::Quarantined),
                    _ => return Ok(Delivery::Duplicate),
                },
                Once::InProgress { retry_after } => return Ok(Delivery::InProgress { retry_after }),
                Once::Mismatch => {
                    event!(warn, consumer, "inbox: a message id was delivered with another payload; not run");
                    return Ok(Delivery::Mismatch);
                }
            }
        }
        // Failed again between the two claims: someone else reran it.
        Ok(Delivery::InProgress { retry_after: Duration::ZERO })
    }

    /// Runs `handler` under the message's lease; a last failure writes the
    /// dead letter before the record says so.
    async fn run<F, Fut>(
        &self,
        consumer: &str,
        (id, payload): (&[u8], &[u8]),
        (attempt, recovered): (u32, bool),
        handler: F,
    ) -> Outcome
    where
        F: FnOnce(Message) -> Fut,
        Fut: Future<Output = Handled>,
    {
        let error = if attempt > self.max_attempts {
            // Every earlier attempt's consumer stopped before it finished
            // (a message that crashes its consumer): never run it again.
            format!("no attempt of {} finished: each consumer stopped while handling it", self.max_attempts)
        } else {
            let message = Message { id: id.to_vec(), payload: payload.to_vec(), attempt, recovered };
            match handler(message).await {
                Handled::Processed => return Outcome::Complete(vec![PROCESSED]),
                Handled::NotProcessed => return Outcome::Release,
                Handled::Failed(error) if attempt < self.max_attempts => {
                    let error = cut(&error, DEAD_LETTER_ERROR_BYTES_MAX);
                    return Outcome::Fail([&[RETRY][..], &attempt.to_le_bytes(), error.as_bytes()].concat());
                }
                Handled::Failed(error) => error,
            }
        };
        let attempts = attempt.min(self.max_attempts);
        let letter = DeadLetter::new(consumer, id, attempts, &error, payload);
        match self.store_letter(Keyspace::DeadLetter, consumer, &letter).await {
            Ok(()) => {
                #[cfg(feature = "metrics")]
                metrics::counter!("idempo_dead_letter_total", "consumer" => consumer.to_owned(), "source" => "inbox")
                    .increment(1);
                event!(warn, consumer, attempts, error = %letter.error, "inbox: a message is quarantined as a dead letter");
                Outcome::Complete([&[DEAD][..], &attempts.to_le_bytes(), letter.error.as_bytes()].concat())
            }
            // Not quarantined: the next delivery tries again (and, its
            // attempts spent, quarantines it without running it).
            #[cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "read by the event"))]
            Err(error) => {
                event!(warn, consumer, %error, "inbox: the dead letter could not be stored; the next delivery tries again");
                Outcome::Fail([&[RETRY][..], &attempt.to_le_bytes(), letter.error.as_bytes()].concat())
            }
        }
    }

    /// Stores `letter` in `keyspace` (claimed and completed; an earlier
    /// letter of the same message stays as it is).
    async fn store_letter(&self, keyspace: Keyspace, consumer: &str, letter: &DeadLetter) -> Result<()> {
        let backend = self.once.backend();
        let encoded = letter.encode(backend.limits().response_bytes_max);
        let options = ClaimOptions::new().ttl(self.dead_retention);
        // Stored now, or by an earlier try (replayed), or being stored by
        // another consumer (in progress): the letter is there either way.
        self.once
            .run_in(
                keyspace,
                consumer.as_bytes(),
                &letter.message_id,
                Fingerprint::of(&letter.message_id),
                options,
                |_| async { Outcome::Complete(encoded) },
            )
            .await
            .map(drop)
    }

    /// A page of `consumer`'s dead letters, in message-id order, after
    /// `after` (see [`IdempotencyBackend::scan`] for what a page costs).
    ///
    /// # Errors
    /// [`Error::InvalidConsumer`], the backend's errors,
    /// [`Error::InvalidDeadLetter`] for a record that is not one.
    pub async fn dead_letters(&self, consumer: &str, after: Option<&[u8]>, limit: usize) -> Result<Vec<DeadLetter>> {
        letters(&**self.once.backend(), Keyspace::DeadLetter, consumer, after, limit).await
    }

    /// Queues dead letter `message_id` of `consumer` to be re-driven: its
    /// next [`redrive`](Inbox::redrive) runs the handler on its payload
    /// with fresh attempts. False if there is no such letter.
    ///
    /// # Errors
    /// As [`dead_letters`](Inbox::dead_letters).
    pub async fn retry_dead_letter(&self, consumer: &str, message_id: &[u8]) -> Result<bool> {
        check_consumer(consumer)?;
        let backend = self.once.backend();
        let Some(record) = backend.get_in(Keyspace::DeadLetter, consumer.as_bytes(), message_id).await? else {
            return Ok(false);
        };
        if record.state != crate::State::Completed {
            return Ok(false);
        }
        let letter = DeadLetter::decode(consumer, message_id, &record.response)?;
        // Queued first, then the old attempts and the letter go: a crash
        // between leaves it queued or still listed, never lost.
        self.store_letter(Keyspace::Redrive, consumer, &letter).await?;
        backend.remove_in(Keyspace::Inbox, consumer.as_bytes(), message_id).await?;
        backend.remove_in(Keyspace::DeadLetter, consumer.as_bytes(), message_id).await?;
        Ok(true)
    }

    /// Drops dead letter `message_id` of `consumer` for good (its message
    /// stays quarantined: a redelivery is still not run). False if there
    /// is no such letter.
    ///
    /// # Errors
    /// [`Error::InvalidConsumer`], the backend's errors.
    pub async fn drop_dead_letter(&self, consumer: &str, message_id: &[u8]) -> Result<bool> {
        check_consumer(consumer)?;
        self.once.backend().remove_in(Keyspace::DeadLetter, consumer.as_bytes(), message_id).await
    }

    /// Runs `handler` on every letter of `consumer` queued by
    /// [`retry_dead_letter`](Inbox::retry_dead_letter), as deliveries
    /// with fresh attempts; a letter leaves the queue once its message is
    /// processed or quarantined again.
    ///
    /// # Errors
    /// As [`handle`](Inbox::handle); the letters not reached stay queued.
    pub async fn redrive<F, Fut>(&self, consumer: &str, mut handler: F) -> Result<Redriven>
    where
        F: FnMut(Message) -> Fut,
        Fut: Future<Output = Handled>,
    {
        check_consumer(consumer)?;
        let backend = self.once.backend();
        let mut report = Redriven::default();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = letters(&**backend, Keyspace::Redrive, consumer, after.as_deref(), 100).await?;
            let Some(last) = page.last() else { return Ok(report) };
            after = Some(last.message_id.clone());
            for letter in page {
                let Some(payload) = &letter.payload else {
                    // Nothing to run: it stays listed in the queue.
                    report.left += 1;
                    continue;
                };
                let mut delivery = self.handle(consumer, &letter.message_id, payload, &mut handler).await?;
                if delivery == Delivery::Quarantined {
                    // Queued before its old record was removed (a crash
                    // between): remove it now and run.
                    backend.remove_in(Keyspace::Inbox, consumer.as_bytes(), &letter.message_id).await?;
                    delivery = self.handle(consumer, &letter.message_id, payload, &mut handler).await?;
                }
                match delivery {
                    Delivery::Processed | Delivery::Duplicate => report.processed += 1,
                    Delivery::DeadLettered { .. } | Delivery::Quarantined | Delivery::Mismatch => {
                        report.dead_again += 1;
                    }
                    _ => {
                        report.left += 1;
                        continue;
                    }
                }
                backend.remove_in(Keyspace::Redrive, consumer.as_bytes(), &letter.message_id).await?;
            }
        }
    }
}

/// The answer of a handler's run.
fn ran(outcome: Outcome) -> Delivery {
    /// The attempt and error after an answer's tag.
    fn attempt_and_error(answer: &[u8]) -> (u32, String) {
        let rest = answer.get(1..).unwrap_or_default();
        rest.split_first_chunk::<4>().map_or((0, String::new()), |(attempt, error)| {
            (u32::from_le_bytes(*attempt), String::from_utf8_lossy(error).into_owned())
        })
    }
    match outcome {
        Outcome::Complete(answer) if answer.first() == Some(&DEAD) => {
            let (attempts, error) = attempt_and_error(&answer);
            Delivery::DeadLettered { attempts, error }
        }
        Outcome::Complete(_) => Delivery::Processed,
        Outcome::Fail(answer) => {
            let (attempt, error) = attempt_and_error(&answer);
            Delivery::Failed { attempt, error }
        }
        Outcome::Release => Delivery::NotProcessed,
    }
}

/// A page of the letters stored under `scope`.
async fn letters<B: IdempotencyBackend>(
    backend: &B,
    keyspace: Keyspace,
    consumer: &str,
    after: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<DeadLetter>> {
    check_consumer(consumer)?;
    let records = backend.scan_in(keyspace, consumer.as_bytes(), after, limit).await?;
    records
        .iter()
        .filter(|record| record.state == crate::State::Completed)
        .map(|record| DeadLetter::decode(consumer, &record.key, &record.response))
        .collect()
}

/// Refuses a consumer name that would not make a clean scope.
pub(crate) fn check_consumer(consumer: &str) -> Result<()> {
    let refuse = |reason| Err(Error::InvalidConsumer { name: consumer.to_owned(), reason });
    if consumer.is_empty() {
        return refuse("empty");
    }
    if consumer.len() > 128 {
        return refuse("longer than 128 bytes");
    }
    if !consumer.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"-_.:".contains(&byte)) {
        return refuse("only ASCII letters, digits and -_.: are allowed");
    }
    Ok(())
}

#[cfg_attr(not(feature = "metrics"), expect(unused_variables, reason = "the labels are for the exporter"))]
fn count(consumer: &str, delivery: &Delivery) {
    #[cfg(feature = "metrics")]
    metrics::counter!("idempo_inbox_messages_total", "consumer" => consumer.to_owned(), "outcome" => delivery.label())
        .increment(1);
}
