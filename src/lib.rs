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
//! | Processing, lease expired    | same        | [`Claim::Acquired`] with [`Lease::recovered`], attempt + 1, new token |
//! | Completed / Failed           | same        | [`Claim::Replay`] with the stored response |
//! | any present                  | different   | [`Claim::Mismatch`]; the stored response is never revealed |
//!
//! The [`Lease`] finishes the claim: [`Lease::complete`],
//! [`Lease::fail`] (a replayed terminal failure), [`Lease::release`] (back to
//! absent) or [`Lease::renew`]. Every transition checks the fencing token: a
//! holder whose lease expired and was reclaimed gets [`Error::LeaseLost`].
//! A holder whose lease ended but was not yet reclaimed may still finish.
//!
//! Records live in an append-only, CRC-framed log per shard (see
//! `docs/format.md`); the in-memory index holds only what a claim decision
//! needs, and responses are read back from the log on replay. Time comes
//! from a [`Clock`]; each shard never lets it run backwards.
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

mod backend;
mod background;
mod claim;
mod clock;
mod compaction;
mod config;
mod error;
mod fingerprint;
mod format;
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "tower")]
pub mod http;
mod index;
pub mod io;
mod lease;
mod manifest;
mod record;
mod recovery;
mod segment;
mod shard;
mod stats;
mod store;
mod verify;

pub use backend::{BackendClaim, IdempotencyBackend};
pub use claim::{Claim, ClaimRequest, LeaseToken, Record};
pub use clock::{Clock, ManualClock, SystemClock};
pub use compaction::CompactionReport;
pub use config::{Config, Durability};
pub use error::{Error, Result};
pub use fingerprint::{Fingerprint, FingerprintBuilder};
pub use format::FormatVersion;
pub use lease::Lease;
pub use record::State;
pub use stats::Stats;
pub use store::{Census, Iter, Store, DEFAULT_SHARDS, LOCK_FILE_NAME};
pub use verify::{verify, Damage, VerifyReport};

/// The README's code blocks, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
