//! The compact index table of a shard: where the newest record of each key
//! is, and nothing else.
//!
//! An entry is 16 bytes: a 32-bit tag of the key's index hash, the frame's
//! length, and its address (segment, offset). Four entries fill a 64-byte,
//! cache-line-aligned bucket. A lookup reads the key's bucket, and a tag
//! that matches is a *candidate*: the caller reads its record and compares
//! the key, so two keys with the same tag simply both stay indexed.
//!
//! Buckets are addressed by linear hashing (Litwin, 1980): `2^level +
//! split` buckets, bucket `tag mod 2^level`, or `tag mod 2^(level+1)` below
//! the split pointer. When the table passes [`LOAD_NUM`]/[`LOAD_DEN`] of
//! its slots, one bucket splits into itself and one new bucket: the table
//! grows a bucket at a time, never by a rehash of the whole, and its memory
//! grows with it (buckets live in fixed chunks, so nothing is copied). A
//! bucket that overflows keeps three entries and links its fourth slot to
//! an overflow bucket, from a second chunked arena with a free list. A
//! chain is packed: every bucket of it but the last is full, and the last
//! holds its entries from slot 0 on.
//!
//! At 0.8 of the slots in use the table spends under 30 bytes per entry,
//! overflow buckets included (the unit test's bound at 100,000 entries;
//! `docs/architecture.md` has the measured figures).

/// Slots per bucket.
const SLOTS: usize = 4;
/// Buckets per chunk: 16 KiB.
const CHUNK: usize = 256;
/// Buckets of an empty table.
const LEVEL_MIN: u32 = 3;
/// Splits happen above this fill of the primary slots...
const LOAD_NUM: usize = 4;
const LOAD_DEN: usize = 5;
/// ...and merges below half of it.
const EMPTY_ADDR: u64 = 0;
/// The address of a link slot: offset 1 of segment 0 holds no record (a
/// segment's header comes first).
const LINK_ADDR: u64 = 1;

/// Primary buckets of a table that holds `entries` without a split.
fn primary_buckets(entries: usize) -> usize {
    entries.saturating_mul(LOAD_DEN).div_ceil(SLOTS * LOAD_NUM).max(1 << LEVEL_MIN)
}

/// Which bucket a tag goes to, in a table of `2^level + split` buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    level: u32,
    split: usize,
}

impl Geometry {
    /// The buckets of a table made to hold `entries`
    /// ([`Table::with_capacity`], [`Table::filling`]): what open orders the
    /// keys it finds by, so that it fills the table a region at a time.
    pub(crate) fn of(entries: usize) -> Geometry {
        let buckets = primary_buckets(entries);
        let level = (usize::BITS - 1 - buckets.leading_zeros()).max(LEVEL_MIN);
        Geometry { level, split: buckets - (1 << level) }
    }

    /// Buckets are numbered below `2^(level + 1)`.
    pub(crate) fn level(self) -> u32 {
        self.level
    }

    /// The bucket of `tag`.
    #[inline]
    pub(crate) fn home(self, tag: u32) -> usize {
        let tag = tag as usize;
        let low = tag & ((1 << self.level) - 1);
        if low < self.split {
            tag & ((1 << (self.level + 1)) - 1)
        } else {
            low
        }
    }
}

/// Where a record is: the table's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Address {
    pub segment: u32,
    pub offset: u32,
    pub len: u32,
}

impl Address {
    fn packed(self) -> u64 {
        (u64::from(self.segment) << 32) | u64::from(self.offset)
    }
}

/// The tag of an index hash: its low 32 bits (the shard was chosen from
/// the top bits of the high word, so the two are independent).
#[inline]
pub(crate) fn tag(hash: u128) -> u32 {
    #[expect(clippy::cast_possible_truncation, reason = "the tag is the low 32 bits")]
    let tag = hash as u32;
    tag
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    tag: u32,
    len: u32,
    addr: u64,
}

impl Slot {
    const EMPTY: Slot = Slot { tag: 0, len: 0, addr: EMPTY_ADDR };

    fn of(tag: u32, at: Address) -> Slot {
        debug_assert!(at.packed() > LINK_ADDR, "no record sits at offset 0 or 1");
        Slot { tag, len: at.len, addr: at.packed() }
    }

