//! Group commit: how far a shard's log is written and durable, and the
//! fsyncs that make it so, each shared by every record written before it
//! began.
//!
//! A batch covers everything written when it begins, its fsync runs
//! outside every lock, and the next batch takes everything written
//! meanwhile, so a batch grows while an fsync runs. A writer appends under
//! the shard's lock, releases it, and waits: a blocking caller that finds
//! no batch running runs one itself (a lone caller pays no hand-off to
//! another thread). A waiter is parked by the batch that covers its record
//! (one condition variable for the running batch, one for the next), and
//! an ended batch wakes its own waiters with one broadcast, never those of
//! the next batch, of whom it wakes one alone to run it.
//!
//! Under `Sync`, where the file system overwrites in place, the writer
//! stages each record here rather than writing it
//! ([`GroupCommit::stage`]): a batch begins by writing every staged record
//! with one `pwrite`, so the shard's lock is never held over a system call
//! for a record, and a batch of many records costs one write. Reads of a
//! record not yet written copy it from the stage ([`GroupCommit::staged`]).
//!
//! An async waiter (feature `tokio`) runs no batch: the shard's flusher, a
//! thread started by the first async waiter that needs it, runs the next
//! batch as soon as the last one ends for as long as async waiters wait,
//! and sleeps when none does ([`GroupCommit::turn_async`]). The store
//! stops it when it closes or its last handle goes
//! ([`GroupCommit::stop_flusher`]).
//!
//! The durable mark (the segment header's record of how far the segment is
//! known to be on stable storage) is written after an fsync, in the
//! segment's first page, which (once the records have passed it) the next
//! fsync must flush beside the page of the newest records: a
//! caller's fsync writes it only when [`MARK_EVERY`] has passed since it
//! was last written, and an explicit sync ([`GroupCommit::sync_marked`])
//! always does. So the mark lags the durable end by one fsync and at most
//! [`MARK_EVERY`] of writes, and most fsyncs flush one page.
//!
//! A failed fsync (or a failed write of the staged records before it, or
//! of the durable mark after it) poisons the shard: an fsync that failed
//! cannot be retried into success. Every waiter of the failed batch gets
//! its I/O error, every later one [`Error::Poisoned`]; nothing is
//! acknowledged that an fsync did not cover.

use crate::engine::segment::header::Mark;
use crate::engine::telemetry::{bump, Counters};
use crate::error::{Error, Result};
use crate::events::event;
use crate::io::StorageFile;
#[cfg(feature = "tokio")]
use event_listener::{Event, EventListener, IntoNotification};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long a caller's fsync leaves the durable mark as it was: the mark is
/// written after an fsync that ends this long or more after the last one
/// written (see the module docs).
pub(crate) const MARK_EVERY: Duration = Duration::from_millis(2);

/// The active segment as the writer left it after its last record: an
/// fsync of `file` makes every record up to `written_lsn` durable (a roll
/// fsyncs the sealed segment itself). The writer keeps it current under
/// the shard's lock; a batch copies it when it begins.
#[derive(Debug, Clone)]
pub(crate) struct Tail {
    pub file: Arc<dyn StorageFile>,
    pub path: PathBuf,
    pub written_lsn: u64,
    /// End of the last whole record in `file`.
    pub end: u64,
}

/// The tail and, under `Sync`, the records staged behind it: appended
/// under the shard's lock but not yet written to the file. They are the
/// last `staged.len()` bytes before `tail.end`, and the next batch writes
/// them with one `pwrite` before its fsync.
#[derive(Debug)]
struct Tailed {
    tail: Tail,
    staged: Vec<u8>,
}

/// Staged records past this many bytes are written at once, by the append
/// that passes it, rather than kept for the next batch (records that no
/// caller waits for, a sweep's, would otherwise pile up).
const STAGED_MAX: usize = 1 << 20;

/// A batch whose fsync failed: what its waiters are told.
#[derive(Debug)]
struct Failed {
    /// The batch covered every record up to this LSN.
    covering: u64,
    operation: &'static str,
    path: PathBuf,
    kind: std::io::ErrorKind,
    raw: Option<i32>,
    text: String,
}

impl Failed {
    fn new(covering: u64, operation: &'static str, path: &Path, error: &std::io::Error) -> Self {
        let (kind, raw, text) = (error.kind(), error.raw_os_error(), error.to_string());
        Failed { covering, operation, path: path.to_path_buf(), kind, raw, text }
    }

    /// The failed call's error, once more for each of its waiters.
    fn error(&self) -> Error {
        let source = match self.raw {
            Some(code) => std::io::Error::from_raw_os_error(code),
            None => std::io::Error::new(self.kind, self.text.clone()),
        };
        Error::io(self.operation, &self.path, source)
    }
}

/// Which batch runs and who waits for the next one; behind
/// [`GroupCommit::batches`].
#[derive(Debug)]
struct Batches {
    /// Number of the running batch, else of the last one run.
    number: u64,
    /// Whether a batch's fsync runs.
    running: bool,
    /// Every record up to this LSN is covered by the running batch.
    covering: u64,
    /// Waiters of the next batch: one of them is woken to run it when the
    /// running one ends.
    next_waiting: usize,
    /// The batch that failed, if one has.
    failed: Option<Failed>,
    /// The shard's flusher: async waiters' batches, see
    /// [`GroupCommit::turn_async`].
    flusher: FlusherState,
}

/// The state of a shard's flusher thread, behind the batches' lock.
#[derive(Debug, Default)]
#[cfg_attr(not(feature = "tokio"), expect(dead_code, reason = "only async waiters start a flusher"))]
struct FlusherState {
    /// Started (its thread runs, or ran).
    started: bool,
    /// Asleep on [`GroupCommit::flush`], nothing to do.
    idle: bool,
    /// Stopped, asked to stop, or never to start: async waiters run their
    /// batches on tokio's blocking pool instead.
    stopped: bool,
    /// The highest LSN an async waiter awaits the flusher's batches for.
    wanted: u64,
}

/// A batch begun: its number and the tail its fsync covers.
struct Batch {
    number: u64,
    tail: Tail,
}

/// What a waiter does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// Its record is durable.
    Durable,
    /// Wait for the end of the batch of this number.
    Wait(u64),
    /// Run the next batch itself (nobody else will).
    Run,
}

