//! What a server or Cluster of an earlier build holds, moved to where this
//! build looks, once, before the first call that names a record:
//!
//! - [`keyspaces`]: records of idemkv's own under caller's scopes;
//! - [`scopes`]: a standalone server's records filed in their scopes'
//!   indexes;
//! - [`buckets`]: a Cluster's records moved to their scopes' buckets.
//!
//! Keyspaces on a server of an earlier build: its records of idemkv's own
//! (holds, versions, inbox entries, dead letters, re-drive marks, relay
//! progress) are caller's records under `idemkv.hold/`-style scopes, named
//! `{prefix}:{tag}:r`. The first connect of a build that knows keyspaces
//! moves each to its keyspace's name (`{prefix}:{keyspace}:{tag}:r`) with
//! the prefix taken off its scope and its expiry kept — written there
//! unless a record is there already, then the old one deleted if it is
//! still what was read — and then sets `{prefix}:keyspaces`, so that later
//! connects read one key. Two instances migrating at once move each record
//! once; one cut short leaves the rest to the next connect.

use super::connection::{Call, Connection};
use super::names::{Layout, Names};
use super::scan;
use super::RedisBackend;
use crate::backend::remote::Address;
use crate::error::Result;
use crate::Keyspace;
use ::redis::{Script, Value};
use futures_util::future::try_join_all;

/// Writes a moved record: KEYS new name; ARGV the old value, the new
/// scope, its time to live in ms (0: none). The record's scope (`[10]`)
/// is the new one. Replies 1 when written, 0 when a record was there.
const PUT: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local r = cmsgpack.unpack(ARGV[1])
r[10] = ARGV[2]
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('SET', KEYS[1], cmsgpack.pack(r), 'PX', ttl)
else
  redis.call('SET', KEYS[1], cmsgpack.pack(r))
end
return 1
";

/// Deletes a moved record's old name if it still holds ARGV[1].
const DROP: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

/// Moves the records of idemkv's own to their keyspaces, once per server
/// and prefix; returns how many moved.
pub(super) async fn keyspaces(backend: &RedisBackend) -> Result<u64> {
    let connection = &backend.connection;
    let mark = format!("{}:keyspaces", backend.prefix);
    if single(connection, ::redis::cmd("EXISTS").arg(&mark)).await? == 1 {
        return Ok(0);
    }
    let names = scan::record_names(connection, &backend.prefix, Keyspace::Caller).await?;
    let values = scan::values(connection, &names).await?;
    let (put, drop) = (Script::new(PUT), Script::new(DROP));
    let mut moved = 0;
    for (name, value) in names.iter().zip(values) {
        let Some(value) = value else { continue };
        let Some((scope, key)) = scan::scope_and_key(&value) else { continue };
        let (keyspace, rest) = Keyspace::from_legacy_scope(scope);
        if !keyspace.is_internal() {
            continue;
        }
        let ttl = single(connection, ::redis::cmd("PTTL").arg(name)).await?;
        if ttl == -2 {
            continue;
        }
        // Where the build that knew keyspaces but not buckets put them: a
        // Cluster's records move on to their buckets next ([`buckets`]).
        let new = Names::of(&backend.prefix, Layout::Digest, Address { keyspace, scope: rest, key });
        let mut call = Call::new(&put, &new.record);
        call.arg(&value[..]).arg(rest).arg(ttl.max(0));
        connection.invoke(&call).await?;
        let mut call = Call::new(&drop, name);
        call.arg(&value[..]);
        connection.invoke(&call).await?;
        moved += 1;
    }
    single(connection, ::redis::cmd("SET").arg(&mark).arg(1)).await?;
    Ok(moved)
}

/// Files every live record of a standalone server in its scope's indexes
/// (see [`super::index`]), once per server and prefix: records written by
/// a build without the indexes are then found by scans and sweeps.
/// Guarded by `{prefix}:scopes`, set once every record is filed; two
/// instances filing at once file a record twice, which changes nothing,
/// and one cut short leaves the whole to the next connect. (A Cluster's
/// records are filed as they move to their buckets: see [`buckets`].)
/// Returns how many records were filed.
///
/// Records that instances of an earlier build write after this ran are
/// not filed (they are claimed, replayed and expire as ever; scans and
/// sweeps miss them): after a rolling upgrade, deleting
/// `{prefix}:scopes` has the next connect file them.
pub(super) async fn scopes(backend: &RedisBackend) -> Result<u64> {
    let connection = &backend.connection;
    let mark = format!("{}:scopes", backend.prefix);
    if single(connection, ::redis::cmd("EXISTS").arg(&mark)).await? == 1 {
        return Ok(0);
    }
    let script = Script::new(super::scripts::FILE);
    let mut filed = 0;
    for keyspace in Keyspace::ALL {
        let names = scan::record_names(connection, &backend.prefix, keyspace).await?;
        let values = scan::values(connection, &names).await?;
        let found: Vec<(Names, &[u8], &[u8])> = values
            .iter()
            .flatten()
            .filter_map(|value| scan::scope_and_key(value))
            .map(|(scope, key)| {
                (Names::filed(&backend.prefix, Layout::Digest, Address { keyspace, scope, key }), scope, key)
            })
            .collect();
        let keys: Vec<Vec<&[u8]>> = found.iter().map(|(names, _, _)| names.written()).collect();
        let calls: Vec<Call<'_>> = found
            .iter()
            .zip(&keys)
            .map(|((_, scope, key), keys)| {
                let mut call = Call::with_keys(&script, keys);
                call.arg(*scope).arg(*key);
                call
            })
            .collect();
        let answers = connection.invoke_all(&script, &calls).await?;
        filed += answers.iter().filter(|answer| matches!(answer, Value::Int(1))).count() as u64;
    }
    single(connection, ::redis::cmd("SET").arg(&mark).arg(1)).await?;
    Ok(filed)
}

