//! Settings of the layer: [`LayerConfig`], the [`FailurePolicy`] that says
//! which answers are kept, and how a request's scope is chosen.

use crate::backend::ClaimOptions;
use crate::fingerprint::{NaturalKey, RequestFingerprint};
use crate::Checkpoint;
use http::header::HeaderName;
use http::request::Parts;
use http::{Method, StatusCode};
use std::sync::Arc;
use std::time::Duration;

/// What becomes of the key once the handler has started.
///
/// Once a handler has started, its side effect may have happened: the key
/// is *spent*, and only the handler's own word — the [`NotSpent`] marker on
/// its response — frees it for a retry. What each policy keeps:
///
/// | outcome | `Default` | `KeepAll` | `ReleaseOnServerError` |
/// |---|---|---|---|
/// | a response marked [`NotSpent`] | released, not kept | released | released |
/// | 400, 422 (validation) | released unless [`LayerConfig::keep_validation_failures`] | kept | as `Default` |
/// | any other status, 404 and 405 and 5xx included | kept and replayed | kept | 5xx, 408, 409, 425, 429 released |
/// | the handler's error or panic | key stays Processing until its lease ends; the next attempt runs with `recovered` | same | released |
/// | a response too large to keep | it goes out whole, and is kept without its body (replayed with `Idempotency-Replay: omitted`) | same | same |
///
/// A 404 or 405 is kept like any answer: a status does not say who gave
/// it, and a handler that did its work and answered 404 must not run
/// again. A router's own 404 and 405 — no handler ran — free the key when
/// the router's fallbacks say so with [`NotSpent`] (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// As in the table: only the handler's word (or a validation status)
    /// frees a key.
    #[default]
    Default,
    /// Keep every response the handler produced.
    KeepAll,
    /// As `Default`, and release on 5xx (and 408, 409, 425, 429) and on
    /// the handler's error or panic, so that a retry runs again: for
    /// handlers that are safe to repeat after a failure. A side effect that
    /// failed half-way may then run twice.
    ReleaseOnServerError,
}

impl FailurePolicy {
    /// Whether a response with `status` (not marked [`NotSpent`]) is kept.
    pub(super) fn keeps(self, status: StatusCode, keep_validation_failures: bool) -> bool {
        match self {
            FailurePolicy::KeepAll => true,
            FailurePolicy::Default | FailurePolicy::ReleaseOnServerError => match status.as_u16() {
                400 | 422 => keep_validation_failures,
                408 | 409 | 425 | 429 | 500..=599 => self == FailurePolicy::Default,
                _ => true,
            },
        }
    }

    /// Whether a handler error or panic releases the key.
    pub(super) fn releases_on_error(self) -> bool {
        self == FailurePolicy::ReleaseOnServerError
    }
}

/// A response extension with which a handler says "nothing happened, a
/// retry may run": the layer releases the key and does not keep the
/// response.
///
/// # Examples
///
/// ```
/// use axum::{http::StatusCode, response::IntoResponse, Extension};
/// use idemkv::http::NotSpent;
///
/// async fn charge() -> impl IntoResponse {
///     // The card network was not reached: a retry is safe.
///     (StatusCode::SERVICE_UNAVAILABLE, Extension(NotSpent), "try again")
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NotSpent;

/// What the handler of a guarded request learns of its claim, as a request
/// extension.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attempt {
    /// The scope of the key.
    pub scope: Vec<u8>,
    /// The key.
    pub key: Vec<u8>,
    /// 1 for the first run, one more for each takeover.
    pub attempt: u32,
    /// Whether an earlier run's lease ended unfinished: it may have
    /// half-run, so check the domain state (and the last checkpoint,
    /// [`Checkpoints::last`](super::Checkpoints::last)) before acting
    /// again.
    pub recovered: bool,
    /// The last checkpoint an earlier run stored, as the claim found
    /// it.
    pub checkpoint: Option<Checkpoint>,
}

type ScopeFn = dyn Fn(&http::request::Parts) -> Option<Vec<u8>> + Send + Sync;

/// How a request's scope is chosen.
#[derive(Clone)]
pub(super) enum ScopeRule {
    PerRequest(Arc<ScopeFn>),
    Global,
}

