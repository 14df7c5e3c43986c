//! [`Relay`]: delivers the messages an [`Outbox`](super::Outbox) staged,
//! at least once and in order per key, to a [`Sink`].
//!
//! The relay finds staged messages two ways: the outboxes of its own
//! process tell it of each completion at once ([`Relay::handle`]), and a
//! sweep reads the scopes it relays from every
//! [`RelayConfig::sweep_interval`] (a producer in another process, a
//! completion whose notice was lost in a crash). Each key's delivery has a
//! progress record `(scope, key)` of [`Keyspace::Relay`], claimed while a relay
//! delivers (so two relays never deliver one key at once; a relay that
//! dies is taken over after its lease), checkpointed after each message
//! delivered (a takeover resumes after it), and finished as `done`, as a
//! failure to retry (`R`: the message, its attempts, the error), or as a
//! dead letter (`D`) once a message failed
//! [`RelayConfig::max_attempts`] times or the sink called its failure
//! permanent. A message after a failed one waits: order per key holds.
//! Once every message of a key is delivered, the relay drops them from
//! the completion ([`IdempotencyBackend::replace`] of the envelope by the
//! bare response): nothing delivered is kept, and no sweep reads the key
//! again — a sweep reads the keys with staged messages alone
//! ([`IdempotencyBackend::scan_staged`]), whatever else its scopes keep.

use super::envelope::{is_envelope, messages_of, response_of, Staged};
use crate::backend::keeper::Keeper;
use crate::backend::{BackendClaim, ClaimOptions, IdempotencyBackend};
use crate::error::Result;
use crate::events::event;
use crate::{Fingerprint, Keyspace, LeaseToken, Record, ReusePolicy, State};
use futures_util::stream::{FuturesUnordered, StreamExt};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// Why a sink did not take a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct SinkError {
    /// What went wrong.
    pub message: String,
    /// Whether trying again cannot help (a 4xx other than 408/429, a
    /// destination that does not exist): the message is dead at once.
    pub permanent: bool,
}

impl SinkError {
    /// A failure worth retrying.
    #[must_use]
    pub fn transient(message: impl Into<String>) -> Self {
        SinkError { message: message.into(), permanent: false }
    }

    /// A failure no retry can fix.
    #[must_use]
    pub fn permanent(message: impl Into<String>) -> Self {
        SinkError { message: message.into(), permanent: true }
    }
}

/// Where a relay delivers: a broker, a webhook, a test's list.
pub trait Sink: Send + Sync + 'static {
    /// Delivers `message`. It may be delivered again after an answer that
    /// was lost (at least once): the receiver deduplicates by
    /// [`Staged::id`] (an [`Inbox`](super::Inbox) does).
    ///
    /// # Errors
    /// A [`SinkError`]: transient ones are retried, up to the relay's
    /// attempts.
    fn deliver(&self, message: &Staged) -> impl Future<Output = std::result::Result<(), SinkError>> + Send;
}

/// How a [`Relay`] runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RelayConfig {
    /// The scopes whose completions it relays.
    pub scopes: Vec<Vec<u8>>,
    /// Attempts of one message before it is a dead letter. Default 8.
    pub max_attempts: u32,
    /// The lease of a key being delivered: how long a relay that died
    /// keeps it from the next. Default 30 s.
    pub lease: Duration,
    /// How often every scope is swept. Default 30 s.
    pub sweep_interval: Duration,
    /// How long a key's progress is kept at least (longer when its
    /// completion lives longer). Default 7 days.
    pub retention: Duration,
    /// Keys delivered at once (each in order, one relay at a time): their
    /// progress writes share fsyncs. Default 16.
    pub concurrency: usize,
}

impl RelayConfig {
    /// Relays the completions of `scopes`, with the defaults.
    #[must_use]
    pub fn new<S: AsRef<[u8]>>(scopes: impl IntoIterator<Item = S>) -> Self {
        RelayConfig {
            scopes: scopes.into_iter().map(|scope| scope.as_ref().to_vec()).collect(),
            max_attempts: 8,
            lease: Duration::from_secs(30),
            sweep_interval: Duration::from_secs(30),
            retention: Duration::from_secs(7 * 24 * 3600),
            concurrency: 16,
        }
    }

    /// Sets [`concurrency`](RelayConfig::concurrency) (at least 1).
    #[must_use]
    pub fn concurrency(mut self, keys: usize) -> Self {
        self.concurrency = keys.max(1);
        self
    }

    /// Sets [`max_attempts`](RelayConfig::max_attempts) (at least 1).
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Sets [`lease`](RelayConfig::lease).
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Sets [`sweep_interval`](RelayConfig::sweep_interval).
    #[must_use]
    pub fn sweep_interval(mut self, interval: Duration) -> Self {
        self.sweep_interval = interval;
        self
    }
}

