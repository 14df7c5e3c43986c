//! `claim_wait` blocks while the key is in progress and answers with the
//! final state as soon as the holder finishes; `claim_wait_async` likewise
//! without a thread. A waiter is woken by every way the key stops being in
//! progress by the holder it saw — never by polling — and one waiting call
//! counts as one claim and one answer.

use crate::common::{acquire, fingerprint, open, START_MS};
use idemkv::{store::Stats, Claim, ClaimRequest, Error, ManualClock, State, Store};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Longer than any test runs: no lease end and no timeout can wake a
/// waiter of these tests, only an event of its key.
const FOREVER: Duration = Duration::from_secs(600);
/// How long a test waits for what must happen before it fails instead.
const BOUND: Duration = Duration::from_secs(60);
/// A pause in which a polling waiter would have looked again (the store
/// used to look every 50 ms, doubling to 1 s).
const QUIET: Duration = Duration::from_millis(400);

/// Starts a thread that waits up to 30 s on key "k" and returns the answer
/// it got, passed through `then`.
fn spawn_waiter<T: Send + 'static>(
    store: &Store,
    then: impl FnOnce(Claim) -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let store = store.clone();
    std::thread::spawn(move || {
        let request = ClaimRequest::new("k", fingerprint("r"));
        then(store.claim_wait(&request, Duration::from_secs(30)).expect("claim_wait"))
    })
}

#[test]
fn waiter_gets_the_replay_when_the_holder_completes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("k", fingerprint("r"));
    let lease = acquire(&store, &request);
    let waiter = spawn_waiter(&store, |claim| claim);
    std::thread::sleep(Duration::from_millis(100));
    lease.complete(b"finished").expect("complete");
    let started = Instant::now();
    match waiter.join().expect("join") {
        Claim::Replay(record) => assert_eq!(record.response, b"finished"),
        other => panic!("expected Replay, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10), "the waiter was not woken");
}

#[test]
fn waiter_acquires_when_the_holder_releases() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("k", fingerprint("r"));
    let lease = acquire(&store, &request);
    let waiter = spawn_waiter(&store, |claim| match claim {
        Claim::Acquired(lease) => lease.complete(b"second").map(|()| true),
        _ => Ok(false),
    });
    std::thread::sleep(Duration::from_millis(50));
    lease.release().expect("release");
    assert!(waiter.join().expect("join").expect("complete"));
}

#[test]
fn waiter_times_out_with_in_progress() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("k", fingerprint("r"));
    let _lease = acquire(&store, &request);
    let started = Instant::now();
    let claim = store.claim_wait(&request, Duration::from_millis(120)).expect("claim_wait");
    assert!(matches!(claim, Claim::InProgress { .. }), "{claim:?}");
    assert!(started.elapsed() >= Duration::from_millis(120));
}

#[test]
fn waiter_takes_over_when_the_lease_runs_out_by_the_clock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    // The waiter wakes at the lease end its look reported (1 s, in real
    // time) and finds the lease over by the store's clock.
    let request = ClaimRequest::new("k", fingerprint("r")).lease(Duration::from_secs(1));
    let _abandoned = acquire(&store, &request).into_token();
    let mover = {
        let clock = clock.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            clock.advance(Duration::from_secs(2));
        })
    };
    match store.claim_wait(&request, Duration::from_secs(30)).expect("claim_wait") {
        Claim::Acquired(lease) => {
            assert!(lease.recovered());
            lease.complete(b"x").expect("complete");
        }
        other => panic!("expected a recovered Acquired, got {other:?}"),
    }
    mover.join().expect("join");
}

/// How a waiting claim is made.
#[derive(Debug, Clone, Copy)]
enum Mode {
    Blocking,
    #[cfg(feature = "tokio")]
    Async,
}

/// The request every waiter of these tests makes.
fn waited() -> ClaimRequest<'static> {
    ClaimRequest::new("k", fingerprint("r")).lease(FOREVER)
}

