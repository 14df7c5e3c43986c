//! `claim_wait` on a networked backend (Redis, PostgreSQL): the callers
//! waiting on each key's wake-up (a published message, a notification),
//! and the loop that claims, parks until the key's wake-up or a poll, and
//! claims again. A backend only says how its wake-ups arrive.

use crate::backend::BackendClaim;
use crate::error::Result;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// First and longest pause between two claims of a waiting `claim_wait`
/// when no wake-up comes (the pause doubles).
const POLL_FIRST: Duration = Duration::from_millis(100);
const POLL_MAX: Duration = Duration::from_secs(1);

/// The keys someone waits on (by their channel or tag), with how many wait
/// and their event.
#[derive(Debug, Default)]
pub(crate) struct Waits {
    keys: Mutex<HashMap<Vec<u8>, Waiting>>,
}

#[derive(Debug)]
struct Waiting {
    count: usize,
    event: Arc<Notify>,
}

impl Waits {
    /// Joins the waiters of `key`; returns its event and whether this
    /// caller is the first (and so must subscribe, where that applies).
    pub(crate) fn join(&self, key: &[u8]) -> (Arc<Notify>, bool) {
        let mut keys = self.keys.lock();
        let entry = keys.entry(key.to_vec()).or_insert_with(|| Waiting { count: 0, event: Arc::new(Notify::new()) });
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
            waiting.event.notify_waiters();
        }
    }

    /// Wakes every waiter (a lost connection may have lost a wake-up).
    pub(crate) fn wake_all(&self) {
        for waiting in self.keys.lock().values() {
            waiting.event.notify_waiters();
        }
    }
}

/// Claims with `claim` until the answer is not in progress or `wait` has
/// passed, parking between claims on `event` (the key's wake-up) or a
/// poll interval, whichever comes first. The event is armed before each
/// claim, so a wake-up between the claim and the park is not missed.
pub(crate) async fn claim_until<F, Fut>(event: &Notify, wait: Duration, mut claim: F) -> Result<BackendClaim>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<BackendClaim>>,
{
    let deadline = Instant::now() + wait;
    let mut poll = POLL_FIRST;
    loop {
        let notified = event.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let answer = claim().await?;
        let BackendClaim::InProgress { retry_after } = answer else {
            return Ok(answer);
        };
        let now = Instant::now();
        if now >= deadline {
            return Ok(answer);
        }
        let until = deadline.min(now + retry_after.min(poll));
        let _woken_or_polled = tokio::time::timeout_at(until.into(), notified).await;
        poll = (poll * 2).min(POLL_MAX);
    }
}