/// What became of one key's messages in a relay's pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyDelivery {
    /// Every message is delivered (this many now).
    Done(usize),
    /// A message failed; it is retried at a later pass (`delivered`
    /// before it now).
    Retrying {
        /// Messages delivered now, before the failure.
        delivered: usize,
    },
    /// A message is a dead letter; the ones after it wait for an
    /// operator.
    Dead,
    /// Another relay is delivering it.
    InFlight,
}

/// What a sweep found and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sweep {
    /// Keys with staged messages seen.
    pub keys: usize,
    /// Messages delivered now.
    pub delivered: usize,
    /// Keys whose delivery failed and will be retried.
    pub retrying: usize,
    /// Keys stopped at a dead letter.
    pub dead: usize,
    /// Keys another relay was delivering.
    pub in_flight: usize,
}

/// A sender of completion notices to a running relay.
#[derive(Debug, Clone)]
pub struct RelayHandle {
    notices: mpsc::UnboundedSender<(Vec<u8>, Vec<u8>)>,
}

impl RelayHandle {
    /// Tells the relay that `(scope, key)` was completed with messages.
    pub fn notify(&self, scope: &[u8], key: &[u8]) {
        // A relay that stopped finds it at its next start's sweep.
        let _ = self.notices.send((scope.to_vec(), key.to_vec()));
    }
}

/// Delivers staged messages to a [`Sink`] (see the module docs).
pub struct Relay<B, S> {
    backend: Arc<B>,
    sink: Arc<S>,
    config: RelayConfig,
    keeper: Keeper,
    notices: mpsc::UnboundedReceiver<(Vec<u8>, Vec<u8>)>,
    handle: RelayHandle,
}

impl<B, S> std::fmt::Debug for Relay<B, S> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Relay").field("config", &self.config).finish_non_exhaustive()
    }
}

pub(super) const DONE: u8 = b'C';
pub(super) const RETRY: u8 = b'R';
pub(super) const DEAD: u8 = b'D';

/// A progress record's answer: its tag, the message it stopped at, that
/// message's attempts, and the error.
pub(super) fn progress(tag: u8, index: usize, attempts: u32, error: &str) -> Vec<u8> {
    let index = u32::try_from(index).unwrap_or(u32::MAX);
    [&[tag][..], &index.to_le_bytes(), &attempts.to_le_bytes(), error.as_bytes()].concat()
}

pub(super) fn read_progress(answer: &[u8]) -> Option<(u8, usize, u32)> {
    let (&tag, rest) = answer.split_first()?;
    let (index, rest) = rest.split_first_chunk::<4>()?;
    let (attempts, _) = rest.split_first_chunk::<4>()?;
    Some((tag, usize::try_from(u32::from_le_bytes(*index)).ok()?, u32::from_le_bytes(*attempts)))
}

/// Drops the messages of `record`, a completion whose messages are all
/// delivered (or given up): its answer becomes the bare response, in one
/// compare-and-set ([`IdempotencyBackend::replace`]), so a replay answers
/// as before and no sweep reads the messages again. Another relay, or an
/// operator, may have done it first.
pub(super) async fn compact<B: IdempotencyBackend>(backend: &B, record: &Record) -> Result<()> {
    backend.replace(&record.scope, &record.key, &record.response, response_of(&record.response)).await?;
    Ok(())
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(0))
}

impl<B: IdempotencyBackend, S: Sink> Relay<B, S> {
    /// A relay of `backend`'s completions in `config`'s scopes to `sink`.
    #[must_use]
    pub fn new(backend: Arc<B>, sink: S, config: RelayConfig) -> Self {
        let (sender, notices) = mpsc::unbounded_channel();
        Relay {
            backend,
            sink: Arc::new(sink),
            config,
            keeper: Keeper::new(),
            notices,
            handle: RelayHandle { notices: sender },
        }
    }

    /// The handle an [`Outbox`](super::Outbox) of this process notifies
    /// (see [`Outbox::relay_to`](super::Outbox::relay_to)).
    #[must_use]
    pub fn handle(&self) -> RelayHandle {
        self.handle.clone()
    }