/// Starts a waiting claim of [`waited`] for `timeout` on its own thread;
/// its answer arrives on the channel.
fn start_waiter(store: &Store, mode: Mode, timeout: Duration) -> mpsc::Receiver<Result<Claim, Error>> {
    let (answer, answered) = mpsc::channel();
    let store = store.clone();
    std::thread::spawn(move || {
        let claim = match mode {
            Mode::Blocking => store.claim_wait(&waited(), timeout),
            #[cfg(feature = "tokio")]
            Mode::Async => tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("runtime")
                .block_on(store.claim_wait_async(&waited(), timeout)),
        };
        let _gone = answer.send(claim);
    });
    answered
}

/// Polls `store`'s stats until `until` holds, for at most [`BOUND`].
fn stats_reach(store: &Store, what: &str, until: impl Fn(&Stats) -> bool) -> Stats {
    let deadline = Instant::now() + BOUND;
    loop {
        let stats = store.stats();
        if until(&stats) {
            return stats;
        }
        assert!(Instant::now() < deadline, "{what}: {stats:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The answer of a waiter, which must come within [`BOUND`]: with a lease
/// and a timeout of [`FOREVER`], only an event of the key can bring it.
fn answer_of(answered: &mpsc::Receiver<Result<Claim, Error>>, what: &str) -> Result<Claim, Error> {
    answered.recv_timeout(BOUND).unwrap_or_else(|_| panic!("the waiter was not woken by {what}"))
}

/// A waiter parked on a key in progress (its first look counted, its look
/// after listening made), and the holder's lease.
fn parked_waiter(store: &Store, mode: Mode) -> (idemkv::Lease, mpsc::Receiver<Result<Claim, Error>>) {
    let lease = acquire(store, &waited());
    let answered = start_waiter(store, mode, FOREVER);
    let stats = stats_reach(store, "the waiter listens and looks again", |stats| stats.wait_looks >= 1);
    assert_eq!((stats.claims, stats.wait_looks, stats.in_progress), (2, 1, 0), "{stats:?}");
    std::thread::sleep(QUIET);
    let stats = store.stats();
    assert_eq!(stats.wait_looks, 1, "the waiter looked again without an event (polling): {stats:?}");
    (lease, answered)
}

/// One way the key stops being in progress by the holder a waiter saw.
#[derive(Debug, Clone, Copy)]
enum Finish {
    Complete,
    Fail,
    Release,
    Remove,
}

/// A waiter parked on "k" is woken by `finish` alone: it looks once more
/// and answers; one claim, no conflict, and the answer counted once.
fn woken_by(finish: Finish, mode: Mode) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let (lease, answered) = parked_waiter(&store, mode);
    match finish {
        Finish::Complete => lease.complete(b"done").expect("complete"),
        Finish::Fail => lease.fail(b"declined").expect("fail"),
        Finish::Release => lease.release().expect("release"),
        Finish::Remove => {
            assert!(store.remove(b"", b"k").expect("remove"));
            drop(lease);
        }
    }
    let claim = answer_of(&answered, &format!("{finish:?}")).expect("claim_wait");
    let stats = store.stats();
    match (finish, claim) {
        (Finish::Complete, Claim::Replay(record)) => {
            assert_eq!((record.state, record.response.as_slice()), (State::Completed, &b"done"[..]));
            assert_eq!((stats.replays, stats.acquired), (1, 1), "{stats:?}");
        }
        (Finish::Fail, Claim::Replay(record)) => {
            assert_eq!((record.state, record.response.as_slice()), (State::Failed, &b"declined"[..]));
            assert_eq!((stats.replays, stats.acquired), (1, 1), "{stats:?}");
        }
        (Finish::Release | Finish::Remove, Claim::Acquired(lease)) => {
            assert!(!lease.recovered());
            assert_eq!((stats.replays, stats.acquired), (0, 2), "{stats:?}");
            lease.complete(b"second").expect("complete");
        }
        (finish, claim) => panic!("after {finish:?} the waiter got {claim:?}"),
    }
    // The holder's claim and the waiter's: two calls, however the waiter
    // looked; no in-progress answer was given.
    assert_eq!((stats.claims, stats.in_progress, stats.wait_looks), (2, 0, 2), "{stats:?}");
}

#[test]
fn a_complete_wakes_a_blocking_waiter() {
    woken_by(Finish::Complete, Mode::Blocking);
}

#[test]
fn a_fail_wakes_a_blocking_waiter() {
    woken_by(Finish::Fail, Mode::Blocking);
}

#[test]
fn a_release_wakes_a_blocking_waiter() {
    woken_by(Finish::Release, Mode::Blocking);
}

#[test]
fn a_remove_wakes_a_blocking_waiter() {
    woken_by(Finish::Remove, Mode::Blocking);
}

#[cfg(feature = "tokio")]
#[test]
fn a_complete_wakes_an_async_waiter() {
    woken_by(Finish::Complete, Mode::Async);
}

#[cfg(feature = "tokio")]
#[test]
fn a_fail_wakes_an_async_waiter() {
    woken_by(Finish::Fail, Mode::Async);
}

#[cfg(feature = "tokio")]
#[test]
fn a_release_wakes_an_async_waiter() {
    woken_by(Finish::Release, Mode::Async);
}

#[cfg(feature = "tokio")]
#[test]
fn a_remove_wakes_an_async_waiter() {
    woken_by(Finish::Remove, Mode::Async);
}

/// The holder's lease ends by the store's clock and another caller takes
/// the key over: the waiter is woken, looks, finds the new holder and
/// waits for it in turn; the new holder's complete wakes it again.
fn woken_by_a_takeover(mode: Mode) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let (_abandoned, answered) = parked_waiter(&store, mode);
    clock.advance(FOREVER + Duration::from_secs(1));
    let taken = acquire(&store, &waited());
    assert!(taken.recovered());
    let stats = stats_reach(&store, "the takeover woke the waiter", |stats| stats.wait_looks >= 2);
    assert_eq!(stats.wait_looks, 2, "{stats:?}");
    assert!(answered.try_recv().is_err(), "the waiter answered while the new holder runs");
    taken.complete(b"by the second").expect("complete");
    let Claim::Replay(record) = answer_of(&answered, "the new holder's complete").expect("claim_wait") else {
        panic!("not a replay")
    };
    assert_eq!(record.response, b"by the second");
    let stats = store.stats();
    assert_eq!(
        (stats.claims, stats.in_progress, stats.replays, stats.recovered, stats.wait_looks),
        (3, 0, 1, 1, 3),
        "{stats:?}"
    );
}

#[test]
fn a_takeover_wakes_a_blocking_waiter() {
    woken_by_a_takeover(Mode::Blocking);
}

#[cfg(feature = "tokio")]
#[test]
fn a_takeover_wakes_an_async_waiter() {
    woken_by_a_takeover(Mode::Async);
}

/// Closing the store wakes its waiters, which answer `Closed`.
fn woken_by_a_close(mode: Mode) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let (lease, answered) = parked_waiter(&store, mode);
    let watcher = store.clone();
    store.close().expect("close");
    let answer = answer_of(&answered, "the close");
    assert!(matches!(answer, Err(Error::Closed)), "{answer:?}");
    // The look refused with `Closed` is not counted, as no refused call is.
    let stats = watcher.stats();
    assert_eq!((stats.claims, stats.in_progress, stats.wait_looks), (2, 0, 1), "{stats:?}");
    drop(lease);
}

