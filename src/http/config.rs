//! Settings of the layer: [`LayerConfig`] and its [`FailurePolicy`].

use http::header::{HeaderName, CONTENT_TYPE};
use http::{Method, StatusCode};
use std::sync::Arc;
use std::time::Duration;

/// What the layer keeps after the inner service answered.
///
/// The default keeps 2xx and the 4xx that a retry would only repeat, and
/// releases the key on 5xx (and on 408, 409, 425, 429), on an error of the
/// inner service and on a dropped request, so that a retry may run: a
/// server-side failure says nothing happened that a retry could not fix,
/// while replaying a 503 forever would turn a blip into a permanent error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// As described above.
    Default,
    /// Keep every response, 5xx included (the inner service's side effects
    /// may have run even when it failed).
    KeepAll,
}

impl FailurePolicy {
    pub(super) fn keeps(self, status: StatusCode) -> bool {
        match self {
            FailurePolicy::KeepAll => true,
            FailurePolicy::Default => {
                status.is_success()
                    || status.is_redirection()
                    || (status.is_client_error() && !matches!(status.as_u16(), 408 | 409 | 425 | 429))
            }
        }
    }
}

type ScopeFn = dyn Fn(&http::request::Parts) -> Vec<u8> + Send + Sync;

/// Settings of the layer, each with its default.
#[derive(Clone)]
pub struct LayerConfig {
    pub(super) methods: Vec<Method>,
    pub(super) key_header: HeaderName,
    pub(super) replay_header: HeaderName,
    pub(super) require_key: bool,
    pub(super) key_bytes_max: usize,
    pub(super) request_bytes_max: usize,
    pub(super) response_bytes_max: usize,
    pub(super) wait_max: Duration,
    pub(super) stored_headers: Vec<HeaderName>,
    pub(super) policy: FailurePolicy,
    pub(super) scope: Option<Arc<ScopeFn>>,
}

impl std::fmt::Debug for LayerConfig {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("LayerConfig")
            .field("methods", &self.methods)
            .field("key_header", &self.key_header)
            .field("require_key", &self.require_key)
            .finish_non_exhaustive()
    }
}

impl Default for LayerConfig {
    fn default() -> Self {
        LayerConfig {
            methods: vec![Method::POST, Method::PATCH],
            key_header: HeaderName::from_static("idempotency-key"),
            replay_header: HeaderName::from_static("idempotency-replay"),
            require_key: true,
            key_bytes_max: 255,
            request_bytes_max: 1 << 20,
            response_bytes_max: 1 << 20,
            wait_max: Duration::from_secs(30),
            stored_headers: vec![CONTENT_TYPE, http::header::LOCATION],
            policy: FailurePolicy::Default,
            scope: None,
        }
    }
}

impl LayerConfig {
    /// Methods the layer guards. Default POST and PATCH.
    #[must_use]
    pub fn methods(mut self, methods: Vec<Method>) -> Self {
        self.methods = methods;
        self
    }

    /// The request header with the key. Default `Idempotency-Key`.
    #[must_use]
    pub fn key_header(mut self, name: HeaderName) -> Self {
        self.key_header = name;
        self
    }

    /// The response header marking a replay. Default `Idempotency-Replay`
    /// (Stripe uses `Idempotent-Replayed`).
    #[must_use]
    pub fn replay_header(mut self, name: HeaderName) -> Self {
        self.replay_header = name;
        self
    }

    /// Whether a guarded request without a key is refused (400) or passed
    /// through unguarded. Default refused.
    #[must_use]
    pub fn require_key(mut self, required: bool) -> Self {
        self.require_key = required;
        self
    }

    /// Largest request body buffered (413 above). Default 1 MiB.
    #[must_use]
    pub fn request_bytes_max(mut self, max: usize) -> Self {
        self.request_bytes_max = max;
        self
    }

    /// Largest response body stored (the key is released and 500 returned
    /// above). Default 1 MiB; keep it within the store's
    /// `response_bytes_max`.
    #[must_use]
    pub fn response_bytes_max(mut self, max: usize) -> Self {
        self.response_bytes_max = max;
        self
    }

    /// Longest `Prefer: wait=N` honoured. Default 30 s.
    #[must_use]
    pub fn wait_max(mut self, max: Duration) -> Self {
        self.wait_max = max;
        self
    }

    /// Response headers stored and replayed besides status and body.
    /// Default `Content-Type` and `Location`.
    #[must_use]
    pub fn stored_headers(mut self, names: Vec<HeaderName>) -> Self {
        self.stored_headers = names;
        self
    }

    /// What is kept and what releases the key. Default
    /// [`FailurePolicy::Default`].
    #[must_use]
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The scope of a request, e.g. the authenticated account. Default:
    /// every request in the empty scope.
    #[must_use]
    pub fn scope(mut self, scope: impl Fn(&http::request::Parts) -> Vec<u8> + Send + Sync + 'static) -> Self {
        self.scope = Some(Arc::new(scope));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_policy_keeps_what_a_retry_would_repeat() {
        let policy = FailurePolicy::Default;
        assert!(policy.keeps(StatusCode::CREATED));
        assert!(policy.keeps(StatusCode::PAYMENT_REQUIRED));
        assert!(!policy.keeps(StatusCode::TOO_MANY_REQUESTS));
        assert!(!policy.keeps(StatusCode::SERVICE_UNAVAILABLE));
        assert!(FailurePolicy::KeepAll.keeps(StatusCode::SERVICE_UNAVAILABLE));
    }
}
