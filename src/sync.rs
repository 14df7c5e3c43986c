//! Durability beyond one call: the fan-out that fsyncs every dirty shard in
//! one round ([`crate::Store::sync`], close), and the background flusher of
//! [`crate::Durability::Interval`].

use crate::background::Worker;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::shard::Shard;
use std::sync::Arc;
use std::time::Duration;

/// Syncs every shard with unsynced records, all in one round: the fsyncs of
/// different shard files run at the same time, not one after another.
pub(crate) fn sync_dirty(shards: &[Shard]) -> Result<()> {
    let dirty: Vec<&Shard> = shards.iter().filter(|shard| shard.is_dirty()).collect();
    match dirty.as_slice() {
        [] => Ok(()),
        [only] => only.sync_all(),
        _ => std::thread::scope(|scope| {
            let running: Vec<_> = dirty.iter().map(|shard| scope.spawn(|| shard.sync_all())).collect();
            running
                .into_iter()
                .try_for_each(|handle| handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
        }),
    }
}

/// Starts the thread that fsyncs dirty shards every `interval`. It holds
/// only a weak reference, so dropping the last handle ends it.
pub(crate) fn start_flusher(engine: &Arc<Engine>, interval: Duration) -> Result<()> {
    let weak = Arc::downgrade(engine);
    let worker = Worker::spawn("idemkv-flush", interval, move || {
        let Some(engine) = weak.upgrade() else {
            return false;
        };
        // A failed fsync poisons its shard, which then answers every call
        // with Error::Poisoned: the failure is not lost.
        let _latched = sync_dirty(&engine.shards);
        true
    })
    .map_err(|error| Error::io("spawn flusher", &engine.dir, error))?;
    engine.workers.lock().push(worker);
    Ok(())
}