    fn link(to: u32) -> Slot {
        Slot { tag: 0, len: to, addr: LINK_ADDR }
    }

    fn is_empty(self) -> bool {
        self.addr == EMPTY_ADDR
    }

    fn is_link(self) -> bool {
        self.addr == LINK_ADDR
    }

    fn address(self) -> Address {
        #[expect(clippy::cast_possible_truncation, reason = "unpacking the two halves")]
        Address { segment: (self.addr >> 32) as u32, offset: self.addr as u32, len: self.len }
    }

    fn is_at(self, tag: u32, segment: u32, offset: u32) -> bool {
        self.tag == tag && self.addr == Address { segment, offset, len: 0 }.packed()
    }
}

#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Bucket([Slot; SLOTS]);

const _: () = assert!(std::mem::size_of::<Bucket>() == 64);

impl Bucket {
    const EMPTY: Bucket = Bucket([Slot::EMPTY; SLOTS]);

    /// The overflow bucket this one links to.
    fn next(&self) -> Option<u32> {
        let last = self.0[SLOTS - 1];
        last.is_link().then_some(last.len)
    }
}

/// Buckets in fixed chunks: growing never moves one.
#[derive(Debug, Default)]
struct Arena {
    chunks: Vec<Box<[Bucket]>>,
    len: usize,
}

impl Arena {
    fn get(&self, index: usize) -> &Bucket {
        &self.chunks[index / CHUNK][index % CHUNK]
    }

    fn get_mut(&mut self, index: usize) -> &mut Bucket {
        &mut self.chunks[index / CHUNK][index % CHUNK]
    }

    fn push(&mut self) -> usize {
        if self.len == self.chunks.len() * CHUNK {
            self.chunks.push(vec![Bucket::EMPTY; CHUNK].into_boxed_slice());
        }
        self.len += 1;
        self.len - 1
    }

    /// Drops the last bucket (which must be empty), and its chunk once
    /// that is empty.
    fn pop(&mut self) {
        self.len -= 1;
        if self.len.is_multiple_of(CHUNK) {
            self.chunks.pop();
        }
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.chunks.len() * CHUNK * std::mem::size_of::<Bucket>() + self.chunks.capacity() * 16
    }
}

/// Where a slot is: a primary bucket, or an overflow bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Primary(usize),
    Overflow(usize),
}

/// A shard's index table (see the module's documentation).
#[derive(Debug)]
pub(crate) struct Table {
    primary: Arena,
    overflow: Arena,
    free: Vec<u32>,
    level: u32,
    split: usize,
    len: usize,
    scratch: Vec<Slot>,
}

impl Default for Table {
    fn default() -> Self {
        Table::with_capacity(0)
    }
}

impl Table {
    /// A table that holds `entries` without a split.
    pub(crate) fn with_capacity(entries: usize) -> Table {
        Table::filling(entries).finish()
    }

    /// A table presized as by [`Table::with_capacity`], whose primary
    /// buckets are made as [`Filling::insert`] first reaches them (see
    /// [`Filling`]).
    pub(crate) fn filling(entries: usize) -> Filling {
        let Geometry { level, split } = Geometry::of(entries);
        let table = Table {
            primary: Arena::default(),
            overflow: Arena::default(),
            free: Vec::new(),
            level,
            split,
            len: 0,
            scratch: Vec::new(),
        };
        Filling { table, buckets: primary_buckets(entries), entries }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes of memory the table holds.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.primary.bytes() + self.overflow.bytes() + self.free.capacity() * 4
    }

    fn buckets(&self) -> usize {
        (1 << self.level) + self.split
    }

    fn home(&self, tag: u32) -> usize {
        Geometry { level: self.level, split: self.split }.home(tag)
    }

    fn bucket(&self, at: At) -> &Bucket {
        match at {
            At::Primary(index) => self.primary.get(index),
            At::Overflow(index) => self.overflow.get(index),
        }
    }

    fn bucket_mut(&mut self, at: At) -> &mut Bucket {
        match at {
            At::Primary(index) => self.primary.get_mut(index),
            At::Overflow(index) => self.overflow.get_mut(index),
        }
    }

