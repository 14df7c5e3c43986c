//! Durability beyond one call: the fan-out that fsyncs every dirty shard in
//! one round ([`crate::Store::sync`], close), and the background flusher of
//! [`crate::Durability::Interval`].
//!
//! Threads: a caller of `sync` waits for the round, so its shards' fsyncs
//! overlap on scoped helper threads, and a helper the system refuses is no
//! error — the calling thread fsyncs that shard itself. The flusher spawns
//! nothing: it fsyncs the dirty shards one after another on its own thread.
//! Its round is on nobody's path (callers of `Interval` never wait for it),
//! so overlapping fsyncs would only shorten a round of a few milliseconds
//! per shard, at the price of a thread per dirty shard per tick — hundreds
//! a second at short intervals, each a chance to be refused.

use crate::engine::background::Worker;
use crate::engine::shard::Shard;
use crate::engine::Engine;
use crate::error::{Error, Result};
use std::sync::Arc;
use std::time::Duration;

/// Syncs every shard with unsynced records (or records its durable mark
/// does not cover yet), all in one round: the fsyncs of
/// different shard files run at the same time, not one after another (one
/// on the calling thread, the others on helpers; see the module docs).
/// Every dirty shard is synced; the first error is returned.
pub(crate) fn sync_dirty(shards: &[Shard]) -> Result<()> {
    let dirty: Vec<&Shard> = shards.iter().filter(|shard| shard.needs_sync()).collect();
    let Some((first, rest)) = dirty.split_first() else {
        return Ok(());
    };
    std::thread::scope(|scope| {
        let mut refused = Vec::new();
        let mut helpers = Vec::new();
        for shard in rest {
            let spawned =
                std::thread::Builder::new().name("idemkv-sync".into()).spawn_scoped(scope, || shard.sync_all());
            match spawned {
                Ok(helper) => helpers.push(helper),
                Err(_refused) => refused.push(*shard),
            }
        }
        let mut outcome = first.sync_all();
        for shard in refused {
            outcome = outcome.and(shard.sync_all());
        }
        for helper in helpers {
            outcome = outcome.and(helper.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
        }
        outcome
    })
}

/// Syncs every shard with unsynced records, one after another, on the
/// calling thread. Every dirty shard is synced; the first error is returned.
fn sync_each(shards: &[Shard]) -> Result<()> {
    let mut outcome = Ok(());
    for shard in shards.iter().filter(|shard| shard.needs_sync()) {
        outcome = outcome.and(shard.sync_all());
    }
    outcome
}

/// Starts the thread that fsyncs dirty shards every `interval`. It holds
/// only a weak reference, so dropping the last handle ends it.
pub(crate) fn start_flusher(engine: &Arc<Engine>, interval: Duration) -> Result<()> {
    let weak = Arc::downgrade(engine);
    let worker = Worker::spawn("idemkv-flush", interval, Arc::clone(&engine.stop), move || {
        let Some(engine) = weak.upgrade() else {
            return false;
        };
        // A failed fsync poisons its shard, which then answers every call
        // with Error::Poisoned: the failure is not lost.
        let _latched = sync_each(&engine.shards);
        true
    })
    .map_err(|error| Error::io("spawn flusher", &engine.dir, error))?;
    engine.workers.lock().push(worker);
    Ok(())
}
