//! The inbox's scenario (feature `messaging`): deduplication, attempts,
//! dead letters and their re-drive, on any backend.

use super::contract::LEASE;
use super::Setting;
use crate::{
    backend::IdempotencyBackend,
    messaging::{Delivery, Handled, Inbox},
};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// [`Inbox`] over the backend: of eight concurrent deliveries of one
/// message, one runs its handler; a reused id with another payload never
/// runs; a release does not count an attempt; a message that fails
/// `max_attempts` times is quarantined with its payload and last error,
/// listed, not run again, then re-driven (processed once) or dropped; a
/// message whose consumers die during every attempt is quarantined
/// without running again.
///
/// # Panics
/// When the backend answers otherwise.
pub async fn inbox<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let consumer = String::from_utf8_lossy(&setting.key("consumer"))
        .chars()
        .map(|character| if character.is_ascii_alphanumeric() { character } else { '-' })
        .collect::<String>();
    let consumer = consumer.as_str();
    let inbox = Inbox::new(backend.clone()).max_attempts(3).lease(LEASE);
    concurrent_deliveries_run_once(&inbox, consumer).await;
    failures_are_quarantined(&inbox, consumer).await;
    redrive_processes_once(&inbox, consumer).await;
    dying_consumers_are_quarantined(&inbox, consumer, setting).await;
    let never = |_message| async { unreachable!("the handler must not run") };
    let refused = inbox.handle("no spaces", b"m", b"p", never).await;
    assert!(matches!(refused, Err(crate::Error::InvalidConsumer { .. })), "{refused:?}");
}

/// Eight deliveries at once: one run, the rest in progress or duplicates;
/// then a duplicate, and the id with another payload a mismatch.
async fn concurrent_deliveries_run_once<B: IdempotencyBackend + Clone>(inbox: &Inbox<B>, consumer: &str) {
    let runs = Arc::new(AtomicU32::new(0));
    let mut deliveries = Vec::new();
    for _ in 0..8 {
        let (inbox, runs, consumer) = (inbox.clone(), Arc::clone(&runs), consumer.to_owned());
        deliveries.push(tokio::spawn(async move {
            let handler = |_message| async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(LEASE / 2).await;
                Handled::Processed
            };
            inbox.handle(&consumer, b"m-1", b"credit 10", handler).await.expect("handle")
        }));
    }
    let mut processed = 0;
    for delivery in deliveries {
        match delivery.await.expect("delivery") {
            Delivery::Processed => processed += 1,
            Delivery::Duplicate | Delivery::InProgress { .. } => {}
            other => panic!("a concurrent delivery got {other:?}"),
        }
    }
    assert_eq!((processed, runs.load(Ordering::SeqCst)), (1, 1), "one delivery ran the handler");
    let never = |_message| async { unreachable!("the handler must not run") };
    assert_eq!(inbox.handle(consumer, b"m-1", b"credit 10", never).await.expect("handle"), Delivery::Duplicate);
    let mismatch = inbox.handle(consumer, b"m-1", b"credit 99", never).await.expect("handle");
    assert!(mismatch == Delivery::Mismatch && mismatch.ack(), "{mismatch:?}");
}

