//! A scope's indexes on a standalone server: what lets a scope's scan read
//! that scope alone, and a relay's sweep the keys with staged messages
//! alone, whatever else the server keeps.
//!
//! A record's name is a digest of its scope and key, so nothing in the
//! names groups a scope. Each `(keyspace, scope)` therefore has three
//! sorted sets, named after a digest of the two
//! (`{prefix}:{keyspace:}scope:{digest}:keys`, `…:ends`, `…:staged`):
//!
//! - **keys**: every key with a live record, score 0, so in key order
//!   (bytewise): a page is `ZRANGE keys (after + BYLEX LIMIT 0 n`;
//! - **ends**: the same keys, scored by a bound of when the record stops
//!   being live (ms on the server's clock, at or after its end), so that
//!   the entries of records that lived out their time can be found without
//!   reading the others;
//! - **staged**: the keys whose Completed record carries staged messages
//!   (an answer that starts with the outbox's envelope mark), score 0.
//!
//! The claim's fast path, a transaction of bare commands, adds the key to
//! keys in the same transaction as the `SET` that writes its record (a key
//! there already stays as it is, so a replay changes nothing). Every script
//! that writes a record files it in the same step (`scripts`' `file`): its
//! bound in ends only grows (a completion within its lease keeps the
//! claim's bound; a key the fast path claimed gets its first there, and is
//! put in keys again in case an ended entry of its earlier record took it
//! out meanwhile), it is in staged while its completion carries messages,
//! and a record that stops being live (released, removed) leaves all
//! three. Each completion then drops up to two keys whose bound has passed,
//! so the indexes shrink as fast as they grow and hold what lived lately,
//! plus a lease at most. A key whose fast claim's holder died before any
//! script wrote it has no bound: it stays in keys until a scan meets it,
//! or a takeover files it.
//!
//! A page reads its keys from the index, then one script ([`PAGE`]) reads
//! their records and drops, in the same step, every key whose record is
//! not live (expired, gone, or another key's: a digest collision); a
//! page short of its limit with the index not at its end reads on. So a
//! scan costs what it returns, plus the keys of records that stopped being
//! live since a script last met them.
//!
//! On a Cluster each record sits in the slot of its own digest, and a
//! script may touch one slot alone: no index can be written with the
//! record there, so a Cluster keeps none, and its scans read every
//! record (`SCAN` of every master, [`super::scan`]).
//!
//! [`PAGE`]: super::scripts::PAGE

use super::connection::Call;
use super::reply::{bytes, protocol};
use super::{keyspace_part, push_hex16, Names, RedisBackend};
use crate::backend::remote::Address;
use crate::error::Result;
use crate::keyspace::Keyspace;
use crate::record::Record;
use ::redis::Value;
use sha2::{Digest, Sha256};

/// Keys a page's script reads at most at once.
const BATCH: usize = 256;

/// The names of one scope's indexes.
#[derive(Debug, Clone)]
pub(super) struct ScopeIndex {
    pub(super) keys: Vec<u8>,
    pub(super) ends: Vec<u8>,
    pub(super) staged: Vec<u8>,
}

impl ScopeIndex {
    /// The indexes of `scope` of `keyspace` under `prefix`.
    pub(super) fn of(prefix: &str, keyspace: Keyspace, scope: &[u8]) -> ScopeIndex {
        let mut hasher = Sha256::new();
        hasher.update(b"idemkv.redis.scope.v1");
        hasher.update([keyspace.to_byte()]);
        hasher.update(scope);
        let space = keyspace_part(keyspace);
        let mut base = Vec::with_capacity(prefix.len() + space.len() + 47);
        base.extend_from_slice(prefix.as_bytes());
        base.push(b':');
        base.extend_from_slice(space.as_bytes());
        base.extend_from_slice(b"scope:");
        push_hex16(&mut base, &hasher.finalize());
        base.push(b':');
        let name = |suffix: &[u8]| [&base[..], suffix].concat();
        ScopeIndex { keys: name(b"keys"), ends: name(b"ends"), staged: name(b"staged") }
    }

