//! The lease keeper (feature `tokio`): one thread of its own, with a tokio
//! runtime of its own, renews the lease of every guarded request (the HTTP
//! layer's) and of every running [`RunOnce`](crate::backend::RunOnce) closure from
//! its claim until its answer is stored (or its key failed or was
//! released).
//!
//! The keep-alive cannot run in the handler's task: a handler that blocks
//! its thread (`std::thread::sleep`, a synchronous driver, CPU-bound work)
//! would starve it, and a response whose body streams for longer than the
//! lease is collected after the handler's future has returned. On a
//! thread of its own, nothing the handler does delays a renewal.
//!
//! A request only enters its lease in a table shared with the keeper, and
//! leaves it when its answer is kept: the keeper's thread is not woken for
//! it. The thread wakes on a tick of a twelfth of the shortest lease it has
//! seen, and renews the leases that are due (a third of a lease after the
//! claim or the last renewal): a request shorter than that costs the
//! keeper nothing, and a lease is renewed between a third and five
//! twelfths of the way through it.
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
use crate::events::event;
use crate::store::renewal_period as period;
use crate::{Error, LeaseToken};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::hash::{BuildHasherDefault, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

/// The thread and runtime that renew leases; started at the first lease.
pub(crate) struct Keeper {
    thread: OnceLock<Option<KeeperThread>>,
    leases: Arc<Leases>,
}

struct KeeperThread {
    runtime: tokio::runtime::Handle,
    /// Dropped with the keeper: the thread's `block_on` returns, and its
    /// runtime (with every renewal still on it) stops.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl std::fmt::Debug for Keeper {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Keeper")
            .field("started", &self.thread.get().is_some())
            .field("leases", &self.leases.entries.lock().map.len())
            .finish()
    }
}

type Renewal = Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;

/// One lease being kept.
struct Entry {
    /// When it is next renewed.
    due: Instant,
    lease: Duration,
    status: Arc<Status>,
    renew: Box<dyn Fn() -> Renewal + Send + Sync>,
    /// The renewal running now, if one is.
    running: Option<tokio::task::AbortHandle>,
}

/// The leases being kept, by id.
struct Entries {
    map: HashMap<u64, Entry, BuildHasherDefault<IdHasher>>,
    /// The id of the next lease.
    next_id: u64,
}

/// The hash of a lease's id: ids are distinct counts, so one multiplication
/// spreads them (the table needs no defence against chosen keys).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*byte)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// The leases being kept, shared by the requests and the keeper's thread.
struct Leases {
    entries: Mutex<Entries>,
    /// The keeper's tick, in microseconds: a twelfth of the shortest lease
    /// seen (at least a millisecond); `u64::MAX` before the first.
    tick_micros: AtomicU64,
    /// Wakes the keeper when the tick got shorter.
    shorter: Arc<tokio::sync::Notify>,
    /// Whether the keeper's loop was started.
    tick_started: AtomicBool,
}

impl Keeper {
    pub(crate) fn new() -> Self {
        let leases = Leases {
            entries: Mutex::new(Entries { map: HashMap::default(), next_id: 0 }),
            tick_micros: AtomicU64::new(u64::MAX),
            shorter: Arc::new(tokio::sync::Notify::new()),
            tick_started: AtomicBool::new(false),
        };
        Keeper { thread: OnceLock::new(), leases: Arc::new(leases) }
    }

    /// Renews `token`'s lease when a third of `lease` has passed since the
    /// claim or the last renewal (within a tick of the keeper) until the returned
    /// [`Kept`] is dropped, or until the backend says the lease is lost.
    pub(crate) fn keep<K: IdempotencyBackend>(
        &self,
        backend: Arc<K>,
        token: impl Into<Arc<LeaseToken>>,
        lease: Duration,
    ) -> Kept {
        let now = Instant::now();
        let status = Arc::new(Status::new(now + lease));
        let token = token.into();
        let renew = move || -> Renewal {
            let (backend, token) = (Arc::clone(&backend), Arc::clone(&token));
            Box::pin(async move { backend.renew(&token, lease).await })
        };
        let entry = Entry {
            due: now + period(lease),
            lease,
            status: Arc::clone(&status),
            renew: Box::new(renew),
            running: None,
        };
        let id = {
            let mut entries = self.leases.entries.lock();
            let id = entries.next_id;
            entries.next_id += 1;
            entries.map.insert(id, entry);
            id
        };
        let tick = u64::try_from((lease / 12).max(Duration::from_millis(1)).as_micros()).unwrap_or(u64::MAX);
        // Read first: the tick seldom changes, and a write on every lease
        // would move its cache line between the cores.
        if tick < self.leases.tick_micros.load(Ordering::Acquire)
            && self.leases.tick_micros.fetch_min(tick, Ordering::AcqRel) > tick
        {
            // The first lease, or one shorter than any before: the keeper
            // starts, or ticks faster from now on.
            self.start();
            self.leases.shorter.notify_one();
        }
        Kept { status, id, leases: Arc::clone(&self.leases) }
    }