    /// The addresses of every entry with `tag`.
    pub(crate) fn candidates(&self, tag: u32) -> Candidates<'_> {
        Candidates { table: self, bucket: self.primary.get(self.home(tag)), slot: 0, tag }
    }

    /// Whether the entry `(tag, segment, offset)` is in the table.
    pub(crate) fn contains(&self, tag: u32, segment: u32, offset: u32) -> bool {
        self.candidates(tag).any(|at| at.segment == segment && at.offset == offset)
    }

    /// Adds an entry. The caller knows the key has no entry yet (an entry
    /// that moves goes through [`Table::replace`]).
    pub(crate) fn insert(&mut self, tag: u32, at: Address) {
        self.place(Slot::of(tag, at));
        self.len += 1;
        while self.len * LOAD_DEN > self.buckets() * SLOTS * LOAD_NUM {
            self.split_one();
        }
    }

    /// Points the entry `(tag, segment, offset)` at `to`; returns whether
    /// it was there.
    pub(crate) fn replace(&mut self, tag: u32, segment: u32, offset: u32, to: Address) -> bool {
        let Some((at, slot)) = self.position(tag, segment, offset) else {
            return false;
        };
        self.bucket_mut(at).0[slot] = Slot::of(tag, to);
        true
    }

    /// Removes the entry `(tag, segment, offset)`; returns whether it was
    /// there.
    pub(crate) fn remove(&mut self, tag: u32, segment: u32, offset: u32) -> bool {
        let Some((at, slot)) = self.position(tag, segment, offset) else {
            return false;
        };
        self.take(self.home(tag), at, slot);
        self.len -= 1;
        true
    }

    /// Every entry, as `(tag, address)`.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, Address)> + '_ {
        (0..self.buckets()).flat_map(move |home| {
            let mut at = Some(At::Primary(home));
            std::iter::from_fn(move || {
                let bucket = self.bucket(at?);
                at = bucket.next().map(|next| At::Overflow(next as usize));
                Some(bucket.0.iter().filter(|slot| !slot.is_empty() && !slot.is_link()).map(|s| (s.tag, s.address())))
            })
            .flatten()
        })
    }

    /// Merges buckets back while under half the load that splits them.
    pub(crate) fn shrink(&mut self) {
        while self.buckets() > 1 << LEVEL_MIN && self.len * LOAD_DEN * 2 < self.buckets() * SLOTS * LOAD_NUM {
            self.merge_one();
        }
        if self.free.len() == self.overflow.len {
            self.free.clear();
            self.overflow = Arena::default();
        }
        self.free.shrink_to_fit();
    }

    /// The bucket and slot of `(tag, segment, offset)`.
    fn position(&self, tag: u32, segment: u32, offset: u32) -> Option<(At, usize)> {
        let mut at = At::Primary(self.home(tag));
        loop {
            let bucket = self.bucket(at);
            for (index, slot) in bucket.0.iter().enumerate() {
                if slot.is_empty() {
                    return None;
                }
                if slot.is_at(tag, segment, offset) {
                    return Some((at, index));
                }
            }
            at = At::Overflow(bucket.next()? as usize);
        }
    }

    /// Appends `slot` to the chain of its home bucket.
    fn place(&mut self, slot: Slot) {
        let mut at = At::Primary(self.home(slot.tag));
        while let Some(next) = self.bucket(at).next() {
            at = At::Overflow(next as usize);
        }
        let bucket = self.bucket_mut(at);
        if let Some(free) = bucket.0.iter_mut().find(|slot| slot.is_empty()) {
            *free = slot;
            return;
        }
        // Full: the last slot's entry and the new one go to a new overflow
        // bucket, and the last slot links to it.
        let moved = bucket.0[SLOTS - 1];
        let next = match self.free.pop() {
            Some(index) => index as usize,
            None => self.overflow.push(),
        };
        let overflow = self.overflow.get_mut(next);
        overflow.0 = [moved, slot, Slot::EMPTY, Slot::EMPTY];
        let link = u32::try_from(next).expect("fewer than 2^32 overflow buckets");
        self.bucket_mut(at).0[SLOTS - 1] = Slot::link(link);
    }

    /// Removes the slot `slot` of `at` in the chain of `home`, keeping the
    /// chain packed: the chain's last entry moves into the hole.
    fn take(&mut self, home: usize, at: At, slot: usize) {
        let mut previous = None;
        let mut last = At::Primary(home);
        while let Some(next) = self.bucket(last).next() {
            previous = Some(last);
            last = At::Overflow(next as usize);
        }
        let bucket = self.bucket(last);
        let end = bucket.0.iter().position(|slot| slot.is_empty()).unwrap_or(SLOTS) - 1;
        let moved = bucket.0[end];
        self.bucket_mut(last).0[end] = Slot::EMPTY;
        if (last, end) != (at, slot) {
            self.bucket_mut(at).0[slot] = moved;
        }
        if end == 0 {
            if let (Some(previous), At::Overflow(index)) = (previous, last) {
                // The last overflow bucket is empty: unlink and free it.
                self.bucket_mut(previous).0[SLOTS - 1] = Slot::EMPTY;
                self.free.push(u32::try_from(index).expect("fewer than 2^32 overflow buckets"));
            }
        }
    }

    /// Takes every entry of the chain of `home` out into the scratch list,
    /// freeing its overflow buckets.
    fn drain(&mut self, home: usize) {
        let mut at = Some(At::Primary(home));
        while let Some(here) = at {
            let bucket = std::mem::replace(self.bucket_mut(here), Bucket::EMPTY);
            at = bucket.next().map(|next| At::Overflow(next as usize));
            if let At::Overflow(index) = here {
                self.free.push(u32::try_from(index).expect("fewer than 2^32 overflow buckets"));
            }
            self.scratch.extend(bucket.0.iter().filter(|slot| !slot.is_empty() && !slot.is_link()));
        }
    }

    fn split_one(&mut self) {
        let from = self.split;
        self.drain(from);
        self.primary.push();
        self.split += 1;
        if self.split == 1 << self.level {
            self.level += 1;
            self.split = 0;
        }
        self.replace_scratch();
    }

    fn merge_one(&mut self) {
        if self.split == 0 {
            self.level -= 1;
            self.split = 1 << self.level;
        }
        self.split -= 1;
        let last = self.buckets();
        self.drain(last);
        self.primary.pop();
        self.replace_scratch();
    }

    fn replace_scratch(&mut self) {
        let mut scratch = std::mem::take(&mut self.scratch);
        for slot in scratch.drain(..) {
            self.place(slot);
        }
        self.scratch = scratch;
    }
}

