//! A background thread that runs a task at an interval and stops cleanly
//! when its owner is dropped or closed.

use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

#[derive(Debug, Default)]
struct Signal {
    stopped: Mutex<bool>,
    wake: Condvar,
}

/// A periodic background task. Dropping it stops the thread and waits for
/// the task in progress to end.
#[derive(Debug)]
pub(crate) struct Worker {
    signal: Arc<Signal>,
    handle: Option<JoinHandle<()>>,
}

impl Worker {
    /// Runs `task` every `interval` until stopped or until `task` returns
    /// false (its owner is gone).
    pub(crate) fn spawn(
        name: &str,
        interval: Duration,
        mut task: impl FnMut() -> bool + Send + 'static,
    ) -> std::io::Result<Self> {
        let signal = Arc::new(Signal::default());
        let thread_signal = Arc::clone(&signal);
        let handle = std::thread::Builder::new().name(name.to_string()).spawn(move || loop {
            {
                let mut stopped = thread_signal.stopped.lock();
                if !*stopped {
                    let _timed_out = thread_signal.wake.wait_for(&mut stopped, interval);
                }
                if *stopped {
                    return;
                }
            }
            if !task() {
                return;
            }
        })?;
        Ok(Worker { signal, handle: Some(handle) })
    }

    /// Stops the thread and waits for it, unless called from the thread
    /// itself (the last store handle dropped inside the task), which then
    /// ends on its own at the next check.
    pub(crate) fn stop(&mut self) {
        *self.signal.stopped.lock() = true;
        self.signal.wake.notify_all();
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
        let mut worker = Worker::spawn("test", Duration::from_millis(1), move || {
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
        let worker = Worker::spawn("test", Duration::from_millis(1), move || {
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
}
