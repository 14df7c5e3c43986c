//! Group commit: how far a shard's log is written and durable, and one
//! fsync shared by every caller that waits for it. It lives outside the
//! shard's lock, so that callers wait for an fsync without holding up
//! writers.

use crate::engine::segment::header::Mark;
use crate::engine::telemetry::{bump, Counters};
use crate::error::{Error, Result};
use crate::events::event;
use crate::io::StorageFile;
use event_listener::{Event, EventListener, Listener};
use parking_lot::Mutex;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// The active segment and the newest written LSN, taken together under the
/// shard's lock: an fsync of `file` makes everything up to `written_lsn`
/// durable (a roll fsyncs the sealed segment itself).
#[derive(Debug)]
pub(crate) struct ActiveSnapshot {
    pub file: Arc<dyn StorageFile>,
    pub path: PathBuf,
    pub written_lsn: u64,
    /// The active segment's end when `written_lsn` was read.
    pub end: u64,
}

/// What a caller waiting for durability does next.
#[derive(Debug)]
pub(crate) enum Turn {
    /// The record is durable.
    Durable,
    /// Run the next fsync for everybody.
    Lead,
    /// Wait until woken, then ask again: by the end of the running fsync
    /// when it covers the record, else by the end of the next one (or by
    /// being handed the lead of the next one).
    Follow(EventListener),
}

/// Who runs the fsync for everybody, and which callers wait for which
/// fsync. Callers are woken only by the fsync that covers them: a record
/// written after the running fsync began waits for the next one, on the
/// other event, and one of those callers is handed the lead.
#[derive(Debug, Default)]
struct Round {
    /// Whether a caller runs (or has been handed) the fsync for everybody.
    leading: bool,
    /// The lead has been handed on, but nobody has taken it yet: the next
    /// caller to ask takes it.
    handed: bool,
    /// Every record up to this LSN is covered by the running fsync: it had
    /// been written when the lead was taken.
    covering: u64,
    /// Which of the two events the callers covered by the running fsync
    /// wait on; the other is for the callers of the next one.
    current: usize,
    /// Callers waiting for the next fsync.
    next_waiting: usize,
}

/// Ends a lead when dropped, even if the fsync failed or panicked: the
/// callers it covered are woken, and the lead is handed to a caller of the
/// next fsync, if any waits. After a failure everybody is woken (to learn
/// that the shard is poisoned).
struct EndLead<'a>(&'a GroupCommit);

impl Drop for EndLead<'_> {
    fn drop(&mut self) {
        let commit = self.0;
        let mut round = commit.round_state.lock();
        let covered = round.current;
        round.current ^= 1;
        let hand_on = round.next_waiting > 0 && !commit.is_poisoned() && !std::thread::panicking();
        round.next_waiting = 0;
        round.leading = hand_on;
        round.handed = hand_on;
        // Everything written by now is covered by the next fsync, which the
        // caller handed the lead starts after this.
        round.covering = commit.written_lsn.load(Ordering::Acquire);
        drop(round);
        commit.done[covered].notify(usize::MAX);
        commit.done[covered ^ 1].notify(if hand_on { 1 } else { usize::MAX });
    }
}

/// How far a shard's log is written and durable, and who is running the
/// fsync for everybody. A failed write or fsync poisons it: an fsync that
/// failed cannot be retried into success, so the shard refuses work until
/// the store is reopened.
#[derive(Debug)]
pub(crate) struct GroupCommit {
    shard: u32,
    /// Who leads, and who waits for which fsync.
    round_state: Mutex<Round>,
    /// Notified when an fsync ends: one event for the callers it covers,
    /// the other for those of the next one (see [`Round::current`]).
    done: [Event; 2],
    /// LSN of the newest record written to the operating system.
    written_lsn: AtomicU64,
    /// LSN up to which every record is on stable storage.
    durable_lsn: AtomicU64,
    poisoned: AtomicBool,
    /// The round of the next durable mark.
    round: AtomicU32,
}

impl GroupCommit {
    /// Everything up to `recovered_lsn` is already durable (recovery synced
    /// it); the next durable mark is of round `next_round`.
    pub(crate) fn new(shard: u32, recovered_lsn: u64, next_round: u32) -> Self {
        GroupCommit {
            shard,
            round_state: Mutex::new(Round::default()),
            done: [Event::new(), Event::new()],
            written_lsn: AtomicU64::new(recovered_lsn),
            durable_lsn: AtomicU64::new(recovered_lsn),
            poisoned: AtomicBool::new(false),
            round: AtomicU32::new(next_round),
        }
    }