/// Records a batch of the [`buckets`] migration moves at once.
const MOVES_AT_ONCE: usize = 256;

/// Moves a Cluster's records from the names earlier builds gave them
/// (each in the slot of its own digest, [`Layout::Digest`]) to their
/// scope's buckets ([`Layout::Buckets`]), each filed in its bucket's
/// indexes as it lands, once per Cluster and prefix: guarded by
/// `{prefix}:buckets`, set once every record moved. Each record is
/// written at its new name unless one is there already, with its expiry
/// kept, filed, and then its old name deleted if it still holds what was
/// read — so two instances moving at once move each record once, and one
/// cut short leaves the rest to the next connect. The staged keys earlier
/// builds kept apart on a Cluster (`{prefix}:staged:{…}:keys`, `…:marks`,
/// `…:seq`, and the mark `{prefix}:staged`) are deleted: the buckets'
/// indexes hold what they held. Returns how many records moved.
///
/// An instance of an earlier build looks for a record at its old name
/// only: a fleet on a Cluster upgrades all at once across this change
/// (a record an earlier build writes after the move is not seen by this
/// one; deleting `{prefix}:buckets` has the next connect move it).
pub(super) async fn buckets(backend: &RedisBackend) -> Result<u64> {
    let connection = &backend.connection;
    let mark = format!("{}:buckets", backend.prefix);
    if single(connection, ::redis::cmd("EXISTS").arg(&mark)).await? == 1 {
        return Ok(0);
    }
    let scripts = [Script::new(PUT), Script::new(super::scripts::FILE), Script::new(DROP)];
    let mut moved = 0;
    for keyspace in Keyspace::ALL {
        let names = scan::record_names(connection, &backend.prefix, keyspace).await?;
        for batch in names.chunks(MOVES_AT_ONCE) {
            let values = scan::values(connection, batch).await?;
            let batch_moves = batch.iter().zip(&values).filter_map(|(old, value)| {
                let value = value.as_deref()?;
                let (scope, key) = scan::scope_and_key(value)?;
                Some(move_to_bucket(backend, &scripts, old, (value, Address { keyspace, scope, key })))
            });
            moved += try_join_all(batch_moves).await?.into_iter().filter(|&moved| moved).count() as u64;
        }
    }
    let pattern = format!("{}:staged:{{*}}:*", scan::escaped(&backend.prefix));
    let staged = scan::names_matching(connection, pattern).await?;
    let deletes: Vec<::redis::Cmd> = staged.iter().map(|name| ::redis::cmd("DEL").arg(name).clone()).collect();
    try_join_all(deletes.iter().map(|delete| single(connection, delete))).await?;
    single(connection, ::redis::cmd("DEL").arg(format!("{}:staged", backend.prefix))).await?;
    single(connection, ::redis::cmd("SET").arg(&mark).arg(1)).await?;
    Ok(moved)
}

/// Moves the record at `old`, read as `value`, to its bucket at
/// `address` (see [`buckets`]): whether it moved (`false` when it was
/// gone meanwhile).
async fn move_to_bucket(
    backend: &RedisBackend,
    [put, file, drop]: &[Script; 3],
    old: &[u8],
    (value, address): (&[u8], Address<'_>),
) -> Result<bool> {
    let connection = &backend.connection;
    let ttl = single(connection, ::redis::cmd("PTTL").arg(old)).await?;
    if ttl == -2 {
        return Ok(false);
    }
    let new = Names::filed(&backend.prefix, Layout::Buckets, address);
    let mut call = Call::new(put, &new.record);
    call.arg(value).arg(address.scope).arg(ttl.max(0));
    connection.invoke(&call).await?;
    let mut call = Call::with_keys(file, &new.written());
    call.arg(address.scope).arg(address.key);
    connection.invoke(&call).await?;
    let mut call = Call::new(drop, old);
    call.arg(value);
    connection.invoke(&call).await?;
    Ok(true)
}

/// One command's integer answer (0 for any other, such as `OK`).
async fn single(connection: &Connection, command: &::redis::Cmd) -> Result<i64> {
    match connection.command(command).await? {
        Value::Int(number) => Ok(number),
        _ => Ok(0),
    }
}