/// What an async waiter does next.
#[cfg(feature = "tokio")]
#[derive(Debug)]
pub(crate) enum AsyncTurn {
    /// Its record is durable.
    Durable,
    /// Await the end of the batch that covers its record, then ask again.
    Listen(EventListener),
    /// Nobody else runs the batch: wait on a blocking thread
    /// ([`GroupCommit::sync_to`]).
    Block,
}

/// The number's slot among the two condition variables (and events): the
/// running batch's and the next one's.
fn parity(number: u64) -> usize {
    usize::from(number % 2 == 1)
}

/// How far a shard's log is written and durable, and the batches of fsyncs
/// that move it (see the module docs). A failed write or fsync poisons it:
/// the shard refuses work until the store is reopened.
#[derive(Debug)]
pub(crate) struct GroupCommit {
    shard: u32,
    counters: Arc<Counters>,
    tail: parking_lot::Mutex<Tailed>,
    /// How far the active segment's file holds its records: `tail.end`
    /// less what is staged.
    on_file: AtomicU64,
    batches: Mutex<Batches>,
    /// The blocking waiters of batch `n` wait on `done[parity(n)]`.
    done: [Condvar; 2],
    /// The async waiters of batch `n` listen to `done_async[parity(n)]`.
    #[cfg(feature = "tokio")]
    done_async: [Event; 2],
    /// Wakes the idle flusher.
    flush: Condvar,
    /// The flusher thread, once started, until stopped.
    flusher: parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>,
    /// LSN of the newest record written to the operating system.
    written_lsn: AtomicU64,
    /// LSN up to which every record is on stable storage.
    durable_lsn: AtomicU64,
    poisoned: AtomicBool,
    /// The round of the next durable mark.
    round: AtomicU32,
    /// When the mark was last written (at first: when the shard opened).
    /// Batches run one at a time, so the lock is never contended.
    marked_at: parking_lot::Mutex<Instant>,
    /// LSN of the last record the written mark covers.
    marked_lsn: AtomicU64,
    /// The highest LSN an explicit sync wants the mark written for.
    mark_asked: AtomicU64,
}

impl GroupCommit {
    /// Everything up to `tail.written_lsn` is already durable (recovery
    /// synced it); the next durable mark is of round `next_round`.
    pub(crate) fn new(shard: u32, tail: Tail, next_round: u32, counters: Arc<Counters>) -> Self {
        let recovered_lsn = tail.written_lsn;
        let on_file = AtomicU64::new(tail.end);
        let flusher = FlusherState::default();
        let batches = Batches { number: 0, running: false, covering: 0, next_waiting: 0, failed: None, flusher };
        GroupCommit {
            shard,
            counters,
            tail: parking_lot::Mutex::new(Tailed { tail, staged: Vec::new() }),
            on_file,
            batches: Mutex::new(batches),
            done: [Condvar::new(), Condvar::new()],
            #[cfg(feature = "tokio")]
            done_async: [Event::new(), Event::new()],
            flush: Condvar::new(),
            flusher: parking_lot::Mutex::new(None),
            written_lsn: AtomicU64::new(recovered_lsn),
            durable_lsn: AtomicU64::new(recovered_lsn),
            poisoned: AtomicBool::new(false),
            round: AtomicU32::new(next_round),
            marked_at: parking_lot::Mutex::new(Instant::now()),
            marked_lsn: AtomicU64::new(recovered_lsn),
            mark_asked: AtomicU64::new(0),
        }
    }

    /// The batches' state. A panic elsewhere cannot leave it half-changed
    /// (every change is a few plain stores), so a poisoned mutex is taken
    /// as it is.
    fn lock(&self) -> MutexGuard<'_, Batches> {
        self.batches.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Latches a failed write or fsync (told once), without waking anyone.
    fn latch(&self) {
        if !self.poisoned.swap(true, Ordering::AcqRel) {
            event!(
                error,
                shard = self.shard,
                "shard poisoned: a write or fsync failed; every call on it now fails until the store is reopened"
            );
        }
    }