    pub(crate) fn poison(&self) {
        if !self.poisoned.swap(true, Ordering::AcqRel) {
            event!(
                error,
                shard = self.shard,
                "shard poisoned: a write or fsync failed; every call on it now fails until the store is reopened"
            );
        }
        // A lead handed on but not yet taken will not be: nobody runs the
        // next fsync, so everybody waiting for it is woken, to learn that
        // the shard is poisoned. (A running lead wakes its callers itself
        // when it ends.)
        let mut round = self.round_state.lock();
        if round.handed {
            round.handed = false;
            round.leading = false;
            drop(round);
            for done in &self.done {
                done.notify(usize::MAX);
            }
        }
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

    /// Records that the record `lsn` has been written (to the OS).
    pub(crate) fn written(&self, lsn: u64) {
        self.written_lsn.store(lsn, Ordering::Release);
    }

    /// LSN of the newest record written.
    pub(crate) fn written_lsn(&self) -> u64 {
        self.written_lsn.load(Ordering::Acquire)
    }

    /// Records that everything up to `lsn` is durable.
    pub(crate) fn synced(&self, lsn: u64, counters: &Counters) {
        bump(&counters.fsyncs);
        let before = self.durable_lsn.fetch_max(lsn, Ordering::AcqRel);
        let batch = lsn.saturating_sub(before);
        counters.records_synced.add(batch);
        #[expect(clippy::cast_precision_loss, reason = "a batch is far below 2^52 records")]
        counters.fsync_batch.record(batch as f64);
    }

    /// Makes every record up to `lsn` durable, sharing fsyncs between
    /// callers: one caller at a time leads and fsyncs everything written so
    /// far; the others wait, each woken once, by the end of the fsync that
    /// covers its record. Records written while an fsync runs ride the
    /// next one, whose lead is handed to one of their callers. `active` gives
    /// the active segment (file and path) and the written LSN, read together
    /// under the shard's lock, so that a roll cannot slip between them.
    pub(crate) fn sync_to(&self, lsn: u64, counters: &Counters, active: impl Fn() -> ActiveSnapshot) -> Result<()> {
        let mut woken = false;
        loop {
            match self.turn(lsn, woken)? {
                Turn::Durable => return Ok(()),
                Turn::Lead => {
                    self.lead(counters, &active)?;
                    woken = false;
                }
                Turn::Follow(listener) => {
                    listener.wait();
                    woken = true;
                }
            }
        }
    }

    /// One step of waiting for `lsn` to be durable: it is already, or this
    /// caller must [`lead`](GroupCommit::lead) the next fsync, or it waits
    /// for the running one and asks again, `woken` (it may then be handed
    /// the lead). Blocking and async callers share
    /// this, so an async caller needs a thread only to lead.
    pub(crate) fn turn(&self, lsn: u64, woken: bool) -> Result<Turn> {
        if !woken && self.durable_lsn.load(Ordering::Acquire) >= lsn {
            return Ok(Turn::Durable);
        }
        let mut round = self.round_state.lock();
        if woken && round.handed && !self.is_poisoned() {
            // The lead was handed on to the callers of the next fsync, and
            // one of them was woken for it. Any woken caller takes it, even
            // one whose own record is durable already: the others wait for
            // it. (A caller that was not woken never takes it in passing,
            // so a leader cannot be kept leading round after round.)
            round.handed = false;
            return Ok(Turn::Lead);
        }
        if self.durable_lsn.load(Ordering::Acquire) >= lsn {
            return Ok(Turn::Durable);
        }
        if self.is_poisoned() {
            return Err(Error::Poisoned { shard: self.shard });
        }
        if round.handed {
            // Handed on, and nobody woken has taken it yet: this caller,
            // whose record is not durable, runs it.
            round.handed = false;
            return Ok(Turn::Lead);
        }
        if round.leading {
            // Listening under the lock: the lead ends under it before
            // notifying, so this listener is not missed.
            if lsn <= round.covering {
                return Ok(Turn::Follow(self.done[round.current].listen()));
            }
            round.next_waiting += 1;
            return Ok(Turn::Follow(self.done[round.current ^ 1].listen()));
        }
        round.leading = true;
        round.covering = self.written_lsn.load(Ordering::Acquire);
        Ok(Turn::Lead)
    }

    /// Runs the fsync this caller leads (after [`Turn::Lead`]), then ends
    /// the lead and wakes the followers, whatever the outcome.
    pub(crate) fn lead(&self, counters: &Counters, active: &impl Fn() -> ActiveSnapshot) -> Result<()> {
        let _end = EndLead(self);
        self.sync_written(counters, active)
    }

    /// One fsync of the active segment, covering every record written
    /// before it starts. Only the leader calls it.
    fn sync_written(&self, counters: &Counters, active: &impl Fn() -> ActiveSnapshot) -> Result<()> {
        let snapshot = active();
        if snapshot.written_lsn <= self.durable_lsn.load(Ordering::Acquire) {
            // A lead handed on to a caller whose record the last fsync
            // covered, with nothing written since.
            return Ok(());
        }
        if let Err(error) = snapshot.file.sync() {
            self.poison();
            return Err(Error::io("fsync", snapshot.path, error));
        }
        self.synced(snapshot.written_lsn, counters);
        // Only now, after the fsync, is the mark true; it becomes durable
        // with the next one.
        let mark = Mark { synced_end: snapshot.end, round: self.round.fetch_add(1, Ordering::AcqRel) };
        if let Err(error) = snapshot.file.write_all_at(&mark.encode(), mark.offset()) {
            self.poison();
            return Err(Error::io("write", snapshot.path, error));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{ActiveSnapshot, GroupCommit};
    use crate::engine::telemetry::Counters;
    use crate::io::StorageFile;
    use parking_lot::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc::Receiver;
    use std::sync::Arc;
    use std::time::Duration;

    /// A log that knows what each fsync covered: `written` is the newest LSN
    /// written, and an fsync makes durable what was written when it began.
    #[derive(Debug, Default)]
    struct Log {
        written: AtomicU64,
        durable: AtomicU64,
        fsyncs: AtomicU64,
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
            self.durable.fetch_max(covered, Ordering::SeqCst);
            self.fsyncs.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    /// One shard's log, its group commit and its writer's lock.
    struct Shard {
        log: Arc<Log>,
        commit: GroupCommit,
        counters: Counters,
        next: Mutex<u64>,
    }

    impl Shard {
        fn new() -> Arc<Self> {
            Arc::new(Shard {
                log: Arc::default(),
                commit: GroupCommit::new(0, 0, 1),
                counters: Counters::new(0),
                next: Mutex::new(0),
            })
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
            self.commit.written(*next);
            *next
        }

        /// Waits for `lsn`; the snapshot waits for the shard's lock, as a
        /// busy shard's does, so that callers write between a lead being
        /// taken and its snapshot.
        fn sync_to(&self, lsn: u64) -> crate::Result<()> {
            let active = || {
                std::thread::sleep(Duration::from_micros(50));
                let file: Arc<dyn StorageFile> = Arc::clone(&self.log) as Arc<dyn StorageFile>;
                ActiveSnapshot { file, path: "log".into(), written_lsn: self.commit.written_lsn(), end: 0 }
            };
            let outcome = self.commit.sync_to(lsn, &self.counters, active);
            if outcome.is_ok() {
                assert!(self.log.durable.load(Ordering::SeqCst) >= lsn, "record {lsn} acknowledged before its fsync");
            }
            outcome
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

    /// Many callers write and wait: each returns only once an fsync that
    /// began after its write has ended, nobody is left waiting, and fsyncs
    /// are shared.
    #[test]
    fn every_caller_returns_durable_and_fsyncs_are_shared() {
        const CALLERS: u64 = 32;
        const ROUNDS: u64 = 200;
        let shard = Shard::new();
        let writes = |caller: u64| ROUNDS / 2 + caller * ROUNDS / CALLERS;
        let running = Arc::clone(&shard);
        // Callers leave at different times: one handed the lead may have
        // nothing more to write.
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

    /// A write that fails while callers wait (the writer poisons the
    /// shard, as after a failed `pwrite`), whether a lead runs, is handed
    /// on or nobody leads: every caller returns, none acknowledged past
    /// what an fsync covered.
    #[test]
    fn a_poisoned_shard_leaves_nobody_waiting() {
        for poison_at in (1..=64).chain([100, 200]) {
            let shard = Shard::new();
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
