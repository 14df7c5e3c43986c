//! A Cluster's keys with staged messages: what lets a relay's sweep on a
//! Cluster read what is pending, not every record the Cluster keeps.
//!
//! On a Cluster a script may touch one slot alone, and a record sits in
//! the slot of its own digest, so no script can file it in an index of its
//! scope as a standalone server's scripts do (see [`super::index`]). The
//! client files it instead, in a step of its own *before* the completion
//! that stages messages, so the index holds at least every key with
//! staged messages (a superset): per scope, in the slot of a digest of the
//! scope (`{prefix}:staged:{{digest}}:keys`, `…:marks`, `…:seq`),
//!
//! - **keys**: the keys filed, score 0, so in key order (bytewise);
//! - **marks**: each key's mark, a number the server counts up at each
//!   filing (`…:seq`), so that two filings of one key are told apart.
//!
//! A sweep's page reads its keys and their marks, then each key's record
//! (one `get` each, at once). A completion with staged messages is
//! listed; a Processing record keeps its entry (its completion may stage
//! messages); any other (gone, delivered, failed) has its entry dropped,
//! by a script that drops it only if its mark is still the one read. A
//! filing that comes between the read of the mark and the drop changes
//! the mark, so its entry stays: a key filed before its completion is
//! never dropped before a sweep has seen that completion.
//!
//! A page costs its keys, plus the keys delivered or ended since the last
//! sweep met them. A completion that stages messages costs one more round
//! trip on a Cluster.

use super::connection::Call;
use super::reply::{bytes, number, protocol};
use super::{hex16, RedisBackend};
use crate::backend::remote::Address;
use crate::error::Result;
use crate::keyspace::Keyspace;
use crate::record::{Record, State};
use ::redis::Value;
use sha2::{Digest, Sha256};

/// Files a key: KEYS keys, marks, seq; ARGV the key. Replies its mark.
pub(super) const FILE: &str = r"
local mark = redis.call('INCR', KEYS[3])
redis.call('ZADD', KEYS[1], 0, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], mark)
return mark
";

/// Drops a key if its mark is still ARGV[2]: KEYS keys, marks; ARGV the
/// key, the mark read. Replies 1 when dropped.
pub(super) const DROP: &str = r"
if tostring(redis.call('HGET', KEYS[2], ARGV[1])) == ARGV[2] then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  return 1
end
return 0
";

/// Keys a page reads at most at once.
const BATCH: usize = 256;

/// The names of one scope's staged keys on a Cluster, all in one slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StagedKeys {
    keys: Vec<u8>,
    marks: Vec<u8>,
    seq: Vec<u8>,
}

impl StagedKeys {
    /// The staged keys of the caller's `scope` under `prefix`.
    pub(super) fn of(prefix: &str, scope: &[u8]) -> StagedKeys {
        let mut hasher = Sha256::new();
        hasher.update(b"idemkv.redis.staged.v1");
        hasher.update(scope);
        let digest = hex16(&hasher.finalize());
        let name = |suffix: &str| format!("{prefix}:staged:{{{digest}}}:{suffix}").into_bytes();
        StagedKeys { keys: name("keys"), marks: name("marks"), seq: name("seq") }
    }
}

/// Files `key` of the caller's `scope` among the staged keys, before the
/// completion that stages its messages.
pub(super) async fn file(backend: &RedisBackend, scope: &[u8], key: &[u8]) -> Result<()> {
    let names = StagedKeys::of(&backend.prefix, scope);
    let mut call = Call::with_keys(&backend.scripts.staged_file, &[&names.keys, &names.marks, &names.seq]);
    call.arg(key);
    backend.connection.invoke(&call).await.map(drop)
}

