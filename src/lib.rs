//! # idemkv
//!
//! An embedded idempotency key-value store: a retried request runs its side
//! effect once, and every retry gets the first answer back.
//!
//! A service claims `(scope, key)` before it executes a request. The claim
//! is one atomic step that answers:
//!
//! | stored state                 | fingerprint | answer |
//! |------------------------------|-------------|--------|
//! | absent or expired            | –           | [`Claim::Acquired`]: record written as Processing with a fresh fencing token |
//! | Processing, lease valid      | same        | [`Claim::InProgress`] with `retry_after` |
//! | Processing, lease expired    | same        | [`Claim::Acquired`] with [`Lease::recovered`], attempt + 1, new token, and the last [`Lease::last_checkpoint`] |
//! | Failed, [`ReusePolicy::RetryFailed`] | same | [`Claim::Acquired`], attempt + 1, new token, not recovered |
//! | Completed / Failed           | same        | [`Claim::Replay`] with the stored response |
//! | any present                  | different   | [`Claim::Mismatch`]; the stored response is never revealed |
//!
//! The [`Lease`] finishes the claim: [`Lease::complete`],
//! [`Lease::fail`] (a replayed terminal failure), [`Lease::release`] (back to
//! absent) or [`Lease::renew`]. Every transition checks the fencing token: a
//! holder whose lease expired and was reclaimed gets [`Error::LeaseLost`].
//! A holder whose lease ended but was not yet reclaimed may still finish,
//! until lease end + TTL, when an abandoned Processing record expires.
//!
//! Between steps with outside effects a holder stores a checkpoint,
//! [`Lease::checkpoint`]: durable, fenced by its token, kept by renewals,
//! carried over by takeovers, dropped with the Processing record. A holder
//! that takes the key over resumes after the step it names instead of
//! running it again. Which claims of a Failed key run again is the claim's
//! [`ReusePolicy`] (replay the failure by default).
//!
//! Optional per-scope [`Quota`]s limit the live records and stored bytes of
//! each scope: a claim that would add a new record to a scope at its limit
//! is answered [`Error::QuotaExceeded`]; nothing else is ever refused by a
//! quota (see [`Quota`]).
//!
//! Records live in an append-only, CRC-framed log per shard (see
//! `docs/format.md`); the in-memory index holds 16 bytes a key, where its
//! record is, and a claim reads its decision and its response back from the
//! record (a key in flight keeps its lease in memory). Time comes
//! from a [`Clock`]: leases count elapsed (monotonic) time, so a jump of
//! the wall clock neither shortens nor freezes one; TTLs count wall-clock
//! time (the rules across a restart are on [`Clock`]).
//!
//! ```
//! use idemkv::{Claim, ClaimRequest, Config, Fingerprint, Store};
//! # fn main() -> Result<(), idemkv::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(dir.path(), Config::new())?;
//! let fingerprint = Fingerprint::builder().part(b"POST").part(b"/payments").part(b"amount=10").finish();
//! let request = ClaimRequest::new("8e03978e-40d5", fingerprint).scope("account-42");
//!
//! let response = match store.claim(&request)? {
//!     Claim::Acquired(lease) => {
//!         let response = b"201 charged 10".to_vec(); // run the side effect once
//!         lease.complete(&response)?;
//!         response
//!     }
//!     Claim::Replay(record) => record.response,       // a retry: the first answer
//!     Claim::InProgress { .. } => b"409 retry later".to_vec(),
//!     Claim::Mismatch => b"422 key reused".to_vec(),
//! };
//! assert_eq!(response, b"201 charged 10");
//!
//! let Claim::Replay(record) = store.claim(&request)? else { unreachable!() };
//! assert_eq!(record.response, b"201 charged 10");
//! # Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

// Module map: docs/architecture.md ("Module map"). The layers are declared
// in .ci/layers.py, which CI runs: no module imports one above it.

