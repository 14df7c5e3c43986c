//! [`Idempotency`]: the face itself — admit a call, claim its key, run
//! its handler once in a task of its own, keep its whole answer, replay
//! it.

use crate::answer::{self, Body, Kept};
use crate::method::{Identity, Method};
use crate::policy::{FailurePolicy, NotSpent};
use crate::refusal::Refusal;
use crate::{REPLAYED_METADATA, STORED_METADATA};
use idemkv::backend::{Attempt, ClaimOptions, IdempotencyBackend, RunOnce, RUN_ONCE_LEASE_DEFAULT};
use idemkv::{Error, Once, Outcome, ReusePolicy};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Extensions, Request, Response, Status};

/// The service's function from a call's metadata and extensions to its
/// scope.
type ScopeFn = dyn Fn(&MetadataMap, &Extensions) -> Option<Vec<u8>> + Send + Sync;

/// The lease a call takes unless told otherwise: `RunOnce`'s
/// ([`RUN_ONCE_LEASE_DEFAULT`]).
pub const LEASE_DEFAULT: Duration = RUN_ONCE_LEASE_DEFAULT;

/// The longest `RetryInfo` delay a duplicate of a running call is told,
/// unless told otherwise: calls finish long before their lease ends.
pub const IN_PROGRESS_RETRY_AFTER_DEFAULT: Duration = Duration::from_secs(1);

/// The idempotency face of a tonic service over any idemkv backend (the
/// embedded [`Store`](idemkv::Store), Redis, PostgreSQL): a handler runs
/// once per `(scope, key)`, and every retry gets its whole answer back.
///
/// Make one for the service (its clones share the backend and the lease
/// keeper), and guard each unary method's handler with
/// [`unary`](Idempotency::unary). Settings are builder methods, each
/// saying its default.
pub struct Idempotency<B> {
    shared: Arc<Shared<B>>,
}

impl<B> Clone for Idempotency<B> {
    fn clone(&self) -> Self {
        Idempotency { shared: Arc::clone(&self.shared) }
    }
}

impl<B> std::fmt::Debug for Idempotency<B> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shared = &self.shared;
        let options = &shared.options;
        formatter
            .debug_struct("Idempotency")
            .field("lease", &options.lease.unwrap_or(LEASE_DEFAULT))
            .field("ttl", &options.ttl)
            .field("wait", &options.wait)
            .field("reuse", &options.reuse)
            .field("failure_policy", &shared.failure_policy)
            .field("in_progress_retry_after", &shared.in_progress_retry_after)
            .finish_non_exhaustive()
    }
}

/// What every call of the face shares.
struct Shared<B> {
    once: RunOnce<B>,
    scope: Arc<ScopeFn>,
    /// What each claim asks: its lease (always set), TTL, wait and reuse.
    options: ClaimOptions,
    failure_policy: FailurePolicy,
    in_progress_retry_after: Duration,
}

impl<B> Clone for Shared<B> {
    fn clone(&self) -> Self {
        Shared {
            once: self.once.clone(),
            scope: Arc::clone(&self.scope),
            options: self.options,
            failure_policy: self.failure_policy,
            in_progress_retry_after: self.in_progress_retry_after,
        }
    }
}

/// A call admitted to claim its key.
struct Admitted {
    scope: Vec<u8>,
    identity: Identity,
    /// The backend's largest answer, read with its other limits.
    response_bytes_max: usize,
}