    /// The three, in the order the scripts take them.
    pub(super) fn all(&self) -> [&[u8]; 3] {
        [&self.keys, &self.ends, &self.staged]
    }
}

/// Which of a scope's records a page lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Of {
    /// Every live record.
    Every,
    /// The Completed records whose answer carries staged messages.
    Staged,
}

/// The page of `scope`'s records of `keyspace` after `after`, at most
/// `limit`, from its index (see the module docs).
pub(super) async fn page(
    backend: &RedisBackend,
    keyspace: Keyspace,
    scope: &[u8],
    (after, limit): (Option<&[u8]>, usize),
    of: Of,
) -> Result<Vec<Record>> {
    let index = ScopeIndex::of(&backend.prefix, keyspace, scope);
    let set = if of == Of::Staged { &index.staged } else { &index.keys };
    let mut after = after.map(<[u8]>::to_vec);
    let mut page = Vec::new();
    while page.len() < limit {
        let want = (limit - page.len()).min(BATCH);
        let keys = range(backend, set, after.as_deref(), want).await?;
        let Some(last) = keys.last().cloned() else { break };
        page.extend(read(backend, keyspace, scope, (&index, &keys), of).await?);
        if keys.len() < want {
            break;
        }
        after = Some(last);
    }
    Ok(page)
}

/// Up to `count` keys of the sorted set `set` after `after`, in order.
async fn range(backend: &RedisBackend, set: &[u8], after: Option<&[u8]>, count: usize) -> Result<Vec<Vec<u8>>> {
    let from = after.map_or_else(|| b"-".to_vec(), |after| [&b"("[..], after].concat());
    let mut command = ::redis::cmd("ZRANGE");
    command.arg(set).arg(from).arg("+").arg("BYLEX").arg("LIMIT").arg(0).arg(count);
    match backend.connection.command(&command).await? {
        Value::Array(keys) => keys.iter().map(bytes).collect(),
        _ => Err(protocol("ZRANGE: not an array")),
    }
}

/// The live records of `keys` (with `of`'s filter), through one run of
/// the page script, which drops the keys of records no longer live.
async fn read(
    backend: &RedisBackend,
    keyspace: Keyspace,
    scope: &[u8],
    (index, keys): (&ScopeIndex, &[Vec<u8>]),
    of: Of,
) -> Result<Vec<Record>> {
    let records: Vec<Vec<u8>> =
        keys.iter().map(|key| Names::of(&backend.prefix, Address { keyspace, scope, key }).record).collect();
    let mut names: Vec<&[u8]> = index.all().to_vec();
    names.extend(records.iter().map(Vec::as_slice));
    let mut call = Call::with_keys(&backend.scripts.page, &names);
    call.arg(scope).arg(if of == Of::Staged { "1" } else { "0" });
    for key in keys {
        call.arg(key.as_slice());
    }
    let Value::Array(fields) = backend.connection.invoke(&call).await? else {
        return Err(protocol("page: not an array"));
    };
    if fields.len() % 13 != 0 {
        return Err(protocol("page: not thirteen fields a record"));
    }
    fields
        .chunks_exact(13)
        .map(|fields| {
            let key = bytes(&fields[10])?;
            super::reply::record(Address { keyspace, scope, key: &key }, fields)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scope_and_keyspace_has_indexes_of_its_own() {
        let caller = ScopeIndex::of("idemkv", Keyspace::Caller, b"shop");
        assert!(caller.keys.starts_with(b"idemkv:scope:"), "{:?}", String::from_utf8_lossy(&caller.keys));
        assert!(caller.keys.ends_with(b":keys") && caller.ends.ends_with(b":ends"));
        assert!(caller.staged.ends_with(b":staged"));
        let other = ScopeIndex::of("idemkv", Keyspace::Caller, b"shop2");
        assert_ne!(caller.keys, other.keys);
        let relay = ScopeIndex::of("idemkv", Keyspace::Relay, b"shop");
        assert!(relay.keys.starts_with(format!("idemkv:{}:scope:", Keyspace::Relay.name()).as_bytes()));
        // No index is ever taken for a record: a record's name ends `:r`.
        assert!(caller.all().iter().all(|name| !name.ends_with(b":r")));
    }
}
