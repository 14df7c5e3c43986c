//! The errors of the retry layer. A retryable *answer* (a 503 after the
//! last attempt) is not an error: the caller gets the response itself.

use std::time::Duration;

/// An error of the inner service, boxed.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why the retry layer gives no response.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The destination's circuit breaker is open: nothing was sent.
    #[error("circuit breaker open for {destination:?}; a probe goes through in {retry_in:?}")]
    CircuitOpen {
        /// The destination (the request's authority).
        destination: String,
        /// How long until the breaker lets a probe through (zero when a
        /// half-open breaker's probes are all out).
        retry_in: Duration,
    },
    /// No place among the attempts in flight to the destination freed
    /// before the deadline (its adaptive concurrency limit, see
    /// [`RetryPolicy::concurrency`](super::RetryPolicy::concurrency)):
    /// nothing was sent.
    #[error("no place under the concurrency limit ({limit}) of {destination:?} before the deadline")]
    ConcurrencyLimited {
        /// The destination (the request's authority).
        destination: String,
        /// Its concurrency limit when the wait ended.
        limit: u32,
    },
    /// The request body could not be read, or is larger than the layer
    /// buffers for replay: nothing was sent.
    #[error("request body unreadable or over {bytes_max} bytes")]
    Body {
        /// The configured limit.
        bytes_max: usize,
        /// The body's error, or the limit's.
        #[source]
        source: BoxError,
    },
    /// The last attempt failed in the transport (no answer), and no more
    /// attempts were allowed: attempts, deadline, budget or breaker.
    #[error("transport error after {attempts} attempt(s)")]
    Transport {
        /// Attempts made.
        attempts: u32,
        /// The last attempt's error.
        #[source]
        source: BoxError,
    },
    /// The total deadline passed while an attempt was in flight.
    #[error("deadline of {deadline:?} passed after {attempts} attempt(s)")]
    DeadlineExceeded {
        /// Attempts made, the one cut short included.
        attempts: u32,
        /// The configured deadline.
        deadline: Duration,
    },
}

impl ClientError {
    /// Whether nothing reached the destination (breaker, concurrency limit
    /// or body): sending the same request later cannot have doubled
    /// anything.
    #[must_use]
    pub fn nothing_sent(&self) -> bool {
        matches!(
            self,
            ClientError::CircuitOpen { .. } | ClientError::ConcurrencyLimited { .. } | ClientError::Body { .. }
        )
    }
}