impl<B: IdempotencyBackend> Idempotency<B> {
    /// The face over `backend`, each call's scope given by `scope` (its
    /// tenant, from its metadata — an authenticated account, an API key's
    /// owner — or from extensions an interceptor set). There is no
    /// default scope: a call for which `scope` answers `None` is refused
    /// (`INVALID_ARGUMENT`), and a service with one tenant says so with
    /// `|_, _| Some(Vec::new())`.
    #[must_use]
    pub fn new(
        backend: B,
        scope: impl Fn(&MetadataMap, &Extensions) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> Self {
        Idempotency::shared(Arc::new(backend), scope)
    }

    /// As [`new`](Idempotency::new), for a backend shared with others (an
    /// HTTP layer of the same service).
    #[must_use]
    pub fn shared(
        backend: Arc<B>,
        scope: impl Fn(&MetadataMap, &Extensions) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> Self {
        let shared = Shared {
            once: RunOnce::shared(backend),
            scope: Arc::new(scope),
            options: ClaimOptions::new().lease(LEASE_DEFAULT),
            failure_policy: FailurePolicy::Default,
            in_progress_retry_after: IN_PROGRESS_RETRY_AFTER_DEFAULT,
        };
        Idempotency { shared: Arc::new(shared) }
    }

    /// Changes a setting of this face; its clones made before keep the
    /// settings they were cloned with (the settings are copied when they
    /// are shared).
    fn with(mut self, change: impl FnOnce(&mut Shared<B>)) -> Self {
        change(Arc::make_mut(&mut self.shared));
        self
    }

    /// The lease of a call ([`LEASE_DEFAULT`], 30 s): renewed while its
    /// handler runs, so it only matters when the process dies mid-call —
    /// the key then stays in progress that long, and the next call after
    /// it runs with `Attempt::recovered`.
    #[must_use]
    pub fn lease(self, lease: Duration) -> Self {
        self.with(|shared| shared.options = shared.options.lease(lease))
    }

    /// How long a kept answer is replayed (the backend's TTL by default).
    #[must_use]
    pub fn ttl(self, ttl: Duration) -> Self {
        self.with(|shared| shared.options = shared.options.ttl(ttl))
    }

    /// How long a duplicate of a running call waits for its answer before
    /// it is told `ABORTED` (`None`, the default: at once).
    #[must_use]
    pub fn wait(self, wait: Option<Duration>) -> Self {
        self.with(|shared| shared.options = shared.options.wait(wait))
    }

    /// What a retry of a kept error status gets
    /// ([`ReusePolicy::ReplayFailure`], the default: the status again).
    #[must_use]
    pub fn reuse(self, reuse: ReusePolicy) -> Self {
        self.with(|shared| shared.options = shared.options.reuse(reuse))
    }

    /// Which handler statuses free the key ([`FailurePolicy::Default`]).
    #[must_use]
    pub fn failure_policy(self, policy: FailurePolicy) -> Self {
        self.with(|shared| shared.failure_policy = policy)
    }

    /// The longest `RetryInfo` delay a duplicate of a running call is told
    /// ([`IN_PROGRESS_RETRY_AFTER_DEFAULT`], 1 s); never more than the
    /// running call's lease.
    #[must_use]
    pub fn in_progress_retry_after(self, cap: Duration) -> Self {
        self.with(|shared| shared.in_progress_retry_after = cap)
    }

    /// The backend, for a handler's checkpoints
    /// ([`IdempotencyBackend::checkpoint`] with its `Attempt::token`).
    #[must_use]
    pub fn backend(&self) -> &Arc<B> {
        self.shared.once.backend()
    }

    /// Runs `handler` for `request` at most once per key of `method`, and
    /// answers every retry with its first answer.
    ///
    /// A call with a new key runs `handler` in a task of its own (a client
    /// that cancels does not cut it short), its lease renewed until its
    /// answer is kept; the handler finds its [`Attempt`] in the request's
    /// extensions. What it answers — message and response metadata, or
    /// status with code, message, details and metadata — is kept as the
    /// [`FailurePolicy`] says and replayed whole, marked with the
    /// `idempotent-replayed: true` metadata. A call without a key runs
    /// `handler` unguarded when `method` allows it.
    ///
    /// # Errors
    /// The handler's status, first or replayed; or the face's refusal
    /// ([`Refusal`]): a malformed or missing key or scope
    /// (`INVALID_ARGUMENT`), the key in progress (`ABORTED` with
    /// `RetryInfo`), the key used for another request
    /// (`FAILED_PRECONDITION`), the scope's quota (`RESOURCE_EXHAUSTED`),
    /// the backend down (`UNAVAILABLE`), a panicking handler or an
    /// unreadable kept answer (`INTERNAL`).
    pub async fn unary<Req, Resp, F, Fut>(
        &self,
        method: &Method<Req>,
        request: Request<Req>,
        handler: F,
    ) -> Result<Response<Resp>, Status>
    where
        Req: prost::Message + Send + 'static,
        Resp: prost::Message + Default + Send + 'static,
        F: FnOnce(Request<Req>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Response<Resp>, Status>> + Send + 'static,
    {
        let admitted = match self.admit(method, &request) {
            Ok(Some(admitted)) => admitted,
            Ok(None) => return handler(request).await,
            Err(refusal) => return Err(refused(&refusal, method)),
        };
        let shared = Arc::clone(&self.shared);
        let guarded = async move { shared.run(admitted, request, handler).await };
        // The handler runs to its end whatever the client does: tonic drops
        // this future when the call is cancelled, not the task.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return guarded.await };
        match runtime.spawn(guarded).await {
            Ok(answer) => answer,
            Err(join) => {
                tracing::error!(method = method.path(), error = %join, "idempotent handler failed; its key stays in progress until its lease ends");
                Err(Refusal::HandlerFailed.status())
            }
        }
    }

    /// The scope, key and fingerprint of `request`; `None` for a call
    /// that runs unguarded.
    fn admit<Req: prost::Message>(
        &self,
        method: &Method<Req>,
        request: &Request<Req>,
    ) -> Result<Option<Admitted>, Refusal> {
        let limits = self.shared.once.backend().limits();
        let Some(identity) = method.identity(request, limits.key_bytes_max)? else { return Ok(None) };
        let Some(scope) = (self.shared.scope)(request.metadata(), request.extensions()) else {
            return Err(Refusal::ScopeMissing);
        };
        if scope.len() > limits.scope_bytes_max {
            return Err(Refusal::ScopeTooLong { length: scope.len(), max: limits.scope_bytes_max });
        }
        Ok(Some(Admitted { scope, identity, response_bytes_max: limits.response_bytes_max }))
    }
}

/// `refusal`'s status, logged.
fn refused<Req>(refusal: &Refusal, method: &Method<Req>) -> Status {
    tracing::debug!(method = method.path(), reason = refusal.reason(), "idempotent call refused");
    refusal.status()
}

impl<B: IdempotencyBackend> Shared<B> {
    /// Claims the admitted call's key and runs `handler` if it is acquired;
    /// the handler's answer, a replay or a refusal.
    async fn run<Req, Resp, F, Fut>(
        &self,
        admitted: Admitted,
        request: Request<Req>,
        handler: F,
    ) -> Result<Response<Resp>, Status>
    where
        Req: Send + 'static,
        Resp: prost::Message + Default,
        F: FnOnce(Request<Req>) -> Fut,
        Fut: Future<Output = Result<Response<Resp>, Status>>,
    {
        let mut first = None;
        let Admitted { scope, identity, response_bytes_max: budget } = admitted;
        let once = self
            .once
            .run(&scope, &identity.key, identity.fingerprint, self.options, |attempt| {
                let first = &mut first;
                async move {
                    let answer = handler(with_attempt(request, attempt)).await;
                    let outcome = self.outcome(&answer, budget);
                    *first = Some(answer);
                    outcome
                }
            })
            .await;
        match (once, first) {
            (Ok(Once::Ran(_)), Some(answer)) => answer,
            (Err(error), Some(answer)) => not_stored(answer, &error),
            (Err(error), None) => Err(claim_failed(&error).status()),
            (Ok(Once::Replayed(kept)), _) => replay(&kept),
            (Ok(Once::InProgress { retry_after }), _) => {
                Err(Refusal::InProgress { retry_after: retry_after.min(self.in_progress_retry_after) }.status())
            }
            (Ok(Once::Mismatch), _) => Err(Refusal::Mismatch.status()),
            // `Ran` without an answer cannot be (the closure that ran set
            // it), nor an answer of a kind this build does not know.
            (Ok(_), _) => Err(Refusal::HandlerFailed.status()),
        }
    }

    /// What the backend keeps of the handler's `answer`.
    fn outcome<Resp: prost::Message>(&self, answer: &Result<Response<Resp>, Status>, budget: usize) -> Outcome {
        match answer {
            Ok(response) if response.extensions().get::<NotSpent>().is_some() => Outcome::Release,
            Ok(response) => {
                let message = response.get_ref().encode_to_vec();
                Outcome::Complete(answer::encode_message(&message, response.metadata(), budget))
            }
            Err(status) if self.failure_policy.frees(status) => Outcome::Release,
            Err(status) => Outcome::Fail(answer::encode_status(status, budget)),
        }
    }
}

/// `request` with its `attempt` in its extensions.
fn with_attempt<Req>(mut request: Request<Req>, attempt: Attempt) -> Request<Req> {
    request.extensions_mut().insert(attempt);
    request
}

/// The refusal of a claim that failed with `error`: nothing ran.
fn claim_failed(error: &Error) -> Refusal {
    match error {
        Error::QuotaExceeded { retry_after, .. } => Refusal::QuotaExceeded { retry_after: *retry_after },
        error => {
            tracing::warn!(%error, "idempotency store unavailable; call refused before it ran");
            Refusal::StoreUnavailable
        }
    }
}

/// The handler's `answer`, which the backend did not keep yet (`error`),
/// marked `idempotent-stored: false`: the answer is true, but a retry may
/// not replay it. A write that failed for a moment is still tried while
/// the lease is held (`RunOnce`'s background tries), the key in progress
/// meanwhile; if it never succeeds the key stays in progress until its
/// lease ends, and the next call runs with `Attempt::recovered` — never a
/// silent second run.
fn not_stored<Resp>(answer: Result<Response<Resp>, Status>, error: &Error) -> Result<Response<Resp>, Status> {
    tracing::warn!(%error, "idempotent call answered but its answer was not kept");
    let value = MetadataValue::from_static("false");
    match answer {
        Ok(mut response) => {
            response.metadata_mut().insert(STORED_METADATA, value);
            Ok(response)
        }
        Err(mut status) => {
            status.metadata_mut().insert(STORED_METADATA, value);
            Err(status)
        }
    }
}

/// The kept answer `bytes`, as the handler first gave it, marked as a
/// replay.
fn replay<Resp: prost::Message + Default>(bytes: &[u8]) -> Result<Response<Resp>, Status> {
    let Kept { body, omitted, mut metadata } = match answer::decode(bytes) {
        Ok(kept) => kept,
        Err(error) => return Err(unreadable(&error.into())),
    };
    let marker = MetadataValue::from_static(if omitted { "omitted" } else { "true" });
    metadata.insert(REPLAYED_METADATA, marker);
    match body {
        Body::Message(message) => match Resp::decode(message) {
            Ok(message) => Ok(Response::from_parts(metadata, message, Extensions::new())),
            Err(error) => Err(unreadable(&Refusal::StoredUnreadable(error.into()))),
        },
        Body::Status { code, message, details } => {
            Err(Status::with_details_and_metadata(Code::from_i32(code), message, details, metadata))
        }
    }
}

/// The status of a kept answer that cannot be read, logged.
fn unreadable(refusal: &Refusal) -> Status {
    tracing::error!(error = %refusal, "kept answer unreadable; the call is not run again");
    refusal.status()
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[derive(Clone, PartialEq, prost::Message)]
    struct Reply {
        #[prost(string, tag = "1")]
        id: String,
    }

    #[test]
    fn a_replay_gives_back_message_metadata_and_the_replay_mark() {
        let mut metadata = MetadataMap::new();
        metadata.insert("x-charge", "ch_1".parse().expect("ascii"));
        let message = Reply { id: "ch_1".into() }.encode_to_vec();
        let replayed: Response<Reply> = replay(&answer::encode_message(&message, &metadata, 1024)).expect("message");
        assert_eq!(replayed.get_ref().id, "ch_1");
        assert_eq!(
            replayed.metadata().get("x-charge").map(tonic::metadata::MetadataValue::as_bytes),
            Some(&b"ch_1"[..])
        );
        assert_eq!(
            replayed.metadata().get(REPLAYED_METADATA).map(tonic::metadata::MetadataValue::as_bytes),
            Some(&b"true"[..])
        );
    }

    #[test]
    fn an_answer_kept_without_its_message_replays_a_default_message_marked_omitted() {
        let message = Reply { id: "x".repeat(100) }.encode_to_vec();
        let replayed: Response<Reply> =
            replay(&answer::encode_message(&message, &MetadataMap::new(), 40)).expect("message");
        assert_eq!(replayed.get_ref(), &Reply::default());
        assert_eq!(
            replayed.metadata().get(REPLAYED_METADATA).map(tonic::metadata::MetadataValue::as_bytes),
            Some(&b"omitted"[..])
        );
    }

    #[test]
    fn a_setting_changed_on_a_cloned_face_holds_for_it_and_not_for_the_clone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = idemkv::Store::open(dir.path(), idemkv::Config::new()).expect("open");
        let base = Idempotency::new(store, |_, _| Some(Vec::new()));
        let kept = base.clone();
        let changed = base.lease(Duration::from_secs(3)).wait(Some(Duration::from_secs(2)));
        let (changed_options, kept_options) = (changed.shared.options, kept.shared.options);
        assert_eq!(
            (changed_options.lease, changed_options.wait),
            (Some(Duration::from_secs(3)), Some(Duration::from_secs(2)))
        );
        assert_eq!((kept_options.lease, kept_options.wait), (Some(LEASE_DEFAULT), None));
        assert!(Arc::ptr_eq(changed.backend(), kept.backend()), "one backend still");
    }

    #[test]
    fn bytes_that_are_no_answer_replay_as_internal() {
        let status = replay::<Reply>(b"not an answer").expect_err("unreadable");
        assert_eq!(status.code(), Code::Internal);
    }
}
