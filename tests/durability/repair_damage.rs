//! Repair keeps every intact record: a damage matrix over a loaded store —
//! 1, 4 and 64 bytes flipped inside a frame's header, inside its payload
//! and inside the segment header, a truncated tail, a zeroed 4 KiB range —
//! in a sealed segment and in the active one, with the segments' hint files
//! and without them. In every case the keys lost are at most the frames
//! made unreadable, every key lost is listed (by the hint, or as the
//! damaged bytes read), `records dropped` counts the frames unreadable,
//! verify is clean after one pass, a second repair does nothing, and no
//! token is handed out twice.

use crate::common::{acquire, fingerprint, START_MS};
use idemkv::{
    store::{repair, verify, Evidence, RepairReport},
    ClaimRequest, Config, Durability, ManualClock, State, Store,
};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

const KEYS: usize = 1200;

fn config(clock: &ManualClock) -> Config {
    Config::new()
        .shards(1)
        .durability(Durability::Buffered)
        .segment_bytes(64 << 10)
        .response_bytes_max(512)
        .compaction_interval(None)
        .clock(Arc::new(clock.clone()))
}

/// Every other key in a scope of its own, so that names are two parts.
fn scope(index: usize) -> &'static str {
    if index.is_multiple_of(2) {
        ""
    } else {
        "tenant-7"
    }
}

fn key(index: usize) -> String {
    format!("key-{index:05}")
}

/// A response of about 100 bytes, its own for each key.
fn response(index: usize) -> Vec<u8> {
    format!("answer {index:05};").repeat(7).into_bytes()
}

/// The loaded store every case starts from (closed: every segment has its
/// hint), and the highest token it handed out.
fn template() -> &'static (tempfile::TempDir, u64) {
    static TEMPLATE: OnceLock<(tempfile::TempDir, u64)> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = ManualClock::new(START_MS);
        let store = Store::open(dir.path(), config(&clock)).expect("open");
        let mut max_token = 0;
        for index in 0..KEYS {
            let name = key(index);
            let request = ClaimRequest::new(&name, fingerprint(&name)).scope(scope(index).as_bytes());
            let lease = acquire(&store, &request);
            max_token = max_token.max(lease.token());
            lease.complete(&response(index)).expect("complete");
        }
        store.close().expect("close");
        (dir, max_token)
    })
}

/// A copy of the template.
fn copy_of_template() -> tempfile::TempDir {
    let copy = tempfile::tempdir().expect("tempdir");
    copy_dir(template().0.path(), copy.path());
    copy
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("ls") {
        let path = entry.expect("entry").path();
        let target = to.join(path.file_name().expect("a name"));
        if path.is_dir() {
            std::fs::create_dir(&target).expect("mkdir");
            copy_dir(&path, &target);
        } else if path.file_name().is_some_and(|name| name != "LOCK") {
            std::fs::copy(&path, &target).expect("copy");
        }
    }
}

/// Offset and length of every frame of a segment (length field at 4..8).
fn frames(segment: &Path) -> Vec<(u64, u64)> {
    let bytes = std::fs::read(segment).expect("read");
    let mut frames = Vec::new();
    let mut at = 64;
    while at + 8 <= bytes.len() {
        let payload = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes")) as usize;
        frames.push((at as u64, 8 + payload as u64));
        at += 8 + payload;
    }
    assert_eq!(at, bytes.len(), "{} holds whole frames only", segment.display());
    frames
}

/// Where a case damages its segment.
#[derive(Debug, Clone, Copy)]
enum Damage {
    /// `n` bytes flipped from `at` bytes into the middle completion frame.
    FrameFlip { at: u64, n: u64 },
    /// `n` bytes flipped from `at` bytes into the middle claim frame.
    ClaimFlip { at: u64, n: u64 },
    /// `n` bytes flipped from offset `at` of the segment header.
    HeaderFlip { at: u64, n: u64 },
    /// The segment cut `at` bytes into its middle completion frame.
    Truncate { at: u64 },
    /// 4 KiB zeroed from `at` bytes into the middle completion frame.
    Zero { at: u64 },
}

/// The frame a case damages: the completion (or claim) frame nearest the
/// middle of the segment (a completion has a response; a claim has none).
fn middle_frame(frames: &[(u64, u64)], completion: bool) -> (u64, u64) {
    let shortest = frames.iter().map(|(_, len)| *len).min().expect("frames");
    let end = frames.last().map_or(0, |(offset, len)| offset + len);
    *frames
        .iter()
        .filter(|(_, len)| (*len > shortest) == completion)
        .min_by_key(|(offset, _)| offset.abs_diff(end / 2))
        .expect("a frame of that kind")
}

