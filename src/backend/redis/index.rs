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
        let indexes = (0..BUCKETS).map(|bucket| ScopeIndex::of(&backend.prefix, keyspace, scope, Some(bucket)));
        let buckets = ClusterScope { backend, keyspace, scope, of, indexes: indexes.collect() };
        return merged(&buckets, (after, limit)).await;
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

/// What a merged page reads (see [`merged`]): each bucket's keys after a
/// cursor, in key order, and the live entries among some of a bucket's
/// keys (dropping the others from its index).
trait Buckets {
    type Entry;
    /// How many buckets there are.
    fn count(&self) -> usize;
    /// Up to `count` keys of `bucket` after `after`, in order.
    async fn range(&self, bucket: usize, after: Option<&[u8]>, count: usize) -> Result<Vec<Vec<u8>>>;
    /// The live entries of `keys` of `bucket`.
    async fn read(&self, bucket: usize, keys: &[Vec<u8>]) -> Result<Vec<Self::Entry>>;
    /// An entry's key.
    fn key(entry: &Self::Entry) -> &[u8];
}

/// One scope's buckets on a Cluster: an index in each of its
/// [`BUCKETS`] slots.
struct ClusterScope<'a> {
    backend: &'a RedisBackend,
    keyspace: Keyspace,
    scope: &'a [u8],
    of: Of,
    indexes: Vec<ScopeIndex>,
}

impl Buckets for ClusterScope<'_> {
    type Entry = Record;

    fn count(&self) -> usize {
        self.indexes.len()
    }

    async fn range(&self, bucket: usize, after: Option<&[u8]>, count: usize) -> Result<Vec<Vec<u8>>> {
        range(self.backend, self.of.set(&self.indexes[bucket]), after, count).await
    }

    async fn read(&self, bucket: usize, keys: &[Vec<u8>]) -> Result<Vec<Record>> {
        read(self.backend, self.keyspace, self.scope, (&self.indexes[bucket], keys), self.of).await
    }

    fn key(record: &Record) -> &[u8] {
        &record.key
    }
}

/// Keys a round of [`merged`] reads from each bucket at least: enough that
/// a small page takes one round, rarely two (with one a bucket, a page of
/// five took five rounds of 16 ranges).
const EACH_LEAST: usize = 8;