    /// Runs until `stop` resolves: a sweep at once and every
    /// [`RelayConfig::sweep_interval`], and each notified key as it comes.
    /// A backend error is logged and the relay goes on.
    pub async fn run(mut self, stop: impl Future<Output = ()>) {
        let mut stop = std::pin::pin!(stop);
        let mut sweeps = tokio::time::interval(self.config.sweep_interval);
        sweeps.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = &mut stop => return,
                _ = sweeps.tick() => {
                    #[cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "read by the event"))]
                    if let Err(error) = self.sweep().await {
                        event!(warn, %error, "relay: a sweep failed; the next one tries again");
                    }
                }
                Some(notice) = self.notices.recv() => {
                    // This notice and those queued behind it, at once.
                    let mut batch = vec![notice];
                    while batch.len() < self.config.concurrency {
                        let Ok(notice) = self.notices.try_recv() else { break };
                        if !batch.contains(&notice) {
                            batch.push(notice);
                        }
                    }
                    // Pushed in a loop, not mapped by a closure: the future
                    // of `run` stays `Send` for any `'static` caller.
                    let mut deliveries = FuturesUnordered::new();
                    for (scope, key) in &batch {
                        deliveries.push(self.deliver_key(scope, key));
                    }
                    while let Some(delivered) = deliveries.next().await {
                        #[cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "read by the event"))]
                        if let Err(error) = delivered {
                            event!(warn, %error, "relay: a delivery failed; the next sweep tries again");
                        }
                    }
                }
            }
        }
    }

    /// One pass over every scope: each completed key with staged messages
    /// not all delivered is delivered as far as it goes. It reads those
    /// keys alone ([`IdempotencyBackend::scan_staged`]): a sweep costs
    /// what is pending, not what the scopes keep.
    ///
    /// # Errors
    /// The backend's errors (the pass stops there).
    pub async fn sweep(&self) -> Result<Sweep> {
        let mut sweep = Sweep::default();
        for scope in &self.config.scopes {
            let mut after: Option<Vec<u8>> = None;
            loop {
                let page = self.backend.scan_staged(scope, after.as_deref(), 256).await?;
                let Some(last) = page.last() else { break };
                after = Some(last.key.clone());
                let mut staged =
                    page.iter().filter(|record| record.state == State::Completed && is_envelope(&record.response));
                let mut running = FuturesUnordered::new();
                let mut deliveries = Vec::new();
                loop {
                    while running.len() < self.config.concurrency {
                        let Some(record) = staged.next() else { break };
                        running.push(self.deliver_record(record));
                    }
                    let Some(delivery) = running.next().await else { break };
                    deliveries.push(delivery);
                }
                for delivery in deliveries {
                    let Some(delivery) = delivery? else { continue };
                    sweep.keys += 1;
                    match delivery {
                        KeyDelivery::Done(count) => sweep.delivered += count,
                        KeyDelivery::Retrying { delivered } => {
                            sweep.delivered += delivered;
                            sweep.retrying += 1;
                        }
                        KeyDelivery::Dead => sweep.dead += 1,
                        KeyDelivery::InFlight => sweep.in_flight += 1,
                    }
                }
            }
        }
        #[cfg(feature = "metrics")]
        {
            let gauge = |count: usize| f64::from(u32::try_from(count).unwrap_or(u32::MAX));
            metrics::gauge!("idempo_outbox_pending_keys").set(gauge(sweep.retrying));
            metrics::gauge!("idempo_outbox_dead_keys").set(gauge(sweep.dead));
        }
        Ok(sweep)
    }

    /// Delivers `(scope, key)`'s staged messages, if it has any left.
    ///
    /// # Errors
    /// The backend's errors.
    pub async fn deliver_key(&self, scope: &[u8], key: &[u8]) -> Result<Option<KeyDelivery>> {
        match self.backend.get(scope, key).await? {
            Some(record) if record.state == State::Completed && is_envelope(&record.response) => {
                self.deliver_record(&record).await
            }
            _ => Ok(None),
        }
    }

    /// Delivers the messages of `record` (a completion with an envelope)
    /// from where its progress stands; `None` when all were delivered
    /// before.
    async fn deliver_record(&self, record: &Record) -> Result<Option<KeyDelivery>> {
        let messages = match messages_of(&record.response) {
            Ok(messages) if !messages.is_empty() => messages,
            // Nothing to deliver: the envelope goes, so that no sweep
            // reads the key again.
            Ok(_) => {
                compact(&*self.backend, record).await?;
                return Ok(None);
            }
            Err(_) => return Ok(None),
        };
        let scope = record.scope.as_slice();
        let (mut next, mut attempts) = (0, 0);
        let fingerprint = Fingerprint::of(messages[0].id.as_bytes());
        match self.backend.get_in(Keyspace::Relay, scope, &record.key).await? {
            // The progress of an earlier completion of a key used again:
            // its turn is over.
            Some(found) if found.fingerprint != fingerprint => {
                self.backend.remove_in(Keyspace::Relay, scope, &record.key).await?;
            }
            // Being delivered, or left by a relay that died: the claim
            // tells (in progress, or a takeover after its lease).
            Some(found) if found.state == State::Processing => {}
            Some(found) => match read_progress(&found.response) {
                // Delivered by a relay that stopped before it compacted.
                Some((DONE, _, _)) => {
                    compact(&*self.backend, record).await?;
                    return Ok(None);
                }
                Some((DEAD, _, _)) => return Ok(Some(KeyDelivery::Dead)),
                Some((_, index, tries)) => (next, attempts) = (index, tries),
                None => {}
            },
            None => {}
        }
        // Kept at least as long as the completion, so that a sweep never
        // delivers a finished key's messages again.
        let lives_ms = record.deadline_ms.saturating_sub(now_ms()).saturating_add(60_000);
        let ttl = self.config.retention.max(Duration::from_millis(lives_ms));
        let options = ClaimOptions::new().lease(self.config.lease).ttl(ttl).reuse(ReusePolicy::RetryFailed);
        let token = match self.backend.claim_in(Keyspace::Relay, scope, &record.key, fingerprint, options).await? {
            BackendClaim::Acquired { token, checkpoint, .. } => {
                let resumed = checkpoint.filter(|point| point.step == "sent").and_then(|point| {
                    let bytes = point.payload.first_chunk::<4>()?;
                    usize::try_from(u32::from_le_bytes(*bytes)).ok()
                });
                if let Some(index) = resumed.filter(|index| *index > next) {
                    (next, attempts) = (index, 0);
                }
                token
            }
            BackendClaim::InProgress { .. } => return Ok(Some(KeyDelivery::InFlight)),
            // Finished meanwhile by another relay; or the progress of an
            // earlier completion of a key used again, whose turn is over.
            BackendClaim::Replay(_) => return Ok(None),
            BackendClaim::Mismatch => {
                self.backend.remove_in(Keyspace::Relay, scope, &record.key).await?;
                return Ok(None);
            }
        };
        let kept = self.keeper.keep(Arc::clone(&self.backend), token.clone(), self.config.lease);
        let delivered = self.deliver_from(record, &messages, next, attempts, &token).await;
        drop(kept);
        delivered
    }

    /// Delivers `messages[next..]` under `token`, then finishes the
    /// progress record.
    async fn deliver_from(
        &self,
        record: &Record,
        messages: &[Staged],
        next: usize,
        attempts: u32,
        token: &LeaseToken,
    ) -> Result<Option<KeyDelivery>> {
        let mut delivered = 0;
        for (index, message) in messages.iter().enumerate().skip(next) {
            if let Err(error) = self.sink.deliver(message).await {
                let attempts = if index == next { attempts + 1 } else { 1 };
                if error.permanent || attempts >= self.config.max_attempts {
                    self.backend.complete(token, &progress(DEAD, index, attempts, &error.message)).await?;
                    #[cfg(feature = "metrics")]
                    metrics::counter!("idempo_dead_letter_total", "consumer" => "relay", "source" => "outbox")
                        .increment(1);
                    event!(warn, attempts, error = %error.message, "relay: a message is a dead letter");
                    return Ok(Some(KeyDelivery::Dead));
                }
                self.backend.fail(token, &progress(RETRY, index, attempts, &error.message)).await?;
                #[cfg(feature = "metrics")]
                metrics::counter!("idempo_outbox_retried_total").increment(1);
                return Ok(Some(KeyDelivery::Retrying { delivered }));
            }
            delivered += 1;
            #[cfg(feature = "metrics")]
            {
                metrics::counter!("idempo_outbox_delivered_total").increment(1);
                let lag_ms = now_ms().saturating_sub(record.updated_ms);
                let lag_ms = u32::try_from(lag_ms).unwrap_or(u32::MAX);
                metrics::histogram!("idempo_relay_lag_seconds").record(f64::from(lag_ms) / 1000.0);
            }
            if index + 1 < messages.len() {
                let sent = u32::try_from(index + 1).unwrap_or(u32::MAX).to_le_bytes();
                self.backend.checkpoint(token, "sent", &sent).await?;
            }
        }
        self.backend.complete(token, &progress(DONE, messages.len(), 0, "")).await?;
        compact(&*self.backend, record).await?;
        Ok(Some(KeyDelivery::Done(delivered)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;

    struct Nowhere;

    impl Sink for Nowhere {
        async fn deliver(&self, _message: &Staged) -> std::result::Result<(), SinkError> {
            Ok(())
        }
    }

    /// `run` can be spawned: its future is `Send` and `'static`.
    #[tokio::test]
    async fn a_relay_runs_on_a_spawned_task_and_stops() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(Store::open(dir.path(), crate::Config::new()).expect("open"));
        let relay = Relay::new(store, Nowhere, RelayConfig::new(["shop"]));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(relay.run(async move {
            let _ = stopped.await;
        }));
        stop.send(()).expect("running");
        running.await.expect("stopped");
    }
}