    /// Latches a failed write (see [`GroupCommit::latch`]) and wakes every
    /// waiter: a batch that would cover their records may never run.
    pub(crate) fn poison(&self) {
        self.latch();
        // Taking the lock orders this after any waiter's look at the flag.
        drop(self.lock());
        self.wake(0);
        self.wake(1);
        // An idle flusher ends.
        self.flush.notify_one();
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Whether records were written that are not yet durable.
    pub(crate) fn is_dirty(&self) -> bool {
        self.written_lsn.load(Ordering::Acquire) > self.durable_lsn.load(Ordering::Acquire)
    }

    /// Whether records were written that the durable mark does not cover
    /// yet (a caller's fsync leaves it, see the module docs), on a shard
    /// not poisoned: an explicit sync writes it.
    pub(crate) fn is_unmarked(&self) -> bool {
        self.written_lsn.load(Ordering::Acquire) > self.marked_lsn.load(Ordering::Acquire) && !self.is_poisoned()
    }

    /// LSN up to which every record is on stable storage.
    pub(crate) fn durable_lsn(&self) -> u64 {
        self.durable_lsn.load(Ordering::Acquire)
    }

    /// Records that the record `lsn` has been written (to the OS) into the
    /// active segment, whose last record now ends at `end`.
    pub(crate) fn written(&self, lsn: u64, end: u64) {
        let mut tailed = self.tail.lock();
        debug_assert!(tailed.staged.is_empty(), "a record written past staged ones");
        tailed.tail.written_lsn = lsn;
        tailed.tail.end = end;
        self.on_file.store(end, Ordering::Release);
        self.written_lsn.store(lsn, Ordering::Release);
    }

    /// Stages the record `lsn`, `frame`, which ends at `end` of the active
    /// segment: the next batch writes it to the file before its fsync (see
    /// [`GroupCommit::staged`] for reads meanwhile). Past [`STAGED_MAX`]
    /// staged bytes, everything staged is written now.
    ///
    /// # Errors
    /// That write's error; the shard is then poisoned (the records staged
    /// before this one are written by no one).
    pub(crate) fn stage(&self, frame: &[u8], lsn: u64, end: u64) -> Result<()> {
        let mut tailed = self.tail.lock();
        debug_assert_eq!(tailed.tail.end + frame.len() as u64, end, "a staged record follows the last");
        tailed.staged.extend_from_slice(frame);
        tailed.tail.written_lsn = lsn;
        tailed.tail.end = end;
        self.written_lsn.store(lsn, Ordering::Release);
        if tailed.staged.len() < STAGED_MAX {
            return Ok(());
        }
        self.write_staged_or_poison(tailed)
    }

    /// Writes the staged records to the active segment (before it is
    /// sealed, trimmed or its hint written).
    ///
    /// # Errors
    /// The write's error; the shard is then poisoned.
    pub(crate) fn write_staged(&self) -> Result<()> {
        self.write_staged_or_poison(self.tail.lock())
    }

    /// [`GroupCommit::write_staged_in`], the shard poisoned on failure
    /// (once the tail's lock is released: poisoning takes the batches'
    /// lock, which is taken before the tail's).
    fn write_staged_or_poison(&self, mut tailed: parking_lot::MutexGuard<'_, Tailed>) -> Result<()> {
        let Err(error) = self.write_staged_in(&mut tailed) else {
            return Ok(());
        };
        let path = tailed.tail.path.clone();
        drop(tailed);
        self.poison();
        Err(Error::io("write", &path, error))
    }

    /// The staged records, written with one `pwrite` where they go.
    fn write_staged_in(&self, tailed: &mut Tailed) -> std::io::Result<()> {
        if tailed.staged.is_empty() {
            return Ok(());
        }
        let at = tailed.tail.end - tailed.staged.len() as u64;
        tailed.tail.file.write_all_at(&tailed.staged, at)?;
        tailed.staged.clear();
        if tailed.staged.capacity() > STAGED_MAX {
            tailed.staged.shrink_to(STAGED_MAX);
        }
        self.on_file.store(tailed.tail.end, Ordering::Release);
        Ok(())
    }

    /// A copy of the `len` bytes at `offset` of the active segment if they
    /// are staged, not yet in its file; `None` if the file has them.
    pub(crate) fn staged(&self, offset: u64, len: usize) -> Option<Vec<u8>> {
        let end = offset.saturating_add(len as u64);
        if end <= self.on_file.load(Ordering::Acquire) {
            return None;
        }
        let tailed = self.tail.lock();
        let start = tailed.tail.end - tailed.staged.len() as u64;
        let from = usize::try_from(offset.checked_sub(start)?).ok()?;
        tailed.staged.get(from..from.checked_add(len)?).map(<[u8]>::to_vec)
    }

    /// Records that the writer rolled to a new active segment, `file` at
    /// `path`, whose records begin at `end` (nothing staged: the roll wrote
    /// it).
    pub(crate) fn rolled(&self, file: Arc<dyn StorageFile>, path: PathBuf, end: u64) {
        let mut tailed = self.tail.lock();
        debug_assert!(tailed.staged.is_empty(), "a segment sealed with records staged");
        tailed.tail.file = file;
        tailed.tail.path = path;
        tailed.tail.end = end;
        self.on_file.store(end, Ordering::Release);
    }

    /// LSN of the newest record written.
    pub(crate) fn written_lsn(&self) -> u64 {
        self.written_lsn.load(Ordering::Acquire)
    }

    /// Records that everything up to `lsn` is durable.
    pub(crate) fn synced(&self, lsn: u64) {
        bump(&self.counters.fsyncs);
        let before = self.durable_lsn.fetch_max(lsn, Ordering::AcqRel);
        let batch = lsn.saturating_sub(before);
        self.counters.records_synced.add(batch);
        #[expect(clippy::cast_precision_loss, reason = "a batch is far below 2^52 records")]
        self.counters.fsync_batch.record(batch as f64);
    }

    /// Blocks until every record up to `lsn` is durable: parked until the
    /// batch that covers it ends, or running that batch where nobody else
    /// does (see the module docs).
    pub(crate) fn sync_to(self: &Arc<Self>, lsn: u64) -> Result<()> {
        if self.durable_lsn() >= lsn {
            return Ok(());
        }
        let mut batches = self.lock();
        loop {
            batches = match self.turn(&mut batches, lsn, |_| false)? {
                Turn::Durable => return Ok(()),
                Turn::Wait(number) => self.done[parity(number)].wait(batches).unwrap_or_else(PoisonError::into_inner),
                Turn::Run => self.run_batch(batches),
            };
        }
    }

    /// [`GroupCommit::sync_to`], and the durable mark written for `lsn` at
    /// the fsync that covers it, however soon after the last one: an
    /// explicit sync (a store's `sync`, its close, the `Interval` flusher)
    /// leaves the mark where it made the log durable.
    pub(crate) fn sync_marked(self: &Arc<Self>, lsn: u64) -> Result<()> {
        self.mark_asked.fetch_max(lsn, Ordering::AcqRel);
        self.sync_to(lsn)?;
        // Durable already, perhaps by a caller's fsync that left the mark:
        // a batch with nothing to fsync writes it then.
        let mut batches = self.lock();
        while self.marked_lsn.load(Ordering::Acquire) < lsn {
            if let Some(failed) = batches.failed.as_ref().filter(|failed| lsn <= failed.covering) {
                return Err(failed.error());
            }
            if self.is_poisoned() {
                return Err(Error::Poisoned { shard: self.shard });
            }
            batches = if batches.running {
                let number = batches.number;
                self.done[parity(number)].wait(batches).unwrap_or_else(PoisonError::into_inner)
            } else {
                self.run_batch(batches)
            };
        }
        Ok(())
    }

    /// One step of an async wait for `lsn` to be durable: it is, or a
    /// listener for the end of the batch that covers it (the caller awaits
    /// it, then asks again), or nobody else runs that batch.
    ///
    /// A batch that no caller runs yet is the shard's flusher's: a thread
    /// of its own, started by the first async waiter that needs it, that
    /// runs batch after batch for as long as async waiters wait, so that
    /// the next fsync begins as soon as the last one ends rather than after
    /// a waiter is woken, polled and handed to a blocking thread. Blocking
    /// callers still run batches themselves, a lone one with no hand-off;
    /// whoever finds no batch running runs the next. Where the flusher
    /// cannot start, or has stopped (the store closing), the waiter is
    /// told to wait on a blocking thread ([`AsyncTurn::Block`]).
    #[cfg(feature = "tokio")]
    pub(crate) fn turn_async(self: &Arc<Self>, lsn: u64) -> Result<AsyncTurn> {
        if self.durable_lsn() >= lsn {
            return Ok(AsyncTurn::Durable);
        }
        let mut batches = self.lock();
        Ok(match self.turn(&mut batches, lsn, |batches| self.flusher_runs(batches))? {
            Turn::Durable => AsyncTurn::Durable,
            // Listening under the lock: the batch ends under it before
            // its waiters are woken, so this listener is not missed.
            Turn::Wait(number) => AsyncTurn::Listen(self.done_async[parity(number)].listen()),
            Turn::Run => AsyncTurn::Block,
        })
    }

    /// What a waiter for `lsn` does next, decided under the batches' lock.
    /// Where no batch that runs covers its record, the next one is the
    /// flusher's if `flusher` says the flusher runs (asked then only), else
    /// the waiters'. Its own batch's failure is its error; a later one's is
    /// [`Error::Poisoned`].
    fn turn(
        self: &Arc<Self>,
        batches: &mut Batches,
        lsn: u64,
        flusher: impl FnOnce(&mut Batches) -> bool,
    ) -> Result<Turn> {
        if self.durable_lsn() >= lsn {
            return Ok(Turn::Durable);
        }
        if let Some(failed) = batches.failed.as_ref().filter(|failed| lsn <= failed.covering) {
            return Err(failed.error());
        }
        if batches.running && lsn <= batches.covering {
            return Ok(Turn::Wait(batches.number));
        }
        if self.is_poisoned() {
            return Err(Error::Poisoned { shard: self.shard });
        }
        if flusher(batches) {
            // The flusher runs the next batch: at once if it is idle,
            // else when the running one ends.
            batches.flusher.wanted = batches.flusher.wanted.max(lsn);
            if batches.flusher.idle {
                self.flush.notify_one();
            }
            return Ok(Turn::Wait(batches.number + 1));
        }
        if batches.running {
            // One of the next batch's waiters is woken to run it.
            batches.next_waiting += 1;
            return Ok(Turn::Wait(batches.number + 1));
        }
        Ok(Turn::Run)
    }

    /// Runs one batch: begins it under the lock, fsyncs outside it, ends it
    /// under the lock again and wakes its waiters (after releasing the lock,
    /// so that they do not wake into it). Returns the lock, taken again.
    fn run_batch<'a>(&'a self, mut batches: MutexGuard<'a, Batches>) -> MutexGuard<'a, Batches> {
        let (tail, staged) = {
            let mut tailed = self.tail.lock();
            let staged = self.write_staged_in(&mut tailed);
            (tailed.tail.clone(), staged)
        };
        batches.number += 1;
        batches.running = true;
        batches.covering = tail.written_lsn;
        batches.next_waiting = 0;
        let batch = Batch { number: batches.number, tail };
        drop(batches);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            staged.map_err(|error| {
                self.latch();
                Failed::new(batch.tail.written_lsn, "write", &batch.tail.path, &error)
            })?;
            self.sync_batch(&batch.tail)
        }));
        let mut batches = self.lock();
        batches.running = false;
        let panic = match outcome {
            Ok(Ok(())) => None,
            Ok(Err(failed)) => {
                batches.failed = Some(failed);
                None
            }
            Err(panic) => {
                self.latch();
                Some(panic)
            }
        };
        let hand_on = batches.next_waiting > 0;
        drop(batches);
        self.wake(batch.number);
        if hand_on {
            // One waiter of the next batch runs it (a blocking one or an
            // async one, whichever is there; both may look). One more
            // listener, not "at least one": the event is shared with the
            // batch before this one, whose waiters `wake` notified, and a
            // task among them not yet polled still counts as notified — a
            // plain `notify(1)` would then wake nobody of the next batch,
            // and, with no later write, nobody would ever run it.
            self.done[parity(batch.number + 1)].notify_one();
            #[cfg(feature = "tokio")]
            self.done_async[parity(batch.number + 1)].notify(1.additional());
        }
        if self.is_poisoned() {
            // No batch runs after this one: its waiters learn so now.
            self.wake(batch.number + 1);
        }
        if let Some(panic) = panic {
            std::panic::resume_unwind(panic);
        }
        self.lock()
    }

    /// Whether the flusher runs the batches an async waiter needs: it
    /// does, unless it has stopped, or was to start now and could not.
    #[cfg(feature = "tokio")]
    fn flusher_runs(self: &Arc<Self>, batches: &mut Batches) -> bool {
        if batches.flusher.stopped {
            return false;
        }
        if !batches.flusher.started {
            // Started under the batches' lock, which its first step takes.
            let commit = Arc::clone(self);
            let name = format!("idemkv-fsync-{}", self.shard);
            match std::thread::Builder::new().name(name).spawn(move || commit.flush_loop()) {
                Ok(handle) => *self.flusher.lock() = Some(handle),
                #[cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "read by the event"))]
                Err(error) => {
                    event!(warn, shard = self.shard, %error, "no flusher thread: async waiters run fsyncs on the blocking pool");
                    batches.flusher.stopped = true;
                    return false;
                }
            }
            batches.flusher.started = true;
        }
        true
    }

    /// The flusher's thread: runs a batch whenever an async waiter waits
    /// for a record no batch covers and none runs; sleeps when none waits.
    /// Once stopped, it ends after the batches its waiters wait for. It
    /// ends at once on a poisoned shard, whose waiters are told so
    /// ([`GroupCommit::turn`]) and woken by whatever poisoned it.
    #[cfg(feature = "tokio")]
    fn flush_loop(&self) {
        let mut batches = self.lock();
        while !self.is_poisoned() {
            let wanted = batches.flusher.wanted > self.durable_lsn();
            batches = if batches.running {
                // A blocking caller's batch: the next one starts after it.
                let number = batches.number;
                self.done[parity(number)].wait(batches).unwrap_or_else(PoisonError::into_inner)
            } else if wanted {
                self.run_batch(batches)
            } else if batches.flusher.stopped {
                break;
            } else {
                batches.flusher.idle = true;
                let mut woken = self.flush.wait(batches).unwrap_or_else(PoisonError::into_inner);
                woken.flusher.idle = false;
                woken
            };
        }
        batches.flusher.stopped = true;
    }

    /// Stops the flusher, if it runs, and waits for its end: its last
    /// batches cover every async waiter that waits for it; the waiters
    /// after run their own. Where it was never started, none will be.
    pub(crate) fn stop_flusher(&self) {
        let mut batches = self.lock();
        batches.flusher.stopped = true;
        self.flush.notify_one();
        drop(batches);
        // Held while joining, so that a second stop returns after the end
        // too; the flusher never takes it, nor does anyone once stopped.
        let mut handle = self.flusher.lock();
        if let Some(handle) = handle.take() {
            // A panic in its batch has poisoned the shard already.
            let _panicked = handle.join();
        }
    }

    /// Wakes every waiter of batch `number`.
    fn wake(&self, number: u64) {
        self.done[parity(number)].notify_all();
        #[cfg(feature = "tokio")]
        self.done_async[parity(number)].notify(usize::MAX);
    }

    /// One batch's fsync of the active segment, covering every record of
    /// `tail`, then the durable mark.
    fn sync_batch(&self, tail: &Tail) -> std::result::Result<(), Failed> {
        if tail.written_lsn <= self.durable_lsn() {
            // Nothing new since the last fsync (or a roll synced it); the
            // mark, if an explicit sync asked for it.
            return if self.mark_due(false) { self.write_mark(tail) } else { Ok(()) };
        }
        if let Err(error) = tail.file.sync() {
            self.latch();
            return Err(Failed::new(tail.written_lsn, "fsync", &tail.path, &error));
        }
        self.synced(tail.written_lsn);
        if self.mark_due(true) {
            self.write_mark(tail)?;
        }
        Ok(())
    }

    /// The durable mark at `tail`'s end, which an fsync has covered: only
    /// now is the mark true; it becomes durable with the next fsync. Once
    /// written, it is what `marked_lsn` says.
    fn write_mark(&self, tail: &Tail) -> std::result::Result<(), Failed> {
        let mark = Mark { synced_end: tail.end, round: self.round.fetch_add(1, Ordering::AcqRel) };
        if let Err(error) = tail.file.write_all_at(&mark.encode(), mark.offset()) {
            self.latch();
            return Err(Failed::new(tail.written_lsn, "write", &tail.path, &error));
        }
        *self.marked_at.lock() = Instant::now();
        self.marked_lsn.store(tail.written_lsn, Ordering::Release);
        Ok(())
    }

    /// Whether the batch that left everything durable writes the mark: an
    /// explicit sync asked for it, or (`timed`: the batch ran an fsync)
    /// [`MARK_EVERY`] has passed since the last one. Batches run one at a
    /// time, so the mark's fields change in one thread at a time.
    fn mark_due(&self, timed: bool) -> bool {
        let asked = self.mark_asked.load(Ordering::Acquire) > self.marked_lsn.load(Ordering::Acquire);
        asked || (timed && self.marked_at.lock().elapsed() >= MARK_EVERY)
    }
}

