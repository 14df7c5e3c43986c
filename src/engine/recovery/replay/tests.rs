//! The rebuild against a model that applies every frame, newest LSN wins:
//! whatever the order frames come in, however many of them name one key,
//! whatever the estimates the groups are made from.

use super::*;
use crate::record::State;
use proptest::prelude::*;
use std::collections::HashMap;

/// A frame of key `key` (of a few), LSN `lsn`, a tombstone or a put.
#[derive(Debug, Clone, Copy)]
struct Op {
    key: u8,
    lsn: u64,
    tombstone: bool,
}

/// A uniform hash for key `key`; keys `0..8` share one tag, as keys whose
/// hashes differ beyond their low 32 bits do.
fn hash(key: u8) -> u128 {
    let mut state = u128::from(key).wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835);
    state ^= state >> 61;
    state = state.wrapping_mul(0x2545_F491_4F6C_DD1D_5851_F42D_4C95_7F2D);
    if key < 8 {
        (state & !u128::from(u32::MAX)) | 0x5EED
    } else {
        state
    }
}

fn entry(op: Op) -> HintEntry {
    let kind = if op.tombstone { Kind::Tombstone } else { Kind::Put(State::Completed) };
    HintEntry {
        hash: hash(op.key),
        kind,
        lsn: op.lsn,
        token: op.lsn,
        deadline_ms: op.lsn * 10,
        offset: 64 + op.lsn,
        len: 100,
    }
}

/// What the rebuild must keep: the newest frame of each key, if a put, as
/// `(hash, lsn)`; of two frames with one LSN, the first.
fn model(ops: &[Op]) -> Vec<(u128, u64)> {
    let mut newest: HashMap<u8, Op> = HashMap::new();
    for op in ops {
        let held = newest.entry(op.key).or_insert(*op);
        if op.lsn > held.lsn {
            *held = *op;
        }
    }
    let mut kept: Vec<(u128, u64)> =
        newest.values().filter(|op| !op.tombstone).map(|op| (hash(op.key), op.lsn)).collect();
    kept.sort_unstable();
    kept
}

