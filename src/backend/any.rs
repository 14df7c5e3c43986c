//! [`AnyBackend`]: a backend chosen at run time, behind one type (feature
//! `tokio`, which every backend's calls need).

use super::{BackendClaim, BackendLimits, ClaimOptions, IdempotencyBackend};
use crate::{Error, Fingerprint, Keyspace, LeaseToken, Record};
use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// A call's future, boxed.
type Call<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// A compare-and-set's expected answer and its replacement.
type Cas<'a> = (&'a [u8], &'a [u8]);

/// [`IdempotencyBackend`] with its futures boxed, so that it can be a
/// trait object.
trait Erased: Send + Sync + 'static {
    fn claim_in<'a>(
        &'a self,
        keyspace: Keyspace,
        scope: &'a [u8],
        key: &'a [u8],
        fingerprint: Fingerprint,
        options: ClaimOptions,
    ) -> Call<'a, BackendClaim>;
    fn complete<'a>(&'a self, token: &'a LeaseToken, response: &'a [u8]) -> Call<'a, ()>;
    fn fail<'a>(&'a self, token: &'a LeaseToken, response: &'a [u8]) -> Call<'a, ()>;
    fn release<'a>(&'a self, token: &'a LeaseToken) -> Call<'a, ()>;
    fn checkpoint<'a>(&'a self, token: &'a LeaseToken, step: &'a str, payload: &'a [u8]) -> Call<'a, ()>;
    fn renew<'a>(&'a self, token: &'a LeaseToken, extend: Duration) -> Call<'a, ()>;
    fn get_in<'a>(&'a self, keyspace: Keyspace, scope: &'a [u8], key: &'a [u8]) -> Call<'a, Option<Record>>;
    fn remove_in<'a>(&'a self, keyspace: Keyspace, scope: &'a [u8], key: &'a [u8]) -> Call<'a, bool>;
    fn replace_in<'a>(&'a self, keyspace: Keyspace, scope: &'a [u8], key: &'a [u8], cas: Cas<'a>) -> Call<'a, bool>;
    fn scan_in<'a>(
        &'a self,
        keyspace: Keyspace,
        scope: &'a [u8],
        after: Option<&'a [u8]>,
        limit: usize,
    ) -> Call<'a, Vec<Record>>;
    fn scan_staged<'a>(&'a self, scope: &'a [u8], after: Option<&'a [u8]>, limit: usize) -> Call<'a, Vec<Record>>;
    fn limits(&self) -> BackendLimits;
    fn now_ms(&self) -> Call<'_, u64>;
    fn as_any(&self) -> &dyn Any;
}

impl<B: IdempotencyBackend> Erased for B {
    fn claim_in<'a>(
        &'a self,
        keyspace: Keyspace,
        scope: &'a [u8],
        key: &'a [u8],
        fingerprint: Fingerprint,
        options: ClaimOptions,
    ) -> Call<'a, BackendClaim> {
        Box::pin(IdempotencyBackend::claim_in(self, keyspace, scope, key, fingerprint, options))
    }

    fn complete<'a>(&'a self, token: &'a LeaseToken, response: &'a [u8]) -> Call<'a, ()> {
        Box::pin(IdempotencyBackend::complete(self, token, response))
    }

    fn fail<'a>(&'a self, token: &'a LeaseToken, response: &'a [u8]) -> Call<'a, ()> {
        Box::pin(IdempotencyBackend::fail(self, token, response))
    }

    fn release<'a>(&'a self, token: &'a LeaseToken) -> Call<'a, ()> {
        Box::pin(IdempotencyBackend::release(self, token))
    }

    fn checkpoint<'a>(&'a self, token: &'a LeaseToken, step: &'a str, payload: &'a [u8]) -> Call<'a, ()> {
        Box::pin(IdempotencyBackend::checkpoint(self, token, step, payload))
    }

    fn renew<'a>(&'a self, token: &'a LeaseToken, extend: Duration) -> Call<'a, ()> {
        Box::pin(IdempotencyBackend::renew(self, token, extend))
    }

    fn get_in<'a>(&'a self, keyspace: Keyspace, scope: &'a [u8], key: &'a [u8]) -> Call<'a, Option<Record>> {
        Box::pin(IdempotencyBackend::get_in(self, keyspace, scope, key))
    }

    fn remove_in<'a>(&'a self, keyspace: Keyspace, scope: &'a [u8], key: &'a [u8]) -> Call<'a, bool> {
        Box::pin(IdempotencyBackend::remove_in(self, keyspace, scope, key))
    }

    fn replace_in<'a>(&'a self, keyspace: Keyspace, scope: &'a [u8], key: &'a [u8], cas: Cas<'a>) -> Call<'a, bool> {
        Box::pin(IdempotencyBackend::replace_in(self, keyspace, scope, key, cas.0, cas.1))
    }

    fn scan_in<'a>(
        &'a self,
        keyspace: Keyspace,
        scope: &'a [u8],
        after: Option<&'a [u8]>,
        limit: usize,
    ) -> Call<'a, Vec<Record>> {
        Box::pin(IdempotencyBackend::scan_in(self, keyspace, scope, after, limit))
    }

    fn scan_staged<'a>(&'a self, scope: &'a [u8], after: Option<&'a [u8]>, limit: usize) -> Call<'a, Vec<Record>> {
        Box::pin(IdempotencyBackend::scan_staged(self, scope, after, limit))
    }

    fn limits(&self) -> BackendLimits {
        IdempotencyBackend::limits(self)
    }

    fn now_ms(&self) -> Call<'_, u64> {
        Box::pin(IdempotencyBackend::now_ms(self))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Any [`IdempotencyBackend`] behind one type: for a service that picks