#[cfg(test)]
mod tests {
    use super::{GroupCommit, Tail, MARK_EVERY, STAGED_MAX};
    use crate::engine::telemetry::Counters;
    use crate::io::StorageFile;
    use parking_lot::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc::Receiver;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// A log that knows what each fsync covered: `written` is the newest LSN
    /// written, and an fsync makes durable what was written when it began.
    /// The fsync numbered `fail_at` (from 1; 0 for none) fails, and
    /// `failed_covering` is then what it would have covered.
    #[derive(Debug, Default)]
    struct Log {
        written: AtomicU64,
        durable: AtomicU64,
        fsyncs: AtomicU64,
        /// Writes of the durable mark (the only writes a group commit makes).
        marks: AtomicU64,
        fail_at: u64,
        failed_covering: AtomicU64,
        /// When set, each fsync waits for a message on it first.
        gate: Mutex<Option<Receiver<()>>>,
    }

    impl StorageFile for Log {
        fn read_exact_at(&self, _buf: &mut [u8], _offset: u64) -> std::io::Result<()> {
            Ok(())
        }
        fn write_all_at(&self, _buf: &[u8], _offset: u64) -> std::io::Result<()> {
            self.marks.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn set_len(&self, _len: u64) -> std::io::Result<()> {
            Ok(())
        }
        fn len(&self) -> std::io::Result<u64> {
            Ok(0)
        }
        fn sync(&self) -> std::io::Result<()> {
            let covered = self.written.load(Ordering::SeqCst);
            if let Some(gate) = self.gate.lock().as_ref() {
                gate.recv_timeout(Duration::from_secs(20)).expect("the test opens the gate");
            }
            // An fsync takes a while, so that callers pile up behind it.
            std::thread::sleep(Duration::from_micros(200));
            if self.fsyncs.fetch_add(1, Ordering::SeqCst) + 1 == self.fail_at {
                self.failed_covering.store(covered, Ordering::SeqCst);
                return Err(std::io::Error::from_raw_os_error(5));
            }
            self.durable.fetch_max(covered, Ordering::SeqCst);
            Ok(())
        }
    }

