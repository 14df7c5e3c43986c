//! A handler's first wait, told by whoever runs the handler when the
//! layer cannot see it itself.

use parking_lot::Mutex;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;
use tokio::sync::oneshot;

/// Tells the layer when the handler of a guarded request first waits on
/// something, when the layer wants to know: a request that asked to
/// respond async (`Prefer: respond-async`) is answered `202 Accepted`
/// once its handler waits, and at once with the handler's own answer when
/// there was nothing to wait for (a route that does not exist, say).
///
/// The layer sees it by itself, when the handler's future first waits (is
/// pending), and puts a `FirstWait` in the request's extensions only for
/// those requests. An inner service that hands the request to a handler
/// running elsewhere (another executor, another thread: its own future
/// waits from the start, whatever the handler does) takes it over: it
/// [`claim`](FirstWait::claim)s it before its future is first polled, and
/// tells the handler's first wait itself ([`FirstWait::waits`]), or
/// nothing when the handler answered at once. The actix-web middleware
/// (`idemkv-actix`) does so. A handler itself has nothing to do with it.
///
/// # Examples
///
/// ```
/// use idemkv::http::FirstWait;
///
/// // An inner service that runs the handler elsewhere, given a guarded
/// // request's extensions.
/// fn hand_over(extensions: &http::Extensions) -> Option<FirstWait> {
///     let first_wait = extensions.get::<FirstWait>().cloned()?;
///     first_wait.claim();
///     Some(first_wait)
/// }
/// # let _ = hand_over(&http::Extensions::new());
/// ```
#[derive(Debug, Clone)]
pub struct FirstWait(Arc<Told>);

#[derive(Debug)]
struct Told {
    /// Taken when told (or when the handler answered first).
    told: Mutex<Option<oneshot::Sender<()>>>,
    claimed: AtomicBool,
}

impl FirstWait {
    /// The first wait told through `told`.
    pub(super) fn new(told: oneshot::Sender<()>) -> Self {
        FirstWait(Arc::new(Told { told: Mutex::new(Some(told)), claimed: AtomicBool::new(false) }))
    }

    /// Takes over telling the first wait: the layer no longer watches the
    /// future of the inner service (which waits from the start) and waits
    /// for [`FirstWait::waits`] instead.
    pub fn claim(&self) {
        self.0.claimed.store(true, Ordering::SeqCst);
    }

    /// Whether an inner service took it over.
    pub(super) fn claimed(&self) -> bool {
        self.0.claimed.load(Ordering::SeqCst)
    }

    /// Tells the layer that the handler waits on something: the run is a
    /// long one. Only the first call tells.
    pub fn waits(&self) {
        if let Some(told) = self.0.told.lock().take() {
            // Nobody may wait for it any more: nothing to tell then.
            let _told = told.send(());
        }
    }

    /// Polls `future` to its end; the first time it waits on something (is
    /// pending), `first_wait` (when there is one) is told
    /// ([`FirstWait::waits`]): the handler did not answer at once. When
    /// the future ends, `first_wait` is dropped, told or not.
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::http::FirstWait;
    ///
    /// # async fn run(first_wait: Option<FirstWait>) {
    /// // The inner service's handler, run where it runs.
    /// let answer = FirstWait::watch(first_wait, async { 7 }).await;
    /// assert_eq!(answer, 7);
    /// # }
    /// # futures_util::FutureExt::now_or_never(run(None));
    /// ```
    pub async fn watch<F: Future>(mut first_wait: Option<FirstWait>, future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        std::future::poll_fn(move |context| {
            let polled = future.as_mut().poll(context);
            match (&polled, first_wait.take()) {
                (Poll::Pending, Some(first_wait)) => first_wait.waits(),
                (Poll::Ready(_), told) => drop(told),
                (Poll::Pending, None) => {}
            }
            polled
        })
        .await
    }
}