mod backend;
mod checkpoint;
mod claim;
#[cfg(feature = "client")]
#[cfg_attr(docsrs, doc(cfg(feature = "client")))]
pub mod client;
mod clock;
mod config;
#[cfg(feature = "conformance")]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
pub mod conformance;
mod engine;
mod error;
mod events;
mod fingerprint;
mod format;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod http;
pub mod io;
pub mod keyspace;
mod lease;
#[cfg(feature = "messaging")]
#[cfg_attr(docsrs, doc(cfg(feature = "messaging")))]
pub mod messaging;
mod quota;
mod record;
mod stats;
mod store;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
#[cfg(feature = "webhooks")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhooks")))]
pub mod webhook;

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use backend::postgres;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use backend::redis;
#[cfg(all(feature = "tls", any(feature = "redis", feature = "postgres")))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "tls", any(feature = "redis", feature = "postgres")))))]
pub use backend::remote::tls::Tls;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use backend::run_once::{Attempt, RunOnce, RUN_ONCE_LEASE_DEFAULT};
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use backend::versions::{Step, Versions, VERSIONS_TTL_DEFAULT};
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use backend::AnyBackend;
pub use backend::{BackendClaim, BackendLimits, ClaimOptions, IdempotencyBackend};
pub use checkpoint::{Checkpoint, STEP_BYTES_MAX};
pub use claim::{Claim, ClaimRequest};
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{Config, Durability, DEFAULT_SHARDS};
pub use error::{BackendFailure, Error, QuotaLimit, Result};
pub use fingerprint::{Fingerprint, FingerprintBuilder};
pub use format::{FormatVersion, LOCK_FILE_NAME};
pub use keyspace::Keyspace;
pub use lease::{FinishError, Lease, LeaseToken};
#[cfg(all(feature = "messaging", feature = "client"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "messaging", feature = "client"))))]
pub use messaging::HttpSink;
#[cfg(all(feature = "messaging", feature = "redis"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "messaging", feature = "redis"))))]
pub use messaging::RedisStreamSink;
#[cfg(feature = "messaging")]
#[cfg_attr(docsrs, doc(cfg(feature = "messaging")))]
pub use messaging::{
    DeadLetter, Delivery, Handled, Inbox, Message, Redriven, DEAD_LETTER_ERROR_BYTES_MAX,
    DEAD_LETTER_RETENTION_DEFAULT, INBOX_MAX_ATTEMPTS_DEFAULT, INBOX_RETENTION_DEFAULT,
};
#[cfg(feature = "messaging")]
#[cfg_attr(docsrs, doc(cfg(feature = "messaging")))]
pub use messaging::{
    KeyDelivery, Outbox, OutboxMessage, Produced, Relay, RelayConfig, RelayHandle, Sink, SinkError, Staged, Sweep,
};
/// The outbox's envelope, for a caller that completes a key itself
/// (PostgreSQL's `complete_in`, in its own transaction), and where each
/// key's staged messages stand (`idemkv outbox`).
#[cfg(feature = "messaging")]
#[cfg_attr(docsrs, doc(cfg(feature = "messaging")))]
pub mod outbox {
    pub use crate::messaging::{drop_dead_key, outbox_status, retry_dead_key, KeyState, KeyStatus};
    pub use crate::messaging::{envelope, is_envelope, messages_of, response_of, RETENTION};
}
pub use engine::repair::{repair, DroppedRecord, Evidence, RepairReport};
pub use engine::verify::{verify, Damage, IgnoredHint, VerifyReport};
pub use quota::{Quota, ScopeUsage};
pub use record::{Record, RecordRef, ReusePolicy, State};
pub use stats::{Census, CompactionReport, Stats};
pub use store::{Iter, Once, Outcome, Store};

/// The README's code blocks, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The code blocks of `docs/guide.md` (the embedded store alone).
#[doc = include_str!("../docs/guide.md")]
#[cfg(doctest)]
pub struct GuideDoctests;

/// The code blocks of `docs/http.md`, which need the `tower` feature.
#[doc = include_str!("../docs/http.md")]
#[cfg(all(doctest, feature = "tower"))]
pub struct HttpDoctests;

/// The code blocks of `docs/client.md`, which need the `client` feature.
#[doc = include_str!("../docs/client.md")]
#[cfg(all(doctest, feature = "client"))]
pub struct ClientDoctests;

/// The code blocks of `docs/fleets.md`, which need both networked backends
/// and the `tower` layer.
#[doc = include_str!("../docs/fleets.md")]
#[cfg(all(doctest, feature = "redis", feature = "postgres", feature = "tower"))]
pub struct FleetsDoctests;

/// The code blocks of `docs/messaging.md`, which need the `messaging`
/// feature.
#[doc = include_str!("../docs/messaging.md")]
#[cfg(all(doctest, feature = "messaging"))]
pub struct MessagingDoctests;

/// The code blocks of `docs/webhooks.md`, which need the `webhooks`
/// feature.
#[doc = include_str!("../docs/webhooks.md")]
#[cfg(all(doctest, feature = "webhooks"))]
pub struct WebhooksDoctests;

/// The code blocks of `docs/operations.md`, which need the `metrics`
/// feature.
#[doc = include_str!("../docs/operations.md")]
#[cfg(all(doctest, feature = "metrics"))]
pub struct OperationsDoctests;

/// The code blocks of `docs/architecture.md`.
#[doc = include_str!("../docs/architecture.md")]
#[cfg(doctest)]
pub struct ArchitectureDoctests;

/// The code blocks of `docs/benchmarks.md`.
#[doc = include_str!("../docs/benchmarks.md")]
#[cfg(doctest)]
pub struct BenchmarksDoctests;

/// The code blocks of `docs/testing.md`.
#[doc = include_str!("../docs/testing.md")]
#[cfg(doctest)]
pub struct TestingDoctests;