/// Settings of the layer. There is no default scope: a service says how a
/// request's scope (tenant, account) is found, or opts into one global
/// namespace.
#[derive(Clone)]
pub struct LayerConfig {
    pub(super) scope: ScopeRule,
    pub(super) methods: Vec<Method>,
    pub(super) key_header: HeaderName,
    pub(super) replay_header: HeaderName,
    pub(super) require_key: bool,
    pub(super) request_bytes_max: usize,
    pub(super) lease: Duration,
    pub(super) ttl: Option<Duration>,
    pub(super) wait_max: Duration,
    pub(super) in_progress_retry_after: Duration,
    pub(super) replay_deny: Vec<HeaderName>,
    pub(super) policy: FailurePolicy,
    pub(super) keep_validation_failures: bool,
    pub(super) resource: Option<ResourceRule>,
    pub(super) operations: Option<Operations>,
    pub(super) fingerprint: RequestFingerprint,
    pub(super) expiry_max: Option<Duration>,
    pub(super) natural_key: Option<NaturalKey>,
    pub(super) span_scope: bool,
}

impl std::fmt::Debug for LayerConfig {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scope = match self.scope {
            ScopeRule::PerRequest(_) => "per request",
            ScopeRule::Global => "global",
        };
        formatter
            .debug_struct("LayerConfig")
            .field("scope", &scope)
            .field("methods", &self.methods)
            .field("key_header", &self.key_header)
            .field("policy", &self.policy)
            .field("fingerprint", &self.fingerprint)
            .field("natural_key", &self.natural_key)
            .field("span_scope", &self.span_scope)
            .finish_non_exhaustive()
    }
}

impl LayerConfig {
    /// Keys live in the scope `scope` finds in each request — the
    /// authenticated account, say, from a header or from an extension set by
    /// an auth middleware. A request for which it returns `None` is refused
    /// with 400.
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::http::LayerConfig;
    ///
    /// let config = LayerConfig::scoped(|request| {
    ///     request.headers.get("x-account").map(|account| account.as_bytes().to_vec())
    /// });
    /// ```
    #[must_use]
    pub fn scoped(scope: impl Fn(&http::request::Parts) -> Option<Vec<u8>> + Send + Sync + 'static) -> Self {
        Self::with_scope(ScopeRule::PerRequest(Arc::new(scope)))
    }

    /// Every request's keys live in one namespace: for a service with a
    /// single client, or whose keys are unique across clients. Two clients
    /// that send the same key with the same request get the same answer.
    #[must_use]
    pub fn global() -> Self {
        Self::with_scope(ScopeRule::Global)
    }

    /// The scope of the request `parts`, `None` when its rule finds none.
    pub(super) fn scope_of(&self, parts: &http::request::Parts) -> Option<Vec<u8>> {
        match &self.scope {
            ScopeRule::Global => Some(Vec::new()),
            ScopeRule::PerRequest(scope_of) => scope_of(parts),
        }
    }

    fn with_scope(scope: ScopeRule) -> Self {
        LayerConfig {
            scope,
            methods: vec![Method::POST, Method::PATCH],
            key_header: HeaderName::from_static("idempotency-key"),
            replay_header: HeaderName::from_static("idempotency-replay"),
            require_key: true,
            request_bytes_max: 1 << 20,
            lease: Duration::from_secs(30),
            ttl: None,
            wait_max: Duration::from_secs(30),
            in_progress_retry_after: Duration::from_secs(1),
            replay_deny: Vec::new(),
            policy: FailurePolicy::Default,
            keep_validation_failures: false,
            resource: None,
            operations: None,
            fingerprint: RequestFingerprint::default(),
            expiry_max: None,
            natural_key: None,
            span_scope: false,
        }
    }

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
    /// (Stripe uses `Idempotent-Replayed`, the draft's public conformance
    /// profile `Idempotency-Replayed`; the draft names none).
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

