//! The contract table, row by row, and properties over arbitrary stored
//! records, requests and times. No disk, no clock. The two time scales are
//! far apart on purpose (wall clock `WALL`, elapsed time `MONO`), so a
//! decision that reads the wrong one shows.

use super::*;
use crate::keyspace::Keyspace;
use proptest::prelude::*;

const WALL: u64 = 1_000_000;
const MONO: u64 = 5_000;
const NOW: Now = Now { wall_ms: WALL, monotonic_ms: MONO };
const NEXT_LSN: u64 = 77;
const TTL: u64 = 60_000;

fn request(fingerprint: &[u8]) -> ClaimParams {
    ClaimParams {
        fingerprint: Fingerprint::of(fingerprint),
        lease_ms: 5_000,
        ttl_ms: TTL,
        reuse: ReusePolicy::default(),
    }
}

fn stored(kind: Kind, fingerprint: &[u8], deadline_ms: u64) -> Header {
    Header {
        kind,
        keyspace: Keyspace::Caller,
        recovered: false,
        attempt: 3,
        lsn: 40,
        token: 40,
        fingerprint: Fingerprint::of(fingerprint),
        created_ms: 500,
        updated_ms: 900,
        deadline_ms,
        ttl_ms: TTL,
        scope_len: 1,
        key_len: 2,
        response_len: 0,
    }
}

const PROCESSING: Kind = Kind::Put(State::Processing);
const COMPLETED: Kind = Kind::Put(State::Completed);
const FAILED: Kind = Kind::Put(State::Failed);

/// What a step looks like, without the details of an acquired record.
#[derive(Debug, PartialEq, Eq)]
enum Row {
    Fresh,
    Takeover,
    Replay,
    InProgress(u64),
    Mismatch,
}

fn row(step: ClaimStep) -> Row {
    match step {
        ClaimStep::Acquire(header) if header.recovered => Row::Takeover,
        ClaimStep::Acquire(_) => Row::Fresh,
        ClaimStep::Replay => Row::Replay,
        ClaimStep::InProgress { retry_after_ms, .. } => Row::InProgress(retry_after_ms),
        ClaimStep::Mismatch => Row::Mismatch,
    }
}

/// A row: name, stored record with its lease end on the monotonic scale,
/// request fingerprint, answer.
type Case = (&'static str, Option<(Header, u64)>, &'static [u8], Row);

#[test]
fn the_contract_table_row_by_row() {
    let same = b"same";
    let other = b"other";
    let table: [Case; 17] = [
        ("absent", None, same, Row::Fresh),
        ("tombstone", Some((stored(Kind::Tombstone, same, 0), 0)), same, Row::Fresh),
        ("tombstone, other request", Some((stored(Kind::Tombstone, same, 0), 0)), other, Row::Fresh),
        ("completed past its TTL", Some((stored(COMPLETED, same, WALL), 0)), same, Row::Fresh),
        ("failed past its TTL, other request", Some((stored(FAILED, same, WALL - 1), 0)), other, Row::Fresh),
        (
            "processing, lease running",
            Some((stored(PROCESSING, same, WALL + 250), MONO + 250)),
            same,
            Row::InProgress(250),
        ),
        (
            "processing, lease running, the wall clock jumped past lease end + TTL",
            Some((stored(PROCESSING, same, 1), MONO + 250)),
            same,
            Row::InProgress(250),
        ),
        ("processing, lease ended now", Some((stored(PROCESSING, same, WALL), MONO)), same, Row::Takeover),
        (
            "processing, lease ended, the wall clock stepped back before its end",
            Some((stored(PROCESSING, same, WALL + 3_600_000), MONO - 1)),
            same,
            Row::Takeover,
        ),
        (
            "processing, lease ended, TTL not yet over",
            Some((stored(PROCESSING, same, WALL - TTL + 1), MONO - 1)),
            same,
            Row::Takeover,
        ),
        (
            "processing abandoned past lease end + TTL",
            Some((stored(PROCESSING, same, WALL - TTL), 0)),
            same,
            Row::Fresh,
        ),
        ("completed", Some((stored(COMPLETED, same, WALL + 1), 0)), same, Row::Replay),
        ("failed", Some((stored(FAILED, same, WALL + 1), 0)), same, Row::Replay),
        ("processing, other request", Some((stored(PROCESSING, same, WALL + 250), MONO + 250)), other, Row::Mismatch),
        ("processing ended, other request", Some((stored(PROCESSING, same, WALL - 1), MONO - 1)), other, Row::Mismatch),
        ("abandoned, other request", Some((stored(PROCESSING, same, 1), 0)), other, Row::Fresh),
        ("completed, other request", Some((stored(COMPLETED, same, WALL + 1), 0)), other, Row::Mismatch),
    ];
    for (name, current, fingerprint, expected) in table {
        let current = current.as_ref().map(|(record, lease_end_ms)| Stored { record, lease_end_ms: *lease_end_ms });
        let step = claim(current, &request(fingerprint), NEXT_LSN, NOW);
        assert_eq!(row(step), expected, "{name}");
    }
}

