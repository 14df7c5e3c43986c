//! A page of one scope's records ([`IdempotencyBackend::scan`]) on a
//! Cluster, which keeps no index of a scope (see [`super::index`]): a
//! record's name is a digest of its scope and key, so the page is found by
//! a `SCAN` of every record name on every master, a `GET` of each, a
//! thousand at a time, and the scope and key read from the value; the
//! matches are then read through the `get` script, which settles and
//! checks liveness as every read does. The migrations walk every record
//! the same way, once.
//!
//! [`IdempotencyBackend::scan`]: crate::backend::IdempotencyBackend::scan

use super::connection::Connection;
use super::reply::{backend_error, bytes, number, protocol};
use super::RedisBackend;
use crate::backend::remote::{Address, Transport};
use crate::error::Result;
use crate::keyspace::Keyspace;
use crate::record::Record;
use ::redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use ::redis::{cmd, Cmd, Value};

/// Names asked for, and values read, per round trip.
const BATCH: usize = 1000;

/// The page of `scope`'s live records of `keyspace` after `after`, at most
/// `limit`, of the records under `prefix`.
pub(super) async fn page_of(
    backend: &RedisBackend,
    connection: &Connection,
    prefix: &str,
    keyspace: Keyspace,
    (scope, after, limit): (&[u8], Option<&[u8]>, usize),
) -> Result<Vec<Record>> {
    let names = record_names(connection, prefix, keyspace).await?;
    let values = values(connection, &names).await?;
    let mut keys: Vec<Vec<u8>> = values
        .iter()
        .flatten()
        .filter_map(|value| scope_and_key(value))
        .filter(|(found, key)| *found == scope && after.is_none_or(|after| *key > after))
        .map(|(_, key)| key.to_vec())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let mut page = Vec::with_capacity(limit.min(keys.len()));
    for key in keys {
        if page.len() == limit {
            break;
        }
        if let Some(record) = Transport::get(backend, Address { keyspace, scope, key: &key }).await? {
            page.push(record);
        }
    }
    Ok(page)
}

/// [`page_of`]'s pages of the caller's `scope`, filtered to the
/// completions with staged messages, until `limit` are found or the scope
/// ends.
pub(super) async fn staged_of(
    backend: &RedisBackend,
    connection: &Connection,
    prefix: &str,
    scope: &[u8],
    (after, limit): (Option<&[u8]>, usize),
) -> Result<Vec<Record>> {
    let mut staged = Vec::new();
    let mut after = after.map(<[u8]>::to_vec);
    while staged.len() < limit {
        let page = page_of(backend, connection, prefix, Keyspace::Caller, (scope, after.as_deref(), BATCH)).await?;
        let Some(last) = page.last() else { break };
        after = Some(last.key.clone());
        let left = limit - staged.len();
        staged.extend(page.into_iter().filter(crate::backend::is_staged_completion).take(left));
    }
    Ok(staged)
}

/// `prefix` with the glob characters of `SCAN … MATCH` escaped.
fn escaped(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 8);
    for character in prefix.chars() {
        if matches!(character, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(character);
    }
    pattern
}

/// The names of every record of `keyspace` under `prefix`, on the server
/// or on every master of a Cluster.
pub(super) async fn record_names(connection: &Connection, prefix: &str, keyspace: Keyspace) -> Result<Vec<Vec<u8>>> {
    let pattern = format!("{}:{}{{*}}:r", escaped(prefix), super::keyspace_part(keyspace));
    let scan = |cursor: u64| {
        let mut command = cmd("SCAN");
        command.arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(BATCH);
        command
    };
    let mut names = Vec::new();
    match connection.clone() {
        Connection::Single(mut connection, _) => {
            let mut cursor = 0;
            loop {
                let reply = scan(cursor).query_async(&mut connection).await.map_err(backend_error)?;
                cursor = scanned(reply, &mut names)?;
                if cursor == 0 {
                    return Ok(names);
                }
            }
        }
        Connection::Cluster(mut cluster) => {
            for (server, _) in connection.each_master(&cmd("PING")).await? {
                let (host, port) = server
                    .rsplit_once(':')
                    .and_then(|(host, port)| Some((host.to_owned(), port.parse().ok()?)))
                    .ok_or_else(|| protocol("SCAN: a master without host:port"))?;
                let mut cursor = 0;
                loop {
                    let routing =
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host: host.clone(), port });
                    let reply = cluster.route_command(scan(cursor), routing).await.map_err(backend_error)?;
                    cursor = scanned(reply, &mut names)?;
                    if cursor == 0 {
                        break;
                    }
                }
            }
            Ok(names)
        }
    }
}

