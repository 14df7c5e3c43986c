//! Passes over every record name of a server, or of every master of a
//! Cluster (`SCAN`), and the values of the names found, a thousand at a
//! time: what the migrations read (see [`super::migrate`]), once per
//! server. No call's path reads them: a scope's scan and a relay's sweep
//! read its indexes ([`super::index`]).

use super::connection::Connection;
use super::reply::{backend_error, bytes, number, protocol};
use crate::error::Result;
use crate::keyspace::Keyspace;
use ::redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use ::redis::{cmd, Cmd, Value};

/// Names asked for, and values read, per round trip.
const BATCH: usize = 1000;
/// `prefix` with the glob characters of `SCAN … MATCH` escaped.
pub(super) fn escaped(prefix: &str) -> String {
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
/// (in the names of [`Layout::Digest`]: a standalone server's, and a
/// Cluster's before it moved to buckets).
///
/// [`Layout::Digest`]: super::names::Layout::Digest
pub(super) async fn record_names(connection: &Connection, prefix: &str, keyspace: Keyspace) -> Result<Vec<Vec<u8>>> {
    names_matching(connection, format!("{}:{}{{*}}:r", escaped(prefix), super::names::keyspace_part(keyspace))).await
}

/// The names that match `pattern` (a `SCAN … MATCH` glob), on the server
/// or on every master of a Cluster.
pub(super) async fn names_matching(connection: &Connection, pattern: String) -> Result<Vec<Vec<u8>>> {
    let mut names = Vec::new();
    let mut scans = Scans::new(connection, pattern).await?;
    while scans.next(&mut names).await? {}
    Ok(names)
}

/// A `SCAN` of the names that match a pattern, on the server or master
/// after master of a Cluster.
struct Scans<'a> {
    connection: &'a Connection,
    pattern: String,
    /// The masters' host and port (none on a standalone server).
    masters: Vec<(String, u16)>,
    /// The master scanned (an index of `masters`).
    at: usize,
    cursor: u64,
}

impl<'a> Scans<'a> {
    async fn new(connection: &'a Connection, pattern: String) -> Result<Scans<'a>> {
        let mut masters = Vec::new();
        if connection.is_cluster() {
            for (server, _) in connection.each_master(&cmd("PING")).await? {
                let master = server
                    .rsplit_once(':')
                    .and_then(|(host, port)| Some((host.to_owned(), port.parse().ok()?)))
                    .ok_or_else(|| protocol("SCAN: a master without host:port"))?;
                masters.push(master);
            }
        }
        Ok(Scans { connection, pattern, masters, at: 0, cursor: 0 })
    }

    /// Adds the names of one more `SCAN` answer to `names`; whether there
    /// are more to scan.
    async fn next(&mut self, names: &mut Vec<Vec<u8>>) -> Result<bool> {
        let mut scan = cmd("SCAN");
        scan.arg(self.cursor).arg("MATCH").arg(&self.pattern).arg("COUNT").arg(BATCH);
        let reply = match self.connection.clone() {
            Connection::Single(mut connection, _) => scan.query_async(&mut connection).await.map_err(backend_error)?,
            Connection::Cluster(mut cluster) => {
                let Some((host, port)) = self.masters.get(self.at).cloned() else { return Ok(false) };
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
                cluster.route_command(scan, routing).await.map_err(backend_error)?
            }
        };
        self.cursor = scanned(reply, names)?;
        if self.cursor == 0 {
            self.at += 1;
        }
        Ok(self.cursor != 0 || self.at < self.masters.len())
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

    /// A record of `scope` and `key` packed as the scripts write it.
    fn packed(scope: &[u8], key: &[u8]) -> Vec<u8> {
        let mut packed = Vec::new();
        rmp::encode::write_array_len(&mut packed, 13).expect("len");
        for text in [&b"C"[..], &[7; 32]] {
            rmp::encode::write_str_len(&mut packed, u32::try_from(text.len()).expect("short")).expect("len");
            packed.extend_from_slice(text);
        }
        for number in [1_u64, 0, 1_700_000_000_000_000, 1, 2, 3, 4] {
            rmp::encode::write_uint(&mut packed, number).expect("number");
        }
        for text in [scope, key, b"response", b""] {
            rmp::encode::write_str_len(&mut packed, u32::try_from(text.len()).expect("short")).expect("len");
            packed.extend_from_slice(text);
        }
        packed
    }

    #[test]
    fn scope_and_key_are_read_from_a_packed_record_and_junk_is_none() {
        let packed = packed(b"tenant", b"key-1");
        assert_eq!(scope_and_key(&packed), Some((&b"tenant"[..], &b"key-1"[..])));
        assert_eq!(scope_and_key(b"not msgpack"), None);
        assert_eq!(scope_and_key(&packed[..40]), None);
    }
}