#[test]
fn the_reuse_policy_decides_only_for_a_failed_key() {
    let retry = ClaimParams { reuse: ReusePolicy::RetryFailed, ..request(b"same") };
    let at = |kind, fingerprint: &[u8], lease_end_ms| {
        let record = stored(kind, fingerprint, WALL + 1);
        claim(Some(Stored { record: &record, lease_end_ms }), &retry, NEXT_LSN, NOW)
    };
    let ClaimStep::Acquire(header) = at(FAILED, b"same", 0) else { panic!("a failed key is run again") };
    assert_eq!(header.kind, PROCESSING);
    assert_eq!((header.token, header.attempt), (NEXT_LSN, 4), "a new token, the attempt after the stored 3");
    assert!(!header.recovered, "nothing ran half-way");
    assert_eq!(header.created_ms, WALL, "a new attempt is a new request");
    assert_eq!(row(at(FAILED, b"other", 0)), Row::Mismatch, "another request is still refused");
    assert_eq!(row(at(COMPLETED, b"same", 0)), Row::Replay, "a completed key is always replayed");
    assert_eq!(row(at(PROCESSING, b"same", MONO + 1)), Row::InProgress(1), "a running lease is never run twice");
    let failed = stored(FAILED, b"same", WALL + 1);
    let default = claim(Some(Stored { record: &failed, lease_end_ms: 0 }), &request(b"same"), NEXT_LSN, NOW);
    assert_eq!(row(default), Row::Replay, "the default replays the failure");
}

#[test]
fn a_fresh_claim_writes_processing_with_a_new_token() {
    let ClaimStep::Acquire(header) = claim(None, &request(b"r"), NEXT_LSN, NOW) else {
        panic!("an absent key is acquired");
    };
    assert_eq!(header.kind, PROCESSING);
    assert_eq!((header.lsn, header.token, header.attempt), (NEXT_LSN, NEXT_LSN, 1));
    assert_eq!((header.created_ms, header.updated_ms, header.deadline_ms), (WALL, WALL, WALL + 5_000));
    assert_eq!(header.ttl_ms, TTL);
    assert!(!header.recovered);
    assert_eq!(lease_end(&header, NOW), MONO + 5_000, "the lease runs its length of elapsed time");
}

#[test]
fn a_takeover_counts_the_attempt_and_keeps_the_creation_time() {
    let old = stored(PROCESSING, b"r", WALL - 1);
    let ClaimStep::Acquire(header) =
        claim(Some(Stored { record: &old, lease_end_ms: MONO }), &request(b"r"), NEXT_LSN, NOW)
    else {
        panic!("an ended lease is taken over");
    };
    assert!(header.recovered);
    assert_eq!((header.attempt, header.created_ms, header.token), (4, 500, NEXT_LSN));
    assert_eq!(header.deadline_ms, WALL + 5_000);
}

#[test]
fn in_progress_names_the_holders_attempt() {
    let holder = stored(PROCESSING, b"r", WALL + 1);
    assert_eq!(
        claim(Some(Stored { record: &holder, lease_end_ms: MONO + 1 }), &request(b"r"), NEXT_LSN, NOW),
        ClaimStep::InProgress { retry_after_ms: 1, attempt: 3 }
    );
}

#[test]
fn the_lease_left_after_a_restart_is_clamped_to_its_length() {
    // Written at wall 900 with a 10 s lease: ends at wall 10_900.
    let record = stored(PROCESSING, b"r", 10_900);
    let at = |wall_ms| lease_end(&record, Now { wall_ms, monotonic_ms: MONO });
    assert_eq!(at(900), MONO + 10_000, "reopened at once: the whole lease");
    assert_eq!(at(4_900), MONO + 6_000, "the wall clock says 6 s are left");
    assert_eq!(at(10_900), MONO, "ended");
    assert_eq!(at(WALL), MONO, "a clock set forward across the restart ends it");
    assert_eq!(at(0), MONO + 10_000, "a clock set back across the restart gives at most its length");
}

