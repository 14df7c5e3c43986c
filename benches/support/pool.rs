//! Parked worker threads for criterion's `iter_custom`: the threads are
//! spawned once per bench function, and each batch of `iters` calls is
//! split among them while the caller times the wall clock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

pub struct Pool {
    threads: u64,
    start: Barrier,
    done: Barrier,
    batch: AtomicU64,
    stop: AtomicBool,
}

/// A panic on either side of a barrier would leave the other side waiting
/// for ever: abort instead.
struct AbortOnPanic;

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("a bench thread panicked; aborting");
            std::process::abort();
        }
    }
}

impl Pool {
    /// Wall time of `iters` calls of the pool's op, spread evenly over its
    /// threads (each keeps its own call counter `n` across batches).
    pub fn run(&self, iters: u64) -> Duration {
        self.batch.store(iters, Ordering::Release);
        let started = Instant::now();
        self.start.wait();
        self.done.wait();
        started.elapsed()
    }
}

/// Runs `body` with a pool of `threads` parked workers calling
/// `op(thread, n)`.
pub fn with_pool<R>(threads: usize, op: &(dyn Fn(usize, u64) + Sync), body: impl FnOnce(&Pool) -> R) -> R {
    let pool = Pool {
        threads: u64::try_from(threads).expect("thread count"),
        start: Barrier::new(threads + 1),
        done: Barrier::new(threads + 1),
        batch: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    };
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let pool = &pool;
            scope.spawn(move || {
                let _abort = AbortOnPanic;
                let index = u64::try_from(thread).expect("thread index");
                let mut n = 0;
                loop {
                    pool.start.wait();
                    if pool.stop.load(Ordering::Acquire) {
                        break;
                    }
                    let batch = pool.batch.load(Ordering::Acquire);
                    let share = batch / pool.threads + u64::from(index < batch % pool.threads);
                    for _ in 0..share {
                        op(thread, n);
                        n += 1;
                    }
                    pool.done.wait();
                }
            });
        }
        let _abort = AbortOnPanic;
        let result = body(&pool);
        pool.stop.store(true, Ordering::Release);
        pool.start.wait();
        result
    })
}
