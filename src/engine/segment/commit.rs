//! Group commit: how far a shard's log is written and durable, and the
//! fsyncs that make it so, each shared by every record written before it
//! began.
//!
//! A batch covers everything written when it begins (under
//! [`crate::Durability::Sync`] it also writes those records, staged by the
//! writer, with one `pwrite`), its fsync runs outside every lock, and the
//! next batch takes everything written meanwhile, so a batch grows while
//! an fsync runs. A writer appends under the shard's lock, releases it,
//! and waits. A waiter that finds no batch running and nobody about to
//! run one runs the batch itself: a lone caller pays no thread hand-off.
//! One that finds a batch running which does not cover its record leaves
//! the next batch to the shard's flusher thread (under `Sync`; started by
//! the first such wait), which runs batch after batch while records keep
//! coming, so that under load writers never run an fsync. A waiter is
//! parked by the batch that covers its record (one condition variable for
//! the running batch, one for the next), and an ended batch wakes its own
//! waiters with one broadcast, never those of the next batch; the flusher
//! itself is woken only when it has gone idle. Under the other
//! durabilities (where only [`crate::Store::sync`], close and the interval
//! flusher wait), and when the system refuses the flusher's thread, the
//! waiting callers run every batch.
//!
//! A failed fsync (or a failed write of the durable mark after it) poisons
//! the shard: an fsync that failed cannot be retried into success. Every
//! waiter of the failed batch gets its I/O error, every later one
//! [`Error::Poisoned`]; nothing is acknowledged that an fsync did not
//! cover.

use crate::engine::segment::header::Mark;
use crate::engine::telemetry::{bump, Counters};
use crate::error::{Error, Result};
use crate::events::event;
use crate::io::StorageFile;
#[cfg(feature = "tokio")]
use event_listener::{Event, EventListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

/// The active segment as the writer left it after its last record: a
/// batch that writes what is staged and then fsyncs `file` makes every
/// record up to `written_lsn` durable (a roll fsyncs the sealed segment
/// itself). The writer keeps it current under the shard's lock; a batch
/// takes what it covers when it begins.
#[derive(Debug)]
pub(crate) struct Tail {
    pub file: Arc<dyn StorageFile>,
    pub path: PathBuf,
    pub written_lsn: u64,
    /// End of the last whole record in `file`.
    pub end: u64,
    /// Under `Sync`, the records appended since the last batch began, not
    /// yet written to `file` (the batch writes them with one `pwrite`),
    /// and where they go.
    staged: Staged,
    /// What the running batch is writing: read from here until it has.
    in_flight: Option<Staged>,
}

/// Records not yet in their file: their bytes and the offset they go to.
#[derive(Debug, Clone, Default)]
struct Staged {
    at: u64,
    bytes: Arc<Vec<u8>>,
}

impl Staged {
    /// The `len` bytes at file offset `offset`, if they are here.
    fn read(&self, offset: u64, len: usize) -> Option<Vec<u8>> {
        let start = usize::try_from(offset.checked_sub(self.at)?).ok()?;
        self.bytes.get(start..start.checked_add(len)?).map(<[u8]>::to_vec)
    }
}

impl Tail {
    /// The tail of a log whose records up to `written_lsn` are all in
    /// `file` (at `path`), the last ending at `end`.
    pub(crate) fn new(file: Arc<dyn StorageFile>, path: PathBuf, written_lsn: u64, end: u64) -> Self {
        Tail { file, path, written_lsn, end, staged: Staged::default(), in_flight: None }
    }
}

/// What a batch covers: the active segment as it was when the batch began,
/// and the staged records it writes before its fsync.
#[derive(Debug)]
struct Covered {
    file: Arc<dyn StorageFile>,
    path: PathBuf,
    written_lsn: u64,
    end: u64,
    writes: Option<Staged>,
}

/// The flusher thread of a shard under `Sync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flusher {
    /// Not started yet (or ended): the next wait starts it.
    Absent,
    /// Waiting for records to sync: a waiter wakes it.
    Idle,
    /// Running a batch, or about to look for the next one.
    Awake,
}

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