#[test]
fn only_the_current_processing_token_holds() {
    let entry = |state, token| Entry { lsn: 9, token, deadline_ms: 0, segment: 1, offset: 32, frame_len: 100, state };
    assert!(holds(&entry(State::Processing, 9), 9));
    assert!(!holds(&entry(State::Processing, 10), 9), "a takeover's token");
    assert!(!holds(&entry(State::Completed, 9), 9), "already finished");
    assert!(!holds(&entry(State::Failed, 9), 9), "already failed");
}

#[test]
fn a_processing_entry_is_gone_only_after_its_lease_and_its_ttl() {
    let record = stored(PROCESSING, b"r", WALL - TTL);
    let entry = Entry {
        lsn: 40,
        token: 40,
        deadline_ms: gone_ms(&record),
        segment: 1,
        offset: 32,
        frame_len: 100,
        state: State::Processing,
    };
    assert_eq!(entry.deadline_ms, WALL);
    assert!(is_gone(&entry, MONO, NOW));
    assert!(!is_gone(&entry, MONO + 1, NOW), "the lease still runs by elapsed time");
    assert!(!is_gone(&entry, MONO, Now { wall_ms: WALL - 1, ..NOW }), "the TTL has not passed");
    assert!(!entry.is_expired(u64::MAX), "a TTL check alone never drops a Processing entry");
}

#[test]
fn finishing_keeps_identity_and_sets_expiry() {
    let held = stored(PROCESSING, b"r", WALL + 10);
    let completed = finish(&held, Finish::Complete(b"ok"), NEXT_LSN, WALL);
    assert_eq!(completed.kind, COMPLETED);
    assert_eq!((completed.lsn, completed.token, completed.attempt), (NEXT_LSN, held.token, held.attempt));
    assert_eq!((completed.updated_ms, completed.deadline_ms), (WALL, WALL + TTL));
    assert_eq!((completed.fingerprint, completed.created_ms), (held.fingerprint, held.created_ms));
    assert_eq!(finish(&held, Finish::Fail(b"no"), NEXT_LSN, WALL).kind, FAILED);
    let released = finish(&held, Finish::Release, NEXT_LSN, WALL);
    assert_eq!((released.kind, released.deadline_ms), (Kind::Tombstone, 0));
}

#[test]
fn a_renewal_never_shortens_the_lease() {
    let held = stored(PROCESSING, b"r", 1);
    let short = renew(&held, MONO + 10_000, 1, NEXT_LSN, NOW);
    assert_eq!((short.deadline_ms, short.updated_ms), (WALL + 10_000, WALL));
    assert_eq!(lease_end(&short, NOW), MONO + 10_000);
    let long = renew(&held, MONO + 10_000, 20_000, NEXT_LSN, NOW);
    assert_eq!(lease_end(&long, NOW), MONO + 20_000);
    assert_eq!(long.kind, PROCESSING);
}

#[test]
fn a_removal_is_a_tombstone_at_the_next_lsn() {
    let removed = remove(&stored(COMPLETED, b"r", WALL + 1), NEXT_LSN, WALL);
    assert_eq!((removed.kind, removed.lsn, removed.deadline_ms), (Kind::Tombstone, NEXT_LSN, 0));
}

fn any_kind() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(PROCESSING), Just(COMPLETED), Just(FAILED), Just(Kind::Tombstone)]
}

prop_compose! {
    fn any_stored()(kind in any_kind(), fingerprint in 0u8..3, deadline_ms in 0u64..2 * WALL, attempt in any::<u32>())
        -> Header {
        Header { attempt, ..stored(kind, &[fingerprint], deadline_ms) }
    }
}

prop_compose! {
    fn any_now()(wall_ms in 0u64..2 * WALL, monotonic_ms in 0u64..2 * WALL) -> Now {
        Now { wall_ms, monotonic_ms }
    }
}

