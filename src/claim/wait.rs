//! The claim-and-wait loop, written once for every backend: the embedded
//! store's blocking [`Store::claim_wait`](crate::Store::claim_wait), its
//! future [`Store::claim_wait_async`](crate::Store::claim_wait_async), and
//! the networked backends' claims with
//! `backend::ClaimOptions::wait`. A backend says only
//! how it looks at the key, how a caller registers for the key's wake-up
//! and how it parks ([`KeyWait`]).
//!
//! The order that loses no wake-up: register first, then look at the key,
//! then park. A finish that lands between the look and the park has
//! already fired the registration, so the park ends at once. A park ends
//! at the wake-up, at the lease end the last look reported (to take over
//! an ended lease), at the caller's timeout, and — only where a wake-up
//! can be lost with a connection — at a poll interval that doubles from
//! [`Poll::first`] to [`Poll::max`]. The embedded store never polls.

use crate::error::Result;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll as TaskPoll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// An answer of a claim, as the loop reads it.
pub(crate) trait Answer {
    /// While the key is in progress, how long until its holder's lease
    /// ends; `None` for a final answer.
    fn in_progress(&self) -> Option<Duration>;
}

/// How long a caller parks without a wake-up where wake-ups can be lost:
/// the pause starts at `first` and doubles up to `max`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Poll {
    pub(crate) first: Duration,
    pub(crate) max: Duration,
}

/// One caller waiting on one key, as its backend serves it.
pub(crate) trait KeyWait {
    /// What a look answers.
    type Answer: Answer;
    /// A registration for the key's next wake-up.
    type Armed;

    /// Where wake-ups can be lost, the poll that bounds a park; `None`
    /// where every finish wakes its waiters.
    const POLL: Option<Poll>;

    /// Looks at the key: one claim. `again` is false for the first look
    /// of a call and true for every later one.
    fn look(&mut self, again: bool) -> impl Future<Output = Result<Self::Answer>>;

    /// Registers for the key's next wake-up; `None` when no more callers
    /// may wait (the last answer then stands).
    fn arm(&mut self) -> impl Future<Output = Option<Self::Armed>>;

    /// Parks until `armed` fires or `pause` has passed.
    fn park(&mut self, armed: Self::Armed, pause: Duration) -> impl Future<Output = ()>;
}

/// Claims through `wait` until the answer is final or `timeout` has
/// passed since the call; the answer is the key's state at the last look,
/// and a look always follows the last park.
pub(crate) async fn claim_wait<W: KeyWait>(wait: &mut W, timeout: Duration) -> Result<W::Answer> {
    let started = Instant::now();
    let mut answer = wait.look(false).await?;
    let mut poll = W::POLL.map(|poll| poll.first);
    // Whether the loop has parked: then `answer` was looked at before the
    // last park, and is looked at again before it is answered.
    let mut parked = false;
    while answer.in_progress().is_some() {
        let armed = if timeout > started.elapsed() { wait.arm().await } else { None };
        let Some(armed) = armed else {
            if parked {
                answer = wait.look(true).await?;
            }
            break;
        };
        answer = wait.look(true).await?;
        let Some(retry_after) = answer.in_progress() else { break };
        let mut pause = timeout.saturating_sub(started.elapsed()).min(retry_after);
        if let (Some(interval), Some(bounds)) = (poll.as_mut(), W::POLL) {
            pause = pause.min(*interval);
            *interval = (*interval * 2).min(bounds.max);
        }
        wait.park(armed, pause).await;
        parked = true;
    }
    Ok(answer)
}

