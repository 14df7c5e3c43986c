//! A future that runs to its end even when its caller stops waiting: when
//! dropped unfinished (a client disconnected and the server dropped the
//! request's future), it hands what is left to a task of its own. Until
//! then it runs inline, in the caller's task, at no cost of a spawn.

use super::first_wait::FirstWait;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

/// The wrapped future panicked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Panicked;

/// See the module docs.
pub(super) struct Detached<F: Future + Send + 'static>
where
    F::Output: Send,
{
    future: Option<Pin<Box<F>>>,
    /// The span it was made in, which the task of its own goes on in.
    span: tracing::Span,
}

impl<F: Future + Send + 'static> Detached<F>
where
    F::Output: Send,
{
    pub(super) fn new(future: F) -> Self {
        Detached { future: Some(Box::pin(future)), span: tracing::Span::current() }
    }
}

impl<F: Future + Send + 'static> Future for Detached<F>
where
    F::Output: Send,
{
    type Output = Result<F::Output, Panicked>;

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(future) = self.future.as_mut() else {
            // Polled again after it ended: it stays ended.
            return Poll::Pending;
        };
        // A panic ends the future (it is never polled again) and is
        // answered, instead of unwinding through the server's connection.
        let polled = catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(context)));
        match polled {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => {
                self.future = None;
                Poll::Ready(Ok(output))
            }
            Err(_panic) => {
                self.future = None;
                Poll::Ready(Err(Panicked))
            }
        }
    }
}

impl<F: Future + Send + 'static> Drop for Detached<F>
where
    F::Output: Send,
{
    fn drop(&mut self) {
        if let Some(future) = self.future.take() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let span = std::mem::replace(&mut self.span, tracing::Span::none());
                drop(runtime.spawn(tracing::Instrument::instrument(future, span)));
            } else {
                tracing::error!("a guarded request was dropped outside a tokio runtime; its handler stops");
            }
        }
    }
}

/// Polls `future` to its end, a panic in it answered as [`Panicked`]
/// (the future is then never polled again); the first time it waits on
/// something (is pending), `started` is told: the run is a long one —
/// unless the inner service claimed `started`, to tell it itself.
pub(super) async fn watched<F: Future>(future: F, started: Option<FirstWait>) -> Result<F::Output, Panicked> {
    let mut future = std::pin::pin!(future);
    let caught =
        std::future::poll_fn(move |context| match catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(context))) {
            Ok(polled) => polled.map(Ok),
            Err(_panic) => Poll::Ready(Err(Panicked)),
        });
    FirstWait::watch(started.filter(|started| !started.claimed()), caught).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn a_dropped_future_still_runs_to_its_end() {
        let finished = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&finished);
        let detached = Detached::new(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            flag.store(true, Ordering::SeqCst);
        });
        assert!(tokio::time::timeout(Duration::from_millis(1), detached).await.is_err(), "dropped unfinished");
        for _ in 0..200 {
            if finished.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("the dropped future never finished");
    }

    #[tokio::test]
    async fn a_watched_future_says_when_it_first_waits() {
        let (started, mut waited) = tokio::sync::oneshot::channel();
        assert_eq!(watched(async { 7 }, Some(FirstWait::new(started))).await, Ok(7));
        assert!(waited.try_recv().is_err(), "answered at once: never waited");
        let (started, waited) = tokio::sync::oneshot::channel();
        let slow = watched(tokio::time::sleep(Duration::from_millis(10)), Some(FirstWait::new(started)));
        let (slept, told) = tokio::join!(slow, waited);
        assert_eq!((slept, told), (Ok(()), Ok(())));
        // Claimed by the inner service: its own waits tell nothing.
        let (started, mut waited) = tokio::sync::oneshot::channel();
        let claimed = FirstWait::new(started);
        claimed.claim();
        let slept = watched(tokio::time::sleep(Duration::from_millis(10)), Some(claimed.clone())).await;
        assert_eq!((slept, waited.try_recv().is_err()), (Ok(()), true), "the layer told a claimed first wait");
        claimed.waits();
        assert_eq!(waited.await, Ok(()), "told by whoever claimed it");
        assert_eq!(watched(async { panic!("handler bug") }, None).await, Err::<(), _>(Panicked));
    }

    #[tokio::test]
    async fn a_panic_is_an_answer() {
        let outcome = Detached::new(async { panic!("handler bug") }).await;
        assert_eq!(outcome, Err::<(), _>(Panicked));
        assert_eq!(Detached::new(async { 7 }).await, Ok(7));
    }
}