/// Damages `segment`; returns how many of its frames no longer read whole.
fn damage(segment: &Path, damage: Damage) -> usize {
    let frames = frames(segment);
    let mut bytes = std::fs::read(segment).expect("read");
    let range = match damage {
        Damage::FrameFlip { at, n } | Damage::ClaimFlip { at, n } => {
            let (offset, _) = middle_frame(&frames, matches!(damage, Damage::FrameFlip { .. }));
            offset + at..offset + at + n
        }
        Damage::HeaderFlip { at, n } => at..at + n,
        Damage::Truncate { at } => {
            let (offset, _) = middle_frame(&frames, true);
            bytes.truncate(usize::try_from(offset + at).expect("small"));
            offset + at..u64::MAX
        }
        Damage::Zero { at } => {
            let (offset, _) = middle_frame(&frames, true);
            offset + at..offset + at + 4096
        }
    };
    let span = usize::try_from(range.start).expect("small")
        ..usize::try_from(range.end.min(bytes.len() as u64)).expect("small");
    for byte in &mut bytes[span] {
        *byte = if matches!(damage, Damage::Zero { .. }) { 0 } else { *byte ^ 0xff };
    }
    std::fs::write(segment, bytes).expect("write");
    frames.iter().filter(|(offset, len)| *offset < range.end && offset + len > range.start).count()
}

/// The keys whose answer is not the one the template stored.
fn lost_keys(dir: &Path) -> HashSet<(Vec<u8>, Vec<u8>)> {
    let clock = ManualClock::new(START_MS);
    let store = Store::open_read_only(dir, config(&clock)).expect("a repaired store opens");
    let mut lost = HashSet::new();
    for index in 0..KEYS {
        let (scope, key) = (scope(index).as_bytes(), key(index).into_bytes());
        let record = store.get(scope, &key).expect("every record reads");
        if !record.is_some_and(|record| record.state == State::Completed && record.response == response(index)) {
            lost.insert((scope.to_vec(), key));
        }
    }
    lost
}

/// The checks of one case, after its damage.
fn check(label: &str, dir: &Path, unreadable: usize, listed_exactly: bool) {
    let before = verify(dir).expect("verify");
    assert!(before.damage.iter().all(|damage| damage.repair.starts_with("idemkv repair would ")), "{before:?}");
    let report = repair(dir).unwrap_or_else(|error| panic!("{label}: repair: {error}"));
    // Verify calls damage exactly what repair then acts on.
    assert_eq!(before.is_clean(), report.did_nothing(), "{label}: {before:?} {report:?}");
    let verified = verify(dir).expect("verify");
    assert!(verified.is_clean(), "{label}: not clean after one repair: {:?}", verified.damage);
    assert!(verified.torn_tails.is_empty(), "{label}: {:?}", verified.torn_tails);
    let again = repair(dir).expect("second repair");
    assert!(again.did_nothing(), "{label}: a second repair did something: {again:?}");
    let lost = lost_keys(dir);
    assert!(lost.len() <= unreadable, "{label}: {} keys lost, {unreadable} frames unreadable", lost.len());
    if listed_exactly {
        assert_eq!(report.records_dropped.len(), unreadable, "{label}: records dropped: {report:?}");
        let listed: HashSet<(Vec<u8>, Vec<u8>)> =
            report.records_dropped.iter().map(|record| (record.scope.clone(), record.key.clone())).collect();
        // A key none of whose frames is left (a cut took them all) is
        // listed by its hint entries, without its name.
        let nameless = report.records_dropped.iter().filter(|record| record.evidence == Evidence::HintWithoutKey);
        let unnamed = lost.iter().filter(|key| !listed.contains(*key)).count();
        assert!(unnamed <= nameless.count(), "{label}: {unnamed} keys lost without a listing: {report:?}");
    }
    superseded_keys_read_as_before(label, &report, &lost);
    tokens_stay_above(label, dir);
}

/// A record marked superseded lost its key nothing.
fn superseded_keys_read_as_before(label: &str, report: &RepairReport, lost: &HashSet<(Vec<u8>, Vec<u8>)>) {
    for record in report.records_dropped.iter().filter(|record| record.superseded) {
        let name = (record.scope.clone(), record.key.clone());
        assert!(!lost.contains(&name), "{label}: {record:?} is marked superseded but its key was lost");
    }
}