    /// One shard's log, its group commit and its writer's lock.
    struct Shard {
        log: Arc<Log>,
        commit: Arc<GroupCommit>,
        next: Mutex<u64>,
    }

    impl Shard {
        /// A shard whose fsync numbered `fail_at` fails.
        fn new(fail_at: u64) -> Arc<Self> {
            let log = Arc::new(Log { fail_at, ..Log::default() });
            let file: Arc<dyn StorageFile> = Arc::clone(&log) as Arc<dyn StorageFile>;
            let tail = Tail { file, path: "log".into(), written_lsn: 0, end: 0 };
            let counters = Arc::new(Counters::new(0));
            let commit = Arc::new(GroupCommit::new(0, tail, 1, counters));
            Arc::new(Shard { log, commit, next: Mutex::new(0) })
        }

        /// Writes the next record (under the writer's lock, as the shard
        /// does); `poison_at` is the LSN whose write fails.
        fn write(&self, poison_at: u64) -> u64 {
            let mut next = self.next.lock();
            *next += 1;
            if *next == poison_at {
                self.commit.poison();
            }
            self.log.written.store(*next, Ordering::SeqCst);
            self.commit.written(*next, *next);
            *next
        }

        /// Waits for `lsn`; a success is checked against what the log's
        /// fsyncs covered.
        fn sync_to(&self, lsn: u64) -> crate::Result<()> {
            let outcome = self.commit.sync_to(lsn);
            self.check(lsn, &outcome);
            outcome
        }

