//! The idempotency contract of [idemkv] on gRPC over tonic: a
//! unary handler runs once per `(scope, key)`, and every retry gets its
//! whole first answer back — the message and its metadata, or the status
//! with its code, message, details and metadata — over any
//! [`IdempotencyBackend`] (the embedded [`Store`](idemkv::Store), Redis,
//! PostgreSQL).
//!
//! The key comes from the `idempotency-key` request metadata, or, per
//! Google's AIP-155, from a `request_id` field of the message (a UUID4),
//! or from another field the service names ([`Method`]). The scope is the
//! service's function of the call's metadata and extensions; there is no
//! default. Refusals are gRPC statuses with google.rpc details
//! ([`Refusal`]).
//!
//! # Examples
//!
//! ```
//! use idemkv::{Config, Durability, Store};
//! use idemkv_tonic::{Idempotency, Method};
//! use tonic::{Request, Response};
//!
//! #[derive(Clone, PartialEq, prost::Message)]
//! struct ChargeRequest {
//!     #[prost(string, tag = "1")]
//!     request_id: String,
//!     #[prost(int64, tag = "2")]
//!     amount_cents: i64,
//! }
//!
//! #[derive(Clone, PartialEq, prost::Message)]
//! struct ChargeReply {
//!     #[prost(string, tag = "1")]
//!     charge_id: String,
//! }
//!
//! # tokio::runtime::Runtime::new().expect("runtime").block_on(async {
//! let dir = tempfile::tempdir().expect("tempdir");
//! let store = Store::open(dir.path(), Config::new().durability(Durability::Buffered)).expect("open");
//! // Keys are per account: the account is the call's `x-account` metadata.
//! let idempotency = Idempotency::new(store, |metadata, _| Some(metadata.get("x-account")?.as_bytes().to_vec()));
//! // AIP-155: the key is the message's request_id.
//! let charge = Method::new("/payments.v1.Payments/Charge")
//!     .request_id("request_id", |request: &ChargeRequest| &request.request_id);
//!
//! // What a service's `charge` does: its handler, guarded.
//! let call = |idempotency: Idempotency<Store>| {
//!     let mut request = Request::new(ChargeRequest {
//!         request_id: "8e03978e-40d5-43e8-bc93-6894a57f9324".into(),
//!         amount_cents: 1000,
//!     });
//!     request.metadata_mut().insert("x-account", "acme".parse().expect("ascii"));
//!     let charge = &charge;
//!     async move {
//!         idempotency
//!             .unary(charge, request, |request| async move {
//!                 // The side effect, once per request_id.
//!                 let mut reply = Response::new(ChargeReply { charge_id: format!("ch_{}", request.get_ref().amount_cents) });
//!                 reply.metadata_mut().insert("x-ledger", "posted".parse().expect("ascii"));
//!                 Ok(reply)
//!             })
//!             .await
//!     }
//! };
//! let first = call(idempotency.clone()).await.expect("charged");
//! let retry = call(idempotency.clone()).await.expect("replayed");
//! assert_eq!(first.get_ref(), retry.get_ref());
//! assert_eq!(retry.metadata().get("x-ledger").map(tonic::metadata::MetadataValue::as_bytes), Some(&b"posted"[..]));
//! assert_eq!(retry.metadata().get("idempotent-replayed").map(tonic::metadata::MetadataValue::as_bytes), Some(&b"true"[..]));
//! # });
//! ```
//!
//! In a tonic service the handler is the body of the generated trait's
//! method: `self.idempotency.unary(&self.charge, request, move |request|
//! async move { ... }).await`. `docs/grpc.md` and the example
//! `examples/grpc_payments` show a whole service with its server and client.
//!
//! # What a call gets
//!
//! | call | answer |
//! |---|---|
//! | new key | the handler runs once, in a task of its own (a client that cancels does not cut it short), its lease renewed until its answer is kept; it finds its [`Attempt`] in the request's extensions |
//! | same key, same request, first answered | the first answer whole: message and metadata, or status code, message, details and metadata; marked `idempotent-replayed: true` |
//! | same key while the first runs | `ABORTED` with `RetryInfo` (at most [`Idempotency::in_progress_retry_after`], 1 s) and `ErrorInfo` `IDEMPOTENCY_KEY_IN_PROGRESS`; with [`Idempotency::wait`], waits for the first answer |
//! | same key, another request (by the fingerprint) | `FAILED_PRECONDITION` with `PreconditionFailure` and `ErrorInfo` `IDEMPOTENCY_KEY_REUSED` |
//! | no key (when required), a malformed `request_id`, a repeated, empty or too long key | `INVALID_ARGUMENT` with `BadRequest` naming the metadata or field |
//! | no scope, a scope too long | `INVALID_ARGUMENT` with `ErrorInfo` `IDEMPOTENCY_SCOPE_*` |
//! | the scope at its quota (embedded store) | `RESOURCE_EXHAUSTED` with `RetryInfo` and `QuotaFailure`; nothing ran |
//! | the backend does not answer the claim | `UNAVAILABLE` with `RetryInfo` (1 s); nothing ran |
//! | the handler panicked, or the process died mid-call | `INTERNAL` (when there is a process to answer); the key stays in progress until its lease ends, then the next call runs with `Attempt::recovered` |
//! | the answer was not kept (the backend failed, the lease was lost) | the handler's answer, marked `idempotent-stored: false`; a write that failed for a moment is tried again while the lease is held, the key in progress meanwhile (then replayed), else the key stays in progress until its lease ends |
//! | an answer larger than the backend keeps | the handler's answer, whole; kept without its message (a status without its message and details), then without its metadata if need be, and replayed marked `idempotent-replayed: omitted` (a message answer as the message's default: the retry learns the call succeeded, never runs it again) |
//!
//! Which error statuses free the key is the [`FailurePolicy`]: by default
//! `INVALID_ARGUMENT` (validation: nothing happened) and any answer the
//! handler marks [`NotSpent`]; every other status is kept and replayed.
//!
//! Why those codes: a duplicate of a running call is a concurrency
//! conflict, `ABORTED` in google.rpc's words (HTTP 409, as the tower
//! layer's answer), and its `RetryInfo` says when to try again; a key
//! reused for another request is refused because of the state of the
//! system (the key's first request), not because the request is wrong
//! in itself — the same message with a new key would run — which is
//! `FAILED_PRECONDITION`, not `INVALID_ARGUMENT`, and not to be retried
//! as is. A store that does not answer is `UNAVAILABLE`, the code AIP-194
//! lets clients retry: nothing ran.
//!
//! Server-streaming, client-streaming and bidirectional methods are not
//! guarded: only unary calls.
//!
//! # Design
//!
//! The face wraps a handler, not the server: a tower layer in front of a
//! tonic server sees HTTP/2 requests whose bodies are length-prefixed
//! frames of a message type it does not know, while AIP-155's key lives
//! inside the message and the answer to keep is a typed message or a
//! `Status`. Inside the handler the request is decoded and the response
//! not yet encoded, so the face reads the key from the message, hashes
//! its encoding, and keeps the response's encoding and metadata (or the
//! status's code, message, details and metadata) in a versioned layout
//! of its own (`answer.rs`), on any backend. The method's path is given
//! by its [`Method`] (tonic's server does not tell a handler which method
//! it serves).
//!
//! The claim, the run with its lease kept alive by the face's keeper
//! thread (its `RunOnce`'s own, started at its first lease and shared by
//! the face's clones), and the finishing write are
//! [`idemkv::backend::RunOnce`]'s; the face adds where the key and scope
//! come from, what is kept, and what each answer is in gRPC's words. The run is spawned on the
//! current tokio runtime, so that tonic dropping a cancelled call's future
//! leaves nothing half-done (outside a runtime it runs in place).

mod answer;
mod idempotency;
mod method;
mod policy;
mod refusal;

// The README's example, compiled with the doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

// The code blocks of `docs/grpc.md`, which need this crate: compiled here,
// not with the root package's docs.
#[doc = include_str!("../../../docs/grpc.md")]
#[cfg(doctest)]
pub struct GrpcDocDoctests;

pub use answer::AnswerError;
pub use idemkv::backend::{Attempt, IdempotencyBackend};
pub use idempotency::{Idempotency, IN_PROGRESS_RETRY_AFTER_DEFAULT, LEASE_DEFAULT};
pub use method::Method;
pub use policy::{FailurePolicy, NotSpent};
pub use refusal::{KeySource, Refusal, ERROR_DOMAIN};

/// The request metadata a key comes from, unless its [`Method`] says
/// otherwise.
pub const KEY_METADATA: &str = "idempotency-key";

/// The metadata that marks a replay: `true`, or `omitted` for an answer
/// kept without its message.
pub const REPLAYED_METADATA: &str = "idempotent-replayed";

/// The metadata that marks an answer the backend did not keep: `false`.
pub const STORED_METADATA: &str = "idempotent-stored";
