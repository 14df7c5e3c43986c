//! How the write that ends a run — a completion, a failure, a release — is
//! tried again when it fails for a moment (one failed I/O, a full disk, the
//! network, a failover). Whoever ran a side effect under a lease and then
//! gives its answer up at the first failure lets the lease lapse, and the
//! next attempt runs the side effect again; so [`Store::run_once`],
//! `RunOnce` and the HTTP layer all try the write again, with these pauses:
//!
//! - **quick tries**, before the caller gets its answer: after each of
//!   [`QUICK`];
//! - **later**, for an answer (a completion or a failure) the quick tries
//!   did not store: in the background while the lease is held (renewed
//!   meanwhile), for at most one lease, from [`LATER_FIRST`] doubling up to
//!   [`LATER_MAX`]. The key stays in progress meanwhile: a retry is told to
//!   wait, never run. If the write never succeeds the lease lapses and the
//!   next attempt runs with `recovered`, as after a crash.
//!
//! A write refused for what it is (a lost lease, an answer too large, a
//! read-only store) is not tried again: see [`worth_retrying`].
//!
//! [`Store::run_once`]: crate::Store::run_once

use crate::error::Error;
use std::time::Duration;

/// Pauses before the quick tries made while the caller waits for its
/// answer.
pub(crate) const QUICK: [Duration; 3] =
    [Duration::from_millis(10), Duration::from_millis(40), Duration::from_millis(150)];

/// The first and the longest pause between background tries.
pub(crate) const LATER_FIRST: Duration = Duration::from_millis(100);
pub(crate) const LATER_MAX: Duration = Duration::from_secs(2);

/// Whether a failed write that ends a run may succeed when tried again:
/// not when the lease is gone or the answer itself is refused.
pub(crate) fn worth_retrying(error: &Error) -> bool {
    !matches!(
        error,
        Error::LeaseLost { .. }
            | Error::ResponseTooLarge { .. }
            | Error::KeyEmpty
            | Error::KeyTooLong { .. }
            | Error::ScopeTooLong { .. }
            | Error::ReadOnly { .. }
    )
}