    /// Runs `future` on the keeper's runtime (or, if its thread could not
    /// be started, on the caller's).
    pub(crate) fn spawn<F>(&self, future: F) -> tokio::task::AbortHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match self.thread.get_or_init(start_thread) {
            Some(thread) => thread.runtime.spawn(future).abort_handle(),
            None => tokio::spawn(future).abort_handle(),
        }
    }

    /// Starts the keeper's ticks, once.
    fn start(&self) {
        let leases = Arc::downgrade(&self.leases);
        let started = self.leases.tick_started.swap(true, Ordering::AcqRel);
        if !started {
            self.spawn(tick(leases));
        }
    }
}

/// The keeper's loop: every tick, starts the renewals that are due. It
/// holds the table weakly, so it ends with the keeper.
async fn tick(leases: Weak<Leases>) {
    loop {
        let Some(table) = leases.upgrade() else { return };
        let tick = Duration::from_micros(table.tick_micros.load(Ordering::Acquire));
        let shorter = Arc::clone(&table.shorter);
        drop(table);
        tokio::select! {
            () = tokio::time::sleep(tick) => {}
            () = shorter.notified() => {}
        }
        let Some(table) = leases.upgrade() else { return };
        let now = Instant::now();
        let mut entries = table.entries.lock();
        for (id, entry) in entries.map.iter_mut().filter(|(_, entry)| entry.running.is_none() && entry.due <= now) {
            let renewal = (entry.renew)();
            let task = tokio::spawn(renew_once(Weak::clone(&leases), *id, renewal));
            entry.running = Some(task.abort_handle());
        }
    }
}

/// One renewal of the lease `id`; what it learnt goes to the lease's
/// status, unless the lease has left the table meanwhile (its answer kept).
async fn renew_once(leases: Weak<Leases>, id: u64, renewal: Renewal) {
    let asked = Instant::now();
    let outcome = renewal.await;
    let Some(table) = leases.upgrade() else { return };
    let mut entries = table.entries.lock();
    let Some(entry) = entries.map.get_mut(&id) else { return };
    entry.running = None;
    match outcome {
        Ok(()) => {
            *entry.status.held_until.lock() = asked + entry.lease;
            entry.due = asked + period(entry.lease);
        }
        #[cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "read by the event"))]
        Err(error @ Error::LeaseLost { .. }) => {
            event!(warn, %error, "lease lost while its request runs; its answer will not be kept");
            entry.status.lost.store(true, Ordering::Release);
            entries.map.remove(&id);
        }
        #[cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "read by the event"))]
        Err(error) => {
            event!(warn, %error, "renewing a running request's lease failed; retrying");
            // Two more failures would let it lapse: sooner than a period.
            entry.due = Instant::now() + (period(entry.lease) / 4).max(Duration::from_millis(1));
        }
    }
}

fn start_thread() -> Option<KeeperThread> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        #[cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "read by the event"))]
        Err(error) => {
            event!(error, %error, "the lease keeper's runtime did not start; leases renew on the service's runtime");
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
        #[cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "read by the event"))]
        Err(error) => {
            event!(error, %error, "the lease keeper's thread did not start; leases renew on the service's runtime");
            None
        }
    }
}

/// What the keeper knows of one lease.
#[derive(Debug)]
pub(crate) struct Status {
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
    pub(crate) fn held(&self) -> bool {
        !self.lost.load(Ordering::Acquire) && Instant::now() < *self.held_until.lock()
    }
}

/// A lease being kept alive; dropping it stops the renewals.
pub(crate) struct Kept {
    status: Arc<Status>,
    id: u64,
    leases: Arc<Leases>,
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Kept").field("status", &self.status).field("id", &self.id).finish_non_exhaustive()
    }
}

impl Kept {
    /// Whether the lease may still be held (see [`Status::held`]).
    pub(crate) fn held(&self) -> bool {
        self.status.held()
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let entry = self.leases.entries.lock().map.remove(&self.id);
        if let Some(running) = entry.and_then(|entry| entry.running) {
            running.abort();
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