    /// The lease of a claim. Until the handler's answer is stored the
    /// layer's keeper thread renews it about every third of this (between
    /// a third and five twelfths of it after the last renewal), so a handler
    /// (and its streamed body) may run longer; it is how long a crashed
    /// run holds its key. Default 30 s.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long a finished request's answer is replayed to its retries,
    /// counted from when it was kept: the expiry the draft asks a resource
    /// to publish (§2.3); after it the key is new again. Not zero, and no
    /// longer than the backend's `duration_max`, or every claim is refused.
    /// Default: the backend's TTL ([`Config::default_ttl`](crate::Config::default_ttl),
    /// 24 h).
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::http::LayerConfig;
    /// use std::time::Duration;
    ///
    /// // Payments replayed for three days, whatever the store's default.
    /// let config = LayerConfig::global().ttl(Duration::from_secs(3 * 24 * 3600));
    /// ```
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The claim options of a guarded request that waits up to `wait`.
    pub(super) fn claim_options(&self, wait: Option<Duration>) -> ClaimOptions {
        let options = ClaimOptions::new().lease(self.lease).wait(wait);
        match self.ttl {
            Some(ttl) => options.ttl(ttl),
            None => options,
        }
    }

    /// Longest `Prefer: wait=N` honoured. Default 30 s.
    #[must_use]
    pub fn wait_max(mut self, max: Duration) -> Self {
        self.wait_max = max;
        self
    }

    /// The longest `Retry-After` of a 409 "in progress": the time left of
    /// the running request's lease when shorter. Default 1 s.
    ///
    /// A request usually finishes long before its lease ends (the lease is
    /// how long a *crashed* run keeps its key), so a duplicate is told to
    /// look again soon rather than when a takeover would be possible; a
    /// client that sends `Prefer: wait=N` (as `idemkv::client` does by
    /// default) gets the answer the moment it is stored instead.
    #[must_use]
    pub fn in_progress_retry_after(mut self, retry_after: Duration) -> Self {
        self.in_progress_retry_after = retry_after;
        self
    }

    /// Response headers never stored or replayed, besides the hop-by-hop
    /// ones, `Date` and `Content-Length`. Default none.
    #[must_use]
    pub fn replay_deny(mut self, names: Vec<HeaderName>) -> Self {
        self.replay_deny = names;
        self
    }