/// A page merged from buckets: each round reads, from every bucket that
/// may still have keys after the cursor, at once, about twice its share
/// of what the page still wants ([`EACH_LEAST`] at least), takes the
/// smallest keys that no bucket can still undercut ([`merge`]), reads
/// their entries bucket by bucket (at once) and moves the cursor past
/// them. A round costs one command a bucket and a read a bucket with
/// keys taken; a page of 256 takes one round, reading about twice the
/// keys it returns.
async fn merged<B: Buckets>(buckets: &B, (after, limit): (Option<&[u8]>, usize)) -> Result<Vec<B::Entry>> {
    let mut open: Vec<usize> = (0..buckets.count()).collect();
    let mut after = after.map(<[u8]>::to_vec);
    let mut page = Vec::new();
    while page.len() < limit && !open.is_empty() {
        let want = limit - page.len();
        let each = (2 * want).div_ceil(buckets.count()).clamp(EACH_LEAST, BATCH);
        let ranges = try_join_all(open.iter().map(|&bucket| buckets.range(bucket, after.as_deref(), each))).await?;
        let (taken, done) = merge(&ranges, each, want);
        let Some(&(_, last)) = taken.last() else { break };
        let mut by_bucket: Vec<Vec<Vec<u8>>> = vec![Vec::new(); open.len()];
        for &(at, key) in &taken {
            by_bucket[at].push(key.to_vec());
        }
        let reads = open.iter().zip(&by_bucket).filter(|(_, keys)| !keys.is_empty());
        let reads = reads.map(|(&bucket, keys)| buckets.read(bucket, keys));
        let mut entries: Vec<B::Entry> = try_join_all(reads).await?.into_iter().flatten().collect();
        entries.sort_by(|one, other| B::key(one).cmp(B::key(other)));
        page.extend(entries);
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
    use sha2::{Digest, Sha256};

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

    /// Buckets in memory, as a Cluster's indexes hold them: `dead` keys
    /// are in an index but their record is not live, and a read drops
    /// them from the index as the page script does. Counts the rounds.
    struct Memory {
        buckets: std::cell::RefCell<Vec<std::collections::BTreeSet<Vec<u8>>>>,
        dead: std::collections::HashSet<Vec<u8>>,
        ranges: std::cell::Cell<usize>,
    }

    impl Buckets for Memory {
        type Entry = Vec<u8>;

        fn count(&self) -> usize {
            self.buckets.borrow().len()
        }

        async fn range(&self, bucket: usize, after: Option<&[u8]>, count: usize) -> Result<Vec<Vec<u8>>> {
            self.ranges.set(self.ranges.get() + 1);
            let buckets = self.buckets.borrow();
            let keys = buckets[bucket].iter().filter(|key| after.is_none_or(|after| key.as_slice() > after));
            Ok(keys.take(count).cloned().collect())
        }

        async fn read(&self, bucket: usize, keys: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
            let (dead, live): (Vec<&Vec<u8>>, Vec<&Vec<u8>>) = keys.iter().partition(|key| self.dead.contains(*key));
            for key in dead {
                self.buckets.borrow_mut()[bucket].remove(key);
            }
            Ok(live.into_iter().cloned().collect())
        }

        fn key(entry: &Vec<u8>) -> &[u8] {
            entry
        }
    }

    /// Every page of `memory` after `after`, `limit` a page, each checked
    /// against the live keys in order: none skipped, none twice, none
    /// short of its limit while more are left.
    fn page_through(memory: &Memory, after: Option<Vec<u8>>, limit: usize) -> Vec<Vec<u8>> {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let mut live: Vec<Vec<u8>> = memory.buckets.borrow().iter().flatten().cloned().collect();
        live.retain(|key| !memory.dead.contains(key) && after.as_ref().is_none_or(|after| key > after));
        live.sort();
        let (mut cursor, mut seen) = (after, Vec::new());
        loop {
            let page = runtime.block_on(merged(memory, (cursor.as_deref(), limit))).expect("page");
            let left = live.len() - seen.len();
            assert_eq!(page.len(), left.min(limit), "a page short of its limit while {left} are left");
            let Some(last) = page.last().cloned() else { return seen };
            seen.extend(page);
            assert_eq!(seen[..], live[..seen.len()], "every live key once, in order");
            cursor = Some(last);
        }
    }

    fn memory(keys: &[(Vec<u8>, usize)], dead: impl Iterator<Item = Vec<u8>>) -> Memory {
        let mut buckets = vec![std::collections::BTreeSet::new(); usize::from(BUCKETS)];
        for (key, bucket) in keys {
            buckets[*bucket].insert(key.clone());
        }
        Memory { buckets: std::cell::RefCell::new(buckets), dead: dead.collect(), ranges: std::cell::Cell::new(0) }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        #[test]
        fn merged_pages_give_every_live_key_once_in_order(
            keys in proptest::collection::btree_map(proptest::collection::vec(proptest::num::u8::ANY, 0..3), 0..16_usize, 0..400),
            dead_every in 2_usize..7,
            limit in proptest::prop_oneof![1_usize..40, 200_usize..300],
            after_at in proptest::option::of(0_usize..400),
            used in 1_usize..=16,
        ) {
            // Keys spread over `used` buckets: one, a few full ones, all.
            let keys: Vec<(Vec<u8>, usize)> = keys.into_iter().map(|(key, bucket)| (key, bucket % used)).collect();
            let dead = keys.iter().step_by(dead_every).map(|(key, _)| key.clone());
            let after = after_at.and_then(|at| keys.get(at)).map(|(key, _)| key.clone());
            page_through(&memory(&keys, dead), after, limit);
        }
    }

    #[test]
    fn a_page_of_a_scope_spread_over_its_buckets_takes_one_round_or_two() {
        for limit in [1, 5, 10, 25, 100, 256] {
            let keys: Vec<(Vec<u8>, usize)> = (0..20_000_u32)
                .map(|n| {
                    let digest = Sha256::digest(n.to_be_bytes());
                    (format!("k-{n:06}").into_bytes(), usize::from(digest[31] % BUCKETS))
                })
                .collect();
            let memory = memory(&keys, std::iter::empty());
            let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
            let mut cursor: Option<Vec<u8>> = None;
            for _ in 0..50 {
                let page = runtime.block_on(merged(&memory, (cursor.as_deref(), limit))).expect("page");
                assert_eq!(page.len(), limit);
                cursor = page.last().cloned();
            }
            // 50 pages: at most 1.5 rounds of 16 ranges a page on average.
            let ranges = memory.ranges.get();
            assert!(ranges * 2 <= 3 * usize::from(BUCKETS) * 50, "pages of {limit}: {ranges} ranges for 50 pages");
        }
    }
}
