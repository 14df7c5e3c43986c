//! Waking `claim_wait`: the finishing script publishes on the key's
//! channel; the connection's push messages (RESP3) arrive here and wake the
//! callers waiting on that channel. A lost connection wakes every waiter
//! (each then claims again), and every wait is also bounded by a poll
//! interval, so a message lost with a connection costs at most one
//! interval.

use ::redis::aio::{AsyncPushSender, SendError};
use ::redis::{PushInfo, PushKind, Value};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Notify;

/// The channels someone waits on, with how many wait and their event.
#[derive(Debug, Default)]
pub(super) struct Waits {
    channels: Mutex<HashMap<Vec<u8>, Waiting>>,
}

/// The callers waiting on one channel.
#[derive(Debug)]
struct Waiting {
    count: usize,
    event: Arc<Notify>,
}

impl Waits {
    /// Joins the waiters of `channel`; returns its event and whether this
    /// caller is the first (and so must subscribe).
    pub(super) fn join(&self, channel: &[u8]) -> (Arc<Notify>, bool) {
        let mut channels = self.channels.lock();
        let entry =
            channels.entry(channel.to_vec()).or_insert_with(|| Waiting { count: 0, event: Arc::new(Notify::new()) });
        entry.count += 1;
        (Arc::clone(&entry.event), entry.count == 1)
    }

    /// Leaves the waiters of `channel`; returns whether this caller was the
    /// last (and so should unsubscribe).
    pub(super) fn leave(&self, channel: &[u8]) -> bool {
        let mut channels = self.channels.lock();
        let Some(entry) = channels.get_mut(channel) else {
            return false;
        };
        entry.count = entry.count.saturating_sub(1);
        if entry.count == 0 {
            channels.remove(channel);
            return true;
        }
        false
    }

    fn wake(&self, channel: &[u8]) {
        if let Some(waiting) = self.channels.lock().get(channel) {
            waiting.event.notify_waiters();
        }
    }

    fn wake_all(&self) {
        for waiting in self.channels.lock().values() {
            waiting.event.notify_waiters();
        }
    }
}

/// Hands the connection's push messages to [`Waits`]; never blocks.
#[derive(Debug, Clone)]
pub(super) struct Pushes(pub(super) Arc<Waits>);

impl AsyncPushSender for Pushes {
    fn send(&self, info: PushInfo) -> Result<(), SendError> {
        match info.kind {
            PushKind::Message | PushKind::SMessage => {
                if let Some(Value::BulkString(channel)) = info.data.first() {
                    self.0.wake(channel);
                }
            }
            PushKind::Disconnection => self.0.wake_all(),
            _ => {}
        }
        Ok(())
    }
}
