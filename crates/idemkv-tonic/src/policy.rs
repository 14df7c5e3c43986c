//! What a handler's answer does to its key: kept (replayed to every
//! retry) or freed (the next call runs). Once a handler has started, its
//! side effect may have happened: only its own word — [`NotSpent`] — or a
//! status the [`FailurePolicy`] names frees the key.

use std::sync::Arc;
use tonic::{Code, Response, Status};

/// The handler's word that nothing happened — no side effect a retry
/// must not repeat (validation failed, a downstream refused before
/// anything was done) — so its key is freed and a retry runs.
///
/// On a message answer, put it in the response's extensions
/// (`response.extensions_mut().insert(NotSpent)`, or
/// [`NotSpent::response`]); on a status, mark the status with
/// [`NotSpent::status`] (the mark rides as the status's source error,
/// which is never sent).
///
/// # Examples
///
/// ```
/// use idemkv_tonic::NotSpent;
///
/// // The card network was not reached: a retry may run.
/// let status = NotSpent::status(tonic::Status::unavailable("card network unreachable"));
/// assert!(NotSpent::is_marked(&status));
/// assert_eq!(status.code(), tonic::Code::Unavailable);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, thiserror::Error)]
#[error("not spent: nothing happened")]
pub struct NotSpent;

impl NotSpent {
    /// `status`, marked: the face frees its key.
    #[must_use]
    pub fn status(mut status: Status) -> Status {
        status.set_source(Arc::new(NotSpent));
        status
    }

    /// `response`, marked: the face frees its key.
    #[must_use]
    pub fn response<T>(mut response: Response<T>) -> Response<T> {
        response.extensions_mut().insert(NotSpent);
        response
    }

    /// Whether `status` was marked with [`NotSpent::status`].
    #[must_use]
    pub fn is_marked(status: &Status) -> bool {
        std::error::Error::source(status).is_some_and(<dyn std::error::Error>::is::<NotSpent>)
    }
}

/// Which error statuses of a handler free its key, beside [`NotSpent`].
///
/// | the handler answered… | `Default` | `KeepAll` | `ReleaseRetryable` |
/// |---|---|---|---|
/// | a message or a status marked [`NotSpent`] | freed | freed | freed |
/// | a message | kept | kept | kept |
/// | `INVALID_ARGUMENT` (the request is wrong whatever the state: validation, so nothing happened) | freed | kept | freed |
/// | `UNAVAILABLE`, `RESOURCE_EXHAUSTED`, `ABORTED` (the codes gRPC calls retryable) | kept | kept | freed |
/// | any other status, `INTERNAL`, `UNKNOWN` and `DEADLINE_EXCEEDED` included | kept | kept | kept |
///
/// `UNAVAILABLE` is kept by default although gRPC calls it retryable: a
/// handler that charged a card and then failed to reach its database may
/// well answer it, and only the handler knows; it says so with
/// [`NotSpent`]. `ReleaseRetryable` is for services whose handlers answer
/// those codes only before any side effect. A kept status is replayed,
/// code, message, details and metadata, to every retry — or, under
/// [`ReusePolicy::RetryFailed`](idemkv::ReusePolicy::RetryFailed), the
/// next retry runs again as a new attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// `INVALID_ARGUMENT` freed, every other status kept.
    #[default]
    Default,
    /// Every status kept; only [`NotSpent`] frees a key.
    KeepAll,
    /// `INVALID_ARGUMENT`, `UNAVAILABLE`, `RESOURCE_EXHAUSTED` and
    /// `ABORTED` freed.
    ReleaseRetryable,
}

impl FailurePolicy {
    /// Whether a handler's `status` frees its key.
    #[must_use]
    pub fn frees(self, status: &Status) -> bool {
        if NotSpent::is_marked(status) {
            return true;
        }
        let code = status.code();
        match self {
            FailurePolicy::KeepAll => false,
            FailurePolicy::Default => code == Code::InvalidArgument,
            FailurePolicy::ReleaseRetryable => {
                matches!(code, Code::InvalidArgument | Code::Unavailable | Code::ResourceExhausted | Code::Aborted)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_policy_frees_what_its_table_says() {
        let frees = |policy: FailurePolicy, code| policy.frees(&Status::new(code, "x"));
        assert!(frees(FailurePolicy::Default, Code::InvalidArgument));
        assert!(!frees(FailurePolicy::Default, Code::Unavailable));
        assert!(!frees(FailurePolicy::Default, Code::Internal));
        assert!(!frees(FailurePolicy::KeepAll, Code::InvalidArgument));
        assert!(frees(FailurePolicy::ReleaseRetryable, Code::Unavailable));
        assert!(frees(FailurePolicy::ReleaseRetryable, Code::Aborted));
        assert!(!frees(FailurePolicy::ReleaseRetryable, Code::DeadlineExceeded));
        for policy in [FailurePolicy::Default, FailurePolicy::KeepAll, FailurePolicy::ReleaseRetryable] {
            assert!(policy.frees(&NotSpent::status(Status::internal("nothing done"))));
        }
    }
}
