//! The reaper: expired rows are absent to every call already (each
//! statement compares `expires_at` with the server's clock); deleting them
//! only keeps the table small. `reap` deletes one bounded batch, oldest
//! expiry first through the `expires_at` index, skipping rows that a claim
//! holds locked; [`Reaper`] runs passes in the background.

use super::PostgresBackend;
use std::time::Duration;

/// Batches of one background pass at most: a pass that keeps finding full
/// batches yields to the next interval rather than running unbounded.
const BATCHES_PER_PASS_MAX: u32 = 1000;

/// A background task deleting expired rows (see
/// [`PostgresBackend::spawn_reaper`]); it stops when dropped.
#[derive(Debug)]
pub struct Reaper {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Reaper {
    pub(super) fn spawn(backend: PostgresBackend, interval: Duration, batch: u32) -> Reaper {
        let task = tokio::spawn(async move {
            loop {
                for _ in 0..BATCHES_PER_PASS_MAX {
                    // An error (the server away) waits for the next pass.
                    match backend.reap(batch).await {
                        Ok(deleted) if deleted >= u64::from(batch) => {}
                        _ => break,
                    }
                }
                tokio::time::sleep(interval).await;
            }
        });
        Reaper { task }
    }
}
