//! The reaper: expired rows are absent to every call already (each
//! statement compares `expires_at` with the server's clock); deleting them
//! only keeps the table small. `reap` deletes one bounded batch, oldest
//! first through the `reap_at` index (a bound of `expires_at` from above:
//! see the schema's version 4), skipping rows that a claim holds locked; [`Reaper`] runs passes in the background for its caller.
//!
//! [`Elected`] is the reaper every backend starts by default
//! ([`Reaping`](super::Reaping)): one per fleet, on a session of its own
//! that takes a session-level advisory lock (`pg_try_advisory_lock`, one
//! key per schema). The instance whose session holds it reaps; the others
//! try again every interval. The lock lives exactly as long as that
//! session: when the instance stops, crashes or loses its connection the
//! server releases it and the next instance to try takes over.

use super::connector::Connector;
use super::options::Schema;
use super::PostgresBackend;
use sha2::{Digest, Sha256};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
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

/// How long the reaper's session may take to connect, and one of its
/// statements to answer, before the session is dropped (and with it the
/// lock, if held).
const SESSION_TIMEOUT: Duration = Duration::from_secs(30);

/// What the elected reaper of a backend shows its clones.
#[derive(Debug, Default)]
pub(super) struct Reaping {
    leading: AtomicBool,
    deleted: AtomicU64,
}

impl Reaping {
    /// Whether this backend's reaper holds the lock now.
    pub(super) fn leading(&self) -> bool {
        self.leading.load(Ordering::Acquire)
    }

    /// Rows this backend's reaper has deleted.
    pub(super) fn deleted(&self) -> u64 {
        self.deleted.load(Ordering::Acquire)
    }
}

/// The elected reaper of one backend (shared by its clones): a task with a
/// session of its own, holding the schema's reaper lock while it reaps. It
/// ends when the last clone drops; its session closes and the server
/// releases the lock for another instance to take.
#[derive(Debug)]
pub(super) struct Elected {
    task: tokio::task::JoinHandle<()>,
    pub(super) reaping: Arc<Reaping>,
}

impl Drop for Elected {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the reaper's session runs: its lock and its statement.
struct Plan {
    connect: tokio_postgres::Config,
    connector: Connector,
    lock: i64,
    reap: String,
    interval: Duration,
    batch: i32,
}

impl Elected {
    pub(super) fn spawn(
        mut connect: tokio_postgres::Config,
        connector: Connector,
        schema: &Schema,
        interval: Duration,
        batch: u32,
    ) -> Elected {
        // Named, so that operators see which session reaps.
        connect.application_name("idemkv-reaper");
        let plan = Plan {
            connect,
            connector,
            lock: lock_key(schema),
            reap: format!("SELECT {}($1)", schema.object("idemkv_reap")),
            interval,
            batch: i32::try_from(batch.max(1)).unwrap_or(i32::MAX),
        };
        let reaping = Arc::new(Reaping::default());
        let task = tokio::spawn(elect(plan, Arc::clone(&reaping)));
        Elected { task, reaping }
    }
}

/// The advisory lock key of `schema`'s reaper: the first 8 bytes of
/// SHA-256 of a label and the schema's name, so each store of a database
/// elects its own reaper and no other use of advisory locks (the
/// migration's among them) meets the key but by chance.
fn lock_key(schema: &Schema) -> i64 {
    let digest = Sha256::new().chain_update(b"idemkv reaper\0").chain_update(schema.name()).finalize();
    let mut key = [0; 8];
    key.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(key)
}

/// Session after session until the backend drops; between two, one
/// interval (the server away, a lost connection).
async fn elect(plan: Plan, reaping: Arc<Reaping>) {
    loop {
        session(&plan, &reaping).await;
        reaping.leading.store(false, Ordering::Release);
        tokio::time::sleep(plan.interval).await;
    }
}

/// One session: every interval, takes the lock if it does not hold it yet
/// and, while it holds it, runs a pass. Returns when the connection ends
/// or a statement fails or hangs.
async fn session(plan: &Plan, reaping: &Reaping) {
    let Ok(Ok(client)) = tokio::time::timeout(SESSION_TIMEOUT, plan.connector.connect(&plan.connect)).await else {
        return;
    };
    let work = async {
        loop {
            if !reaping.leading() {
                let Some(taken) = timed(client.query_one("SELECT pg_try_advisory_lock($1)", &[&plan.lock])).await
                else {
                    return;
                };
                reaping.leading.store(taken.try_get::<_, bool>(0).unwrap_or(false), Ordering::Release);
            }
            if reaping.leading() && !pass(&client, plan, reaping).await {
                return;
            }
            tokio::time::sleep(plan.interval).await;
        }
    };
    // The connection's end fails the next statement, which ends `work`.
    work.await;
}

/// Statement after statement while they come back full, up to
/// [`BATCHES_PER_PASS_MAX`]; `false` when one failed.
async fn pass(client: &tokio_postgres::Client, plan: &Plan, reaping: &Reaping) -> bool {
    for _ in 0..BATCHES_PER_PASS_MAX {
        let Some(row) = timed(client.query_one(&plan.reap, &[&plan.batch])).await else {
            return false;
        };
        let deleted = row.try_get::<_, i64>(0).ok().and_then(|deleted| u64::try_from(deleted).ok()).unwrap_or(0);
        reaping.deleted.fetch_add(deleted, Ordering::AcqRel);
        if deleted < u64::from(plan.batch.unsigned_abs()) {
            break;
        }
    }
    true
}

/// A statement's answer, or `None` when it failed or did not come in
/// [`SESSION_TIMEOUT`].
async fn timed<T>(call: impl Future<Output = Result<T, tokio_postgres::Error>>) -> Option<T> {
    tokio::time::timeout(SESSION_TIMEOUT, call).await.ok()?.ok()
}