/// A release does not count; three failures quarantine the message, with
/// its payload and last error, listed and not run again.
async fn failures_are_quarantined<B: IdempotencyBackend + Clone>(inbox: &Inbox<B>, consumer: &str) {
    let released = inbox.handle(consumer, b"m-2", b"%%%", |_| async { Handled::NotProcessed }).await;
    assert!(released.expect("handle") == Delivery::NotProcessed);
    for attempt in 1..=2 {
        let failing = |message: crate::messaging::Message| async move {
            assert_eq!(message.attempt, attempt, "attempts count across deliveries");
            Handled::Failed(format!("unparsable, attempt {attempt}"))
        };
        let failed = inbox.handle(consumer, b"m-2", b"%%%", failing).await.expect("handle");
        assert_eq!(failed, Delivery::Failed { attempt, error: format!("unparsable, attempt {attempt}") });
        assert!(!failed.ack(), "left for redelivery");
    }
    let last = inbox.handle(consumer, b"m-2", b"%%%", |_| async { Handled::Failed("unparsable, at last".into()) });
    let last = last.await.expect("handle");
    assert_eq!(last, Delivery::DeadLettered { attempts: 3, error: "unparsable, at last".into() });
    assert!(last.ack());
    let never = |_message| async { unreachable!("the handler must not run") };
    assert_eq!(inbox.handle(consumer, b"m-2", b"%%%", never).await.expect("handle"), Delivery::Quarantined);
    let letters = inbox.dead_letters(consumer, None, 10).await.expect("list");
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0].message_id, b"m-2");
    assert_eq!((letters[0].attempts, letters[0].error.as_str()), (3, "unparsable, at last"));
    assert_eq!(letters[0].payload.as_deref(), Some(&b"%%%"[..]));
}

/// The quarantined message re-driven: processed once, and a redelivery is
/// then a duplicate.
async fn redrive_processes_once<B: IdempotencyBackend + Clone>(inbox: &Inbox<B>, consumer: &str) {
    assert!(inbox.retry_dead_letter(consumer, b"m-2").await.expect("retry"));
    assert!(!inbox.retry_dead_letter(consumer, b"m-2").await.expect("retry"), "no longer a letter");
    assert!(inbox.dead_letters(consumer, None, 10).await.expect("list").is_empty());
    let fixed = |message: crate::messaging::Message| async move {
        assert_eq!((message.payload.as_slice(), message.attempt), (&b"%%%"[..], 1), "fresh attempts");
        Handled::Processed
    };
    let redriven = inbox.redrive(consumer, fixed).await.expect("redrive");
    assert_eq!((redriven.processed, redriven.dead_again, redriven.left), (1, 0, 0));
    let never = |_message| async { unreachable!("the handler must not run") };
    assert_eq!(inbox.redrive(consumer, never).await.expect("redrive").processed, 0, "the queue is empty");
    assert_eq!(inbox.handle(consumer, b"m-2", b"%%%", never).await.expect("handle"), Delivery::Duplicate);
}

/// A consumer dies during each of three attempts (its task is dropped
/// mid-handler): the next delivery quarantines without running; the
/// letter is listed, then dropped.
async fn dying_consumers_are_quarantined<B: IdempotencyBackend + Clone>(
    inbox: &Inbox<B>,
    consumer: &str,
    setting: &Setting,
) {
    for _ in 0..3 {
        let (dying, consumer_name) = (inbox.clone(), consumer.to_owned());
        let task = tokio::spawn(async move {
            let hang = |_| std::future::pending::<Handled>();
            dying.handle(&consumer_name, b"m-3", b"crash me", hang).await
        });
        tokio::time::sleep(LEASE / 4).await;
        task.abort();
        assert!(task.await.is_err(), "the consumer died");
        setting.pass(LEASE + LEASE / 2).await;
    }
    let never = |_message| async { unreachable!("the handler must not run") };
    let poisoned = inbox.handle(consumer, b"m-3", b"crash me", never).await.expect("handle");
    assert!(matches!(poisoned, Delivery::DeadLettered { attempts: 3, .. }), "{poisoned:?}");
    let letters = inbox.dead_letters(consumer, Some(b"m-2"), 10).await.expect("list");
    assert_eq!(letters.iter().map(|letter| letter.message_id.clone()).collect::<Vec<_>>(), [b"m-3".to_vec()]);
    assert!(inbox.drop_dead_letter(consumer, b"m-3").await.expect("drop"));
    assert!(inbox.dead_letters(consumer, None, 10).await.expect("list").is_empty());
    assert_eq!(inbox.handle(consumer, b"m-3", b"crash me", never).await.expect("handle"), Delivery::Quarantined);
}
