//! The outbox's scenario (feature `messaging`): messages staged with their
//! completion, relayed at least once and in order per key, retried, dead,
//! taken over, on any backend.

use super::contract::{fp, LEASE};
use super::Setting;
use crate::messaging::{self as outbox, KeyState};
use crate::{
    backend::{ClaimOptions, IdempotencyBackend},
    messaging::{KeyDelivery, Outbox, OutboxMessage, Produced, Relay, RelayConfig, Sink, SinkError, Staged},
    Once,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// A sink that records what it took, refuses a message (`destination/payload`)
/// or a destination's messages a number of times first (or for good), and
/// can hang.
#[derive(Default)]
struct Recording {
    taken: Mutex<Vec<Staged>>,
    refusals: Mutex<HashMap<String, u32>>,
    hang: Mutex<Option<String>>,
}

impl Sink for Arc<Recording> {
    async fn deliver(&self, message: &Staged) -> Result<(), SinkError> {
        if self.hang.lock().as_deref() == Some(message.destination.as_str()) {
            std::future::pending::<()>().await;
        }
        let name = format!("{}/{}", message.destination, String::from_utf8_lossy(&message.payload));
        let mut refusals = self.refusals.lock();
        let name = if refusals.contains_key(&name) { name } else { message.destination.clone() };
        if let Some(left) = refusals.get_mut(&name).filter(|left| **left > 0) {
            *left -= 1;
            return Err(SinkError::transient(format!("{} is down", message.destination)));
        }
        self.taken.lock().push(message.clone());
        Ok(())
    }
}

impl Recording {
    /// The payloads taken for `destination`, in order.
    fn payloads(&self, destination: &str) -> Vec<Vec<u8>> {
        let taken = self.taken.lock();
        taken
            .iter()
            .filter(|message| message.destination == destination)
            .map(|message| message.payload.clone())
            .collect()
    }
}

/// Stages `count` messages for `destination` with the completion of `key`.
async fn produce<B: IdempotencyBackend>(outbox: &Outbox<B>, scope: &[u8], key: &[u8], destination: &str, count: u8) {
    let messages = (0..count).map(|index| OutboxMessage::new(destination, vec![b'a' + index])).collect();
    let produced = Produced::Complete { response: format!("201 {destination}").into_bytes(), messages };
    let options = ClaimOptions::new().ttl(Duration::from_secs(1));
    let once = outbox.run(scope, key, fp(destination), options, |_| async { produced }).await.expect("run");
    assert_eq!(once.response(), Some(format!("201 {destination}").as_bytes()));
}

/// [`Outbox`] and [`Relay`] over the backend: a completion's messages are
/// staged with it (a replay answers the response alone and stages
/// nothing), a sweep delivers every key's in order, a second delivers
/// nothing; a refused message is retried without the one before it again
/// and without the ones after it first; a message refused
/// `max_attempts` times is dead and holds back the rest of its key; a
/// relay that dies mid-delivery is taken over after its lease.
///
/// # Panics
/// When the backend answers otherwise.
pub async fn outbox<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let scope = setting.key("outbox-scope");
    let backend = Arc::new(backend.clone());
    let sink = Arc::new(Recording::default());
    let config = RelayConfig::new([&scope]).max_attempts(3).lease(LEASE);
    let relay = Relay::new(Arc::clone(&backend), Arc::clone(&sink), config.clone());
    let outbox = Outbox::shared(Arc::clone(&backend));
    let fixture = Fixture { scope, backend, sink, config, outbox, relay };
    staged_then_relayed_once(&fixture).await;
    refused_message_retried_in_order(&fixture).await;
    dead_message_holds_its_key_back(&fixture).await;
    key_used_again_after_its_completion_expired(&fixture, setting).await;
    dying_relay_is_taken_over(&fixture, setting).await;
}

/// What the outbox scenario's steps share: an outbox staging into the
/// backend and a relay delivering to a recording sink, in one scope.
struct Fixture<B> {
    scope: Vec<u8>,
    backend: Arc<B>,
    sink: Arc<Recording>,
    config: RelayConfig,
    outbox: Outbox<B>,
    relay: Relay<B, Arc<Recording>>,
}

