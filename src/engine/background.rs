//! Background threads that run a task at an interval, and the stop signal
//! an engine shares with them and with its compaction passes: set once, it
//! wakes every thread waiting on it, so close and drop never wait out a
//! sleep.

use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A one-way stop signal with interruptible waits.
#[derive(Debug, Default)]
pub(crate) struct Stop {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Stop {
    /// Sets the signal and wakes every waiter.
    pub(crate) fn stop(&self) {
        *self.stopped.lock() = true;
        self.wake.notify_all();
    }

    pub(crate) fn is_stopped(&self) -> bool {
        *self.stopped.lock()
    }

    /// Sleeps for `timeout` unless the signal is set first (or already);
    /// returns whether it is set.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let mut stopped = self.stopped.lock();
        match Instant::now().checked_add(timeout) {
            Some(deadline) => while !*stopped && !self.wake.wait_until(&mut stopped, deadline).timed_out() {},
            // A timeout too long for an `Instant` is as good as forever.
            None => {
                while !*stopped {
                    self.wake.wait(&mut stopped);
                }
            }
        }
        *stopped
    }
}

/// A periodic background task. Dropping it stops the thread (and sets the
/// shared stop signal) and waits for the task in progress to end.
#[derive(Debug)]
pub(crate) struct Worker {
    stop: Arc<Stop>,
    handle: Option<JoinHandle<()>>,
}

impl Worker {
    /// Runs `task` every `interval` until `stop` is set or until `task`
    /// returns false (its owner is gone).
    pub(crate) fn spawn(
        name: &str,
        interval: Duration,
        stop: Arc<Stop>,
        mut task: impl FnMut() -> bool + Send + 'static,
    ) -> std::io::Result<Self> {
        let thread_stop = Arc::clone(&stop);
        let handle = std::thread::Builder::new().name(name.to_string()).spawn(move || {
            while !thread_stop.wait(interval) {
                if !task() {
                    return;
                }
            }
        })?;
        Ok(Worker { stop, handle: Some(handle) })
    }

    /// Stops the thread and waits for it, unless called from the thread
    /// itself (the last store handle dropped inside the task), which then
    /// ends on its own at the next check.
    pub(crate) fn stop(&mut self) {
        self.stop.stop();
        if let Some(handle) = self.handle.take() {
            if handle.thread().id() != std::thread::current().id() {
                let _panicked = handle.join();
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn runs_until_stopped() {
        let runs = Arc::new(AtomicU32::new(0));
        let counter = Arc::clone(&runs);
        let mut worker = Worker::spawn("test", Duration::from_millis(1), Arc::default(), move || {
            counter.fetch_add(1, Ordering::SeqCst);
            true
        })
        .expect("spawn");
        while runs.load(Ordering::SeqCst) < 3 {
            std::thread::yield_now();
        }
        worker.stop();
        let after_stop = runs.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(runs.load(Ordering::SeqCst), after_stop);
    }

    #[test]
    fn task_can_end_itself() {
        let runs = Arc::new(AtomicU32::new(0));
        let counter = Arc::clone(&runs);
        let worker = Worker::spawn("test", Duration::from_millis(1), Arc::default(), move || {
            counter.fetch_add(1, Ordering::SeqCst);
            false
        })
        .expect("spawn");
        while runs.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(runs.load(Ordering::SeqCst), 1, "a task that returned false ran again");
        drop(worker);
    }

    #[test]
    fn a_long_wait_ends_at_the_stop() {
        let stop = Arc::new(Stop::default());
        let waiter = Arc::clone(&stop);
        let started = Instant::now();
        let sleeper = std::thread::spawn(move || waiter.wait(Duration::from_secs(3600)));
        std::thread::sleep(Duration::from_millis(20));
        stop.stop();
        assert!(sleeper.join().expect("join"), "the wait did not see the stop");
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(!Stop::default().wait(Duration::from_millis(1)), "a timeout is not a stop");
    }
}