    /// What is kept once the handler has started. Default
    /// [`FailurePolicy::Default`].
    #[must_use]
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// What makes a retry "the same request" as the first one under its
    /// key (a retry that is not is answered 422 `key-reused`, never
    /// replayed). Default [`RequestFingerprint::bytes`]: the method, the
    /// path, the query and the body's bytes as sent. A request the
    /// fingerprint refuses is answered 400 before anything is claimed:
    /// `body-not-json` for a body that is not JSON under
    /// [`RequestFingerprint::json`], `fingerprint-refused` when a
    /// fingerprint of the service's own says
    /// [`FingerprintError::Refused`](crate::fingerprint::FingerprintError::Refused).
    ///
    /// # Examples
    ///
    /// ```
    /// use http::header::HeaderName;
    /// use idemkv::fingerprint::RequestFingerprint;
    /// use idemkv::http::LayerConfig;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // A client may re-serialise the JSON body and change its trace id
    /// // between retries; the API version it asks for counts.
    /// let fingerprint = RequestFingerprint::json()
    ///     .exclude("/metadata/trace_id")
    ///     .header(HeaderName::from_static("x-api-version"))
    ///     .ignore_query("utm_source")
    ///     .build()?;
    /// let config = LayerConfig::global().fingerprint(fingerprint);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn fingerprint(mut self, fingerprint: RequestFingerprint) -> Self {
        self.fingerprint = fingerprint;
        self
    }

    /// Clients may choose how long their answer is replayed, up to
    /// `max`: a guarded request with `Idempotency-Key-Expiry: 24h` (a
    /// whole number of `s`, `m`, `h` or `d`; bare digits are seconds) is
    /// claimed with that [`ttl`](LayerConfig::ttl) instead of the layer's.
    /// One longer than `max` is refused with 400 `expiry-too-long`,
    /// whose detail names `max`; a malformed one with 400
    /// `expiry-invalid` — before anything is claimed or run. Every
    /// answer the layer keeps states the expiry in force (the one asked
    /// for, else the layer's, else the backend's) in its own
    /// `Idempotency-Key-Expiry` header, in its largest whole unit
    /// (`24h` is stated `1d`); replays carry it as first stated. So do
    /// the `202 Accepted` answers of a long operation and its status
    /// resource while it runs (its first request's, whatever a retry
    /// asks). A
    /// `max` longer than the backend's `duration_max` counts as that:
    /// a client asking for more is refused with the same 400, naming
    /// the backend's. Default none: the header is not read, and answers
    /// state no expiry.
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::http::LayerConfig;
    /// use std::time::Duration;
    ///
    /// // A day by default; a client may ask for up to a week.
    /// let config = LayerConfig::global()
    ///     .ttl(Duration::from_secs(24 * 3600))
    ///     .expiry_max(Duration::from_secs(7 * 24 * 3600));
    /// ```
    #[must_use]
    pub fn expiry_max(mut self, max: Duration) -> Self {
        self.expiry_max = Some(max);
        self
    }

    /// Whether the span of each guarded request names its scope. Every
    /// guarded request runs in a `tracing` span `idempotent_request`,
    /// the handler included, so that every line logged for it can be
    /// tied to its key: the span's fields are `key`, `outcome` (the
    /// layer's decision, as `idempo_http_responses_total` counts it:
    /// `executed`, `replay`, `in_progress`, `mismatch`, `refused`, …),
    /// `attempt` and `recovered` once the key is acquired, and `scope`
    /// only when this is on: a scope may name a tenant or a user, which
    /// not every service lets into its logs. Default off.
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::http::LayerConfig;
    ///
    /// // Scopes are tenant ids this service logs anyway.
    /// let config = LayerConfig::global().span_scope(true);
    /// ```
    #[must_use]
    pub fn span_scope(mut self, on: bool) -> Self {
        self.span_scope = on;
        self
    }

    /// The key of every guarded request is the request's own, `natural`:
    /// a field of its JSON body (an `external_payment_id`, a
    /// `merchant_reference`), a segment of its path, a header, or what a
    /// function of the service's says. Two requests with one natural key
    /// in one scope are one operation: the second is replayed the first
    /// one's answer (or 409 while it runs; 422 `key-reused` if it is not
    /// the same request by the [`fingerprint`](LayerConfig::fingerprint)).
    ///
    /// The natural key wins: the [`key_header`](LayerConfig::key_header)
    /// (`Idempotency-Key`) is not read, whatever it holds, or whether it
    /// is there at all. Two clicks of one order whose client mints a new
    /// header key for each are exactly the duplicate a natural key is
    /// there to catch; refusing a header that differs would refuse it
    /// rather than replay the first answer.
    ///
    /// The key taken is held to a header key's rules (not empty, no
    /// longer than the backend's `key_bytes_max`, visible ASCII or
    /// spaces). A request without it is refused with 400
    /// `natural-key-missing`, one whose key breaks those rules (or is a
    /// JSON object, array, boolean or `null`) with 400
    /// `natural-key-invalid`, a body that is not JSON under
    /// [`NaturalKey::json`] with 400 `body-not-json` — before anything is
    /// claimed or run, whatever [`require_key`](LayerConfig::require_key)
    /// says. Default none: the key is the `Idempotency-Key` header.
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::fingerprint::{NaturalKey, RequestFingerprint};
    /// use idemkv::http::LayerConfig;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // One payment per external payment id and tenant, however many
    /// // times it is sent and with whatever Idempotency-Key.
    /// let config = LayerConfig::scoped(|request| {
    ///     request.headers.get("x-tenant").map(|tenant| tenant.as_bytes().to_vec())
    /// })
    /// .natural_key(NaturalKey::json("/external_payment_id")?)
    /// .fingerprint(RequestFingerprint::json().build()?);
    ///
    /// // Or the order's id in `POST /orders/{id}/pay`.
    /// let config = LayerConfig::global().natural_key(NaturalKey::path_segment(1));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn natural_key(mut self, natural: NaturalKey) -> Self {
        self.natural_key = Some(natural);
        self
    }

    /// Whether a handler's 400 and 422 are kept and replayed (Stripe does
    /// not keep validation failures). Default false: the key is released
    /// so that a corrected request may use it.
    #[must_use]
    pub fn keep_validation_failures(mut self, keep: bool) -> Self {
        self.keep_validation_failures = keep;
        self
    }
}

/// Names the resource a request acts on.
pub(super) type ResourceFn = dyn Fn(&Parts) -> Option<Vec<u8>> + Send + Sync;

