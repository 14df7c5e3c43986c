//! [`Store::run_once`]: claim, run, finish or replay in one call, with the
//! lease renewed from a thread of its own while the closure runs; and the
//! [`Outcome`] and [`Once`] that every surface's `run_once` speaks in.

use super::Store;
use crate::claim::{Claim, ClaimRequest};
use crate::error::{Error, Result};
use crate::events::event;
use crate::lease::{retry, FinishError, Lease, LeaseToken};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What a `run_once` closure says its run came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done: store `response`; every retry gets it back.
    Complete(Vec<u8>),
    /// A terminal failure: store `response`; retries get it back (or, under
    /// [`ReusePolicy::RetryFailed`](crate::ReusePolicy::RetryFailed), run
    /// again with the attempt counted).
    Fail(Vec<u8>),
    /// Not processed (nothing happened that a retry must not repeat): the
    /// key is freed, and the next call runs again as attempt 1.
    Release,
}

/// What a `run_once` call answers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Once {
    /// This call ran the closure, and its outcome is stored (a
    /// [`Outcome::Release`] freed the key).
    Ran(Outcome),
    /// An earlier call finished the key: its stored response (a completion
    /// or a terminal failure), and the closure did not run.
    Replayed(Vec<u8>),
    /// Another caller holds the key; the closure did not run.
    InProgress {
        /// Until its lease ends, at most.
        retry_after: Duration,
    },
    /// The key was used for a different request; the closure did not run.
    Mismatch,
}

impl Once {
    /// The response to hand back: the one this call stored or the one
    /// replayed; `None` when the closure did not finish the key (in
    /// progress, a mismatch, a release).
    #[must_use]
    pub fn response(&self) -> Option<&[u8]> {
        match self {
            Once::Ran(Outcome::Complete(response) | Outcome::Fail(response)) | Once::Replayed(response) => {
                Some(response)
            }
            Once::Ran(Outcome::Release) | Once::InProgress { .. } | Once::Mismatch => None,
        }
    }
}

/// How often a kept lease is renewed: every third of it.
pub(crate) fn renewal_period(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(1))
}