        /// Waits for `lsn` as an async waiter does (the store's
        /// `wait_durable_async`), its listeners awaited by blocking on
        /// them; a success is checked as by [`Shard::sync_to`]. Returns
        /// whether it was ever told to wait on a blocking thread.
        #[cfg(feature = "tokio")]
        fn sync_to_async(&self, lsn: u64) -> (crate::Result<()>, bool) {
            use super::AsyncTurn;
            use event_listener::Listener;
            let mut blocked = false;
            let outcome = loop {
                match self.commit.turn_async(lsn) {
                    Ok(AsyncTurn::Durable) => break Ok(()),
                    Ok(AsyncTurn::Listen(listener)) => {
                        assert!(
                            listener.wait_timeout(Duration::from_secs(20)).is_some(),
                            "record {lsn}: nobody ran its batch"
                        );
                    }
                    Ok(AsyncTurn::Block) => {
                        blocked = true;
                        break self.commit.sync_to(lsn);
                    }
                    Err(error) => break Err(error),
                }
            };
            self.check(lsn, &outcome);
            (outcome, blocked)
        }

        fn check(&self, lsn: u64, outcome: &crate::Result<()>) {
            if outcome.is_ok() {
                assert!(self.log.durable.load(Ordering::SeqCst) >= lsn, "record {lsn} acknowledged before its fsync");
            }
        }
    }

    /// Runs `callers` threads of `work` and returns what each returned.
    /// The threads are not scoped: a caller left waiting fails the test
    /// (after 20 s) rather than hanging it.
    fn run<T: Send + 'static>(callers: u64, work: impl Fn(u64) -> T + Send + Sync + 'static) -> Vec<T> {
        let work = Arc::new(work);
        let (done, finished) = std::sync::mpsc::channel();
        for caller in 0..callers {
            let (done, work) = (done.clone(), Arc::clone(&work));
            std::thread::spawn(move || done.send(work(caller)));
        }
        collect(callers, &finished)
    }

    fn collect<T>(callers: u64, finished: &Receiver<T>) -> Vec<T> {
        (0..callers)
            .map(|_| finished.recv_timeout(Duration::from_secs(20)).expect("a caller was left waiting"))
            .collect()
    }

    /// One caller's fsyncs write the mark once a [`MARK_EVERY`], an explicit
    /// sync at once, and alone when there is nothing to fsync.
    #[test]
    fn staged_records_are_read_from_memory_until_the_cap_or_a_batch_writes_them() {
        let shard = Shard::new(0);
        let (commit, log) = (&shard.commit, &shard.log);
        let frame: Vec<u8> = (0..1000_u32).map(|n| n.to_le_bytes()[0]).collect();
        let (mut lsn, mut end) = (1, 1000);
        commit.stage(&frame, lsn, end).expect("staged");
        assert_eq!(commit.staged(0, 1000), Some(frame.clone()));
        assert_eq!(commit.staged(10, 20).as_deref(), Some(&frame[10..30]));
        assert!(commit.is_dirty());
        assert_eq!(log.marks.load(Ordering::SeqCst), 0, "nothing written yet");
        while end < STAGED_MAX as u64 {
            (lsn, end) = (lsn + 1, end + 1000);
            commit.stage(&frame, lsn, end).expect("staged");
        }
        assert_eq!(log.marks.load(Ordering::SeqCst), 1, "the cap wrote everything staged at once");
        assert_eq!(commit.staged(0, 1000), None, "read from the file");
        commit.stage(&frame, lsn + 1, end + 1000).expect("staged");
        assert_eq!(commit.staged(end, 1000), Some(frame));
        log.written.store(lsn + 1, Ordering::SeqCst);
        commit.sync_to(lsn + 1).expect("synced");
        assert_eq!(commit.staged(end, 1000), None, "the batch wrote it before its fsync");
        assert!(log.marks.load(Ordering::SeqCst) >= 2);
        assert!(!commit.is_dirty());
    }

    #[test]
    fn a_callers_fsync_writes_the_mark_once_a_mark_every_and_an_explicit_sync_at_once() {
        let shard = Shard::new(0);
        let started = Instant::now();
        for _ in 0..20 {
            let lsn = shard.write(0);
            shard.sync_to(lsn).expect("sync");
        }
        let elapsed = started.elapsed();
        let (fsyncs, marks) = (shard.log.fsyncs.load(Ordering::SeqCst), shard.log.marks.load(Ordering::SeqCst));
        assert_eq!(fsyncs, 20, "one caller, one fsync a record");
        // Each fsync takes 200 µs or more: MARK_EVERY passed at least once.
        let most = 1 + elapsed.as_nanos() / MARK_EVERY.as_nanos();
        assert!((1..=most).contains(&u128::from(marks)), "{marks} marks in {elapsed:?}");
        let lsn = shard.write(0);
        shard.commit.sync_marked(lsn).expect("sync");
        assert_eq!(shard.log.marks.load(Ordering::SeqCst), marks + 1, "an explicit sync writes the mark");
        let lsn = shard.write(0);
        shard.commit.sync_marked(lsn).expect("sync");
        assert_eq!(shard.log.marks.load(Ordering::SeqCst), marks + 2, "however soon after the last one");
        // A caller's fsync left the mark behind: an explicit sync with
        // nothing to fsync writes it alone.
        let lsn = shard.write(0);
        shard.sync_to(lsn).expect("sync");
        let (fsyncs, marks) = (shard.log.fsyncs.load(Ordering::SeqCst), shard.log.marks.load(Ordering::SeqCst));
        // (Unless the caller's fsync came MARK_EVERY after the last mark.)
        let left_behind = shard.commit.marked_lsn.load(Ordering::SeqCst) < lsn;
        shard.commit.sync_marked(lsn).expect("sync");
        assert_eq!(shard.log.fsyncs.load(Ordering::SeqCst), fsyncs, "nothing new to fsync");
        assert_eq!(shard.log.marks.load(Ordering::SeqCst), marks + u64::from(left_behind));
        assert_eq!(shard.commit.marked_lsn.load(Ordering::SeqCst), lsn, "the mark covers the record");
        shard.commit.sync_marked(lsn).expect("sync");
        assert_eq!(shard.log.marks.load(Ordering::SeqCst), marks + u64::from(left_behind), "written once");
    }

