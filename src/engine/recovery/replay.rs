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
//!    (a few hundred parts): vectors each written in order. Where a key's
//!    last frame is still known (a claim, then its completion), the newer
//!    takes its place instead.
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

use crate::engine::entry::KeyHasher;
use crate::engine::index::{self, Address, Geometry};
use crate::engine::segment::hint::HintEntry;
use crate::keyspace::Keyspace;
use crate::record::Kind;
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

const _: () = assert!(std::mem::size_of::<Replayed>() == 48);

impl Replayed {
    pub(crate) fn address(&self) -> Address {
        Address { segment: self.segment, offset: self.offset, len: self.frame_len }
    }
}

/// The frames of a shard's hints and log, by part, each part in the order
/// they came: what recovery hands to the shard it builds.
#[derive(Debug, Default)]
pub(crate) struct Frames {
    /// The groups, if known from the start; until then, one part.
    groups: Option<Groups>,
    parts: Vec<Vec<Replayed>>,
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
        (word != Recent::NONE).then(|| Recent { check, index: index as usize })
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
        let parts = groups.map_or(1, Groups::parts);
        // A little more than a part's share: parts differ by a few percent.
        let each = frames / parts + frames / parts / 16;
        let parts = (0..parts).map(|_| Vec::with_capacity(each)).collect();
        let frames = Frames { groups, parts };
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
    /// [`Replay::finish`] would make of them. Anything else is added.
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
        let Frames { groups, parts } = &mut self.frames;
        let part = &mut parts[groups.map_or(0, |groups| groups.part(entry.hash))];
        // Bits 32.. of the hash choose the place, bits 64.. are checked
        // there before the frame it names is read.
        #[expect(clippy::cast_possible_truncation, reason = "any bits of a uniform hash")]
        let (place, check) = ((entry.hash >> 32) as usize % RECENT, (entry.hash >> 64) as u32);
        let recent = &mut self.recent[place];
        let known = Recent::unpack(*recent).filter(|known| known.check == check);
        match known.and_then(|known| part.get_mut(known.index)) {
            Some(known) if known.hash == frame.hash => {
                // Newest LSN wins; of two copies of one frame, the first.
                if frame.lsn > known.lsn {
                    *known = frame;
                }
            }
            _ => {
                *recent = Recent::pack(check, part.len());
                part.push(frame);
            }
        }
        Ok(())
    }

    /// Where the frames applied so far end: a mark for
    /// [`Replay::forget_after`]. Frames applied later never take the
    /// place of one applied before.
    pub(crate) fn applied(&mut self) -> Mark {
        self.recent.fill(Recent::NONE);
        Mark(self.frames.parts.iter().map(Vec::len).collect())
    }

    /// Forgets the frames applied after `mark`: those of a hint found
    /// damaged half-way, whose segment the log then replays whole.
    pub(crate) fn forget_after(&mut self, mark: &Mark) {
        for (part, len) in self.frames.parts.iter_mut().zip(&mark.0) {
            part.truncate(*len);
        }
    }

    /// The frames applied.
    pub(crate) fn into_frames(self) -> Frames {
        self.frames
    }
}

impl Frames {
    /// Frames kept (a key's frames that came close together count once).
    pub(crate) fn len(&self) -> usize {
        self.parts.iter().map(Vec::len).sum()
    }

    /// The newest record of every key, if it is a put (the keys present,
    /// expired ones too), in the order of the index table's buckets, in
    /// the room the frames took (see the module's documentation).
    pub(crate) fn finish(self) -> Rebuilt {
        // Groups chosen now have one part, and are those of a table of as
        // many keys as there are frames.
        let groups = self.groups.unwrap_or_else(|| Groups { part_bits: 0, ..Groups::of(self.len()) });
        let mut newest = Newest::default();
        let mut parts = self.parts;
        for part in &mut parts {
            let starts = groups.sort_part(part);
            let mut kept = 0;
            for group in starts.windows(2) {
                kept = newest.keep(part, group[0]..group[1], kept);
            }
            part.truncate(kept);
        }
        Rebuilt { keys: parts.iter().map(Vec::len).sum(), parts }
    }
}

/// The newest put of every key present in a shard's log, as
/// [`Frames::finish`] leaves them: what open builds the index table from.
#[derive(Debug, Default)]
pub(crate) struct Rebuilt {
    parts: Vec<Vec<Replayed>>,
    keys: usize,
}

impl Rebuilt {
    pub(crate) fn len(&self) -> usize {
        self.keys
    }
}

impl IntoIterator for Rebuilt {
    type Item = Replayed;
    type IntoIter = std::iter::Flatten<std::vec::IntoIter<Vec<Replayed>>>;

    /// The keys, each part freed once read.
    fn into_iter(self) -> Self::IntoIter {
        self.parts.into_iter().flatten()
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
    fn sort_part(self, frames: &mut [Replayed]) -> Vec<usize> {
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
    fn sort_below(self, frames: &mut [Replayed], base: usize, bits: u32, starts: &mut Vec<usize>) {
        if bits == 0 {
            starts.push(base);
            return;
        }
        let pass = bits.min(PASS_BITS);
        let below = bits - pass;
        let digit = |frame: &Replayed| (self.group(frame.hash) >> below) & ((1 << pass) - 1);
        let bounds = flag_sort(frames, 1 << pass, digit);
        for part in bounds.windows(2) {
            self.sort_below(&mut frames[part[0]..part[1]], base + part[0], below, starts);
        }
    }
}

/// Sorts `frames` in place by `digit` (below `digits`): an American flag
/// sort, one pass to count, one to swap each frame into its place. Returns
/// where each digit's frames start, and the end.
fn flag_sort(frames: &mut [Replayed], digits: usize, digit: impl Fn(&Replayed) -> usize) -> Vec<usize> {
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
    fn keep(&mut self, frames: &mut [Replayed], group: Range<usize>, kept: usize) -> usize {
        debug_assert!(kept <= group.start);
        let members = &frames[group.clone()];
        let size = (members.len() * 2).next_power_of_two().max(8);
        self.slots.clear();
        self.slots.resize(size, NO_FRAME);
        for (index, frame) in members.iter().enumerate() {
            // Bits 32.. of the hash: neither the tag's (which chose the
            // group) nor the shard's (bits 96..).
            #[expect(clippy::cast_possible_truncation, reason = "any 64 bits of a uniform hash")]
            let mut at = (frame.hash >> 32) as usize & (size - 1);
            // Bounded: the table has more slots than the group has frames.
            for _ in 0..size {
                let slot = &mut self.slots[at];
                if *slot == NO_FRAME {
                    *slot = index;
                    break;
                }
                let held = &members[*slot];
                if held.hash == frame.hash {
                    // Newest LSN wins; of two copies of one frame, the first.
                    if frame.lsn > held.lsn {
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
            self.kept[slot] = matches!(members[slot].kind, Kind::Put(_));
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
