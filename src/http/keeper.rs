//! The layer's lease keeper: one thread of its own, with a tokio runtime
//! of its own, renews the lease of every guarded request from its claim
//! until its answer is stored (or its key failed or was released).
//!
//! The keep-alive cannot run in the handler's task: a handler that blocks
//! its thread (`std::thread::sleep`, a synchronous driver, CPU-bound work)
//! would starve it, and a response whose body streams for longer than the
//! lease is collected after the handler's future has returned. On a
//! thread of its own, nothing the handler does delays a renewal.
//!
//! What a handler that blocks a runtime thread still costs: the thread
//! (and every other request scheduled on it) waits, and when the blocked
//! worker was the one polling tokio's I/O driver, no other connection or
//! timer of that runtime may make progress until it returns; blocking
//! belongs in `block_in_place` or `spawn_blocking`. And a networked
//! backend's connection is driven by tasks on the service's runtime: if
//! every worker thread of that runtime is blocked, renewals sent from the
//! keeper wait for them too. The embedded store needs nothing of the
//! service's runtime.

use crate::backend::IdempotencyBackend;
use crate::{Error, LeaseToken};
use parking_lot::Mutex;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The thread and runtime that renew leases; started at the first lease.
pub(super) struct Keeper {
    thread: OnceLock<Option<KeeperThread>>,
}

struct KeeperThread {
    runtime: tokio::runtime::Handle,
    /// Dropped with the keeper: the thread's `block_on` returns, and its
    /// runtime (with every renewal still on it) stops.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl std::fmt::Debug for Keeper {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Keeper").field("started", &self.thread.get().is_some()).finish()
    }
}

impl Keeper {
    pub(super) fn new() -> Self {
        Keeper { thread: OnceLock::new() }
    }

    /// Renews `token`'s lease every third of `lease` until the returned
    /// [`Kept`] is dropped, or until the backend says the lease is lost.
    pub(super) fn keep<K: IdempotencyBackend>(&self, backend: Arc<K>, token: LeaseToken, lease: Duration) -> Kept {
        let status = Arc::new(Status::new(Instant::now() + lease));
        let task = renew_until_dropped(backend, token, lease, Arc::clone(&status));
        let task = self.spawn(task);
        Kept { status, task }
    }

    /// Runs `future` on the keeper's runtime (or, if its thread could not
    /// be started, on the caller's).
    pub(super) fn spawn<F>(&self, future: F) -> tokio::task::AbortHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match self.thread.get_or_init(start_thread) {
            Some(thread) => thread.runtime.spawn(future).abort_handle(),
            None => tokio::spawn(future).abort_handle(),
        }
    }
}

fn start_thread() -> Option<KeeperThread> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "the lease keeper's runtime did not start; leases renew on the service's runtime");
            return None;
        }
    };
    let handle = runtime.handle().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let started = std::thread::Builder::new().name("idemkv-lease-keeper".into()).spawn(move || {
        // Runs the renewals until the keeper is dropped.
        let _stopped = runtime.block_on(stopped);
    });
    match started {
        Ok(_detached) => Some(KeeperThread { runtime: handle, _stop: stop }),
        Err(error) => {
            tracing::error!(%error, "the lease keeper's thread did not start; leases renew on the service's runtime");
            None
        }
    }
}

/// What the keeper knows of one lease.
#[derive(Debug)]
pub(super) struct Status {
    /// Until when the lease is known to be held: the start of the last
    /// renewal that succeeded, plus the lease.
    held_until: Mutex<Instant>,
    lost: AtomicBool,
}

impl Status {
    fn new(held_until: Instant) -> Self {
        Status { held_until: Mutex::new(held_until), lost: AtomicBool::new(false) }
    }

    /// Whether the lease may still be held now: not lost, not past the
    /// end the last renewal gave it.
    pub(super) fn held(&self) -> bool {
        !self.lost.load(Ordering::Acquire) && Instant::now() < *self.held_until.lock()
    }
}

/// A lease being kept alive; dropping it stops the renewals.
#[derive(Debug)]
pub(super) struct Kept {
    status: Arc<Status>,
    task: tokio::task::AbortHandle,
}

impl Kept {
    /// Whether the lease may still be held (see [`Status::held`]).
    pub(super) fn held(&self) -> bool {
        self.status.held()
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Renews every third of the lease; after a failed renewal (not a lost
/// lease) tries again sooner, since two more failures would let it lapse.
async fn renew_until_dropped<K: IdempotencyBackend>(
    backend: Arc<K>,
    token: LeaseToken,
    lease: Duration,
    status: Arc<Status>,
) {
    let period = (lease / 3).max(Duration::from_millis(1));
    let mut wait = period;
    loop {
        tokio::time::sleep(wait).await;
        let asked = Instant::now();
        match backend.renew(&token, lease).await {
            Ok(()) => {
                *status.held_until.lock() = asked + lease;
                wait = period;
            }
            Err(error @ Error::LeaseLost { .. }) => {
                tracing::warn!(%error, "lease lost while its request runs; its answer will not be kept");
                status.lost.store(true, Ordering::Release);
                return;
            }
            Err(error) => {
                tracing::warn!(%error, "renewing a running request's lease failed; retrying");
                wait = (period / 4).max(Duration::from_millis(1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Claim, ClaimRequest, Config, Durability, Fingerprint, Store};

    #[tokio::test(flavor = "current_thread")]
    async fn a_lease_stays_held_while_the_callers_thread_is_blocked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path(), Config::new().durability(Durability::Buffered)).expect("open");
        let request = ClaimRequest::new("k", Fingerprint::of(b"r")).lease(Duration::from_millis(300));
        let Claim::Acquired(lease) = store.claim(&request).expect("claim") else { panic!("not acquired") };
        let token = lease.into_token();
        let keeper = Keeper::new();
        let kept = keeper.keep(Arc::new(store.clone()), token.clone(), Duration::from_millis(300));
        // The only thread of this runtime blocks for three leases.
        std::thread::sleep(Duration::from_millis(900));
        assert!(kept.held(), "the keeper renewed from its own thread");
        assert!(
            matches!(store.claim(&request).expect("claim"), Claim::InProgress { .. }),
            "nobody could take the key over"
        );
        drop(kept);
        store.complete(&token, b"done").expect("the lease is still this caller's");
    }
}
