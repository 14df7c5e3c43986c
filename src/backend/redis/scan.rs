//! A page of one scope's records ([`IdempotencyBackend::scan`]) on a
//! Cluster, which keeps no index of a scope (see [`super::index`]): a
//! record's name is a digest of its scope and key, so a scope's keys are
//! found by a pass over every record name on every master (`SCAN`), a
//! `GET` of each, a thousand at a time, and the scope and key read from
//! the value. A pass keeps the smallest keys after the page's cursor, up
//! to a window of them, and the next pages read their keys from it (see
//! [`page_of`]); each key is then read through the `get` script, which
//! settles and checks liveness as every read does. The migrations walk
//! every record the same way, once. (A relay's sweep on a Cluster reads
//! its staged keys instead: see [`super::staged`].)
//!
//! [`IdempotencyBackend::scan`]: crate::backend::IdempotencyBackend::scan

use super::connection::Connection;
use super::reply::{backend_error, bytes, number, protocol};
use super::RedisBackend;
use crate::backend::remote::Address;
use crate::error::Result;
use crate::keyspace::Keyspace;
use crate::record::Record;
use ::redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use ::redis::{cmd, Cmd, Value};
use std::collections::BTreeSet;

/// Names asked for, and values read, per round trip.
const BATCH: usize = 1000;
/// Keys of a scope one pass over a Cluster's records keeps at most.
const WINDOW: usize = 65_536;

/// A scope's keys found by one pass over a Cluster's records: the smallest
/// [`WINDOW`] keys after the page's cursor, in order.
#[derive(Debug)]
struct Window {
    keys: Vec<Vec<u8>>,
    /// Whether the pass found no key after the last of `keys`.
    to_the_end: bool,
}

impl Window {
    /// Up to `limit` of its keys after `after`, and whether they reach the
    /// scope's end.
    fn after(&self, after: Option<&[u8]>, limit: usize) -> (Vec<Vec<u8>>, bool) {
        let start = after.map_or(0, |after| self.keys.partition_point(|key| key.as_slice() <= after));
        let keys: Vec<Vec<u8>> = self.keys[start..].iter().take(limit).cloned().collect();
        let exhausted = start + keys.len() == self.keys.len();
        (keys, exhausted && self.to_the_end)
    }
}

/// The page of `scope`'s live records of `keyspace` after `after`, at most
/// `limit`, on a Cluster. A record's name says nothing of its scope, so
/// its keys are found by a pass over every record of every master (a
/// `SCAN`, a `GET` of each, the scope and key read from the value); a pass
/// keeps the smallest [`WINDOW`] keys of the scope after `after` (its
/// memory bounded whatever the Cluster keeps), and the page reads its
/// keys from it: a page costs one pass per [`WINDOW`] keys it returns.
/// No window outlives its page: a page's keys are those live when it
/// starts, whatever another process wrote since an earlier page.
pub(super) async fn page_of(
    backend: &RedisBackend,
    keyspace: Keyspace,
    (scope, after, limit): (&[u8], Option<&[u8]>, usize),
) -> Result<Vec<Record>> {
    let mut after = after.map(<[u8]>::to_vec);
    let mut page = Vec::with_capacity(limit.min(BATCH));
    while page.len() < limit {
        let window = pass(backend, keyspace, scope, after.as_deref()).await?;
        let (keys, at_the_end) = window.after(after.as_deref(), limit - page.len());
        for key in &keys {
            if let Some(record) = backend.read(Address { keyspace, scope, key }).await? {
                page.push(record);
            }
        }
        match keys.last() {
            Some(last) if !at_the_end => after = Some(last.clone()),
            _ => break,
        }
    }
    Ok(page)
}

