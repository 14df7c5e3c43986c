//! The runtime a networked backend's connections belong to: the one it
//! was connected on. A connection's socket and the task that drives it
//! are made wherever the future that opens it is polled; a backend whose
//! calls come from several runtimes (each actix-web worker has its own)
//! would otherwise leave a connection driven by one worker's runtime,
//! and every other caller of that connection waiting while that worker's
//! thread is busy, or for good once that worker has stopped.

use std::future::Future;
use tokio::runtime::Handle;

/// The runtime `connect` runs on; an error when there is none.
pub(crate) fn current(backend: &str) -> crate::error::Result<Handle> {
    Handle::try_current()
        .map_err(|_| crate::error::Error::InvalidConfig(format!("{backend}: connect outside a tokio runtime")))
}

/// Polls `future` inside `runtime`'s context, so that what it spawns or
/// opens (a new connection's driver and socket, a reconnection) belongs
/// to `runtime` and not to the caller's.
pub(crate) async fn on<F: Future>(runtime: &Handle, future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|context| {
        let _entered = runtime.enter();
        future.as_mut().poll(context)
    })
    .await
}
