//! The index being rebuilt at open, from hint entries and log frames
//! alike: both arrive as [`HintEntry`]s and are kept as they come, 48
//! bytes each, with no lookup ([`Replay`]). Once every shard is read and
//! the store's time is settled, [`Frames::finish`] keeps the newest record
//! of every key, newest LSN wins, so the result depends neither on the
//! order segments are read in nor on a frame being applied twice; the
//! shard fills its table from them.
//!
//! The frames are kept by group of keys: the keys whose buckets, in a
//! table of the keys the hints count, are neighbours (a few hundred
//! buckets).
//!
//! 1. Each frame is put, as it comes, in the part of its group's top bits
//!    (a few hundred parts, each written in order). Where a key's last
//!    frame is still known (a claim, then its completion), the newer takes
//!    its place instead.
//! 2. At the end, each part is sorted in place by the rest of its groups'
//!    bits (an American flag sort), and each group, a few hundred frames
//!    in a store of 10 M records, is cut down to the newest frame of each
//!    key with a small table of its own, by the key's whole 128-bit hash.
//!    The puts among them are kept in place, group after group.
//!
//! Every step reads and writes frames in order, or within a part or a
//! group that the cache holds, where a hash map of every key takes a cache
//! miss a frame. And the keys come out in the order of the table's
//! buckets: filling the table walks it a region at a time too.
//!
//! The parts share one buffer, each with room for its share of the frames
//! the hints count and a quarter more (the buffer is made larger when one
//! is full). It is allocated zeroed, which the system does page by page as
//! pages are first written, so room never written takes no memory; and as
//! one large allocation it goes back to the system whole once the table is
//! built, where many small ones would stay with the allocator.

use crate::engine::entry::KeyHasher;
use crate::engine::index::{self, Address, Geometry};
use crate::engine::segment::hint::HintEntry;
use crate::keyspace::Keyspace;
use crate::record::{Kind, State};
use std::ops::Range;

/// Bits of a bucket's number that a group leaves free: a group's keys go
/// to `2^REGION_BITS` neighbouring buckets (16 KiB).
const REGION_BITS: u32 = 8;
/// At most `2^GROUP_BITS` groups.
const GROUP_BITS: u32 = 12;
/// At most `2^PART_BITS` parts, written at once as frames come: few enough
/// places for the cache and the TLB to hold.
const PART_BITS: u32 = 8;
/// Bits of the group one pass of the sort of a part takes, for the same
/// reason.
const PASS_BITS: u32 = 6;
/// Keys whose last frame [`Replay::apply`] knows.
const RECENT: usize = 4096;
/// A part's room when no frames are expected.
const ROOM_MIN: usize = 16;

/// One frame as the rebuild keeps it: its key's hash, its LSN, where it is,
/// and what it is. A put's `deadline_ms` is as the frame has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replayed {
    pub hash: u128,
    pub lsn: u64,
    pub deadline_ms: u64,
    pub segment: u32,
    pub offset: u32,
    pub frame_len: u32,
    pub kind: Kind,
}

/// A [`Replayed`] in six words: hash (low, high), LSN, deadline, segment
/// and offset, frame length and kind. A buffer of them can be allocated
/// zeroed.
type Packed = [u64; 6];

impl Replayed {
    pub(crate) fn address(&self) -> Address {
        Address { segment: self.segment, offset: self.offset, len: self.frame_len }
    }

    #[expect(clippy::cast_possible_truncation, reason = "the hash's two halves")]
    fn pack(&self) -> Packed {
        let kind = match self.kind {
            Kind::Tombstone => 0,
            Kind::Put(State::Processing) => 1,
            Kind::Put(State::Completed) => 2,
            Kind::Put(State::Failed) => 3,
        };
        [
            self.hash as u64,
            (self.hash >> 64) as u64,
            self.lsn,
            self.deadline_ms,
            (u64::from(self.segment) << 32) | u64::from(self.offset),
            (u64::from(self.frame_len) << 32) | kind,
        ]
    }

    #[expect(clippy::cast_possible_truncation, reason = "unpacking the halves of words")]
    fn unpack(packed: &Packed) -> Replayed {
        let kind = match packed[5] as u32 {
            1 => Kind::Put(State::Processing),
            2 => Kind::Put(State::Completed),
            3 => Kind::Put(State::Failed),
            // Only `pack` writes them: 0.
            _ => Kind::Tombstone,
        };
        Replayed {
            hash: hash_of(packed),
            lsn: packed[2],
            deadline_ms: packed[3],
            segment: (packed[4] >> 32) as u32,
            offset: packed[4] as u32,
            frame_len: (packed[5] >> 32) as u32,
            kind,
        }
    }
}

fn hash_of(packed: &Packed) -> u128 {
    u128::from(packed[0]) | (u128::from(packed[1]) << 64)
}

