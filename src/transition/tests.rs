//! The contract table, row by row, and properties over arbitrary stored
//! records, requests and times. No disk, no clock.

use super::*;
use proptest::prelude::*;

const NOW: u64 = 1_000_000;
const NEXT_LSN: u64 = 77;

fn request(fingerprint: &[u8]) -> ClaimParams {
    ClaimParams { fingerprint: Fingerprint::of(fingerprint), lease_ms: 5_000, ttl_ms: 60_000 }
}

fn stored(kind: Kind, fingerprint: &[u8], deadline_ms: u64) -> Header {
    Header {
        kind,
        recovered: false,
        attempt: 3,
        lsn: 40,
        token: 40,
        fingerprint: Fingerprint::of(fingerprint),
        created_ms: 500,
        updated_ms: 900,
        deadline_ms,
        ttl_ms: 60_000,
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

#[test]
fn the_contract_table_row_by_row() {
    let same = b"same";
    let other = b"other";
    let table: [(&str, Option<Header>, &[u8], Row); 13] = [
        ("absent", None, same, Row::Fresh),
        ("tombstone", Some(stored(Kind::Tombstone, same, 0)), same, Row::Fresh),
        ("tombstone, other request", Some(stored(Kind::Tombstone, same, 0)), other, Row::Fresh),
        ("completed past its TTL", Some(stored(COMPLETED, same, NOW)), same, Row::Fresh),
        ("failed past its TTL, other request", Some(stored(FAILED, same, NOW - 1)), other, Row::Fresh),
        ("processing, lease running", Some(stored(PROCESSING, same, NOW + 250)), same, Row::InProgress(250)),
        ("processing, lease ended now", Some(stored(PROCESSING, same, NOW)), same, Row::Takeover),
        ("processing, lease long over", Some(stored(PROCESSING, same, 1)), same, Row::Takeover),
        ("completed", Some(stored(COMPLETED, same, NOW + 1)), same, Row::Replay),
        ("failed", Some(stored(FAILED, same, NOW + 1)), same, Row::Replay),
        ("processing, other request", Some(stored(PROCESSING, same, NOW + 250)), other, Row::Mismatch),
        ("processing ended, other request", Some(stored(PROCESSING, same, 1)), other, Row::Mismatch),
        ("completed, other request", Some(stored(COMPLETED, same, NOW + 1)), other, Row::Mismatch),
    ];
    for (name, current, fingerprint, expected) in table {
        let step = claim(current.as_ref(), &request(fingerprint), NEXT_LSN, NOW);
        assert_eq!(row(step), expected, "{name}");
    }
}

#[test]
fn a_fresh_claim_writes_processing_with_a_new_token() {
    let ClaimStep::Acquire(header) = claim(None, &request(b"r"), NEXT_LSN, NOW) else {
        panic!("an absent key is acquired");
    };
    assert_eq!(header.kind, PROCESSING);
    assert_eq!((header.lsn, header.token, header.attempt), (NEXT_LSN, NEXT_LSN, 1));
    assert_eq!((header.created_ms, header.updated_ms, header.deadline_ms), (NOW, NOW, NOW + 5_000));
    assert_eq!(header.ttl_ms, 60_000);
    assert!(!header.recovered);
}

#[test]
fn a_takeover_counts_the_attempt_and_keeps_the_creation_time() {
    let old = stored(PROCESSING, b"r", NOW - 1);
    let ClaimStep::Acquire(header) = claim(Some(&old), &request(b"r"), NEXT_LSN, NOW) else {
        panic!("an ended lease is taken over");
    };
    assert!(header.recovered);
    assert_eq!((header.attempt, header.created_ms, header.token), (4, 500, NEXT_LSN));
    assert_eq!(header.deadline_ms, NOW + 5_000);
}

#[test]
fn in_progress_names_the_holders_attempt() {
    let holder = stored(PROCESSING, b"r", NOW + 1);
    assert_eq!(
        claim(Some(&holder), &request(b"r"), NEXT_LSN, NOW),
        ClaimStep::InProgress { retry_after_ms: 1, attempt: 3 }
    );
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
fn finishing_keeps_identity_and_sets_expiry() {
    let held = stored(PROCESSING, b"r", NOW + 10);
    let completed = finish(&held, Finish::Complete(b"ok"), NEXT_LSN, NOW);
    assert_eq!(completed.kind, COMPLETED);
    assert_eq!((completed.lsn, completed.token, completed.attempt), (NEXT_LSN, held.token, held.attempt));
    assert_eq!((completed.updated_ms, completed.deadline_ms), (NOW, NOW + 60_000));
    assert_eq!((completed.fingerprint, completed.created_ms), (held.fingerprint, held.created_ms));
    assert_eq!(finish(&held, Finish::Fail(b"no"), NEXT_LSN, NOW).kind, FAILED);
    let released = finish(&held, Finish::Release, NEXT_LSN, NOW);
    assert_eq!((released.kind, released.deadline_ms), (Kind::Tombstone, 0));
}

#[test]
fn a_renewal_never_shortens_the_lease() {
    let held = stored(PROCESSING, b"r", NOW + 10_000);
    assert_eq!(renew(&held, 1, NEXT_LSN, NOW).deadline_ms, NOW + 10_000);
    assert_eq!(renew(&held, 20_000, NEXT_LSN, NOW).deadline_ms, NOW + 20_000);
    assert_eq!(renew(&held, 20_000, NEXT_LSN, NOW).kind, PROCESSING);
}

#[test]
fn a_removal_is_a_tombstone_at_the_next_lsn() {
    let removed = remove(&stored(COMPLETED, b"r", NOW + 1), NEXT_LSN, NOW);
    assert_eq!((removed.kind, removed.lsn, removed.deadline_ms), (Kind::Tombstone, NEXT_LSN, 0));
}

fn any_kind() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(PROCESSING), Just(COMPLETED), Just(FAILED), Just(Kind::Tombstone)]
}

prop_compose! {
    fn any_stored()(kind in any_kind(), fingerprint in 0u8..3, deadline_ms in 0u64..2 * NOW, attempt in any::<u32>())
        -> Header {
        Header { attempt, ..stored(kind, &[fingerprint], deadline_ms) }
    }
}

proptest! {
    #[test]
    fn claim_follows_the_table(
        current in proptest::option::of(any_stored()),
        fingerprint in 0u8..3,
        now in 0u64..2 * NOW,
        next_lsn in 1u64..u64::MAX,
    ) {
        let params = request(&[fingerprint]);
        let step = claim(current.as_ref(), &params, next_lsn, now);
        let live = current.filter(|stored| match stored.kind {
            Kind::Put(state) => !state.is_expired(stored.deadline_ms, now),
            Kind::Tombstone => false,
        });
        match step {
            ClaimStep::Acquire(header) => {
                // A new lease: Processing, token and LSN are the next LSN,
                // the lease runs from now.
                prop_assert_eq!(header.kind, PROCESSING);
                prop_assert_eq!((header.lsn, header.token), (next_lsn, next_lsn));
                prop_assert_eq!(header.deadline_ms, now.saturating_add(params.lease_ms));
                prop_assert_eq!(header.fingerprint, params.fingerprint);
                match live {
                    None => prop_assert_eq!((header.attempt, header.recovered), (1, false)),
                    Some(old) => {
                        // Only a Processing record whose lease ended is taken over.
                        prop_assert_eq!(old.kind, PROCESSING);
                        prop_assert!(old.deadline_ms <= now);
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
                prop_assert_eq!(now + retry_after_ms, old.deadline_ms);
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
        extend in 1u64..NOW,
        now in 0u64..2 * NOW,
        next_lsn in 1u64..u64::MAX,
    ) {
        for done in [Finish::Complete(b"a"), Finish::Fail(b"b"), Finish::Release] {
            let written = finish(&held, done, next_lsn, now);
            prop_assert_eq!((written.token, written.lsn, written.attempt), (held.token, next_lsn, held.attempt));
            prop_assert_eq!(written.updated_ms, now);
            if let Kind::Put(state) = written.kind {
                prop_assert!(state.is_terminal());
                prop_assert!(!state.is_expired(written.deadline_ms, now) || held.ttl_ms == 0);
            }
        }
        let renewed = renew(&held, extend, next_lsn, now);
        prop_assert!(renewed.deadline_ms >= held.deadline_ms);
        prop_assert!(renewed.deadline_ms >= now + extend);
        prop_assert_eq!(renewed.token, held.token);
    }
}
