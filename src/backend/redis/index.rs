//! A scope's indexes: what lets a scope's scan read that scope alone, and
//! a relay's sweep the keys with staged messages alone, whatever else the
//! server or Cluster keeps.
//!
//! A record's name is a digest of its scope and key, so nothing in the
//! names groups a scope. Each `(keyspace, scope)` therefore has three
//! sorted sets, named after a digest of the two
//! (`{prefix}:{keyspace:}scope:{digest}:keys`, `…:ends`, `…:staged`) —
//! on a Cluster three in each of the scope's [`BUCKETS`] slots, each
//! holding the keys whose records sit in that slot (see [`super::names`]):
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
//! On a Cluster a script may touch one slot alone, so each bucket's
//! indexes are written as a standalone server's are, in the step that
//! writes the record beside them; a page merges the buckets' ranges
//! ([`merged`]): one command a bucket per round, at once, and about twice
//! the keys the page returns.
//!
//! [`PAGE`]: super::scripts::PAGE

use super::connection::Call;
use super::names::{Layout, ScopeIndex, BUCKETS};
use super::reply::{bytes, protocol};
use super::RedisBackend;
use crate::backend::remote::Address;
use crate::error::Result;
use crate::keyspace::Keyspace;
use crate::record::Record;
use ::redis::Value;
use futures_util::future::try_join_all;

/// Keys a page's script reads at most at once.
const BATCH: usize = 256;

/// Which of a scope's records a page lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Of {
    /// Every live record.
    Every,
    /// The Completed records whose answer carries staged messages.
    Staged,
}

impl Of {
    /// The set of `index` a page of these reads its keys from.
    fn set(self, index: &ScopeIndex) -> &[u8] {
        if self == Of::Staged {
            &index.staged
        } else {
            &index.keys
        }
    }
}

/// The page of `scope`'s records of `keyspace` after `after`, at most
/// `limit`, from its index (see the module docs): the scope's own on a
/// standalone server, its buckets' merged on a Cluster ([`merged`]).
pub(super) async fn page(
    backend: &RedisBackend,
    keyspace: Keyspace,
    scope: &[u8],
    (after, limit): (Option<&[u8]>, usize),
    of: Of,
) -> Result<Vec<Record>> {
    if backend.layout == Layout::Buckets {
        return merged(backend, keyspace, scope, (after, limit), of).await;
    }
    let index = ScopeIndex::of(&backend.prefix, keyspace, scope, None);
    let mut after = after.map(<[u8]>::to_vec);
    let mut page = Vec::new();
    while page.len() < limit {
        let want = (limit - page.len()).min(BATCH);
        let keys = range(backend, of.set(&index), after.as_deref(), want).await?;
        let Some(last) = keys.last().cloned() else { break };
        page.extend(read(backend, keyspace, scope, (&index, &keys), of).await?);
        if keys.len() < want {
            break;
        }
        after = Some(last);
    }
    Ok(page)
}

/// A page on a Cluster, whose scope has an index in each of its
/// [`BUCKETS`] slots: each round reads, from every bucket that may still
/// have keys after the cursor, at once, about twice its share of what the
/// page still wants (so a round costs what it returns, twice at most, and
/// one command a bucket), takes the smallest keys that no bucket can
/// still undercut ([`merge`]), reads their records bucket by bucket (the
/// page script, at once) and moves the cursor past them.
async fn merged(
    backend: &RedisBackend,
    keyspace: Keyspace,
    scope: &[u8],
    (after, limit): (Option<&[u8]>, usize),
    of: Of,
) -> Result<Vec<Record>> {
    let indexes: Vec<ScopeIndex> =
        (0..BUCKETS).map(|bucket| ScopeIndex::of(&backend.prefix, keyspace, scope, Some(bucket))).collect();
    let mut open: Vec<&ScopeIndex> = indexes.iter().collect();
    let mut after = after.map(<[u8]>::to_vec);
    let mut page = Vec::new();
    while page.len() < limit && !open.is_empty() {
        let want = limit - page.len();
        let each = (2 * want).div_ceil(usize::from(BUCKETS)).clamp(1, BATCH);
        let ranges = open.iter().map(|index| range(backend, of.set(index), after.as_deref(), each));
        let ranges = try_join_all(ranges).await?;
        let (taken, done) = merge(&ranges, each, want);
        let Some(&(_, last)) = taken.last() else { break };
        let mut by_bucket: Vec<Vec<Vec<u8>>> = vec![Vec::new(); open.len()];
        for &(at, key) in &taken {
            by_bucket[at].push(key.to_vec());
        }
        let reads = open.iter().zip(&by_bucket).filter(|(_, keys)| !keys.is_empty());
        let reads = reads.map(|(index, keys)| read(backend, keyspace, scope, (index, keys), of));
        let mut records: Vec<Record> = try_join_all(reads).await?.into_iter().flatten().collect();
        records.sort_by(|one, other| one.key.cmp(&other.key));
        page.extend(records);
        after = Some(last.to_vec());
        let mut done = done.into_iter();
        open.retain(|_| !done.next().unwrap_or(true));
    }
    Ok(page)
}

