//! Compaction: which sealed segments to drop or rewrite (a pure policy,
//! [`choose`]), and the report of a pass. The shard executes the plan
//! (`shard/compact.rs`).
//!
//! Rules that keep a removed, released or expired key from coming back:
//! - A record that is no longer its key's newest is dropped: the newer one,
//!   in a later segment, shadows it for as long as it exists.
//! - The newest record of a dead key (a tombstone, or a put whose key is
//!   absent) may shadow older records of that key in older segments. In the
//!   oldest segment nothing older exists, so it is dropped; elsewhere it is
//!   kept, a put rewritten as a tombstone (its response is gone).
//! - A segment is rewritten in place under its own id (write a temporary
//!   file, fsync, rename over the old one, fsync the directory), so segment
//!   order stays LSN order; a temporary file left by a crash is deleted at
//!   open.

use crate::engine::entry::Entry;
use std::collections::BTreeMap;

/// Live-data accounting of one segment, kept current by the shard.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SegmentUsage {
    /// Bytes in the file, header included.
    pub total_bytes: u64,
    /// Bytes of records that the index points at.
    pub live_bytes: u64,
    /// The same bytes by the wall-clock time they read absent from
    /// ([`Entry::deadline_ms`]: a TTL, or lease end + TTL for an abandoned
    /// Processing record), rounded up to the second: what expiry will free,
    /// and when. A Processing record whose lease still runs by elapsed time
    /// (the wall clock jumped) may be counted early; compaction checks each
    /// record before it drops one, so that only makes a rewrite find less.
    expiring: BTreeMap<u64, u64>,
    /// Rewritten, and no record here has been superseded or released since:
    /// rewriting again would reclaim nothing until records expire.
    pub settled: bool,
}

/// The expiry bucket of a deadline: its second, rounded up, so a bucket is
/// wholly expired once `now` reaches it.
fn bucket(deadline_ms: u64) -> u64 {
    deadline_ms.div_ceil(1000).saturating_mul(1000)
}

/// Expiry buckets a segment's [`UsageTally`] adds up at once.
const TALLY_WAYS: usize = 8;
/// Segments a [`UsageTally`] adds up for at most.
const TALLY_SEGMENTS_MAX: usize = 1 << 16;

/// Live bytes found at open, added up a record at a time before they go
/// into each segment's [`SegmentUsage`], where an addition is two map
/// lookups: by segment in an array, and within a segment by expiry bucket
/// in a few places (most of a segment's records share a few seconds).
/// What does not fit goes into the usage at once; the sums are the same.
#[derive(Debug)]
pub(crate) struct UsageTally {
    first: u32,
    /// Per segment from `first`: `(bucket, bytes)` by the bucket's second.
    buckets: Vec<[(u64, u64); TALLY_WAYS]>,
}

impl UsageTally {
    /// A tally for the segments of `usage`, whose ids follow one another.
    pub(crate) fn new(usage: &BTreeMap<u32, SegmentUsage>) -> Self {
        let first = usage.keys().next().copied().unwrap_or(0);
        let last = usage.keys().next_back().copied().unwrap_or(first);
        let count = usize::try_from(last - first).map_or(0, |span| span + 1);
        let count = if count > TALLY_SEGMENTS_MAX || usage.is_empty() { 0 } else { count };
        UsageTally { first, buckets: vec![[(0, 0); TALLY_WAYS]; count] }
    }

    /// [`SegmentUsage::add_bytes`] for segment `segment` of `usage`.
    pub(crate) fn add(
        &mut self,
        usage: &mut BTreeMap<u32, SegmentUsage>,
        segment: u32,
        frame_len: u32,
        deadline_ms: u64,
    ) {
        let at = segment.checked_sub(self.first).and_then(|at| usize::try_from(at).ok());
        let Some(ways) = at.and_then(|at| self.buckets.get_mut(at)) else {
            usage.entry(segment).or_default().add_bytes(frame_len, deadline_ms);
            return;
        };
        let bucket = bucket(deadline_ms);
        let way = &mut ways[usize::try_from(bucket / 1000).unwrap_or(0) % TALLY_WAYS];
        if way.0 != bucket {
            if way.1 > 0 {
                usage.entry(segment).or_default().add_expiring(way.0, way.1);
            }
            *way = (bucket, 0);
        }
        way.1 += u64::from(frame_len);
    }