#[test]
fn a_close_wakes_a_blocking_waiter() {
    woken_by_a_close(Mode::Blocking);
}

#[cfg(feature = "tokio")]
#[test]
fn a_close_wakes_an_async_waiter() {
    woken_by_a_close(Mode::Async);
}

/// A waiter wakes at the lease end its look reported; a renewal wakes
/// nobody, and the waiter, finding the lease renewed, waits on for the
/// finish instead of answering or taking over.
#[test]
fn a_waiter_wakes_at_the_lease_end_it_saw_and_waits_for_a_renewal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let mut lease = acquire(&store, &ClaimRequest::new("k", fingerprint("r")).lease(Duration::from_secs(1)));
    let answered = start_waiter(&store, Mode::Blocking, FOREVER);
    stats_reach(&store, "the waiter listens", |stats| stats.wait_looks >= 1);
    lease.renew(FOREVER).expect("renew");
    stats_reach(&store, "the waiter woke at the lease end it saw", |stats| stats.wait_looks >= 2);
    std::thread::sleep(QUIET);
    assert!(answered.try_recv().is_err(), "the waiter answered while the renewed lease runs");
    lease.complete(b"renewed").expect("complete");
    let Claim::Replay(record) = answer_of(&answered, "the complete").expect("claim_wait") else { panic!() };
    assert_eq!(record.response, b"renewed");
    let stats = store.stats();
    assert_eq!((stats.claims, stats.in_progress, stats.acquired, stats.replays), (2, 0, 1, 1), "{stats:?}");
}

