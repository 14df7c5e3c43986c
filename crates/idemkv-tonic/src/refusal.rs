//! Every answer the face gives in place of the handler's: a typed
//! [`Refusal`], sent as a gRPC status with the google.rpc details a
//! client acts on (`ErrorInfo` with a stable reason in the domain
//! [`ERROR_DOMAIN`], `RetryInfo`, `QuotaFailure`, `PreconditionFailure`,
//! `BadRequest`).

use crate::answer::AnswerError;
use std::collections::HashMap;
use std::time::Duration;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The `ErrorInfo.domain` of every refusal.
pub const ERROR_DOMAIN: &str = "idemkv";

/// The field a refusal about the key names in its `BadRequest`: the
/// metadata key, or the message's field.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeySource {
    /// The `idempotency-key` request metadata.
    Metadata,
    /// A field of the request message (AIP-155's `request_id`, or a
    /// natural key), by name.
    Field(&'static str),
}

impl std::fmt::Display for KeySource {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeySource::Metadata => formatter.write_str(crate::KEY_METADATA),
            KeySource::Field(field) => formatter.write_str(field),
        }
    }
}

/// Why a guarded call got the face's answer rather than its handler's.
/// Each is a gRPC status ([`Refusal::status`], `From<Refusal> for
/// Status`); none ran the handler, except [`Refusal::HandlerFailed`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// No key, and the method requires one: `INVALID_ARGUMENT`.
    #[error("no idempotency key: {source_name} is required")]
    KeyMissing {
        /// Where the key was looked for.
        source_name: KeySource,
    },
    /// More than one `idempotency-key` value: `INVALID_ARGUMENT`.
    #[error("more than one {source_name} value")]
    KeyRepeated {
        /// Where.
        source_name: KeySource,
    },
    /// A key that is not printable ASCII, empty, or (for an AIP-155
    /// `request_id`) not a UUID4: `INVALID_ARGUMENT`.
    #[error("malformed idempotency key in {source_name}: {reason}")]
    KeyInvalid {
        /// Where.
        source_name: KeySource,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A key longer than the backend keeps: `INVALID_ARGUMENT`.
    #[error("idempotency key in {source_name} is {length} bytes, at most {max}")]
    KeyTooLong {
        /// Where.
        source_name: KeySource,
        /// Its length.
        length: usize,
        /// The backend's limit.
        max: usize,
    },
    /// The service's scope function found no scope for the call (no
    /// tenant): `INVALID_ARGUMENT`; there is no default scope.
    #[error("the call has no idempotency scope")]
    ScopeMissing,
    /// A scope longer than the backend keeps: `INVALID_ARGUMENT`.
    #[error("the idempotency scope is {length} bytes, at most {max}")]
    ScopeTooLong {
        /// Its length.
        length: usize,
        /// The backend's limit.
        max: usize,
    },
    /// The first call with this key is still running: `ABORTED`, with
    /// `RetryInfo`.
    #[error("a call with this idempotency key is in progress; retry after {retry_after:?}")]
    InProgress {
        /// When to try again.
        retry_after: Duration,
    },
    /// The key was used for another request: `FAILED_PRECONDITION`.
    #[error("the idempotency key was used for a different request")]
    Mismatch,
    /// The scope is at its quota (embedded store): `RESOURCE_EXHAUSTED`,
    /// with `RetryInfo` and a `QuotaFailure`.
    #[error("the idempotency scope is at its quota; retry after {retry_after:?}")]
    QuotaExceeded {
        /// When to try again.
        retry_after: Duration,
    },
    /// The backend did not answer the claim; nothing ran: `UNAVAILABLE`,
    /// with `RetryInfo`.
    #[error("the idempotency store is unavailable; nothing ran")]
    StoreUnavailable,
    /// The handler panicked (or its task was cancelled): `INTERNAL`. Its
    /// key stays in progress until its lease ends.
    #[error("the handler failed to answer")]
    HandlerFailed,
    /// The kept answer cannot be read (bytes this face did not write, or
    /// a response type that no longer decodes them): `INTERNAL`, and the
    /// call does not run again.
    #[error("the kept answer cannot be read: {0}")]
    StoredUnreadable(#[from] AnswerError),
}

impl Refusal {
    /// The `ErrorInfo.reason`: stable, `UPPER_SNAKE_CASE`.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::KeyMissing { .. } => "IDEMPOTENCY_KEY_MISSING",
            Refusal::KeyRepeated { .. } => "IDEMPOTENCY_KEY_REPEATED",
            Refusal::KeyInvalid { .. } => "IDEMPOTENCY_KEY_INVALID",
            Refusal::KeyTooLong { .. } => "IDEMPOTENCY_KEY_TOO_LONG",
            Refusal::ScopeMissing => "IDEMPOTENCY_SCOPE_MISSING",
            Refusal::ScopeTooLong { .. } => "IDEMPOTENCY_SCOPE_TOO_LONG",
            Refusal::InProgress { .. } => "IDEMPOTENCY_KEY_IN_PROGRESS",
            Refusal::Mismatch => "IDEMPOTENCY_KEY_REUSED",
            Refusal::QuotaExceeded { .. } => "IDEMPOTENCY_QUOTA_EXCEEDED",
            Refusal::StoreUnavailable => "IDEMPOTENCY_STORE_UNAVAILABLE",
            Refusal::HandlerFailed => "IDEMPOTENCY_HANDLER_FAILED",
            Refusal::StoredUnreadable(_) => "IDEMPOTENCY_STORED_UNREADABLE",
        }
    }

    /// The gRPC code.
    #[must_use]
    pub fn code(&self) -> Code {
        match self {
            Refusal::KeyMissing { .. }
            | Refusal::KeyRepeated { .. }
            | Refusal::KeyInvalid { .. }
            | Refusal::KeyTooLong { .. }
            | Refusal::ScopeMissing
            | Refusal::ScopeTooLong { .. } => Code::InvalidArgument,
            Refusal::InProgress { .. } => Code::Aborted,
            Refusal::Mismatch => Code::FailedPrecondition,
            Refusal::QuotaExceeded { .. } => Code::ResourceExhausted,
            Refusal::StoreUnavailable => Code::Unavailable,
            Refusal::HandlerFailed | Refusal::StoredUnreadable(_) => Code::Internal,
        }
    }

    /// The status a client gets: [`code`](Refusal::code), this refusal's
    /// text as the message, and its details.
    #[must_use]
    pub fn status(&self) -> Status {
        let mut details = ErrorDetails::new();
        details.set_error_info(self.reason(), ERROR_DOMAIN, HashMap::<String, String>::new());
        match self {
            Refusal::KeyMissing { source_name }
            | Refusal::KeyRepeated { source_name }
            | Refusal::KeyInvalid { source_name, .. }
            | Refusal::KeyTooLong { source_name, .. } => {
                details.add_bad_request_violation(source_name.to_string(), self.to_string());
            }
            Refusal::InProgress { retry_after } => {
                details.set_retry_info(Some(*retry_after));
            }
            Refusal::Mismatch => {
                details.add_precondition_failure_violation(
                    "IDEMPOTENCY_KEY",
                    "idempotency key",
                    "the key was first used for a request with another fingerprint; use a new key",
                );
            }
            Refusal::QuotaExceeded { retry_after } => {
                details.set_retry_info(Some(*retry_after));
                details.add_quota_failure_violation("idempotency scope", "live idempotency records or bytes");
            }
            Refusal::StoreUnavailable => {
                details.set_retry_info(Some(STORE_RETRY_AFTER));
            }
            Refusal::ScopeMissing
            | Refusal::ScopeTooLong { .. }
            | Refusal::HandlerFailed
            | Refusal::StoredUnreadable(_) => {}
        }
        Status::with_error_details(self.code(), self.to_string(), details)
    }
}

/// The retry delay of [`Refusal::StoreUnavailable`], as the HTTP layer's
/// `Retry-After: 1`.
const STORE_RETRY_AFTER: Duration = Duration::from_secs(1);

impl From<Refusal> for Status {
    fn from(refusal: Refusal) -> Status {
        refusal.status()
    }
}