/// Which batch runs, who waits for the next one, and the flusher's state;
/// behind [`GroupCommit::batches`].
#[derive(Debug)]
struct Batches {
    /// Number of the running batch, else of the last one run.
    number: u64,
    /// Whether a batch's fsync runs.
    running: bool,
    /// Every record up to this LSN is covered by the running batch.
    covering: u64,
    /// Waiters of the next batch: the flusher runs one for them even if
    /// a roll has synced their records meanwhile, so that they are woken.
    next_waiting: usize,
    flusher: Flusher,
    /// Set when the shard is dropped: the flusher ends.
    stopping: bool,
    /// The batch that failed, if one has.
    failed: Option<Failed>,
}

/// A batch begun: its number and what its fsync covers.
struct Batch {
    number: u64,
    covered: Covered,
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
    /// Whether a flusher thread runs the batches (`Sync`), or the waiting
    /// callers do.
    flusher_wanted: bool,
    tail: parking_lot::Mutex<Tail>,
    batches: Mutex<Batches>,
    /// The blocking waiters of batch `n` wait on `done[parity(n)]`.
    done: [Condvar; 2],
    /// The async waiters of batch `n` listen to `done_async[parity(n)]`.
    #[cfg(feature = "tokio")]
    done_async: [Event; 2],
    /// The idle flusher waits on it.
    work: Condvar,
    thread: parking_lot::Mutex<Option<JoinHandle<()>>>,
    /// LSN of the newest record written to the operating system.
    written_lsn: AtomicU64,
    /// LSN up to which every record is on stable storage.
    durable_lsn: AtomicU64,
    poisoned: AtomicBool,
    /// The round of the next durable mark.
    round: AtomicU32,
}