fn is_put(packed: &Packed) -> bool {
    packed[5] & 0xff != 0
}

/// The frames of a shard's hints and log, by part, each part in the order
/// they came: what recovery hands to the shard it builds.
#[derive(Debug, Default)]
pub(crate) struct Frames {
    /// The groups, if known from the start; until then, one part.
    groups: Option<Groups>,
    /// Part `p` is `packed[p * room..][..lens[p]]`.
    packed: Vec<Packed>,
    room: usize,
    lens: Vec<usize>,
}

impl Frames {
    /// Parts for `groups`, with room for about `frames` frames.
    fn new(groups: Option<Groups>, frames: usize) -> Self {
        let parts = groups.map_or(1, Groups::parts);
        let share = frames / parts;
        let room = share.saturating_add(share / 4).max(ROOM_MIN);
        Frames { groups, packed: vec![[0; 6]; parts.saturating_mul(room)], room, lens: vec![0; parts] }
    }

    /// Frames kept (a key's frames that came close together count once).
    pub(crate) fn len(&self) -> usize {
        self.lens.iter().sum()
    }

    /// Part `part`'s frames.
    fn part_mut(&mut self, part: usize) -> &mut [Packed] {
        &mut self.packed[part * self.room..][..self.lens[part]]
    }

    /// Adds `frame` to part `part`; returns its index there.
    #[expect(clippy::inline_always, reason = "into `Replay::apply`, inlined into the hint reader's loop")]
    #[inline(always)]
    fn push(&mut self, part: usize, frame: Packed) -> usize {
        if self.lens[part] == self.room {
            self.grow();
        }
        let index = self.lens[part];
        self.packed[part * self.room + index] = frame;
        self.lens[part] += 1;
        index
    }

    /// Twice the room for every part, in a new buffer.
    fn grow(&mut self) {
        let room = self.room.saturating_mul(2);
        let mut packed = vec![[0; 6]; self.lens.len().saturating_mul(room)];
        for (part, len) in self.lens.iter().enumerate() {
            packed[part * room..][..*len].copy_from_slice(&self.packed[part * self.room..][..*len]);
        }
        self.packed = packed;
        self.room = room;
    }

    /// The newest record of every key, if it is a put (the keys present,
    /// expired ones too), in the order of the index table's buckets, in
    /// the room the frames took (see the module's documentation).
    pub(crate) fn finish(mut self) -> Rebuilt {
        // Groups chosen now have one part, and are those of a table of as
        // many keys as there are frames.
        let groups = self.groups.unwrap_or_else(|| Groups { part_bits: 0, ..Groups::of(self.len()) });
        let mut newest = Newest::default();
        for part in 0..self.lens.len() {
            let frames = self.part_mut(part);
            let starts = groups.sort_part(frames);
            let mut kept = 0;
            for group in starts.windows(2) {
                kept = newest.keep(frames, group[0]..group[1], kept);
            }
            self.lens[part] = kept;
        }
        Rebuilt(self)
    }
}

/// A shard's frames being replayed.
pub(crate) struct Replay<'a> {
    hasher: &'a KeyHasher,
    frames: Frames,
    /// Where a recent frame of some keys is, by bits of the key's hash:
    /// see [`Replay::apply`].
    recent: Vec<u64>,
    pub max_lsn: u64,
    pub max_updated_ms: u64,
}

/// A place of [`Replay`]'s `recent`, packed in a word: 32 bits of a key's
/// hash and the index of the key's frame in its part.
#[derive(Debug, Clone, Copy)]
struct Recent {
    check: u32,
    index: usize,
}

impl Recent {
    /// An empty place (no frame has index `u32::MAX`: see `pack`).
    const NONE: u64 = u64::MAX;

    /// A frame at an index beyond 32 bits is not kept track of.
    fn pack(check: u32, index: usize) -> u64 {
        u32::try_from(index)
            .ok()
            .filter(|index| *index != u32::MAX)
            .map_or(Recent::NONE, |index| (u64::from(check) << 32) | u64::from(index))
    }

    fn unpack(word: u64) -> Option<Recent> {
        #[expect(clippy::cast_possible_truncation, reason = "the two halves")]
        let (check, index) = ((word >> 32) as u32, word as u32);
        (word != Recent::NONE).then_some(Recent { check, index: index as usize })
    }
}

/// How many frames each part held: what [`Replay::forget_after`] goes
/// back to.
pub(crate) struct Mark(Vec<usize>);

impl<'a> Replay<'a> {
    /// A replay that expects about `frames` frames of `keys` keys
    /// (estimates, 0 if unknown): room is made for the frames, and the
    /// groups are those of a table of `keys` keys.
    pub(crate) fn new(hasher: &'a KeyHasher, frames: usize, keys: usize) -> Self {
        let groups = (keys > 0).then(|| Groups::of(keys));
        let frames = Frames::new(groups, frames);
        Replay { hasher, frames, recent: vec![Recent::NONE; RECENT], max_lsn: 0, max_updated_ms: 0 }
    }