/// Whether a versioned route requires `If-Match` on every unsafe method
/// but `POST` (`PUT`, `PATCH`, `DELETE` and any other that is not `GET`,
/// `HEAD`, `OPTIONS` or `TRACE`); a `POST` may create the resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfMatch {
    /// Without it such a request is refused with 428, before anything is
    /// held or claimed.
    Required,
    /// Without it such a request runs unconditionally (and still steps
    /// the version).
    Optional,
}

/// The resource rule of a layer.
#[derive(Clone)]
pub(super) struct ResourceRule {
    pub(super) name: Arc<ResourceFn>,
    pub(super) versioned: Option<IfMatch>,
}

impl LayerConfig {
    /// One request at a time per resource: `resource` names what a
    /// request acts on (an account, an order; a function of the request,
    /// like the scope; `None`: nothing to hold). While a request holds it,
    /// another gets 409 `resource-locked` with `Retry-After`, or waits
    /// under `Prefer: wait`. Keys of different requests on one resource
    /// never run at once. Every unsafe method (all but `GET`, `HEAD`,
    /// `OPTIONS`, `TRACE`) on a resource is held, whatever
    /// [`methods`](LayerConfig::methods) says: a method the layer does not
    /// guard with keys runs held, its answer not kept, as a request
    /// without a key under [`require_key(false)`](LayerConfig::require_key).
    #[must_use]
    pub fn resource(mut self, resource: impl Fn(&Parts) -> Option<Vec<u8>> + Send + Sync + 'static) -> Self {
        self.resource = Some(ResourceRule { name: Arc::new(resource), versioned: None });
        self
    }

    /// As [`resource`](LayerConfig::resource), and the resource has a
    /// version ([`Versions`](crate::backend::Versions)): responses carry a strong
    /// `ETag` (`"<resource>-v<version>"`); `If-Match` and `If-None-Match`
    /// are checked under the hold (412 when they fail); with
    /// [`IfMatch::Required`] an unsafe method but `POST` without
    /// `If-Match` is 428 before anything is held. Every unsafe method is
    /// held and checked, whatever [`methods`](LayerConfig::methods) says.
    /// A 2xx steps the version (a `DELETE`'s too, so that no tag of the
    /// deleted resource matches again). `GET` and `HEAD` run with the
    /// current `ETag` added, or are answered 304 Not Modified (with the
    /// `ETag`, the handler not run) when `If-None-Match` names it, 412 when
    /// an `If-Match` does not.
    #[must_use]
    pub fn versioned_resource(
        mut self,
        resource: impl Fn(&Parts) -> Option<Vec<u8>> + Send + Sync + 'static,
        if_match: IfMatch,
    ) -> Self {
        self.resource = Some(ResourceRule { name: Arc::new(resource), versioned: Some(if_match) });
        self
    }
}

/// Where status resources live, and when a request is answered 202.
#[derive(Debug, Clone)]
pub(super) struct Operations {
    /// The path the status resources live under, without a trailing `/`.
    pub(super) path: String,
    /// Past this long a running handler is answered 202; `None`: only on
    /// `Prefer: respond-async`.
    pub(super) after: Option<Duration>,
}

impl LayerConfig {
    /// Long operations: status resources under `path` (`/operations`:
    /// `/operations/<id>`), and a request with `Prefer: respond-async`
    /// answered 202 as soon as its handler waits on something, while the
    /// handler runs on (a handler that answers without waiting is
    /// answered at once). The layer answers `GET <path>/<id>` itself: 202
    /// while the run holds its lease; its answer once done, kept or not
    /// (an answer the key does not keep is told with
    /// `Idempotency-Stored: false`, the key left free); 500
    /// `operation-abandoned` once a run that died has lost its lease,
    /// until the request is sent again with its key. Put the layer on a
    /// router that routes that path to it (router-wide, as the examples
    /// do).
    #[must_use]
    pub fn operations(mut self, path: &str) -> Self {
        let path = path.trim_end_matches('/').to_owned();
        let after = self.operations.as_ref().and_then(|operations| operations.after);
        self.operations = Some(Operations { path, after });
        self
    }

    /// With [`operations`](LayerConfig::operations): a handler still
    /// running after `after` is answered 202 too, without the preference.
    #[must_use]
    pub fn respond_async_after(mut self, after: Duration) -> Self {
        if let Some(operations) = self.operations.as_mut() {
            operations.after = Some(after);
        }
        self
    }
}

#[cfg(test)]
mod tests;