impl GroupCommit {
    /// Everything up to `tail.written_lsn` is already durable (recovery
    /// synced it); the next durable mark is of round `next_round`. With
    /// `flusher_wanted` a flusher thread runs the batches.
    pub(crate) fn new(shard: u32, tail: Tail, next_round: u32, counters: Arc<Counters>, flusher_wanted: bool) -> Self {
        let recovered_lsn = tail.written_lsn;
        let batches = Batches {
            number: 0,
            running: false,
            covering: 0,
            next_waiting: 0,
            flusher: Flusher::Absent,
            stopping: false,
            failed: None,
        };
        GroupCommit {
            shard,
            counters,
            flusher_wanted,
            tail: parking_lot::Mutex::new(tail),
            batches: Mutex::new(batches),
            done: [Condvar::new(), Condvar::new()],
            #[cfg(feature = "tokio")]
            done_async: [Event::new(), Event::new()],
            work: Condvar::new(),
            thread: parking_lot::Mutex::new(None),
            written_lsn: AtomicU64::new(recovered_lsn),
            durable_lsn: AtomicU64::new(recovered_lsn),
            poisoned: AtomicBool::new(false),
            round: AtomicU32::new(next_round),
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
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Whether records were written that are not yet durable.
    pub(crate) fn is_dirty(&self) -> bool {
        self.written_lsn.load(Ordering::Acquire) > self.durable_lsn.load(Ordering::Acquire)
    }

    /// LSN up to which every record is on stable storage.
    pub(crate) fn durable_lsn(&self) -> u64 {
        self.durable_lsn.load(Ordering::Acquire)
    }

    /// Records that the record `lsn` has been written (to the OS) into the
    /// active segment, whose last record now ends at `end`.
    pub(crate) fn written(&self, lsn: u64, end: u64) {
        let mut tail = self.tail.lock();
        tail.written_lsn = lsn;
        tail.end = end;
        self.written_lsn.store(lsn, Ordering::Release);
    }

    /// Records that the writer rolled to a new active segment, `file` at
    /// `path`, whose records begin at `end` (after
    /// [`GroupCommit::write_staged`] wrote out the old one's).
    pub(crate) fn rolled(&self, file: Arc<dyn StorageFile>, path: PathBuf, end: u64) {
        let mut tail = self.tail.lock();
        tail.file = file;
        tail.path = path;
        tail.end = end;
    }

    /// Stages `frame`, appended at file offset `offset` of the active
    /// segment: the next batch writes it (under `Sync`, where the writer
    /// does not).
    pub(crate) fn stage(&self, offset: u64, frame: &[u8]) {
        let mut tail = self.tail.lock();
        let staged = &mut tail.staged;
        if staged.bytes.is_empty() {
            staged.at = offset;
        }
        debug_assert_eq!(staged.at + staged.bytes.len() as u64, offset, "staged records are contiguous");
        Arc::make_mut(&mut staged.bytes).extend_from_slice(frame);
    }

    /// The `len` bytes at `offset` of the active segment, if they are
    /// staged or being written (not yet readable from the file).
    pub(crate) fn read_staged(&self, offset: u64, len: usize) -> Option<Vec<u8>> {
        let tail = self.tail.lock();
        tail.staged.read(offset, len).or_else(|| tail.in_flight.as_ref()?.read(offset, len))
    }

    /// Writes what is staged or being written into the active segment
    /// itself (a roll, before it seals the segment; the drop of the
    /// shard). A batch writing the same bytes at the same time writes them
    /// again, which changes nothing.
    ///
    /// # Errors
    /// The write's I/O error, with the file's path.
    pub(crate) fn write_staged(&self) -> Result<()> {
        let mut tail = self.tail.lock();
        let pending = [tail.in_flight.take(), Some(std::mem::take(&mut tail.staged))];
        for staged in pending.iter().flatten().filter(|staged| !staged.bytes.is_empty()) {
            tail.file.write_all_at(&staged.bytes, staged.at).map_err(|error| Error::io("write", &tail.path, error))?;
        }
        Ok(())
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
            batches = match self.turn(&mut batches, lsn)? {
                Turn::Durable => return Ok(()),
                Turn::Wait(number) => self.done[parity(number)].wait(batches).unwrap_or_else(PoisonError::into_inner),
                Turn::Run => self.run_batch(batches),
            };
        }
    }

    /// One step of an async wait for `lsn` to be durable: it is, or a
    /// listener for the end of the batch that covers it (the caller awaits
    /// it, then asks again), or nobody else runs that batch.
    #[cfg(feature = "tokio")]
    pub(crate) fn turn_async(self: &Arc<Self>, lsn: u64) -> Result<AsyncTurn> {
        if self.durable_lsn() >= lsn {
            return Ok(AsyncTurn::Durable);
        }
        let mut batches = self.lock();
        Ok(match self.turn(&mut batches, lsn)? {
            Turn::Durable => AsyncTurn::Durable,
            // Listening under the lock: the batch ends under it before
            // its waiters are woken, so this listener is not missed.
            Turn::Wait(number) => AsyncTurn::Listen(self.done_async[parity(number)].listen()),
            Turn::Run => AsyncTurn::Block,
        })
    }

    /// What a waiter for `lsn` does next, decided under the batches' lock.
    /// Its own batch's failure is its error; a later one's is
    /// [`Error::Poisoned`].
    fn turn(self: &Arc<Self>, batches: &mut Batches, lsn: u64) -> Result<Turn> {
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
        if batches.running {
            if self.flusher_wanted && self.wake_flusher(batches) {
                batches.next_waiting += 1;
                return Ok(Turn::Wait(batches.number + 1));
            }
            // Nobody runs the next batch for this caller: it looks again
            // when this one ends (and may then run that one itself).
            return Ok(Turn::Wait(batches.number));
        }
        if batches.flusher == Flusher::Awake {
            // Between two batches: the flusher runs the next one.
            batches.next_waiting += 1;
            return Ok(Turn::Wait(batches.number + 1));
        }
        Ok(Turn::Run)
    }

    /// Makes sure the flusher runs the next batch: wakes it if idle,
    /// starts it if absent. False if the system refused its thread.
    fn wake_flusher(self: &Arc<Self>, batches: &mut Batches) -> bool {
        match batches.flusher {
            Flusher::Awake => true,
            Flusher::Idle => {
                batches.flusher = Flusher::Awake;
                self.work.notify_one();
                true
            }
            Flusher::Absent => {
                let commit = Arc::clone(self);
                let name = format!("idemkv-commit-{}", self.shard);
                let Ok(handle) = std::thread::Builder::new().name(name).spawn(move || commit.flush()) else {
                    return false;
                };
                batches.flusher = Flusher::Awake;
                *self.thread.lock() = Some(handle);
                true
            }
        }
    }

    /// The flusher thread: runs a batch whenever records wait to be synced
    /// (or waiters for the next batch), once a batch a caller runs has
    /// ended; sleeps otherwise; ends when the shard is dropped or poisoned.
    fn flush(&self) {
        let mut batches = self.lock();
        loop {
            if batches.stopping || self.is_poisoned() {
                batches.flusher = Flusher::Absent;
                return;
            }
            if batches.running {
                let number = batches.number;
                batches = self.done[parity(number)].wait(batches).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            if self.is_dirty() || batches.next_waiting > 0 {
                batches = self.run_batch(batches);
                continue;
            }
            batches.flusher = Flusher::Idle;
            batches = self.work.wait(batches).unwrap_or_else(PoisonError::into_inner);
            batches.flusher = Flusher::Awake;
        }
    }

    /// Runs one batch: begins it under the lock, fsyncs outside it, ends it
    /// under the lock again and wakes its waiters (after releasing the lock,
    /// so that they do not wake into it). Returns the lock, taken again.
    fn run_batch<'a>(&'a self, mut batches: MutexGuard<'a, Batches>) -> MutexGuard<'a, Batches> {
        let covered = self.cover();
        batches.number += 1;
        batches.running = true;
        batches.covering = covered.written_lsn;
        batches.next_waiting = 0;
        let batch = Batch { number: batches.number, covered };
        drop(batches);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.sync_batch(&batch.covered)));
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
        drop(batches);
        self.wake(batch.number);
        if self.is_poisoned() {
            // No batch runs after this one: its waiters learn so now.
            self.wake(batch.number + 1);
        }
        if let Some(panic) = panic {
            std::panic::resume_unwind(panic);
        }
        self.lock()
    }