/// The page of the caller's `scope`'s completions with staged messages
/// after `after`, at most `limit`, from its staged keys (see the module
/// docs).
pub(super) async fn page(
    backend: &RedisBackend,
    scope: &[u8],
    (after, limit): (Option<&[u8]>, usize),
) -> Result<Vec<Record>> {
    let names = StagedKeys::of(&backend.prefix, scope);
    let mut after = after.map(<[u8]>::to_vec);
    let mut page = Vec::new();
    while page.len() < limit {
        let keys = range(backend, &names, after.as_deref()).await?;
        let Some(last) = keys.last().map(|(key, _)| key.clone()) else { break };
        let records = futures_util::future::try_join_all(
            keys.iter().map(|(key, _)| backend.read(Address { keyspace: Keyspace::Caller, scope, key })),
        )
        .await?;
        for ((key, mark), record) in keys.iter().zip(records) {
            match record {
                Some(record) if crate::backend::is_staged_completion(&record) => {
                    if page.len() < limit {
                        page.push(record);
                    }
                }
                Some(record) if record.state == State::Processing => {}
                _ => drop_if_unchanged(backend, &names, key, mark.as_deref()).await?,
            }
        }
        if keys.len() < BATCH {
            break;
        }
        after = Some(last);
    }
    Ok(page)
}

/// Up to [`BATCH`] staged keys after `after`, in order, each with its mark
/// (`None` for a key without one).
async fn range(
    backend: &RedisBackend,
    names: &StagedKeys,
    after: Option<&[u8]>,
) -> Result<Vec<(Vec<u8>, Option<Vec<u8>>)>> {
    let from = after.map_or_else(|| b"-".to_vec(), |after| [&b"("[..], after].concat());
    let mut command = ::redis::cmd("ZRANGE");
    command.arg(&names.keys).arg(from).arg("+").arg("BYLEX").arg("LIMIT").arg(0).arg(BATCH);
    let keys: Vec<Vec<u8>> = match backend.connection.command(&command).await? {
        Value::Array(keys) => keys.iter().map(bytes).collect::<Result<_>>()?,
        _ => return Err(protocol("ZRANGE: not an array")),
    };
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut command = ::redis::cmd("HMGET");
    command.arg(&names.marks);
    for key in &keys {
        command.arg(key.as_slice());
    }
    let Value::Array(marks) = backend.connection.command(&command).await? else {
        return Err(protocol("HMGET: not an array"));
    };
    if marks.len() != keys.len() {
        return Err(protocol("HMGET: not a mark a key"));
    }
    let marks = marks.iter().map(|mark| match mark {
        Value::Nil => Ok(None),
        Value::Int(mark) => Ok(Some(mark.to_string().into_bytes())),
        mark => bytes(mark).map(Some),
    });
    keys.into_iter().zip(marks).map(|(key, mark)| Ok((key, mark?))).collect()
}

/// Drops `key`'s entry if its mark is still `mark` (a key without one is
/// dropped if it still has none).
async fn drop_if_unchanged(backend: &RedisBackend, names: &StagedKeys, key: &[u8], mark: Option<&[u8]>) -> Result<()> {
    let mut call = Call::with_keys(&backend.scripts.staged_drop, &[&names.keys, &names.marks]);
    // `tostring` of a missing field is "false", which no mark is.
    call.arg(key).arg(mark.unwrap_or(b"false"));
    let answer = backend.connection.invoke(&call).await?;
    number(&answer).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scope_has_staged_keys_of_its_own_in_one_slot() {
        let shop = StagedKeys::of("idemkv", b"shop");
        let name = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).expect("utf-8");
        let (keys, marks, seq) = (name(&shop.keys), name(&shop.marks), name(&shop.seq));
        assert!(keys.starts_with("idemkv:staged:{") && keys.ends_with("}:keys"), "{keys}");
        let tag = |name: &str| name[name.find('{').expect("{")..=name.find('}').expect("}")].to_owned();
        assert_eq!(tag(&keys), tag(&marks));
        assert_eq!(tag(&keys), tag(&seq));
        assert_ne!(StagedKeys::of("idemkv", b"shop2"), shop);
        assert_ne!(StagedKeys::of("other", b"shop"), shop);
        // No record's name ends `:r`, and none is a standalone index's.
        assert!([keys, marks, seq].iter().all(|name| !name.ends_with(":r") && !name.contains(":scope:")));
    }
}