/// One pass over every record of `keyspace` on every master: the smallest
/// [`WINDOW`] keys of `scope` after `after`.
async fn pass(backend: &RedisBackend, keyspace: Keyspace, scope: &[u8], after: Option<&[u8]>) -> Result<Window> {
    let mut found = BTreeSet::new();
    let mut beyond = false;
    let mut names = Vec::new();
    let mut scans = Scans::new(&backend.connection, &backend.prefix, keyspace).await?;
    loop {
        let more = scans.next(&mut names).await?;
        if names.len() >= BATCH || !more {
            let values = values(&backend.connection, &std::mem::take(&mut names)).await?;
            beyond |= keep_smallest(&mut found, &values, (scope, after), WINDOW);
        }
        if !more {
            break;
        }
    }
    Ok(Window { keys: found.into_iter().collect(), to_the_end: !beyond })
}

/// Adds the keys of `scope` after `after` among `values` to `found`,
/// keeping the smallest `window`; whether one was left out.
fn keep_smallest(
    found: &mut BTreeSet<Vec<u8>>,
    values: &[Option<Vec<u8>>],
    (scope, after): (&[u8], Option<&[u8]>),
    window: usize,
) -> bool {
    let mut left_out = false;
    for (found_scope, key) in values.iter().flatten().filter_map(|value| scope_and_key(value)) {
        if found_scope != scope || after.is_some_and(|after| key <= after) {
            continue;
        }
        found.insert(key.to_vec());
        if found.len() > window {
            found.pop_last();
            left_out = true;
        }
    }
    left_out
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
    let mut names = Vec::new();
    let mut scans = Scans::new(connection, prefix, keyspace).await?;
    while scans.next(&mut names).await? {}
    Ok(names)
}

/// A `SCAN` of the record names of one keyspace, on the server or master
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
    async fn new(connection: &'a Connection, prefix: &str, keyspace: Keyspace) -> Result<Scans<'a>> {
        let pattern = format!("{}:{}{{*}}:r", escaped(prefix), super::keyspace_part(keyspace));
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
    fn a_pass_keeps_the_smallest_keys_of_its_scope_after_the_cursor() {
        let values: Vec<Option<Vec<u8>>> = [&b"k5"[..], b"k1", b"k9", b"k3", b"k7", b"k2"]
            .iter()
            .map(|key| Some(packed(b"shop", key)))
            .chain([Some(packed(b"other", b"k0")), None, Some(b"junk".to_vec())])
            .collect();
        let mut found = BTreeSet::new();
        assert!(keep_smallest(&mut found, &values, (b"shop", Some(b"k1")), 3), "k7 and k9 left out");
        assert_eq!(found.iter().map(Vec::as_slice).collect::<Vec<_>>(), [&b"k2"[..], b"k3", b"k5"]);
        let mut all = BTreeSet::new();
        assert!(!keep_smallest(&mut all, &values, (b"shop", None), 10));
        assert_eq!(all.len(), 6);
    }

    #[test]
    fn a_window_gives_its_keys_after_the_cursor_and_says_whether_they_end_the_scope() {
        let keys: Vec<Vec<u8>> = [&b"k2"[..], b"k3", b"k5"].iter().map(|key| key.to_vec()).collect();
        let window = Window { keys, to_the_end: false };
        assert_eq!(window.after(Some(b"k2"), 1), (vec![b"k3".to_vec()], false));
        assert_eq!(window.after(Some(b"k3"), 5), (vec![b"k5".to_vec()], false));
        assert_eq!(window.after(None, 2), (vec![b"k2".to_vec(), b"k3".to_vec()], false));
        let last = Window { to_the_end: true, ..window };
        assert_eq!(last.after(Some(b"k3"), 5), (vec![b"k5".to_vec()], true));
        assert_eq!(last.after(Some(b"k9"), 5), (vec![], true));
    }

    #[test]
    fn scope_and_key_are_read_from_a_packed_record_and_junk_is_none() {
        let packed = packed(b"tenant", b"key-1");
        assert_eq!(scope_and_key(&packed), Some((&b"tenant"[..], &b"key-1"[..])));
        assert_eq!(scope_and_key(b"not msgpack"), None);
        assert_eq!(scope_and_key(&packed[..40]), None);
    }
}
