//! Format 2 to format 3: keyspaces.
//!
//! Format 2 kept idemkv's own records among the caller's, under scopes
//! `idemkv.hold/<scope>`, `idemkv.version/<scope>`, `idemkv.inbox/<consumer>`,
//! `idemkv.dead/<consumer>`, `idemkv.redrive/<consumer>` and
//! `idemkv.relay/<scope>`; format 3 gives each kind a keyspace of its own
//! (the frame's keyspace byte, see [`crate::keyspace`]). The first writable
//! open of a format-2 store moves every live record under those prefixes to
//! its keyspace — written there first, at its new shard's next LSN (its
//! fencing token too), then taken out of the caller's with a tombstone —
//! makes every shard durable, and only then writes the manifest of format
//! 3. A crash before that leaves a format-2 store that the next open
//! migrates again: a record already moved is kept as it is, and its old
//! one taken out. A read-only open of a format-2 store migrates nothing and
//! shows those records as the caller's; a build before format 3 does not
//! open a format-3 store (its manifest says 3).

use super::Engine;
use crate::error::Result;
use crate::keyspace::Keyspace;

/// Moves format 2's records of idemkv's own into their keyspaces; returns
/// how many moved.
pub(crate) fn keyspaces(engine: &Engine) -> Result<u64> {
    let mut moved = 0;
    for shard in &*engine.shards {
        for (scope, key) in shard.legacy_keys()? {
            let (keyspace, rest) = Keyspace::from_legacy_scope(&scope);
            let old = engine.key_ref(Keyspace::Caller, &scope, &key)?;
            let new = engine.key_ref(keyspace, rest, &key)?;
            let Some(lying) = shard.lying(&old)? else { continue };
            engine.shard_of_hash(new.hash).put_in(&new, &lying)?;
            shard.take_out(&old)?;
            moved += 1;
        }
    }
    Ok(moved)
}
