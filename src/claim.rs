//! What a caller asks ([`ClaimRequest`]) and what the store answers
//! ([`Claim`], [`Record`]).

use crate::fingerprint::Fingerprint;
use crate::lease::Lease;
use crate::record::{self, Header, Kind, State};
use std::time::Duration;

/// A request to claim `(scope, key)`.
///
/// # Examples
///
/// ```
/// use idemkv::{ClaimRequest, Fingerprint};
/// use std::time::Duration;
///
/// let request = ClaimRequest::new("order-17", Fingerprint::of(b"POST /orders {..}"))
///     .scope("tenant-a")
///     .lease(Duration::from_secs(5))
///     .ttl(Duration::from_secs(72 * 3600));
/// assert_eq!(request.key(), b"order-17");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    pub(crate) scope: &'a [u8],
    pub(crate) key: &'a [u8],
    pub(crate) fingerprint: Fingerprint,
    pub(crate) lease: Option<Duration>,
    pub(crate) ttl: Option<Duration>,
}

impl<'a> ClaimRequest<'a> {
    /// A claim of `key` in the empty scope with the store's default lease
    /// and TTL.
    #[must_use]
    pub fn new<K: AsRef<[u8]> + ?Sized>(key: &'a K, fingerprint: Fingerprint) -> Self {
        ClaimRequest { scope: &[], key: key.as_ref(), fingerprint, lease: None, ttl: None }
    }

    /// The tenant or API consumer; equal keys in different scopes never
    /// meet. Default: empty.
    #[must_use]
    pub fn scope<S: AsRef<[u8]> + ?Sized>(mut self, scope: &'a S) -> Self {
        self.scope = scope.as_ref();
        self
    }

    /// How long the holder may run before another claim may take over.
    /// Default: [`crate::Config::default_lease`].
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// How long the finished record is replayed, counted from completion.
    /// Default: [`crate::Config::default_ttl`].
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The key.
    #[must_use]
    pub fn key(&self) -> &'a [u8] {
        self.key
    }
}

/// The answer to a claim (DESIGN §3).
#[derive(Debug)]
#[must_use = "a claim answer says whether to execute, replay or refuse"]
pub enum Claim {
    /// The caller holds the key and must execute, then finish the lease.
    Acquired(Lease),
    /// The request already finished; here is its stored answer.
    Replay(Record),
    /// Another holder is executing the same request now.
    InProgress {
        /// Time until the holder's lease ends (HTTP `Retry-After`).
        retry_after: Duration,
        /// The holder's attempt number.
        attempt: u32,
    },
    /// The key is present with a different fingerprint. The stored response
    /// is never revealed.
    Mismatch,
}

/// A stored record, as read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record {
    /// The scope.
    pub scope: Vec<u8>,
    /// The key.
    pub key: Vec<u8>,
    /// Processing, Completed or Failed.
    pub state: State,
    /// The fingerprint of the request that claimed the key.
    pub fingerprint: Fingerprint,
    /// Fencing token of the current (or finishing) holder. Tokens of one key
    /// only grow; tokens of keys in different shards are unrelated.
    pub token: u64,
    /// 1 for the first holder, one more for each takeover after an expired lease.
    pub attempt: u32,
    /// Whether the current holder took over an expired lease.
    pub recovered: bool,
    /// When the key was first claimed (ms since the epoch).
    pub created_ms: u64,
    /// When the record last changed state or lease (ms since the epoch).
    pub updated_ms: u64,
    /// Lease end for Processing, expiry for Completed and Failed (ms since
    /// the epoch).
    pub deadline_ms: u64,
    /// The stored response; empty while Processing.
    pub response: Vec<u8>,
}

impl Record {
    /// Builds a record from a decoded Put frame.
    pub(crate) fn from_frame(header: &Header, frame: &[u8]) -> Option<Self> {
        let Kind::Put(state) = header.kind else {
            return None;
        };
        let (scope, key, response) = record::body(header, frame);
        Some(Record {
            scope: scope.to_vec(),
            key: key.to_vec(),
            state,
            fingerprint: header.fingerprint,
            token: header.token,
            attempt: header.attempt,
            recovered: header.recovered,
            created_ms: header.created_ms,
            updated_ms: header.updated_ms,
            deadline_ms: header.deadline_ms,
            response: response.to_vec(),
        })
    }
}

/// A lease held elsewhere: enough to finish it from any thread or after
/// handing the work to a background job. See [`Lease::into_token`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseToken {
    /// The scope of the claimed key.
    pub scope: Vec<u8>,
    /// The claimed key.
    pub key: Vec<u8>,
    /// The fencing token of the claim.
    pub token: u64,
}