/// One `SCAN` answer: its names added to `names`, the next cursor.
fn scanned(reply: Value, names: &mut Vec<Vec<u8>>) -> Result<u64> {
    let Value::Array(parts) = reply else { return Err(protocol("SCAN: not an array")) };
    let [cursor, Value::Array(found)] = parts.as_slice() else { return Err(protocol("SCAN: not a cursor and names")) };
    for name in found {
        names.push(bytes(name)?);
    }
    number(cursor)
}

/// The raw values of `names` (`None` for a name gone meanwhile), a
/// batch at a time: one pipeline on a server; on a Cluster, whose client
/// refuses a pipeline across slots, the batch's `GET`s at once.
pub(super) async fn values(connection: &Connection, names: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
    let mut values = Vec::with_capacity(names.len());
    for batch in names.chunks(BATCH) {
        let answers = match connection {
            Connection::Single(..) => {
                let mut pipeline = ::redis::pipe();
                for name in batch {
                    pipeline.add_command(get(name));
                }
                connection.pipeline(&pipeline).await?
            }
            Connection::Cluster(cluster) => {
                let gets = batch.iter().map(|name| {
                    let mut cluster = cluster.clone();
                    async move { get(name).query_async::<Value>(&mut cluster).await.map_err(backend_error) }
                });
                futures_util::future::try_join_all(gets).await?
            }
        };
        for value in answers {
            values.push(match value {
                Value::Nil => None,
                value => Some(bytes(&value)?),
            });
        }
    }
    Ok(values)
}

fn get(name: &[u8]) -> Cmd {
    let mut command = cmd("GET");
    command.arg(name);
    command
}

/// The scope and key of a record's value as the scripts write it (a
/// `MessagePack` array: `[10]` scope, `[11]` key; see `scripts`), or
/// `None` for a value that is not one.
pub(super) fn scope_and_key(mut packed: &[u8]) -> Option<(&[u8], &[u8])> {
    fn text<'a>(input: &mut &'a [u8]) -> Option<&'a [u8]> {
        let length = usize::try_from(rmp::decode::read_str_len(input).ok()?).ok()?;
        let (text, rest) = (input.get(..length)?, input.get(length..)?);
        *input = rest;
        Some(text)
    }
    let input = &mut packed;
    if rmp::decode::read_array_len(input).ok()? < 11 {
        return None;
    }
    text(input)?;
    text(input)?;
    for _ in 3..=9 {
        let _: i64 = rmp::decode::read_int(input).ok()?;
    }
    Some((text(input)?, text(input)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_escapes_the_prefixs_glob_characters() {
        assert_eq!(escaped("idemkv"), "idemkv");
        assert_eq!(escaped("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }

    #[test]
    fn scope_and_key_are_read_from_a_packed_record_and_junk_is_none() {
        let mut packed = Vec::new();
        rmp::encode::write_array_len(&mut packed, 13).expect("len");
        for text in [&b"C"[..], &[7; 32]] {
            rmp::encode::write_str_len(&mut packed, u32::try_from(text.len()).expect("short")).expect("len");
            packed.extend_from_slice(text);
        }
        for number in [1_u64, 0, 1_700_000_000_000_000, 1, 2, 3, 4] {
            rmp::encode::write_uint(&mut packed, number).expect("number");
        }
        for text in [&b"tenant"[..], b"key-1", b"response", b""] {
            rmp::encode::write_str_len(&mut packed, u32::try_from(text.len()).expect("short")).expect("len");
            packed.extend_from_slice(text);
        }
        assert_eq!(scope_and_key(&packed), Some((&b"tenant"[..], &b"key-1"[..])));
        assert_eq!(scope_and_key(b"not msgpack"), None);
        assert_eq!(scope_and_key(&packed[..40]), None);
    }
}