    /// Puts what is still added up into `usage`.
    pub(crate) fn finish(self, usage: &mut BTreeMap<u32, SegmentUsage>) {
        for (segment, ways) in (self.first..).zip(&self.buckets) {
            for &(bucket, bytes) in ways.iter().filter(|(_, bytes)| *bytes > 0) {
                usage.entry(segment).or_default().add_expiring(bucket, bytes);
            }
        }
    }
}

impl SegmentUsage {
    pub(crate) fn with_total(total_bytes: u64) -> Self {
        SegmentUsage { total_bytes, ..SegmentUsage::default() }
    }

    pub(crate) fn add(&mut self, entry: &Entry) {
        self.add_bytes(entry.frame_len, entry.deadline_ms);
    }

    /// [`SegmentUsage::add`] of a record of `frame_len` bytes that reads
    /// absent from `deadline_ms`.
    pub(crate) fn add_bytes(&mut self, frame_len: u32, deadline_ms: u64) {
        self.add_expiring(bucket(deadline_ms), u64::from(frame_len));
    }

    /// Adds `bytes` of records whose expiry bucket is `bucket`.
    fn add_expiring(&mut self, bucket: u64, bytes: u64) {
        self.live_bytes += bytes;
        *self.expiring.entry(bucket).or_default() += bytes;
    }

    pub(crate) fn release(&mut self, entry: &Entry) {
        self.settled = false;
        self.live_bytes = self.live_bytes.saturating_sub(u64::from(entry.frame_len));
        let key = bucket(entry.deadline_ms);
        if let Some(bytes) = self.expiring.get_mut(&key) {
            *bytes = bytes.saturating_sub(u64::from(entry.frame_len));
            if *bytes == 0 {
                self.expiring.remove(&key);
            }
        }
    }

    /// Bytes of indexed records whose TTL has passed by `now_ms`.
    pub(crate) fn expired_bytes(&self, now_ms: u64) -> u64 {
        self.expiring.range(..=now_ms).map(|(_, bytes)| bytes).sum()
    }

    /// What the policy sees of this segment at `now_ms`.
    pub(crate) fn view(&self, id: u32, now_ms: u64) -> SegmentView {
        let expired = self.expired_bytes(now_ms);
        SegmentView {
            id,
            total_bytes: self.total_bytes,
            live_bytes: self.live_bytes.saturating_sub(expired),
            settled: self.settled && expired == 0,
        }
    }
}

/// A sealed segment as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentView {
    pub id: u32,
    pub total_bytes: u64,
    /// Live bytes not yet expired.
    pub live_bytes: u64,
    /// Rewritten, and nothing in it died since.
    pub settled: bool,
}

/// The thresholds of the policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Policy {
    /// Rewrite a segment whose live fraction is below this.
    pub live_fraction_min: f64,
    /// At most this many actions per shard and pass.
    pub actions_max: usize,
}

/// What to do with one sealed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// The oldest segment holds nothing live: delete it without rewriting.
    Drop(u32),
    /// Copy its live records into a new file under the same id.
    Rewrite(u32),
}