    /// Many callers write and wait, twice over: each returns only once an fsync that began after its write has
    /// ended, nobody is left waiting, and fsyncs are shared.
    #[test]
    fn every_caller_returns_durable_and_fsyncs_are_shared() {
        const CALLERS: u64 = 32;
        const ROUNDS: u64 = 200;
        for _round in 0..2 {
            let shard = Shard::new(0);
            let writes = |caller: u64| ROUNDS / 2 + caller * ROUNDS / CALLERS;
            let running = Arc::clone(&shard);
            // Callers leave at different times.
            run(CALLERS, move |caller| {
                for _ in 0..writes(caller) {
                    let lsn = running.write(0);
                    running.sync_to(lsn).expect("sync");
                }
            });
            let records = (0..CALLERS).map(writes).sum::<u64>();
            let fsyncs = shard.log.fsyncs.load(Ordering::SeqCst);
            assert!(fsyncs < records, "{fsyncs} fsyncs for {records} records: none shared");
            assert_eq!(shard.commit.durable_lsn(), records);
        }
    }

    /// A write that fails while callers wait (the writer poisons the
    /// shard, as after a failed `pwrite`), whether a batch runs or not:
    /// every caller returns, none acknowledged past what an fsync covered.
    #[test]
    fn a_poisoned_shard_leaves_nobody_waiting() {
        for _round in 0..2 {
            for poison_at in (1..=64).chain([100, 200]) {
                let shard = Shard::new(0);
                let errors = run(16, move |_| loop {
                    let lsn = shard.write(poison_at);
                    if let Err(error) = shard.sync_to(lsn) {
                        break error;
                    }
                });
                for error in errors {
                    assert!(matches!(error, crate::Error::Poisoned { .. }), "{error}");
                }
            }
        }
    }

    /// An fsync that fails under many waiters: every waiter of that batch
    /// gets the fsync's I/O error, every later call `Poisoned`, and no
    /// caller is acknowledged past what the fsyncs before it covered.
    #[test]
    fn a_failed_fsync_fails_every_waiter_of_its_batch() {
        for _round in 0..2 {
            for fail_at in [1, 2, 5, 20] {
                let shard = Shard::new(fail_at);
                let running = Arc::clone(&shard);
                let ends = run(16, move |_| loop {
                    let lsn = running.write(0);
                    if let Err(error) = running.sync_to(lsn) {
                        break (lsn, error);
                    }
                });
                let covering = shard.log.failed_covering.load(Ordering::SeqCst);
                // What the group commit says is durable: what its batches
                // covered when they began, at most what the log's good
                // fsyncs covered (a record written between a batch's
                // start and its fsync's call is on disk but not counted).
                let durable = shard.commit.durable_lsn();
                let synced = shard.log.durable.load(Ordering::SeqCst);
                assert!(durable <= synced, "acknowledged past the last good fsync: {durable} > {synced}");
                assert!(covering > durable, "the failed fsync covered nothing new");
                let mut failed_in_batch = 0;
                for (lsn, error) in ends {
                    match error {
                        crate::Error::Io { operation: "fsync", source, .. } => {
                            assert_eq!(source.raw_os_error(), Some(5));
                            assert!(lsn > durable && lsn <= covering, "record {lsn} not of the failed batch");
                            failed_in_batch += 1;
                        }
                        crate::Error::Poisoned { .. } => assert!(lsn > durable, "record {lsn} was durable"),
                        other => panic!("unexpected error {other}"),
                    }
                }
                assert!(failed_in_batch >= 1, "nobody was told of the failed fsync");
            }
        }
    }

    /// Regression: a batch's waiters were handed the next batch with
    /// `notify(1)`, which notifies nobody new while a waiter of the batch
    /// before (same event, woken but not yet polled) still counts as
    /// notified; the next batch then never ran, and its async waiters hung
    /// once writes stopped (seen as a rare hang of a Sync store's burst of
    /// async calls ending).
    ///
    /// Async waiters hand batches on only where there is no flusher: it is
    /// stopped first.
    #[cfg(feature = "tokio")]
    #[test]
    fn the_next_batch_is_handed_on_while_a_waiter_of_the_batch_before_is_not_yet_polled() {
        use super::AsyncTurn;
        use event_listener::{EventListener, Listener};
        let shard = Shard::new(0);
        shard.commit.stop_flusher();
        let (open, gate) = std::sync::mpsc::channel();
        *shard.log.gate.lock() = Some(gate);
        let running = |shard: &Arc<Shard>| {
            while !shard.commit.lock().running {
                std::thread::yield_now();
            }
        };
        let listen = |lsn: u64| -> EventListener {
            match shard.commit.turn_async(lsn).expect("turn") {
                AsyncTurn::Listen(listener) => listener,
                other => panic!("record {lsn}: {other:?}"),
            }
        };
        // Batch 1, held in its fsync; a waiter of it (never polled) and one of batch 2.
        let first = shard.write(0);
        let blocking = Arc::clone(&shard);
        let batch_one = std::thread::spawn(move || blocking.sync_to(first));
        running(&shard);
        let stale = listen(first);
        let second = shard.write(0);
        let handed_two = listen(second);
        open.send(()).expect("gate");
        batch_one.join().expect("batch 1").expect("durable");
        assert!(handed_two.wait_timeout(Duration::from_secs(5)).is_some(), "batch 2 not handed on");
        // Batch 2, run by its waiter, held in its fsync; a waiter of batch 3
        // listens on the event of batch 1, whose `stale` waiter is notified.
        assert!(matches!(shard.commit.turn_async(second).expect("turn"), AsyncTurn::Block));
        let blocking = Arc::clone(&shard);
        let batch_two = std::thread::spawn(move || blocking.sync_to(second));
        running(&shard);
        let third = shard.write(0);
        let handed_three = listen(third);
        open.send(()).expect("gate");
        batch_two.join().expect("batch 2").expect("durable");
        assert!(handed_three.wait_timeout(Duration::from_secs(5)).is_some(), "batch 3 not handed on: nobody runs it");
        drop(stale);
    }