/// A completion's messages are staged with it (a replay answers the
/// response alone and stages nothing); a sweep delivers every key's in
/// order, a second nothing; delivered, the messages leave the completion.
async fn staged_then_relayed_once<B: IdempotencyBackend>(fixture: &Fixture<B>) {
    let Fixture { scope, backend, sink, outbox, relay, .. } = fixture;
    produce(outbox, scope, b"a", "orders", 3).await;
    produce(outbox, scope, b"b", "mail", 2).await;
    let replayed = outbox.run(scope, b"a", fp("orders"), ClaimOptions::new(), |_| async { unreachable!("replayed") });
    assert_eq!(replayed.await.expect("run"), Once::Replayed(b"201 orders".to_vec()));
    let failed = outbox.run(scope, b"c", fp("c"), ClaimOptions::new(), |_| async { Produced::Fail(b"402".to_vec()) });
    assert_eq!(failed.await.expect("run").response(), Some(&b"402"[..]));

    let sweep = relay.sweep().await.expect("sweep");
    assert_eq!((sweep.keys, sweep.delivered), (2, 5), "{sweep:?}");
    assert_eq!(sink.payloads("orders"), [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()], "in order");
    assert_eq!(sink.payloads("mail"), [b"a".to_vec(), b"b".to_vec()]);
    let ids: Vec<String> = sink.taken.lock().iter().map(|message| message.id.clone()).collect();
    assert_eq!(ids.iter().collect::<std::collections::HashSet<_>>().len(), 5, "every message its own id: {ids:?}");
    let again = relay.sweep().await.expect("sweep");
    assert_eq!((again.keys, again.delivered), (0, 0), "nothing twice: {again:?}");
    // Delivered, the messages leave the completion; it lives the outbox's
    // retention, longer than its claim asked, and replays as before.
    let a = backend.get(scope, b"a").await.expect("get").expect("live");
    assert_eq!(a.response, b"201 orders", "compacted to the bare response");
    let lives = Duration::from_millis(a.deadline_ms.saturating_sub(a.created_ms));
    assert!(
        lives + Duration::from_secs(60) >= crate::messaging::OUTBOX_RETENTION,
        "kept {lives:?}, not the claim's second"
    );
    let replayed = outbox.run(scope, b"a", fp("orders"), ClaimOptions::new(), |_| async { unreachable!("replayed") });
    assert_eq!(replayed.await.expect("run"), Once::Replayed(b"201 orders".to_vec()));
}

/// The second message refused twice, then taken: the first is not sent
/// again, the third not before it.
async fn refused_message_retried_in_order<B: IdempotencyBackend>(fixture: &Fixture<B>) {
    let Fixture { scope, sink, outbox, relay, .. } = fixture;
    sink.refusals.lock().insert("flaky/b".into(), 2);
    produce(outbox, scope, b"d", "flaky", 3).await;
    let first = relay.deliver_key(scope, b"d").await.expect("deliver");
    assert_eq!(first, Some(KeyDelivery::Retrying { delivered: 1 }));
    let second = relay.deliver_key(scope, b"d").await.expect("deliver");
    assert_eq!(second, Some(KeyDelivery::Retrying { delivered: 0 }));
    assert_eq!(relay.deliver_key(scope, b"d").await.expect("deliver"), Some(KeyDelivery::Done(2)));
    assert_eq!(sink.payloads("flaky"), [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()], "each once, in order");
}