    /// The index hash of `(scope, key)` of `keyspace`.
    pub(crate) fn hash(&self, keyspace: Keyspace, scope: &[u8], key: &[u8]) -> u128 {
        self.hasher.hash(keyspace, scope, key)
    }

    /// Applies the frame `entry` of segment `segment`.
    ///
    /// A key's frames often come close together (a claim and its
    /// completion): where the key's last frame is still known (`recent`,
    /// a few thousand places by bits of the hash), the newer of the two
    /// takes its place rather than adding one more, which is what
    /// [`Frames::finish`] would make of them. Anything else is added.
    ///
    /// # Errors
    /// A put beyond 4 GiB, which an index entry cannot point at.
    #[expect(
        clippy::inline_always,
        reason = "into the hint reader's loop, where the entry is still in registers: read back from memory, it stalls on its stores"
    )]
    #[inline(always)]
    pub(crate) fn apply(&mut self, segment: u32, entry: &HintEntry) -> Result<(), &'static str> {
        self.max_lsn = self.max_lsn.max(entry.lsn);
        let (offset, frame_len) = match (u32::try_from(entry.offset), u32::try_from(entry.len)) {
            (Ok(offset), Ok(len)) => (offset, len),
            // A tombstone is never indexed: only its key and LSN count.
            _ if entry.kind == Kind::Tombstone => (u32::MAX, 0),
            _ => return Err("frame beyond 4 GiB"),
        };
        let frame = Replayed {
            hash: entry.hash,
            lsn: entry.lsn,
            deadline_ms: entry.deadline_ms,
            segment,
            offset,
            frame_len,
            kind: entry.kind,
        };
        let part = self.frames.groups.map_or(0, |groups| groups.part(entry.hash));
        // Bits 32.. of the hash choose the place, bits 64.. are checked
        // there before the frame it names is read.
        #[expect(clippy::cast_possible_truncation, reason = "any bits of a uniform hash")]
        let (place, check) = ((entry.hash >> 32) as usize % RECENT, (entry.hash >> 64) as u32);
        let known = Recent::unpack(self.recent[place]).filter(|known| known.check == check);
        let frames = self.frames.part_mut(part);
        match known.and_then(|known| frames.get_mut(known.index)) {
            Some(known) if hash_of(known) == frame.hash => {
                // Newest LSN wins; of two copies of one frame, the first.
                if frame.lsn > known[2] {
                    *known = frame.pack();
                }
            }
            _ => {
                let index = self.frames.push(part, frame.pack());
                self.recent[place] = Recent::pack(check, index);
            }
        }
        Ok(())
    }

    /// Where the frames applied so far end: a mark for
    /// [`Replay::forget_after`]. Frames applied later never take the
    /// place of one applied before.
    pub(crate) fn applied(&mut self) -> Mark {
        self.recent.fill(Recent::NONE);
        Mark(self.frames.lens.clone())
    }

    /// Forgets the frames applied after `mark`: those of a hint found
    /// damaged half-way, whose segment the log then replays whole.
    pub(crate) fn forget_after(&mut self, mark: &Mark) {
        for (len, marked) in self.frames.lens.iter_mut().zip(&mark.0) {
            *len = (*len).min(*marked);
        }
    }

    /// The frames applied.
    pub(crate) fn into_frames(self) -> Frames {
        self.frames
    }
}

/// The newest put of every key present in a shard's log, as
/// [`Frames::finish`] leaves them: what open builds the index table from.
#[derive(Debug, Default)]
pub(crate) struct Rebuilt(Frames);

impl Rebuilt {
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The keys, part after part.
    pub(crate) fn iter(&self) -> impl Iterator<Item = Replayed> + '_ {
        let Frames { packed, room, lens, .. } = &self.0;
        lens.iter().enumerate().flat_map(move |(part, len)| packed[part * room..][..*len].iter().map(Replayed::unpack))
    }
}

/// Which group a frame's key falls in: its bucket in a table of the
/// expected keys, less its low `shift` bits, a number of `bits` bits; and
/// which part: the group's top `part_bits`.
#[derive(Debug, Clone, Copy)]
struct Groups {
    geometry: Geometry,
    shift: u32,
    bits: u32,
    part_bits: u32,
}

impl Groups {
    /// The groups of a table of `keys` keys: a few hundred buckets each,
    /// in the table's order. Open builds a table of the keys it found,
    /// which are about as many; where the two tables differ, some keys of
    /// a group go to other buckets than its neighbours.
    fn of(keys: usize) -> Self {
        let geometry = Geometry::of(keys);
        let bucket_bits = geometry.level() + 1;
        let bits = bucket_bits.saturating_sub(REGION_BITS).min(GROUP_BITS);
        Groups { geometry, shift: bucket_bits - bits, bits, part_bits: bits.min(PART_BITS) }
    }