    /// Wakes every waiter of batch `number`.
    fn wake(&self, number: u64) {
        self.done[parity(number)].notify_all();
        #[cfg(feature = "tokio")]
        self.done_async[parity(number)].notify(usize::MAX);
    }

    /// What a batch beginning now covers: everything written so far, its
    /// staged records now being written.
    fn cover(&self) -> Covered {
        let mut tail = self.tail.lock();
        let staged = std::mem::take(&mut tail.staged);
        let writes = (!staged.bytes.is_empty()).then_some(staged);
        tail.in_flight.clone_from(&writes);
        Covered {
            file: Arc::clone(&tail.file),
            path: tail.path.clone(),
            written_lsn: tail.written_lsn,
            end: tail.end,
            writes,
        }
    }

    /// One batch: the write of its staged records, the fsync of the active
    /// segment that makes every record it covers durable, then the durable
    /// mark.
    fn sync_batch(&self, tail: &Covered) -> std::result::Result<(), Failed> {
        if let Some(writes) = &tail.writes {
            if let Err(error) = tail.file.write_all_at(&writes.bytes, writes.at) {
                self.latch();
                return Err(Failed::new(tail.written_lsn, "write", &tail.path, &error));
            }
            // Written: readers find the records in the file from now on.
            let mut current = self.tail.lock();
            if current.in_flight.as_ref().is_some_and(|in_flight| Arc::ptr_eq(&in_flight.bytes, &writes.bytes)) {
                current.in_flight = None;
            }
        }
        if tail.written_lsn <= self.durable_lsn() {
            // Nothing new since the last fsync (or a roll synced it).
            return Ok(());
        }
        if let Err(error) = tail.file.sync() {
            self.latch();
            return Err(Failed::new(tail.written_lsn, "fsync", &tail.path, &error));
        }
        self.synced(tail.written_lsn);
        // Only now, after the fsync, is the mark true; it becomes durable
        // with the next one.
        let mark = Mark { synced_end: tail.end, round: self.round.fetch_add(1, Ordering::AcqRel) };
        if let Err(error) = tail.file.write_all_at(&mark.encode(), mark.offset()) {
            self.latch();
            return Err(Failed::new(tail.written_lsn, "write", &tail.path, &error));
        }
        Ok(())
    }

