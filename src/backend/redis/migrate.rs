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
use super::scan;
use super::{Names, RedisBackend};
use crate::backend::remote::Address;
use crate::error::Result;
use crate::Keyspace;
use ::redis::{Script, Value};

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
        let new = Names::of(&backend.prefix, Address { keyspace, scope: rest, key });
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

/// Files every live record of the server in its scope's indexes (see
/// [`super::index`]), once per server and prefix: records written by a
/// build without the indexes are then found by scans and sweeps. Guarded
/// by `{prefix}:scopes`, set once every record is filed; two instances
/// filing at once file a record twice, which changes nothing, and one cut
/// short leaves the whole to the next connect. A Cluster keeps no
/// scope's index but its staged keys: see [`staged_on_cluster`]. Returns
/// how many records were filed.
///
/// Records that instances of an earlier build write after this ran are
/// not filed (they are claimed, replayed and expire as ever; scans and
/// sweeps miss them): after a rolling upgrade, deleting
/// `{prefix}:scopes` has the next connect file them.
pub(super) async fn scopes(backend: &RedisBackend) -> Result<u64> {
    let connection = &backend.connection;
    if connection.is_cluster() {
        return staged_on_cluster(backend).await;
    }
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
                (Names::filed(&backend.prefix, Address { keyspace, scope, key }, connection), scope, key)
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

/// Files every completion with staged messages of a Cluster among its
/// scope's staged keys (see [`super::staged`]), once per Cluster and
/// prefix (`{prefix}:staged`), so that a sweep finds the messages a build
/// without them staged. Returns how many were filed.
async fn staged_on_cluster(backend: &RedisBackend) -> Result<u64> {
    let connection = &backend.connection;
    let mark = format!("{}:staged", backend.prefix);
    if single(connection, ::redis::cmd("EXISTS").arg(&mark)).await? == 1 {
        return Ok(0);
    }
    let names = scan::record_names(connection, &backend.prefix, Keyspace::Caller).await?;
    let values = scan::values(connection, &names).await?;
    let mut filed = 0;
    for (scope, key) in values.iter().flatten().filter_map(|value| scan::scope_and_key(value)) {
        let address = Address { keyspace: Keyspace::Caller, scope, key };
        let staged = backend.read(address).await?.is_some_and(|record| crate::backend::is_staged_completion(&record));
        if staged {
            super::staged::file(backend, scope, key).await?;
            filed += 1;
        }
    }
    single(connection, ::redis::cmd("SET").arg(&mark).arg(1)).await?;
    Ok(filed)
}

/// One command's integer answer (0 for any other, such as `OK`).
async fn single(connection: &Connection, command: &::redis::Cmd) -> Result<i64> {
    match connection.command(command).await? {
        Value::Int(number) => Ok(number),
        _ => Ok(0),
    }
}