fn rebuilt(ops: &[Op], frames: usize, keys: usize) -> Vec<(u128, u64)> {
    let hasher = KeyHasher::new([1, 2]);
    let mut replay = Replay::new(&hasher, frames, keys);
    for op in ops {
        replay.apply(1, &entry(*op)).expect("apply");
    }
    assert_eq!(replay.max_lsn, ops.iter().map(|op| op.lsn).max().unwrap_or(0));
    let newest = replay.into_frames().finish();
    let len = newest.len();
    let mut kept: Vec<(u128, u64)> = newest.iter().map(|found| (found.hash, found.lsn)).collect();
    assert_eq!(kept.len(), len);
    kept.sort_unstable();
    kept
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    // LSNs from a small range, so that one frame comes twice (a hint, then
    // the log) and frames of one key come close together or far apart.
    proptest::collection::vec(
        (0..40_u8, 1..300_u64, proptest::bool::weighted(0.25)).prop_map(|(key, lsn, tombstone)| Op {
            key,
            lsn,
            tombstone,
        }),
        0..600,
    )
    .prop_map(|mut ops| {
        // One LSN is one frame: the copies of a frame agree.
        let mut first: HashMap<u64, Op> = HashMap::new();
        for op in &mut ops {
            *op = *first.entry(op.lsn).or_insert(*op);
        }
        ops
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// With the frames and keys counted right, not counted, or wrong (a
    /// part then runs out of room and the buffer grows).
    #[test]
    fn keeps_the_newest_put_of_every_key(
        ops in ops(),
        frames in prop_oneof![Just(usize::MAX), Just(0_usize), 1..50_usize],
        keys in prop_oneof![Just(0_usize), 1..100_usize, Just(1 << 22)],
    ) {
        let frames = if frames == usize::MAX { ops.len() } else { frames };
        prop_assert_eq!(rebuilt(&ops, frames, keys), model(&ops));
    }

    #[test]
    fn a_frame_packs_and_unpacks_whole(
        hash in any::<u128>(),
        lsn in any::<u64>(),
        deadline_ms in any::<u64>(),
        at in any::<(u32, u32, u32)>(),
        kind in 0..4_u8,
    ) {
        let kind = [Kind::Tombstone, Kind::Put(State::Processing), Kind::Put(State::Completed), Kind::Put(State::Failed)]
            [usize::from(kind)];
        let frame = Replayed { hash, lsn, deadline_ms, segment: at.0, offset: at.1, frame_len: at.2, kind };
        prop_assert_eq!(Replayed::unpack(&frame.pack()), frame);
        prop_assert_eq!(is_put(&frame.pack()), kind != Kind::Tombstone);
    }
}

#[test]
fn keys_with_one_tag_stay_apart() {
    let ops: Vec<Op> = (0..8).map(|key| Op { key, lsn: u64::from(key) + 1, tombstone: false }).collect();
    assert_eq!(rebuilt(&ops, 8, 8).len(), 8);
    assert!(ops.iter().all(|op| index::tag(hash(op.key)) == index::tag(hash(0))));
}

#[test]
fn a_tombstone_hides_older_puts_and_not_newer_ones() {
    let put = |key, lsn| Op { key, lsn, tombstone: false };
    let removed = |key, lsn| Op { key, lsn, tombstone: true };
    // Key 9: put, removed. Key 10: removed, put again. Key 11: a later
    // segment's tombstone read before the earlier put.
    let ops = [put(9, 1), put(10, 2), removed(9, 3), removed(10, 4), put(10, 5), removed(11, 7), put(11, 6)];
    assert_eq!(rebuilt(&ops, 0, 0), vec![(hash(10), 5)].into_iter().collect::<Vec<_>>());
}

#[test]
fn frames_forgotten_leave_the_earlier_ones_whole() {
    // A key's put before the mark, its newer frame after it (a hint that
    // is then found damaged): forgetting must give the put back, not
    // leave it replaced.
    let hasher = KeyHasher::new([1, 2]);
    let mut replay = Replay::new(&hasher, 4, 4);
    replay.apply(1, &entry(Op { key: 12, lsn: 1, tombstone: false })).expect("apply");
    let mark = replay.applied();
    replay.apply(2, &entry(Op { key: 12, lsn: 2, tombstone: true })).expect("apply");
    replay.apply(2, &entry(Op { key: 13, lsn: 3, tombstone: false })).expect("apply");
    replay.forget_after(&mark);
    let kept: Vec<(u128, u64)> = replay.into_frames().finish().iter().map(|found| (found.hash, found.lsn)).collect();
    assert_eq!(kept, vec![(hash(12), 1)]);
}

#[test]
fn a_put_beyond_4_gib_is_refused_and_a_tombstone_is_not() {
    let hasher = KeyHasher::new([1, 2]);
    let mut replay = Replay::new(&hasher, 0, 0);
    let far = HintEntry { offset: 1 << 32, ..entry(Op { key: 14, lsn: 1, tombstone: false }) };
    assert!(replay.apply(1, &far).is_err());
    let far = HintEntry { offset: 1 << 32, ..entry(Op { key: 14, lsn: 2, tombstone: true }) };
    assert!(replay.apply(1, &far).is_ok());
    assert_eq!(replay.into_frames().finish().len(), 0);
}

#[test]
fn frames_of_one_key_close_together_are_kept_once() {
    let ops: Vec<Op> =
        (0..50_u8).flat_map(|key| [1, 2].map(|n| Op { key, lsn: u64::from(key) * 2 + n, tombstone: false })).collect();
    let hasher = KeyHasher::new([1, 2]);
    let mut replay = Replay::new(&hasher, 100, 50);
    for op in &ops {
        replay.apply(1, &entry(*op)).expect("apply");
    }
    assert_eq!(replay.into_frames().len(), 50);
}

#[test]
fn keys_come_out_in_the_order_of_the_table_buckets() {
    // 20,000 keys, two frames each, counted right: groups follow the
    // buckets of the table built from them.
    let keys = 20_000_usize;
    let hasher = KeyHasher::new([1, 2]);
    let mut replay = Replay::new(&hasher, 2 * keys, keys);
    for round in 0..2_u64 {
        for key in 0..keys as u64 {
            let hash = hasher.hash(Keyspace::Caller, b"", &key.to_le_bytes());
            let put = Op { key: 0, lsn: round * 100_000 + key + 1, tombstone: false };
            replay.apply(1, &HintEntry { hash, ..entry(put) }).expect("apply");
        }
    }
    let newest = replay.into_frames().finish();
    assert_eq!(newest.len(), keys);
    let geometry = Geometry::of(keys);
    let regions: Vec<usize> = newest.iter().map(|found| geometry.home(index::tag(found.hash)) >> REGION_BITS).collect();
    assert!(regions.windows(2).all(|pair| pair[1] >= pair[0]), "regions in order");
    assert!(regions.last() > regions.first(), "more than one region");
}
