//! The callers of a networked backend (Redis, PostgreSQL) waiting on each
//! key's wake-up (a published message, a notification), by the key's
//! channel or tag. The loop they run is [`crate::claim::wait`]; a backend
//! only says how its wake-ups arrive and calls [`Waits::wake`].

use event_listener::Event;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// The keys someone waits on (by their channel or tag), with how many wait
/// and their event.
#[derive(Debug, Default)]
pub(crate) struct Waits {
    keys: Mutex<HashMap<Vec<u8>, Waiting>>,
}

#[derive(Debug)]
struct Waiting {
    count: usize,
    event: Arc<Event>,
}

impl Waits {
    /// Joins the waiters of `key`; returns its event and whether this
    /// caller is the first (and so must subscribe, where that applies).
    pub(crate) fn join(&self, key: &[u8]) -> (Arc<Event>, bool) {
        let mut keys = self.keys.lock();
        let entry = keys.entry(key.to_vec()).or_insert_with(|| Waiting { count: 0, event: Arc::new(Event::new()) });
        entry.count += 1;
        (Arc::clone(&entry.event), entry.count == 1)
    }

    /// Leaves the waiters of `key`; returns whether this caller was the
    /// last.
    pub(crate) fn leave(&self, key: &[u8]) -> bool {
        let mut keys = self.keys.lock();
        let Some(entry) = keys.get_mut(key) else {
            return false;
        };
        entry.count = entry.count.saturating_sub(1);
        if entry.count == 0 {
            keys.remove(key);
            return true;
        }
        false
    }

    /// Wakes the waiters of `key`.
    pub(crate) fn wake(&self, key: &[u8]) {
        if let Some(waiting) = self.keys.lock().get(key) {
            waiting.event.notify(usize::MAX);
        }
    }

    /// Wakes every waiter (a lost connection may have lost a wake-up).
    pub(crate) fn wake_all(&self) {
        for waiting in self.keys.lock().values() {
            waiting.event.notify(usize::MAX);
        }
    }
}