/// One round of [`merged`]: of each bucket's keys after the cursor
/// (`ranges`, in key order, each at most `each`), the smallest `want`
/// that no bucket can undercut — those up to the smallest last key of a
/// bucket that gave `each` (it may have more) — as (bucket, key) in key
/// order; and for each bucket whether nothing of it is left after them
/// (it gave fewer than `each` and every one was taken).
fn merge(ranges: &[Vec<Vec<u8>>], each: usize, want: usize) -> (Vec<(usize, &[u8])>, Vec<bool>) {
    let bound = ranges.iter().filter(|keys| keys.len() >= each).filter_map(|keys| keys.last()).min();
    let mut taken: Vec<(usize, &[u8])> = ranges
        .iter()
        .enumerate()
        .flat_map(|(at, keys)| keys.iter().map(move |key| (at, key.as_slice())))
        .filter(|(_, key)| bound.is_none_or(|bound| *key <= bound.as_slice()))
        .collect();
    taken.sort_unstable_by(|one, other| one.1.cmp(other.1));
    taken.truncate(want);
    let last = taken.last().map(|&(_, key)| key);
    let done = ranges
        .iter()
        .map(|keys| keys.len() < each && keys.last().is_none_or(|key| last.is_some_and(|last| key.as_slice() <= last)))
        .collect();
    (taken, done)
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
    let records: Vec<Vec<u8>> = keys.iter().map(|key| backend.names(Address { keyspace, scope, key }).record).collect();
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

    fn keys(names: &[&str]) -> Vec<Vec<u8>> {
        names.iter().map(|name| name.as_bytes().to_vec()).collect()
    }

    fn taken<'a>(taken: &[(usize, &'a [u8])]) -> Vec<(usize, &'a str)> {
        taken.iter().map(|&(at, key)| (at, std::str::from_utf8(key).expect("utf-8"))).collect()
    }

    #[test]
    fn a_merged_round_takes_what_no_bucket_can_undercut_in_key_order() {
        // Bucket 0 gave all it asked for (it may have more after "d"), so
        // nothing after "d" is taken: bucket 1's "e" waits for the next
        // round, and bucket 1 is not done.
        let ranges = [keys(&["a", "d"]), keys(&["b", "e"]), keys(&["c"])];
        let (round, done) = merge(&ranges, 2, 10);
        assert_eq!(taken(&round), [(0, "a"), (1, "b"), (2, "c"), (0, "d")]);
        assert_eq!(done, [false, false, true]);
        // No bucket full: every key is taken, up to what is wanted.
        let ranges = [keys(&["a", "d"]), keys(&["b"]), keys(&[])];
        let (round, done) = merge(&ranges, 3, 2);
        assert_eq!(taken(&round), [(0, "a"), (1, "b")]);
        assert_eq!(done, [false, true, true], "bucket 0's \"d\" was left for later");
        let (round, done) = merge(&ranges, 3, 5);
        assert_eq!(taken(&round), [(0, "a"), (1, "b"), (0, "d")]);
        assert_eq!(done, [true, true, true]);
        // Nothing anywhere: nothing taken, every bucket done.
        let empty = [keys(&[]), keys(&[])];
        let (round, done) = merge(&empty, 1, 4);
        assert!(round.is_empty());
        assert_eq!(done, [true, true]);
        // Keys compare as bytes, as the server's BYLEX ranges do.
        let ranges = [vec![vec![0xff]], vec![vec![0x00, 0x01]]];
        let (round, _) = merge(&ranges, 1, 1);
        assert_eq!(round, [(1, &[0x00, 0x01][..])]);
    }
}