impl Store {
    /// Claims `request`; if it is acquired, runs `f` with the lease renewed
    /// every third of it from a thread of its own (so a closure that blocks
    /// or runs long keeps the key), then stores what `f` decided: complete,
    /// fail or release. Otherwise answers the replay, the key in progress or
    /// the mismatch without running `f`.
    ///
    /// `f` gets the [`Lease`]: its [`attempt`](Lease::attempt), whether it
    /// [`recovered`](Lease::recovered) a holder that stopped half-way, the
    /// [`last_checkpoint`](Lease::last_checkpoint) to resume after, and
    /// [`checkpoint`](Lease::checkpoint) to store progress. It must not
    /// finish the lease itself: its [`Outcome`] does.
    ///
    /// A closure that panics leaves the key in progress until its lease
    /// ends; the next claim takes it over with `recovered` set, exactly as
    /// after a crash.
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::{ClaimRequest, Config, Fingerprint, Once, Outcome, Store};
    /// # fn main() -> Result<(), idemkv::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path(), Config::new())?;
    /// let request = ClaimRequest::new("order-7", Fingerprint::of(b"charge 10")).scope("payments");
    ///
    /// let mut charged = 0;
    /// for _ in 0..3 {
    ///     let answer = store.run_once(&request, |_lease| {
    ///         charged += 10; // the side effect
    ///         Outcome::Complete(b"charged 10".to_vec())
    ///     })?;
    ///     assert_eq!(answer.response(), Some(&b"charged 10"[..]));
    /// }
    /// assert_eq!(charged, 10, "three calls, one charge");
    /// # Ok(()) }
    /// ```
    ///
    /// A finishing write refused for a moment (an I/O error, a full disk)
    /// is tried again at once a few times; an answer (`Complete`, `Fail`)
    /// those tries did not store is then tried again from a thread of its
    /// own while the lease is held, for at most one lease, the key in
    /// progress meanwhile: a retry is told to wait and then replays it,
    /// where giving up would have let the lease lapse and the retry run `f`
    /// again.
    ///
    /// # Errors
    /// The claim's errors (nothing ran); after `f` ran, the finishing
    /// write's, once its quick tries are spent: [`Error::LeaseLost`] if
    /// another holder took the key over meanwhile (the renewals failed for
    /// a whole lease), I/O errors (the answer may still be stored by the
    /// background tries), [`Error::ResponseTooLarge`] — a key not stored
    /// stays in progress until its lease ends and the next claim recovers
    /// it, as after a crash: a key `f` ran for is never freed for a silent
    /// second run.
    pub fn run_once<F>(&self, request: &ClaimRequest<'_>, f: F) -> Result<Once>
    where
        F: FnOnce(&mut Lease) -> Outcome,
    {
        let mut lease = match self.claim(request)? {
            Claim::Acquired(lease) => lease,
            Claim::Replay(record) => return Ok(Once::Replayed(record.response)),
            Claim::InProgress { retry_after, .. } => return Ok(Once::InProgress { retry_after }),
            Claim::Mismatch => return Ok(Once::Mismatch),
        };
        let lease_for = request.lease.unwrap_or_else(|| Duration::from_millis(self.engine.config.lease_ms));
        let token = LeaseToken {
            keyspace: lease.keyspace(),
            scope: lease.scope().to_vec(),
            key: lease.key().to_vec(),
            token: lease.token(),
        };
        let outcome = std::thread::scope(|scope| {
            let (stop, stopped) = mpsc::channel::<()>();
            let renewer = std::thread::Builder::new()
                .name("idemkv-run-once".into())
                .spawn_scoped(scope, move || keep_renewing(self, &token, lease_for, &stopped));
            #[cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "read by the event"))]
            if let Err(error) = &renewer {
                // Without a renewer the closure still runs; only a closure
                // longer than its lease can lose the key.
                event!(warn, %error, "run_once: the renewal thread did not start");
            }
            let outcome = f(&mut lease);
            drop(stop);
            outcome
        });
        match finish_quickly(lease, &outcome) {
            Ok(()) => Ok(Once::Ran(outcome)),
            Err(FinishError { error, lease: Some(lease), .. })
                if !matches!(outcome, Outcome::Release) && retry::worth_retrying(&error) =>
            {
                finish_later(*lease, outcome, lease_for);
                Err(error)
            }
            // A lease handed back otherwise (the write was refused before
            // it was made) is dropped unfinished: the key stays in progress.
            Err(refused) => Err(Error::from(refused)),
        }
    }
}

/// Writes `outcome` with `lease` once.
fn finish(lease: Lease, outcome: &Outcome) -> std::result::Result<(), FinishError> {
    match outcome {
        Outcome::Complete(response) => lease.complete(response),
        Outcome::Fail(response) => lease.fail(response),
        Outcome::Release => lease.release(),
    }
}

/// Writes `outcome` with `lease`, tried again after each of the quick
/// pauses ([`retry::QUICK`]) while the write hands the lease back with an
/// error [worth retrying](retry::worth_retrying).
fn finish_quickly(mut lease: Lease, outcome: &Outcome) -> std::result::Result<(), FinishError> {
    let mut pauses = retry::QUICK.iter();
    loop {
        match finish(lease, outcome) {
            Err(FinishError { error, lease: Some(back), .. }) if retry::worth_retrying(&error) => {
                let Some(pause) = pauses.next() else {
                    return Err(FinishError { error, lease: Some(back) });
                };
                event!(warn, %error, "run_once: the write that ends the run failed; trying again");
                std::thread::sleep(*pause);
                lease = *back;
            }
            finished => return finished,
        }
    }
}

/// Tries `outcome`'s write again from a thread of its own while `lease` is
/// held (renewed by `lease_for` before each try), for at most `lease_for`
/// (see [`retry`]); a lease dropped unfinished at the end lapses, and the
/// next attempt runs recovered.
fn finish_later(lease: Lease, outcome: Outcome, lease_for: Duration) {
    let later = move || {
        let give_up = Instant::now() + lease_for;
        let (mut lease, mut pause) = (lease, retry::LATER_FIRST);
        while Instant::now() < give_up {
            std::thread::sleep(pause);
            if let Err(Error::LeaseLost { .. }) = lease.renew(lease_for) {
                return;
            }
            match finish(lease, &outcome) {
                Ok(()) => {
                    event!(info, "run_once: the run's answer is stored after all; retries replay it");
                    return;
                }
                Err(FinishError { error, lease: Some(back), .. }) if retry::worth_retrying(&error) => {
                    (lease, pause) = (*back, (pause * 2).min(retry::LATER_MAX));
                }
                Err(refused) => {
                    #[cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "read by the event"))]
                    let error = refused.error;
                    event!(error, %error, "run_once: the run's answer could not be kept");
                    return;
                }
            }
        }
        event!(
            error,
            "run_once: the run's answer was never stored; once its lease ends the next attempt runs recovered"
        );
    };
    let spawned = std::thread::Builder::new().name("idemkv-finish".into()).spawn(later);
    #[cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "read by the event"))]
    if let Err(error) = spawned {
        event!(error, %error, "run_once: no thread to keep the run's answer; its lease lapses");
    }
}

/// Renews `token` every third of `lease` until `stopped` says stop (its
/// sender dropped) or the lease is lost.
fn keep_renewing(store: &Store, token: &LeaseToken, lease: Duration, stopped: &mpsc::Receiver<()>) {
    let period = renewal_period(lease);
    let mut wait = period;
    loop {
        match stopped.recv_timeout(wait) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        match store.renew(token, lease) {
            Ok(_deadline) => wait = period,
            Err(Error::LeaseLost { .. }) => return,
            // Two more failures would let it lapse: try again sooner.
            Err(_) => wait = (period / 4).max(Duration::from_millis(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, Durability, Fingerprint, ReusePolicy, State};

    fn store(dir: &tempfile::TempDir) -> Store {
        Store::open(dir.path(), Config::new().durability(Durability::Buffered)).expect("open")
    }

    #[test]
    fn a_closure_that_blocks_past_its_lease_keeps_the_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store(&dir);
        let request = ClaimRequest::new("k", Fingerprint::of(b"r")).lease(Duration::from_millis(150));
        let answer = store
            .run_once(&request, |_lease| {
                // Three leases long; a second caller meanwhile is told to wait.
                for _ in 0..3 {
                    std::thread::sleep(Duration::from_millis(150));
                    let other = store.run_once(&request, |_| unreachable!("the key is held")).expect("claim");
                    assert!(matches!(other, Once::InProgress { .. }), "got {other:?}");
                }
                Outcome::Complete(b"done".to_vec())
            })
            .expect("the lease was never lost");
        assert_eq!(answer, Once::Ran(Outcome::Complete(b"done".to_vec())));
        let replay = store.run_once(&request, |_| unreachable!("finished")).expect("claim");
        assert_eq!(replay, Once::Replayed(b"done".to_vec()));
    }

    #[test]
    fn release_frees_the_key_and_fail_is_replayed_or_retried_by_policy() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store(&dir);
        let request = ClaimRequest::new("k", Fingerprint::of(b"r"));
        assert_eq!(store.run_once(&request, |_| Outcome::Release).expect("run"), Once::Ran(Outcome::Release));
        assert_eq!(store.get(b"", b"k").expect("get"), None, "released");
        let failed = store
            .run_once(&request, |lease| {
                assert_eq!(lease.attempt(), 1, "a release does not count");
                Outcome::Fail(b"declined".to_vec())
            })
            .expect("run");
        assert_eq!(failed, Once::Ran(Outcome::Fail(b"declined".to_vec())));
        assert_eq!(store.get(b"", b"k").expect("get").map(|record| record.state), Some(State::Failed));
        assert_eq!(
            store.run_once(&request, |_| unreachable!("replayed")).expect("run"),
            Once::Replayed(b"declined".to_vec())
        );
        let retry = request.reuse(ReusePolicy::RetryFailed);
        let again = store
            .run_once(&retry, |lease| {
                assert_eq!(lease.attempt(), 2);
                Outcome::Complete(b"ok".to_vec())
            })
            .expect("run");
        assert_eq!(again.response(), Some(&b"ok"[..]));
        let other = ClaimRequest::new("k", Fingerprint::of(b"another request"));
        assert_eq!(store.run_once(&other, |_| unreachable!("mismatch")).expect("run"), Once::Mismatch);
    }

    #[test]
    fn a_response_too_large_leaves_the_key_in_progress_never_free() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path(), Config::new().durability(Durability::Buffered).response_bytes_max(8))
            .expect("open");
        let request = ClaimRequest::new("k", Fingerprint::of(b"r"));
        let error = store.run_once(&request, |_| Outcome::Complete(vec![0; 64])).expect_err("too large");
        assert!(matches!(error, Error::ResponseTooLarge { .. }), "got {error:?}");
        let record = store.get(b"", b"k").expect("get").expect("present");
        assert_eq!(record.state, State::Processing, "a retry waits for the lease, then recovers");
    }

    #[test]
    fn a_closure_checkpoints_and_a_takeover_resumes_after_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store(&dir);
        let request = ClaimRequest::new("k", Fingerprint::of(b"r")).lease(Duration::from_millis(100));
        // The first holder stores a point, then stops for good (its lease
        // is dropped, as a crash would leave it).
        let crate::Claim::Acquired(mut lease) = store.claim(&request).expect("claim") else { panic!("acquired") };
        lease.checkpoint("charged", b"ch_1").expect("checkpoint");
        drop(lease);
        std::thread::sleep(Duration::from_millis(150));
        let answer = store
            .run_once(&request, |lease| {
                assert!(lease.recovered());
                let point = lease.last_checkpoint().expect("carried over");
                assert_eq!((point.step.as_str(), point.payload.as_slice()), ("charged", &b"ch_1"[..]));
                Outcome::Complete(b"resumed".to_vec())
            })
            .expect("run");
        assert_eq!(answer.response(), Some(&b"resumed"[..]));
    }
}