    fn parts(self) -> usize {
        1 << self.part_bits
    }

    fn group(self, hash: u128) -> usize {
        self.geometry.home(index::tag(hash)) >> self.shift
    }

    fn part(self, hash: u128) -> usize {
        self.group(hash) >> (self.bits - self.part_bits)
    }

    /// Sorts a part's frames in place by group, the order within a group
    /// not kept; returns where each of its groups starts, and the end.
    fn sort_part(self, frames: &mut [Packed]) -> Vec<usize> {
        let bits = self.bits - self.part_bits;
        let mut starts = Vec::with_capacity((1 << bits) + 1);
        self.sort_below(frames, 0, bits, &mut starts);
        starts.push(frames.len());
        starts
    }

    /// Sorts `frames`, which start at `base` of their part and agree on
    /// every bit of their group from bit `bits` up, by the bits below,
    /// [`PASS_BITS`] a pass; pushes where each of their groups starts to
    /// `starts`, in order.
    fn sort_below(self, frames: &mut [Packed], base: usize, bits: u32, starts: &mut Vec<usize>) {
        if bits == 0 {
            starts.push(base);
            return;
        }
        let pass = bits.min(PASS_BITS);
        let below = bits - pass;
        let digit = |frame: &Packed| (self.group(hash_of(frame)) >> below) & ((1 << pass) - 1);
        let bounds = flag_sort(frames, 1 << pass, digit);
        for part in bounds.windows(2) {
            self.sort_below(&mut frames[part[0]..part[1]], base + part[0], below, starts);
        }
    }
}

/// Sorts `frames` in place by `digit` (below `digits`): an American flag
/// sort, one pass to count, one to swap each frame into its place. Returns
/// where each digit's frames start, and the end.
fn flag_sort(frames: &mut [Packed], digits: usize, digit: impl Fn(&Packed) -> usize) -> Vec<usize> {
    let mut starts = vec![0usize; digits + 1];
    for frame in frames.iter() {
        starts[digit(frame) + 1] += 1;
    }
    for at in 0..digits {
        starts[at + 1] += starts[at];
    }
    let mut next = starts[..digits].to_vec();
    for place in 0..digits {
        let end = starts[place + 1];
        // Bounded: each turn moves one of the `next` cursors forward, and
        // together they move at most `frames.len()` times.
        while next[place] < end {
            let at = next[place];
            let home = digit(&frames[at]);
            if home != place {
                frames.swap(at, next[home]);
            }
            next[home] += 1;
        }
    }
    starts
}

/// What [`Newest::keep`] reuses from group to group.
#[derive(Debug, Default)]
struct Newest {
    /// An open-addressing table of indices into the group.
    slots: Vec<usize>,
    /// Whether each frame of the group is kept.
    kept: Vec<bool>,
}

const NO_FRAME: usize = usize::MAX;

impl Newest {
    /// Moves the newest frame of each key of `frames[group]`, if it is a
    /// put, to `frames[kept..]`, in the group's order; returns how many
    /// frames are kept so far. `kept` is at most `group.start`, so no frame
    /// is overwritten before it is read.
    fn keep(&mut self, frames: &mut [Packed], group: Range<usize>, kept: usize) -> usize {
        debug_assert!(kept <= group.start);
        let members = &frames[group.clone()];
        let size = (members.len() * 2).next_power_of_two().max(8);
        self.slots.clear();
        self.slots.resize(size, NO_FRAME);
        for (index, frame) in members.iter().enumerate() {
            let hash = hash_of(frame);
            // Bits 32.. of the hash: neither the tag's (which chose the
            // group) nor the shard's (bits 96..).
            let mut at = (hash >> 32) as usize & (size - 1);
            // Bounded: the table has more slots than the group has frames.
            for _ in 0..size {
                let slot = &mut self.slots[at];
                if *slot == NO_FRAME {
                    *slot = index;
                    break;
                }
                let held = &members[*slot];
                if hash_of(held) == hash {
                    // Newest LSN wins; of two copies of one frame, the first.
                    if frame[2] > held[2] {
                        *slot = index;
                    }
                    break;
                }
                at = (at + 1) & (size - 1);
            }
        }
        self.kept.clear();
        self.kept.resize(members.len(), false);
        for &slot in self.slots.iter().filter(|slot| **slot != NO_FRAME) {
            self.kept[slot] = is_put(&members[slot]);
        }
        let mut kept = kept;
        for (index, keep) in self.kept.iter().enumerate() {
            if *keep {
                frames[kept] = frames[group.start + index];
                kept += 1;
            }
        }
        kept
    }
}

#[cfg(test)]
mod tests;