/// Refused three times: dead, and the message after it waits; re-driven
/// once the destination is back, both are delivered in order; a dead key
/// dropped is never delivered.
async fn dead_message_holds_its_key_back<B: IdempotencyBackend>(fixture: &Fixture<B>) {
    let Fixture { scope, backend, sink, outbox, relay, .. } = fixture;
    sink.refusals.lock().insert("down".into(), u32::MAX);
    produce(outbox, scope, b"e", "down", 2).await;
    for expected in [KeyDelivery::Retrying { delivered: 0 }, KeyDelivery::Retrying { delivered: 0 }, KeyDelivery::Dead]
    {
        assert_eq!(relay.deliver_key(scope, b"e").await.expect("deliver"), Some(expected));
    }
    assert_eq!(relay.sweep().await.expect("sweep").dead, 1, "still dead at the next sweep");
    assert!(sink.payloads("down").is_empty());
    let statuses = outbox::outbox_status(&**backend, scope, None, 10).await.expect("status");
    let states: Vec<(Vec<u8>, KeyState)> = statuses.into_iter().map(|status| (status.key, status.state)).collect();
    assert!(!states.iter().any(|(key, _)| key == b"a"), "a delivered key has no messages left: {states:?}");
    let dead = KeyState::Dead { index: 0, attempts: 3, error: "down is down".into() };
    assert!(states.contains(&(b"e".to_vec(), dead)), "{states:?}");
    assert!(!outbox::retry_dead_key(&**backend, scope, b"a").await.expect("retry"), "a is not dead");
    // Re-driven once the destination is back: both delivered, in order.
    assert!(outbox::retry_dead_key(&**backend, scope, b"e").await.expect("retry"));
    sink.refusals.lock().insert("down".into(), 0);
    assert_eq!(relay.deliver_key(scope, b"e").await.expect("deliver"), Some(KeyDelivery::Done(2)));
    assert_eq!(sink.payloads("down"), [b"a".to_vec(), b"b".to_vec()]);
    // Dropped: the rest of a dead key is never delivered.
    sink.refusals.lock().insert("gone".into(), u32::MAX);
    produce(outbox, scope, b"g", "gone", 1).await;
    for _ in 0..3 {
        relay.deliver_key(scope, b"g").await.expect("deliver");
    }
    assert!(outbox::drop_dead_key(&**backend, scope, b"g").await.expect("drop"));
    assert_eq!(relay.deliver_key(scope, b"g").await.expect("deliver"), None, "nothing left to deliver");
    assert_eq!(backend.get(scope, b"g").await.expect("get").expect("live").response, b"201 gone", "compacted");
    assert!(!outbox::drop_dead_key(&**backend, scope, b"g").await.expect("drop"), "dropped once");
}

/// A key used again once its completion expired: the progress of its
/// first completion does not hold back the second's messages.
async fn key_used_again_after_its_completion_expired<B: IdempotencyBackend>(fixture: &Fixture<B>, setting: &Setting) {
    let Fixture { scope, backend, sink, relay, .. } = fixture;
    let brief = Outbox::shared(Arc::clone(backend)).retention(Duration::from_secs(1));
    produce(&brief, scope, b"h", "again", 1).await;
    assert_eq!(relay.deliver_key(scope, b"h").await.expect("deliver"), Some(KeyDelivery::Done(1)));
    setting.pass(Duration::from_millis(1_500)).await;
    produce(&brief, scope, b"h", "again", 2).await;
    assert_eq!(relay.deliver_key(scope, b"h").await.expect("deliver"), Some(KeyDelivery::Done(2)));
    assert_eq!(sink.payloads("again"), [b"a".to_vec(), b"a".to_vec(), b"b".to_vec()]);
}

/// A relay dies while delivering (its task is dropped): another takes the
/// key over after the lease, and delivers it.
async fn dying_relay_is_taken_over<B: IdempotencyBackend>(fixture: &Fixture<B>, setting: &Setting) {
    let Fixture { scope, backend, sink, config, outbox, relay } = fixture;
    *sink.hang.lock() = Some("slow".into());
    produce(outbox, scope, b"f", "slow", 1).await;
    let dying = Relay::new(Arc::clone(backend), Arc::clone(sink), config.clone());
    let scope_of_task = scope.clone();
    let task = tokio::spawn(async move { dying.deliver_key(&scope_of_task, b"f").await });
    tokio::time::sleep(LEASE / 4).await;
    assert_eq!(relay.deliver_key(scope, b"f").await.expect("deliver"), Some(KeyDelivery::InFlight));
    task.abort();
    assert!(task.await.is_err(), "the relay died");
    *sink.hang.lock() = None;
    setting.pass(LEASE + LEASE / 2).await;
    assert_eq!(relay.deliver_key(scope, b"f").await.expect("deliver"), Some(KeyDelivery::Done(1)));
    assert_eq!(sink.payloads("slow"), [b"a".to_vec()]);
}