    /// Async waiters and blocking callers at once, twice over: every async
    /// waiter's batch is run by the flusher or by a blocking caller (none
    /// is told to run its own), each returns durable, fsyncs are shared;
    /// then the flusher, stopped, ends, and an async waiter after it runs
    /// its own batch.
    #[cfg(feature = "tokio")]
    #[test]
    fn the_flusher_runs_the_async_waiters_batches_beside_blocking_callers() {
        const CALLERS: u64 = 24;
        const ROUNDS: u64 = 150;
        for _round in 0..2 {
            let shard = Shard::new(0);
            let running = Arc::clone(&shard);
            // One caller in three blocks; the others wait as async ones.
            let blocked = run(CALLERS, move |caller| {
                let mut blocked = false;
                for _ in 0..ROUNDS {
                    let lsn = running.write(0);
                    if caller % 3 == 0 {
                        running.sync_to(lsn).expect("sync");
                    } else {
                        let (outcome, block) = running.sync_to_async(lsn);
                        outcome.expect("sync");
                        blocked |= block;
                    }
                }
                blocked
            });
            assert!(!blocked.contains(&true), "an async waiter was told to run its own batch");
            let records = CALLERS * ROUNDS;
            let fsyncs = shard.log.fsyncs.load(Ordering::SeqCst);
            assert!(fsyncs < records, "{fsyncs} fsyncs for {records} records: none shared");
            assert_eq!(shard.commit.durable_lsn(), records);
            let flusher = shard.commit.flusher.lock().take().expect("the flusher was started");
            shard.commit.stop_flusher();
            ends(&flusher, "stopped");
            // After it, an async waiter runs its own batch.
            let lsn = shard.write(0);
            let (outcome, blocked) = shard.sync_to_async(lsn);
            outcome.expect("sync");
            assert!(blocked, "no flusher, yet the waiter was not told to run its batch");
        }
    }

    /// Stopping the flusher while its waiters wait for two batches: the
    /// first held in its fsync at a gate, the second not yet begun (its
    /// waiters listen for it). The stop waits for both, and every waiter
    /// returns durable without running a batch of its own.
    #[cfg(feature = "tokio")]
    #[test]
    fn a_stopped_flusher_ends_the_batches_its_waiters_wait_for() {
        use super::AsyncTurn;
        use event_listener::Listener;
        let shard = Shard::new(0);
        let (open, gate) = std::sync::mpsc::channel();
        *shard.log.gate.lock() = Some(gate);
        // Batch 1, the flusher's, covers record 1 alone and is held.
        let first = shard.write(0);
        let waiting = Arc::clone(&shard);
        let first_waiter = std::thread::spawn(move || waiting.sync_to_async(first));
        while !shard.commit.lock().running {
            std::thread::yield_now();
        }
        // Records 2 to 4 wait for the next batch, which nobody runs yet.
        let listeners: Vec<_> = (2..=4)
            .map(|_| {
                let lsn = shard.write(0);
                match shard.commit.turn_async(lsn).expect("turn") {
                    AsyncTurn::Listen(listener) => (lsn, listener),
                    other => panic!("record {lsn}: {other:?}"),
                }
            })
            .collect();
        assert_eq!(shard.commit.lock().flusher.wanted, 4);
        let stopping = Arc::clone(&shard);
        let stop = std::thread::spawn(move || stopping.commit.stop_flusher());
        while !shard.commit.lock().flusher.stopped {
            std::thread::yield_now();
        }
        // Each fsync passes the gate once opened; at most two are to come.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !stop.is_finished() {
            assert!(Instant::now() < deadline, "the stop did not end");
            let _queued = open.send(());
            std::thread::sleep(Duration::from_millis(1));
        }
        stop.join().expect("stop");
        let (outcome, blocked) = first_waiter.join().expect("waiter");
        outcome.expect("durable");
        assert!(!blocked, "the first waiter ran its own batch");
        for (lsn, listener) in listeners {
            assert!(listener.wait_timeout(Duration::from_secs(5)).is_some(), "record {lsn}: its batch never ran");
            assert!(matches!(shard.commit.turn_async(lsn).expect("turn"), AsyncTurn::Durable), "record {lsn}");
        }
        assert_eq!(shard.log.durable.load(Ordering::SeqCst), 4);
    }

    /// A write that fails (the writer poisons the shard) or an fsync that
    /// fails while async waiters wait for the flusher: every one returns
    /// with an error, none acknowledged past what an fsync covered, and
    /// the flusher has ended.
    #[cfg(feature = "tokio")]
    #[test]
    fn a_poisoned_shard_leaves_no_async_waiter_waiting() {
        for (poison_at, fail_at) in [(1, 0), (7, 0), (40, 0), (0, 1), (0, 3), (0, 9)] {
            let shard = Shard::new(fail_at);
            let running = Arc::clone(&shard);
            let errors = run(16, move |_| loop {
                let lsn = running.write(poison_at);
                if let (Err(error), _) = running.sync_to_async(lsn) {
                    break error;
                }
            });
            for error in errors {
                assert!(matches!(error, crate::Error::Poisoned { .. } | crate::Error::Io { .. }), "{error}");
            }
            let flusher = shard.commit.flusher.lock().take();
            if let Some(flusher) = flusher {
                ends(&flusher, "on a poisoned shard");
            }
        }
        // The flusher idle when a write poisons the shard: it ends too.
        let shard = Shard::new(0);
        let lsn = shard.write(0);
        shard.sync_to_async(lsn).0.expect("durable");
        while !shard.commit.lock().flusher.idle {
            std::thread::yield_now();
        }
        let flusher = shard.commit.flusher.lock().take().expect("the flusher was started");
        let lsn = shard.write(lsn + 1);
        assert!(matches!(shard.sync_to_async(lsn).0, Err(crate::Error::Poisoned { .. })));
        ends(&flusher, "idle on a shard then poisoned");
    }

    /// Fails unless the flusher's thread ends within 20 s.
    #[cfg(feature = "tokio")]
    fn ends(flusher: &std::thread::JoinHandle<()>, when: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !flusher.is_finished() {
            assert!(Instant::now() < deadline, "the flusher did not end {when}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
