//! The table against a `HashMap` model: inserts, moves, removals, growth
//! and shrinking, with tags from a weak hash so that keys collide.

use super::*;
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};

#[derive(Debug, Clone)]
enum Op {
    /// Adds key `n` (or moves it, if present: an overwrite).
    Put(u16),
    Remove(u16),
    Shrink,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => any::<u16>().prop_map(|n| Op::Put(n % 2048)),
        3 => any::<u16>().prop_map(|n| Op::Remove(n % 2048)),
        1 => Just(Op::Shrink),
    ]
}

/// Runs `ops` on a table and a model; `weak` maps a key to its tag.
fn check(ops: &[Op], weak: impl Fn(u16) -> u32) {
    let mut table = Table::default();
    let mut model: HashMap<u16, Address> = HashMap::new();
    let mut next = 64_u32;
    for op in ops {
        match *op {
            Op::Put(key) => {
                next += 1;
                let to = Address { segment: next % 7, offset: next, len: u32::from(key) };
                match model.insert(key, to) {
                    Some(old) => assert!(table.replace(weak(key), old.segment, old.offset, to)),
                    None => table.insert(weak(key), to),
                }
            }
            Op::Remove(key) => {
                let removed = model.remove(&key);
                let at = removed.unwrap_or(Address { segment: 0, offset: 9, len: 0 });
                assert_eq!(table.remove(weak(key), at.segment, at.offset), removed.is_some());
            }
            Op::Shrink => table.shrink(),
        }
        assert_eq!(table.len(), model.len());
    }
    for (key, at) in &model {
        let found: Vec<Address> = table.candidates(weak(*key)).filter(|candidate| candidate == at).collect();
        assert_eq!(found, vec![*at], "key {key}");
        assert!(table.contains(weak(*key), at.segment, at.offset));
        let expected: HashSet<Address> =
            model.iter().filter(|(other, _)| weak(**other) == weak(*key)).map(|(_, at)| *at).collect();
        let candidates: HashSet<Address> = table.candidates(weak(*key)).collect();
        assert_eq!(candidates, expected, "candidates of key {key}");
    }
    let listed: HashSet<(u32, Address)> = table.iter().collect();
    let modelled: HashSet<(u32, Address)> = model.iter().map(|(key, at)| (weak(*key), *at)).collect();
    assert_eq!(listed, modelled);
    assert_eq!(table.iter().count(), model.len());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn matches_a_hash_map(ops in proptest::collection::vec(op(), 0..3000)) {
        check(&ops, |key| u32::from(key).wrapping_mul(0x9E37_79B9));
    }

    /// Eight tags for every key: long overflow chains, shared tags.
    #[test]
    fn matches_a_hash_map_under_collisions(ops in proptest::collection::vec(op(), 0..1500)) {
        check(&ops, |key| u32::from(key % 8));
    }
}

#[test]
fn grows_a_bucket_at_a_time_and_shrinks_back() {
    let mut table = Table::default();
    let mut buckets = table.buckets();
    for n in 0..100_000_u32 {
        table.insert(n.wrapping_mul(0x9E37_79B9), Address { segment: 1, offset: 64 + n, len: 100 });
        assert!(table.buckets() <= buckets + 1, "one split per insert at most");
        buckets = table.buckets();
    }
    // 0.8 of the slots in use, and about 25 bytes an entry.
    assert_eq!(table.buckets(), 100_000 * LOAD_DEN / (SLOTS * LOAD_NUM));
    let per_entry = table.bytes() / 100_000;
    assert!((16..30).contains(&per_entry), "{per_entry} bytes per entry");
    for n in 0..99_000_u32 {
        assert!(table.remove(n.wrapping_mul(0x9E37_79B9), 1, 64 + n));
    }
    table.shrink();
    assert!(table.buckets() <= 1000 * LOAD_DEN * 2 / (SLOTS * LOAD_NUM) + 1, "{} buckets", table.buckets());
    assert_eq!(table.iter().count(), 1000);
}

#[test]
fn presized_tables_do_not_split() {
    let mut table = Table::with_capacity(10_000);
    let buckets = table.buckets();
    for n in 0..10_000_u32 {
        table.insert(n.wrapping_mul(0x9E37_79B9), Address { segment: 1, offset: 64 + n, len: 1 });
    }
    assert_eq!(table.buckets(), buckets);
    // Past the presized block it grows in chunks, and shrinks back.
    for n in 10_000..40_000_u32 {
        table.insert(n.wrapping_mul(0x9E37_79B9), Address { segment: 1, offset: 64 + n, len: 1 });
    }
    assert!(table.buckets() > buckets);
    for n in 0..40_000_u32 {
        let tag = n.wrapping_mul(0x9E37_79B9);
        assert_eq!(table.candidates(tag).filter(|at| at.offset == 64 + n).count(), 1);
    }
    for n in 0..39_000_u32 {
        assert!(table.remove(n.wrapping_mul(0x9E37_79B9), 1, 64 + n));
    }
    table.shrink();
    assert!(table.buckets() < buckets);
    let left: Vec<u32> = table.iter().map(|(_, at)| at.offset - 64).collect();
    assert_eq!(left.len(), 1000);
    assert!(left.iter().all(|n| *n >= 39_000));
}

#[test]
fn a_filling_table_holds_what_it_is_given_in_any_order_and_past_its_room() {
    for (presized, inserted) in [(0, 100), (1000, 1000), (1000, 3000), (50_000, 20_000)] {
        let mut filling = Table::filling(presized);
        // Tags out of any bucket order.
        let tag = |n: u32| n.wrapping_mul(0x9E37_79B9).rotate_left(n % 32);
        for n in 0..inserted {
            filling.insert(tag(n), Address { segment: 1, offset: 64 + n, len: 1 });
        }
        let table = filling.finish();
        assert_eq!(table.len(), inserted as usize);
        assert!(table.buckets() >= Table::with_capacity(presized).buckets());
        for n in 0..inserted {
            assert!(table.contains(tag(n), 1, 64 + n), "{presized}, {inserted}: entry {n}");
        }
        assert_eq!(table.iter().count(), inserted as usize);
    }
}