/// its backend from its configuration (the embedded store on one machine,
/// Redis or PostgreSQL in a fleet), the HTTP layer and everything generic
/// over a backend are then built once, for this type.
///
/// Each call goes to the backend it wraps, unchanged; its future is boxed
/// (one allocation a call). Clones share the backend.
///
/// ```
/// use idemkv::{backend::{AnyBackend, IdempotencyBackend}, Config, Store};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let store = Store::open(dir.path(), Config::new().key_bytes_max(64))?;
/// let backend = AnyBackend::new(store);
/// assert_eq!(backend.limits().key_bytes_max, 64);
/// // The store again, for what only it offers.
/// let store: &Store = backend.downcast_ref().expect("a store");
/// assert_eq!(store.stats().live_records, 0);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct AnyBackend(Arc<dyn Erased>);

impl AnyBackend {
    /// Wraps `backend`.
    #[must_use]
    pub fn new<B: IdempotencyBackend>(backend: B) -> AnyBackend {
        AnyBackend(Arc::new(backend))
    }

    /// The wrapped backend, if it is a `B`.
    #[must_use]
    pub fn downcast_ref<B: IdempotencyBackend>(&self) -> Option<&B> {
        self.0.as_any().downcast_ref()
    }
}

impl std::fmt::Debug for AnyBackend {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("AnyBackend").finish_non_exhaustive()
    }
}

impl IdempotencyBackend for AnyBackend {
    async fn claim_in(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        key: &[u8],
        fingerprint: Fingerprint,
        options: ClaimOptions,
    ) -> Result<BackendClaim, Error> {
        self.0.claim_in(keyspace, scope, key, fingerprint, options).await
    }

    async fn complete(&self, token: &LeaseToken, response: &[u8]) -> Result<(), Error> {
        self.0.complete(token, response).await
    }

    async fn fail(&self, token: &LeaseToken, response: &[u8]) -> Result<(), Error> {
        self.0.fail(token, response).await
    }

    async fn release(&self, token: &LeaseToken) -> Result<(), Error> {
        self.0.release(token).await
    }

    async fn checkpoint(&self, token: &LeaseToken, step: &str, payload: &[u8]) -> Result<(), Error> {
        self.0.checkpoint(token, step, payload).await
    }

    async fn renew(&self, token: &LeaseToken, extend: Duration) -> Result<(), Error> {
        self.0.renew(token, extend).await
    }

    async fn get_in(&self, keyspace: Keyspace, scope: &[u8], key: &[u8]) -> Result<Option<Record>, Error> {
        self.0.get_in(keyspace, scope, key).await
    }

    async fn remove_in(&self, keyspace: Keyspace, scope: &[u8], key: &[u8]) -> Result<bool, Error> {
        self.0.remove_in(keyspace, scope, key).await
    }

    async fn replace_in(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        key: &[u8],
        expected: &[u8],
        answer: &[u8],
    ) -> Result<bool, Error> {
        self.0.replace_in(keyspace, scope, key, (expected, answer)).await
    }

    async fn scan_in(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Record>, Error> {
        self.0.scan_in(keyspace, scope, after, limit).await
    }

    async fn scan_staged(&self, scope: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Record>, Error> {
        self.0.scan_staged(scope, after, limit).await
    }

    fn limits(&self) -> BackendLimits {
        self.0.limits()
    }

    async fn now_ms(&self) -> Result<u64, Error> {
        self.0.now_ms().await
    }
}