    /// Ends the flusher (the shard is being dropped) and waits for it to
    /// finish the batch it runs.
    pub(crate) fn shut_down(&self) {
        let mut batches = self.lock();
        batches.stopping = true;
        if batches.flusher == Flusher::Idle {
            self.work.notify_one();
        }
        drop(batches);
        let handle = self.thread.lock().take();
        if let Some(handle) = handle {
            if handle.thread().id() != std::thread::current().id() {
                let _panicked = handle.join();
            }
        }
        if !self.is_poisoned() {
            // Records nobody waited for (a caller gave up its wait) still
            // reach the file, as a `Buffered` store's would.
            let _unacknowledged = self.write_staged();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{GroupCommit, Tail};
    use crate::engine::telemetry::Counters;
    use crate::io::StorageFile;
    use parking_lot::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc::Receiver;
    use std::sync::Arc;
    use std::time::Duration;

    /// A log that knows what each fsync covered: `written` is the newest LSN
    /// written, and an fsync makes durable what was written when it began.
    /// The fsync numbered `fail_at` (from 1; 0 for none) fails, and
    /// `failed_covering` is then what it would have covered.
    #[derive(Debug, Default)]
    struct Log {
        written: AtomicU64,
        durable: AtomicU64,
        fsyncs: AtomicU64,
        fail_at: u64,
        failed_covering: AtomicU64,
    }

    impl StorageFile for Log {
        fn read_exact_at(&self, _buf: &mut [u8], _offset: u64) -> std::io::Result<()> {
            Ok(())
        }
        fn write_all_at(&self, _buf: &[u8], _offset: u64) -> std::io::Result<()> {
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
        /// A shard whose batches a flusher thread runs (`flusher`), or its
        /// waiting callers; its fsync numbered `fail_at` fails.
        fn new(flusher: bool, fail_at: u64) -> Arc<Self> {
            let log = Arc::new(Log { fail_at, ..Log::default() });
            let file: Arc<dyn StorageFile> = Arc::clone(&log) as Arc<dyn StorageFile>;
            let tail = Tail::new(file, "log".into(), 0, 0);
            let counters = Arc::new(Counters::new(0));
            let commit = Arc::new(GroupCommit::new(0, tail, 1, counters, flusher));
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
            if outcome.is_ok() {
                assert!(self.log.durable.load(Ordering::SeqCst) >= lsn, "record {lsn} acknowledged before its fsync");
            }
            outcome
        }
    }

    impl Drop for Shard {
        fn drop(&mut self) {
            self.commit.shut_down();
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

    /// Many callers write and wait, with a flusher thread and without:
    /// each returns only once an fsync that began after its write has
    /// ended, nobody is left waiting, and fsyncs are shared.
    #[test]
    fn every_caller_returns_durable_and_fsyncs_are_shared() {
        const CALLERS: u64 = 32;
        const ROUNDS: u64 = 200;
        for flusher in [true, false] {
            let shard = Shard::new(flusher, 0);
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
            assert!(fsyncs < records, "{fsyncs} fsyncs for {records} records: none shared (flusher: {flusher})");
            assert_eq!(shard.commit.durable_lsn(), records);
        }
    }

    /// A write that fails while callers wait (the writer poisons the
    /// shard, as after a failed `pwrite`), whether a batch runs or not:
    /// every caller returns, none acknowledged past what an fsync covered.
    #[test]
    fn a_poisoned_shard_leaves_nobody_waiting() {
        for flusher in [true, false] {
            for poison_at in (1..=64).chain([100, 200]) {
                let shard = Shard::new(flusher, 0);
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
        for flusher in [true, false] {
            for fail_at in [1, 2, 5, 20] {
                let shard = Shard::new(flusher, fail_at);
                let running = Arc::clone(&shard);
                let ends = run(16, move |_| loop {
                    let lsn = running.write(0);
                    if let Err(error) = running.sync_to(lsn) {
                        break (lsn, error);
                    }
                });
                let covering = shard.log.failed_covering.load(Ordering::SeqCst);
                let durable = shard.log.durable.load(Ordering::SeqCst);
                assert!(covering > durable, "the failed fsync covered nothing new");
                assert_eq!(shard.commit.durable_lsn(), durable, "acknowledged past the last good fsync");
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
}
