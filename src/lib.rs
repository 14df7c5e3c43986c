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
//! A holder stores [`Lease::checkpoint`]s between steps with outside
//! effects; a takeover resumes after the last one. Per-scope quotas,
//! iteration, stats, compaction, `verify` and `repair` are in [`store`].
//!
//! By task: [`backend`] (the contract on any backend: Redis, PostgreSQL,
//! `RunOnce`, `Versions`, a near cache of replays), [`fingerprint`] (what
//! "the same request" is; with `tower`, a request's fingerprint as the
//! service chooses it: canonical JSON, fields, headers), `http` (the tower layer), `client` (the
//! calling side), `messaging` (inbox, outbox, relay), `webhook`,
//! `conformance` (the contract's scenarios), `testing`; each a feature
//! (see `Cargo.toml`). Records live in a CRC-framed log per shard
//! (`docs/format.md`), time comes from a [`Clock`].
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
// in .ci/layers.py, which CI runs: no module imports one above it, and no
// folder's modules import one another in a cycle.

// The store and its claim.
mod checkpoint;
mod claim;
mod clock;
mod config;
mod error;
pub mod fingerprint;
pub mod keyspace;
mod lease;
mod record;
pub mod store;

// What each task needs, a module each.
pub mod backend;
#[cfg(feature = "client")]
#[cfg_attr(docsrs, doc(cfg(feature = "client")))]
pub mod client;
#[cfg(feature = "conformance")]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
pub mod conformance;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod http;
pub mod io;
#[cfg(feature = "messaging")]
#[cfg_attr(docsrs, doc(cfg(feature = "messaging")))]
pub mod messaging;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
#[cfg(feature = "webhooks")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhooks")))]
pub mod webhook;

// The engine's internals and the crate's own plumbing.
mod engine;
mod events;
mod format;
mod quota;
mod stats;

#[cfg(doctest)]
mod doctests;

pub use checkpoint::Checkpoint;
pub use claim::{Claim, ClaimRequest};
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{Config, Durability};
pub use error::{Error, Result};
pub use fingerprint::{Fingerprint, FingerprintBuilder};
pub use keyspace::Keyspace;
pub use lease::{FinishError, Lease, LeaseToken};
pub use record::{Record, RecordRef, ReusePolicy, State};
pub use store::{Once, Outcome, Store};