/// The repaired store opens for writing, and a new claim's token is above
/// every token the template handed out; after that open (which writes the
/// hints again) it still verifies clean.
fn tokens_stay_above(label: &str, dir: &Path) {
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir, config(&clock)).expect("open");
    let lease = acquire(&store, &ClaimRequest::new("after-repair", fingerprint("after-repair")));
    assert!(lease.token() > template().1, "{label}: token {} handed out again", lease.token());
    lease.complete(b"done").expect("complete");
    store.close().expect("close");
    let verified = verify(dir).expect("verify");
    assert!(verified.is_clean() && verified.ignored_hints.is_empty(), "{label}: {verified:?}");
}

fn cases() -> Vec<Damage> {
    let mut cases = Vec::new();
    for n in [1, 4, 64] {
        // The length field, the CRC, the fixed fields after them.
        let at = match n {
            1 => 5,
            4 => 0,
            _ => 8,
        };
        cases.push(Damage::FrameFlip { at, n });
        // Inside the response, after the 104-byte prefix and the names.
        cases.push(Damage::FrameFlip { at: 104 + 20 + n, n });
        cases.push(Damage::HeaderFlip { at: if n == 4 { 20 } else { 0 }, n });
    }
    cases.push(Damage::ClaimFlip { at: 30, n: 4 });
    cases.push(Damage::Truncate { at: 50 });
    // At a frame boundary: only the hint tells what is gone.
    cases.push(Damage::Truncate { at: 0 });
    cases.push(Damage::Zero { at: 50 });
    cases
}

/// Runs every case on the segment `pick` chooses, with or without hints.
fn run(pick: fn(&[PathBuf]) -> PathBuf, hints: bool) {
    for case in cases() {
        let dir = copy_of_template();
        let segment = pick(&crate::common::segment_files(dir.path(), 0));
        if !hints {
            crate::common::delete_hints(dir.path());
        }
        let unreadable = damage(&segment, case);
        let label = format!("{case:?} in {} ({})", segment.display(), if hints { "hints" } else { "no hints" });
        // Without a hint, records whose every byte is gone cannot be named.
        let listed_exactly = hints || matches!(case, Damage::FrameFlip { .. } | Damage::ClaimFlip { .. });
        check(&label, dir.path(), unreadable, listed_exactly);
    }
}

fn a_sealed_segment(segments: &[PathBuf]) -> PathBuf {
    assert!(segments.len() >= 4, "the template spans several segments: {segments:?}");
    segments[segments.len() / 2].clone()
}

fn the_active_segment(segments: &[PathBuf]) -> PathBuf {
    segments.last().expect("segments").clone()
}

#[test]
fn damage_in_a_sealed_segment_costs_only_the_frames_it_hits() {
    run(a_sealed_segment, true);
}

#[test]
fn damage_in_the_active_segment_costs_only_the_frames_it_hits() {
    run(the_active_segment, true);
}

#[test]
fn without_hints_damage_still_costs_only_the_frames_it_hits() {
    run(a_sealed_segment, false);
    run(the_active_segment, false);
}

#[test]
fn damage_across_two_frames_drops_both_and_names_each_once() {
    // The dropped list names a key at most once per dropped frame, and the
    // frames of the damage alone: 64 bytes across the boundary of two
    // frames drop both.
    let dir = copy_of_template();
    let segment = a_sealed_segment(&crate::common::segment_files(dir.path(), 0));
    let frames = frames(&segment);
    let (offset, len) = middle_frame(&frames, true);
    let mut bytes = std::fs::read(&segment).expect("read");
    let start = usize::try_from(offset + len - 32).expect("small");
    for byte in &mut bytes[start..start + 64] {
        *byte ^= 0xff;
    }
    std::fs::write(&segment, bytes).expect("write");
    let report = repair(dir.path()).expect("repair");
    let offsets: HashMap<u64, usize> = report.records_dropped.iter().fold(HashMap::new(), |mut seen, record| {
        *seen.entry(record.offset).or_default() += 1;
        seen
    });
    assert_eq!(offsets.len(), 2, "{report:?}");
    assert!(offsets.contains_key(&offset) && offsets.contains_key(&(offset + len)), "{report:?}");
    assert!(offsets.values().all(|count| *count == 1), "{report:?}");
    check("across two frames (after repair)", dir.path(), 2, false);
}