/// The counts of one waiting claim, through the public API only: it adds
/// one claim and, ending in a replay, no conflict; timing out, one.
fn one_waiting_claim_counts_once(mode: Mode) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);

    let lease = acquire(&store, &waited());
    let answered = start_waiter(&store, mode, FOREVER);
    stats_reach(&store, "the waiter's first look", |stats| stats.claims >= 2);
    std::thread::sleep(QUIET);
    lease.complete(b"done").expect("complete");
    let claim = answer_of(&answered, "the complete").expect("claim_wait");
    assert!(matches!(claim, Claim::Replay(_)), "{claim:?}");
    let stats = store.stats();
    assert_eq!((stats.claims, stats.in_progress, stats.replays), (2, 0, 1), "a wait ending in a replay: {stats:?}");

    let _holder = acquire(&store, &ClaimRequest::new("other", fingerprint("r")).lease(FOREVER));
    let request = ClaimRequest::new("other", fingerprint("r"));
    let started = Instant::now();
    let timeout = Duration::from_millis(1500);
    let claim = match mode {
        Mode::Blocking => store.claim_wait(&request, timeout),
        #[cfg(feature = "tokio")]
        Mode::Async => tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
            .block_on(store.claim_wait_async(&request, timeout)),
    };
    assert!(matches!(claim, Ok(Claim::InProgress { .. })), "{claim:?}");
    assert!(started.elapsed() >= timeout, "answered before its timeout");
    let after = store.stats();
    assert_eq!(
        (after.claims - stats.claims, after.in_progress - stats.in_progress),
        (2, 1),
        "the other key's holder and one wait that timed out: {after:?}"
    );
}

#[test]
fn one_blocking_wait_counts_one_claim_and_one_answer() {
    one_waiting_claim_counts_once(Mode::Blocking);
}

#[cfg(feature = "tokio")]
#[test]
fn one_async_wait_counts_one_claim_and_one_answer() {
    one_waiting_claim_counts_once(Mode::Async);
}

/// A wait that times out looks twice after its first look: once as it
/// starts to listen, once at the timeout for the answer it gives; none in
/// between, however long it waits.
#[test]
fn a_wait_that_times_out_looks_at_its_start_and_its_end_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let _holder = acquire(&store, &waited());
    let claim = store.claim_wait(&waited(), Duration::from_millis(1500)).expect("claim_wait");
    let Claim::InProgress { retry_after, .. } = claim else { panic!("{claim:?}") };
    assert_eq!(retry_after, FOREVER, "the manual clock did not move");
    let stats = store.stats();
    assert_eq!((stats.claims, stats.in_progress, stats.wait_looks), (2, 1, 2), "{stats:?}");
}