/// Chooses the work of one pass over a shard's sealed segments (oldest
/// first). Pure: the same state and time give the same plan.
pub(crate) fn choose(sealed: &[SegmentView], policy: &Policy) -> Vec<Action> {
    let mut actions = Vec::new();
    let mut still_oldest = true;
    for view in sealed {
        if actions.len() >= policy.actions_max {
            break;
        }
        let live = view.live_bytes;
        if still_oldest && live == 0 {
            actions.push(Action::Drop(view.id));
            continue;
        }
        still_oldest = false;
        if view.settled {
            continue;
        }
        #[expect(clippy::cast_precision_loss, reason = "a ratio of byte counts")]
        let live_fraction = live as f64 / view.total_bytes.max(1) as f64;
        if live_fraction < policy.live_fraction_min {
            actions.push(Action::Rewrite(view.id));
        }
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::State;

    const POLICY: Policy = Policy { live_fraction_min: 0.5, actions_max: 8 };

    fn view(id: u32, total: u64, live: u64) -> SegmentView {
        SegmentView { id, total_bytes: total, live_bytes: live, settled: false }
    }

    fn entry(state: State, deadline_ms: u64, frame_len: u32) -> Entry {
        Entry { lsn: 1, token: 1, deadline_ms, segment: 1, offset: 40, frame_len, state }
    }

    #[test]
    fn a_tally_adds_up_what_adding_each_record_would() {
        let segments = || (3..8).map(|id| (id, SegmentUsage::with_total(1 << 20))).collect::<BTreeMap<u32, _>>();
        let (mut tallied, mut direct) = (segments(), segments());
        let mut tally = UsageTally::new(&tallied);
        // Records of every segment and of one outside them, with more
        // expiry seconds than a segment's tally holds at once, in no order.
        for n in 0..5000_u64 {
            let segment = u32::try_from(2 + n % 6).expect("small");
            let deadline_ms = (n * 7919) % 40 * 1000 + n % 999;
            let frame_len = u32::try_from(100 + n % 50).expect("small");
            tally.add(&mut tallied, segment, frame_len, deadline_ms);
            direct.entry(segment).or_default().add_bytes(frame_len, deadline_ms);
        }
        tally.finish(&mut tallied);
        assert_eq!(tallied, direct);
        assert!(tallied[&3].expiring.len() > TALLY_WAYS);
    }

    #[test]
    fn dead_prefix_is_dropped_whole() {
        let sealed = [view(1, 100, 0), view(2, 100, 0), view(3, 100, 90)];
        assert_eq!(choose(&sealed, &POLICY), vec![Action::Drop(1), Action::Drop(2)]);
    }

    #[test]
    fn an_empty_segment_behind_a_live_one_is_rewritten_not_dropped() {
        // Segment 3 may hold tombstones that shadow records in segment 2.
        let sealed = [view(1, 100, 0), view(2, 100, 80), view(3, 100, 0)];
        assert_eq!(choose(&sealed, &POLICY), vec![Action::Drop(1), Action::Rewrite(3)]);
    }

    #[test]
    fn mostly_dead_segments_are_rewritten() {
        let sealed = [view(1, 100, 60), view(2, 100, 40), view(3, 100, 70)];
        assert_eq!(choose(&sealed, &POLICY), vec![Action::Rewrite(2)]);
    }

    #[test]
    fn settled_segments_are_left_alone() {
        let mut settled = view(2, 100, 10);
        settled.settled = true;
        assert_eq!(choose(&[view(1, 100, 90), settled], &POLICY), vec![]);
    }

    #[test]
    fn the_plan_is_bounded() {
        let sealed: Vec<SegmentView> = (1..=20).map(|id| view(id, 100, 0)).collect();
        assert_eq!(choose(&sealed, &POLICY).len(), 8);
    }

    #[test]
    fn expiry_is_discounted_by_the_second_abandoned_leases_too() {
        let mut usage = SegmentUsage::with_total(1000);
        let short = entry(State::Completed, 1_500, 100);
        let long = entry(State::Failed, 9_000, 200);
        // A Processing entry's deadline is its lease end + TTL.
        let abandoned = entry(State::Processing, 20_000, 300);
        for entry in [&short, &long, &abandoned] {
            usage.add(entry);
        }
        assert_eq!(usage.view(1, 1_999).live_bytes, 600);
        assert_eq!(usage.view(1, 2_000).live_bytes, 500);
        assert_eq!(usage.view(1, 9_000).live_bytes, 300);
        assert_eq!(usage.view(1, 20_000).live_bytes, 0, "an abandoned lease expires too");
        usage.settled = true;
        assert!(!usage.view(1, 2_000).settled, "an expiry unsettles a segment");
        usage.release(&short);
        assert_eq!((usage.live_bytes, usage.expired_bytes(2_000)), (500, 0));
        assert!(!usage.settled);
    }
}