/// Runs `future` to its end on this thread, parking the thread while it
/// is pending: how the blocking `claim_wait` runs the loop above, whose
/// looks and parks then block the thread themselves.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    /// Wakes the thread that runs the future.
    struct Unpark(Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let TaskPoll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A scripted key: the answers its looks give, and what happened.
    struct Script {
        answers: VecDeque<Option<Duration>>,
        armed_ok: bool,
        /// How long a park really takes, whatever its pause.
        park_takes: Duration,
        log: Vec<String>,
    }

    struct Scripted(Option<Duration>);

    impl Answer for Scripted {
        fn in_progress(&self) -> Option<Duration> {
            self.0
        }
    }

    impl KeyWait for Script {
        type Answer = Scripted;
        type Armed = ();
        const POLL: Option<Poll> = Some(Poll { first: Duration::from_millis(1), max: Duration::from_millis(4) });

        async fn look(&mut self, again: bool) -> Result<Scripted> {
            self.log.push(if again { "look again" } else { "look" }.into());
            Ok(Scripted(self.answers.pop_front().unwrap_or(None)))
        }

        async fn arm(&mut self) -> Option<()> {
            self.log.push("arm".into());
            self.armed_ok.then_some(())
        }

        async fn park(&mut self, (): (), pause: Duration) {
            self.log.push(format!("park {}", pause.as_millis()));
            std::thread::sleep(self.park_takes);
        }
    }

    fn script(answers: &[Option<u64>], armed_ok: bool) -> Script {
        let answers = answers.iter().map(|answer| answer.map(Duration::from_millis)).collect();
        Script { answers, armed_ok, park_takes: Duration::ZERO, log: Vec::new() }
    }

    #[test]
    fn a_final_first_answer_registers_nothing() {
        let mut wait = script(&[None], true);
        let answer = block_on(claim_wait(&mut wait, Duration::from_secs(1))).expect("answer");
        assert_eq!(answer.0, None);
        assert_eq!(wait.log, ["look"]);
    }

    #[test]
    fn it_registers_before_each_look_again_and_parks_with_a_doubling_poll() {
        let mut wait = script(&[Some(100), Some(100), Some(100), Some(100), None], true);
        let answer = block_on(claim_wait(&mut wait, Duration::from_secs(60))).expect("answer");
        assert_eq!(answer.0, None);
        let expected = [
            "look",
            "arm",
            "look again",
            "park 1",
            "arm",
            "look again",
            "park 2",
            "arm",
            "look again",
            "park 4",
            "arm",
        ];
        assert_eq!(wait.log[..expected.len()], expected);
        assert_eq!(wait.log.last().map(String::as_str), Some("look again"));
    }

    #[test]
    fn a_park_never_outlasts_the_lease_end_reported() {
        let mut wait = script(&[Some(1), Some(0), None], true);
        let _answer = block_on(claim_wait(&mut wait, Duration::from_secs(60))).expect("answer");
        assert_eq!(wait.log, ["look", "arm", "look again", "park 0", "arm", "look again"]);
    }

    #[test]
    fn with_no_room_to_wait_the_first_answer_stands() {
        let mut wait = script(&[Some(100), None], false);
        let answer = block_on(claim_wait(&mut wait, Duration::from_secs(60))).expect("answer");
        assert_eq!(answer.0, Some(Duration::from_millis(100)));
        assert_eq!(wait.log, ["look", "arm"]);
    }

    #[test]
    fn a_zero_timeout_answers_the_first_look() {
        let mut wait = script(&[Some(100), None], true);
        let answer = block_on(claim_wait(&mut wait, Duration::ZERO)).expect("answer");
        assert_eq!(answer.0, Some(Duration::from_millis(100)));
        assert_eq!(wait.log, ["look"]);
    }

    #[test]
    fn past_the_timeout_the_answer_is_looked_at_after_the_last_park() {
        let mut wait = script(&[Some(100), Some(100), None], true);
        wait.park_takes = Duration::from_millis(30);
        let answer = block_on(claim_wait(&mut wait, Duration::from_millis(10))).expect("answer");
        assert_eq!(answer.0, None, "the look after the park");
        assert_eq!(wait.log, ["look", "arm", "look again", "park 1", "look again"]);
    }
}