proptest! {
    #[test]
    fn claim_follows_the_table(
        current in proptest::option::of(any_stored()),
        lease_end_ms in 0u64..2 * WALL,
        fingerprint in 0u8..3,
        now in any_now(),
        next_lsn in 1u64..u64::MAX,
    ) {
        let params = request(&[fingerprint]);
        let step = claim(current.as_ref().map(|record| Stored { record, lease_end_ms }), &params, next_lsn, now);
        let live = current.filter(|stored| match stored.kind {
            Kind::Put(State::Processing) => lease_end_ms > now.monotonic_ms || stored.deadline_ms + TTL > now.wall_ms,
            Kind::Put(state) => !state.is_expired(stored.deadline_ms, now.wall_ms),
            Kind::Tombstone => false,
        });
        match step {
            ClaimStep::Acquire(header) => {
                // A new lease: Processing, token and LSN are the next LSN,
                // the lease runs from now.
                prop_assert_eq!(header.kind, PROCESSING);
                prop_assert_eq!((header.lsn, header.token), (next_lsn, next_lsn));
                prop_assert_eq!(header.deadline_ms, now.wall_ms.saturating_add(params.lease_ms));
                prop_assert_eq!(lease_end(&header, now), now.monotonic_ms + params.lease_ms);
                prop_assert_eq!(header.fingerprint, params.fingerprint);
                match live {
                    None => prop_assert_eq!((header.attempt, header.recovered), (1, false)),
                    Some(old) => {
                        // Only a Processing record whose lease ended (by
                        // elapsed time) is taken over.
                        prop_assert_eq!(old.kind, PROCESSING);
                        prop_assert!(lease_end_ms <= now.monotonic_ms);
                        prop_assert_eq!(old.fingerprint, params.fingerprint);
                        prop_assert!(header.recovered);
                        prop_assert_eq!(header.attempt, old.attempt.saturating_add(1));
                        prop_assert_eq!(header.created_ms, old.created_ms);
                    }
                }
            }
            ClaimStep::Mismatch => {
                let old = live.expect("a mismatch needs a live record");
                prop_assert_ne!(old.fingerprint, params.fingerprint);
            }
            ClaimStep::InProgress { retry_after_ms, attempt } => {
                let old = live.expect("in progress needs a live record");
                prop_assert_eq!(old.kind, PROCESSING);
                prop_assert_eq!(old.fingerprint, params.fingerprint);
                prop_assert!(retry_after_ms > 0);
                prop_assert_eq!(now.monotonic_ms + retry_after_ms, lease_end_ms);
                prop_assert_eq!(attempt, old.attempt);
            }
            ClaimStep::Replay => {
                let old = live.expect("a replay needs a live record");
                prop_assert!(matches!(old.kind, Kind::Put(state) if state.is_terminal()));
                prop_assert_eq!(old.fingerprint, params.fingerprint);
            }
        }
    }

    #[test]
    fn finishing_and_renewing_keep_the_token(
        held in any_stored(),
        lease_end_ms in 0u64..2 * WALL,
        extend in 1u64..WALL,
        now in any_now(),
        next_lsn in 1u64..u64::MAX,
    ) {
        for done in [Finish::Complete(b"a"), Finish::Fail(b"b"), Finish::Release] {
            let written = finish(&held, done, next_lsn, now.wall_ms);
            prop_assert_eq!((written.token, written.lsn, written.attempt), (held.token, next_lsn, held.attempt));
            prop_assert_eq!(written.updated_ms, now.wall_ms);
            if let Kind::Put(state) = written.kind {
                prop_assert!(state.is_terminal());
                prop_assert!(!state.is_expired(written.deadline_ms, now.wall_ms) || held.ttl_ms == 0);
            }
        }
        let renewed = renew(&held, lease_end_ms, extend, next_lsn, now);
        let renewed_end = lease_end(&renewed, now);
        prop_assert!(renewed_end >= lease_end_ms);
        prop_assert!(renewed_end >= now.monotonic_ms + extend);
        prop_assert_eq!(renewed_end, lease_end_ms.max(now.monotonic_ms + extend));
        prop_assert_eq!(renewed.token, held.token);
    }

    #[test]
    fn a_lease_found_at_open_never_outlasts_its_length(record in any_stored(), now in any_now()) {
        let left = lease_end(&record, now) - now.monotonic_ms;
        prop_assert!(left <= record.deadline_ms.saturating_sub(record.updated_ms));
        prop_assert!(left <= record.deadline_ms.saturating_sub(now.wall_ms));
    }
}