/// A table being filled at open ([`Table::filling`]). Its primary buckets
/// are made in order, as far as the bucket an insert needs: entries that
/// come in the order of their buckets' regions (as open's are) each find
/// theirs freshly made, in the cache, where buckets made all at once
/// would have left it long before.
#[derive(Debug)]
pub(crate) struct Filling {
    table: Table,
    /// Primary buckets of the whole table.
    buckets: usize,
    /// Entries it is presized for.
    entries: usize,
}

impl Filling {
    /// [`Table::insert`].
    pub(crate) fn insert(&mut self, tag: u32, at: Address) {
        if self.table.len >= self.entries {
            // Past its presized room a table splits buckets: all of them
            // must be there.
            self.make_all();
        }
        let home = self.table.home(tag);
        while self.table.primary.len <= home {
            self.table.primary.push();
        }
        self.table.insert(tag, at);
    }

    fn make_all(&mut self) {
        while self.table.primary.len < self.buckets {
            self.table.primary.push();
        }
    }

    /// The table, every bucket made.
    pub(crate) fn finish(mut self) -> Table {
        self.make_all();
        self.table
    }
}

/// The addresses of the entries with one tag ([`Table::candidates`]).
pub(crate) struct Candidates<'a> {
    table: &'a Table,
    bucket: &'a Bucket,
    slot: usize,
    tag: u32,
}

impl Iterator for Candidates<'_> {
    type Item = Address;

    fn next(&mut self) -> Option<Address> {
        loop {
            if self.slot == SLOTS {
                return None;
            }
            let slot = self.bucket.0[self.slot];
            self.slot += 1;
            if slot.is_empty() {
                return None;
            }
            if slot.is_link() {
                self.bucket = self.table.overflow.get(slot.len as usize);
                self.slot = 0;
                continue;
            }
            if slot.tag == self.tag {
                return Some(slot.address());
            }
        }
    }
}

#[cfg(test)]
mod tests;
