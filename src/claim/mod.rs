//! What a caller asks ([`ClaimRequest`]) and what the store answers
//! ([`Claim`]).

use crate::fingerprint::Fingerprint;
use crate::keyspace::Keyspace;
use crate::lease::Lease;
use crate::record::Record;
use crate::record::ReusePolicy;
use std::time::Duration;

pub(crate) mod wait;

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
    pub(crate) keyspace: Keyspace,
    pub(crate) scope: &'a [u8],
    pub(crate) key: &'a [u8],
    pub(crate) fingerprint: Fingerprint,
    pub(crate) lease: Option<Duration>,
    pub(crate) ttl: Option<Duration>,
    pub(crate) reuse: ReusePolicy,
}

impl<'a> ClaimRequest<'a> {
    /// A claim of `key` in the empty scope with the store's default lease
    /// and TTL.
    #[must_use]
    pub fn new<K: AsRef<[u8]> + ?Sized>(key: &'a K, fingerprint: Fingerprint) -> Self {
        ClaimRequest {
            keyspace: Keyspace::Caller,
            scope: &[],
            key: key.as_ref(),
            fingerprint,
            lease: None,
            ttl: None,
            reuse: ReusePolicy::ReplayFailure,
        }
    }

    /// The tenant or API consumer; equal keys in different scopes never
    /// meet. Default: empty.
    #[must_use]
    pub fn scope<S: AsRef<[u8]> + ?Sized>(mut self, scope: &'a S) -> Self {
        self.scope = scope.as_ref();
        self
    }

    /// The keyspace of the claim: [`Keyspace::Caller`] (the default) for
    /// every claim of a service's own; idemkv's features claim their
    /// records in keyspaces of their own (see [`Keyspace`]), which no
    /// scope of a caller's reaches.
    #[must_use]
    pub fn keyspace(mut self, keyspace: Keyspace) -> Self {
        self.keyspace = keyspace;
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

    /// What this claim gets if the key's request failed
    /// ([`crate::State::Failed`]) with the same fingerprint: the failure
    /// replayed (the default) or a new attempt.
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::{Claim, ClaimRequest, Config, Fingerprint, ReusePolicy, Store};
    /// # fn main() -> Result<(), idemkv::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path(), Config::new())?;
    /// let request = ClaimRequest::new("pay-3", Fingerprint::of(b"charge 10"));
    /// let Claim::Acquired(lease) = store.claim(&request)? else { unreachable!() };
    /// lease.fail(b"402 card declined")?;
    /// assert!(matches!(store.claim(&request)?, Claim::Replay(_)));
    /// let Claim::Acquired(lease) = store.claim(&request.reuse(ReusePolicy::RetryFailed))? else { unreachable!() };
    /// assert_eq!(lease.attempt(), 2);
    /// lease.complete(b"201 charged")?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn reuse(mut self, policy: ReusePolicy) -> Self {
        self.reuse = policy;
        self
    }

    /// The key.
    #[must_use]
    pub fn key(&self) -> &'a [u8] {
        self.key
    }
}

/// The answer to a claim (DESIGN §3). A replay carries the stored
/// [`Record`], or with [`Store::claim_with`](crate::Store::claim_with)
/// what the caller made of it where it lies.
#[derive(Debug)]
#[must_use = "a claim answer says whether to execute, replay or refuse"]
pub enum Claim<R = Record> {
    /// The caller holds the key and must execute, then finish the lease.
    Acquired(Lease),
    /// The request already finished; here is its stored answer.
    Replay(R),
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

impl<R> wait::Answer for Claim<R> {
    fn in_progress(&self) -> Option<Duration> {
        match self {
            Claim::InProgress { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }
}
