//! The crate's one error type.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Everything that can go wrong in idemkv.
///
/// Variants are structured so that callers can react to them (an HTTP layer
/// maps [`Error::LeaseLost`] to 412, the limits to 400, ...). I/O failures keep
/// their [`std::io::Error`] as [`std::error::Error::source`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O call failed.
    #[error("I/O error during {operation} on {}: {source}", path.display())]
    Io {
        /// What the store was doing (`"write"`, `"fsync"`, `"open"`, ...).
        operation: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// Stored bytes failed a check (CRC, magic, length, field value).
    #[error("corruption in {} at offset {offset}: {reason}", file.display())]
    Corruption {
        /// The damaged file.
        file: PathBuf,
        /// Byte offset of the damaged frame or header within `file`.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// The directory holds no idemkv manifest: for [`crate::Store::open`]
    /// it is not empty either (an empty directory becomes a new store); for
    /// [`crate::Store::open_read_only`], `verify` and
    /// `repair`, which never create a store, it may be empty.
    #[error("{} is not an idemkv store (it has no MANIFEST)", path.display())]
    NotAStore {
        /// The directory that was opened.
        path: PathBuf,
    },
    /// The store directory does not exist, and the call does not create one
    /// ([`crate::Store::open_read_only`], `verify`,
    /// `repair`).
    #[error("{} does not exist", path.display())]
    NotFound {
        /// The directory that was asked for.
        path: PathBuf,
    },
    /// A call that would change the store was made on a handle opened with
    /// [`crate::Store::open_read_only`]; nothing was changed.
    #[error("the store is open read-only: {operation} is refused")]
    ReadOnly {
        /// The refused call (`"claim"`, `"complete"`, `"remove"`, ...).
        operation: &'static str,
    },
    /// A file was written by a format version this build does not know.
    #[error("{} has format version {found}, this build reads only version {supported}", file.display())]
    UnsupportedFormatVersion {
        /// The file with the unknown version.
        file: PathBuf,
        /// The version found on disk.
        found: u8,
        /// The newest version this build reads.
        supported: u8,
    },
    /// Another handle (in this process or another) has the directory open:
    /// a writer refuses any other handle, a read-only handle
    /// ([`crate::Store::open_read_only`]) refuses writers but not other
    /// readers.
    #[error("{} is locked by another open store{}", path.display(), match holder_pid {
        Some(pid) => format!(" (process {pid})"),
        None => " (no process id recorded: a read-only handle, or a writer that recorded none)".to_string(),
    })]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// The writing process that holds it, as it wrote in the lock file;
        /// `None` when the holders are read-only handles (they cannot write
        /// the file) or the file names no process.
        holder_pid: Option<u32>,
    },
    /// The store was created with another shard count than the one configured.
    #[error("store has {on_disk} shards, the configuration asks for {configured}")]
    ShardCountMismatch {
        /// The shard count in the manifest.
        on_disk: u32,
        /// The shard count in [`crate::Config`].
        configured: u32,
    },
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The configuration sets something this backend cannot honour (a
    /// setting of the embedded store's files, background work, waiters,
    /// clock or quotas, given to Redis or PostgreSQL): refused rather than
    /// ignored, so that no setting is believed in force when it is not.
    /// [`crate::Config`]'s docs list which settings apply where.
    #[error("the {backend} backend cannot honour Config::{setting} (only the embedded store does): leave it unset")]
    UnsupportedSetting {
        /// The backend that refused it (`"redis"`, `"postgres"`).
        backend: &'static str,
        /// The setter of [`crate::Config`] whose setting it cannot honour.
        setting: &'static str,
    },
    /// The key is empty.
    #[error("the key is empty")]
    KeyEmpty,
    /// The key is longer than [`crate::Config::key_bytes_max`].
    #[error("the key has {len} bytes, the limit is {max}")]
    KeyTooLong {
        /// Length of the key given.
        len: usize,
        /// The configured limit.
        max: usize,
    },
    /// The scope is longer than [`crate::Config::scope_bytes_max`].
    #[error("the scope has {len} bytes, the limit is {max}")]
    ScopeTooLong {
        /// Length of the scope given.
        len: usize,
        /// The configured limit.
        max: usize,
    },
    /// The response is larger than [`crate::Config::response_bytes_max`].
    #[error("the response has {len} bytes, the limit is {max}")]
    ResponseTooLarge {
        /// Length of the response given.
        len: usize,
        /// The configured limit.
        max: usize,
    },
    /// A checkpoint, step name and payload together, is larger than
    /// [`crate::Config::response_bytes_max`] allows (one byte goes to the
    /// step's length).
    #[error("the checkpoint has {len} bytes, the limit is {max}")]
    CheckpointTooLarge {
        /// Bytes the checkpoint would take.
        len: usize,
        /// The configured limit.
        max: usize,
    },
    /// A checkpoint's step name is empty or longer than
    /// `store::STEP_BYTES_MAX`.
    #[error("invalid checkpoint: {reason}")]
    InvalidCheckpoint {
        /// Why it was refused.
        reason: &'static str,
    },
    /// A record in a scope of the inbox's dead letters that is not one
    /// (written by something else, or by a later version).
    #[error("the dead letter of message {} is not readable", String::from_utf8_lossy(message_id))]
    InvalidDeadLetter {
        /// The message id.
        message_id: Vec<u8>,
    },
    /// A stored answer that should be an outbox's envelope is not a whole
    /// one.
    #[error("the stored answer is not a whole outbox envelope")]
    InvalidEnvelope,
    /// A consumer name that is empty, longer than 128 bytes, or holds a
    /// character other than ASCII letters, digits and `-_.:`.
    #[error("invalid consumer name {name:?}: {reason}")]
    InvalidConsumer {
        /// The name given.
        name: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A lease or TTL duration is zero or too large.
    #[error("invalid {what} duration: {reason}")]
    InvalidDuration {
        /// `"lease"`, `"ttl"` or `"renewal"`.
        what: &'static str,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The fencing token no longer matches the record: the lease expired and
    /// the key was reclaimed, released, removed or already finished.
    #[error("lease lost: token {token} no longer holds this key")]
    LeaseLost {
        /// The stale token that was presented.
        token: u64,
    },
    /// An earlier write or fsync on this shard failed; the shard refuses
    /// further work until the store is reopened, because an fsync that failed
    /// cannot be retried into success.
    #[error("shard {shard} refuses work after an earlier I/O failure; reopen the store")]
    Poisoned {
        /// The shard that failed.
        shard: u32,
    },
    /// The store was closed.
    #[error("the store is closed")]
    Closed,
    /// Two different `(scope, key)` pairs hashed to the same 128-bit index
    /// key, one of them in flight (the embedded store's lease table knows
    /// keys by that hash; its index compares the keys themselves), or, on
    /// a fleet backend, stored under it. With a random per-store `SipHash`
    /// key this has probability about 2^-100 even for billions of keys; it
    /// is reported rather than allowed to mix two keys' records.
    #[error("index hash collision between two distinct keys")]
    KeyHashCollision,
    /// A claim would create a new record in a scope at its quota
    /// ([`crate::Config::quota`], [`crate::Config::scope_quota`]); nothing
    /// was written. Only new keys are refused: replays, in-progress answers,
    /// mismatches, takeovers and finishing a lease never are (see
    /// `store::Quota`). HTTP answers 429 with `Retry-After`.
    ///
    /// ```
    /// use idemkv::{Claim, ClaimRequest, Config, Error, Fingerprint, Store, store::{Quota, QuotaLimit}};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path(), Config::new().quota(Quota::new().records(1)))?;
    /// let Claim::Acquired(lease) = store.claim(&ClaimRequest::new("a", Fingerprint::of(b"a")))? else { panic!() };
    /// match store.claim(&ClaimRequest::new("b", Fingerprint::of(b"b"))) {
    ///     Err(Error::QuotaExceeded { limit: QuotaLimit::Records, max: 1, used: 1, retry_after }) => {
    ///         assert_eq!(retry_after.as_secs(), 60); // the Quota's default
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// lease.release()?; // the slot is free again
    /// assert!(matches!(store.claim(&ClaimRequest::new("b", Fingerprint::of(b"b")))?, Claim::Acquired(_)));
    /// # Ok::<(), idemkv::Error>(())
    /// ```
    #[error("the scope is at its {limit} quota: {used} used of {max}")]
    QuotaExceeded {
        /// The limit that refused the claim.
        limit: QuotaLimit,
        /// That limit: records, or bytes.
        max: u64,
        /// What the scope holds of it now.
        used: u64,
        /// How long the caller should wait before trying again
        /// (`store::Quota::retry_after`).
        retry_after: std::time::Duration,
    },
    /// The PostgreSQL schema holds no store (`found` 0), or one at another
    /// version than this build uses. `connect` runs no DDL: the schema's
    /// owner migrates it, once per release (`idemkv migrate --postgres
    /// URL`, or `PostgresBackend::migrate`); a schema migrated by a newer
    /// build needs that build.
    #[error("postgres schema {schema:?} is at version {found}, this build uses version {expected}: {}",
        if found < expected {
            "run the migration as the schema's owner (`idemkv migrate --postgres URL`, or PostgresBackend::migrate)"
        } else {
            "it was migrated by a newer build; run that build"
        })]
    SchemaVersion {
        /// The PostgreSQL schema connected to.
        schema: String,
        /// The version found (0: none).
        found: i32,
        /// The version this build uses.
        expected: i32,
    },
    /// The role `connect` logged in as lacks privileges the calls need:
    /// nothing was done. The schema's owner grants them (the grants are
    /// listed in the docs of the `postgres` module's backend).
    #[error("postgres role {role:?} lacks {}: the schema's owner must grant them", missing.join(", "))]
    MissingPrivileges {
        /// The role connected as.
        role: String,
        /// Each privilege missing, as `PRIVILEGE on kind object`.
        missing: Vec<String>,
    },
    /// A networked backend did not answer as the contract needs: see
    /// [`BackendFailure`] for what is known of the call's effect.
    #[error("{backend}: {failure}: {source}")]
    Backend {
        /// `"redis"`, `"postgres"`.
        backend: &'static str,
        /// What went wrong, and so what may have happened.
        failure: BackendFailure,
        /// The client library's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A transition took effect on the Redis primary, but fewer replicas
    /// than the backend waits for (`RedisBackend::wait_for_replicas`)
    /// acknowledged it in time: it stands as long as that primary does, and
    /// a failover before the replicas catch up may lose it. What to do:
    /// after a `claim`, do not run the side effect (no token was given; the
    /// key answers in progress until the lease ends, then a recovered
    /// attempt runs); after `complete` or `fail`, the answer is stored and
    /// replays — do not run the side effect or finish again (a second call
    /// answers `LeaseLost`); after `checkpoint` or `renew`, carry on
    /// knowing a failover may undo it. In every case the replicas are
    /// behind or gone: alert, it is what a failover would lose.
    #[error("{backend}: {operation} is written on the primary, but only {acknowledged} of {required} replicas acknowledged it in time: a failover may lose it")]
    NotReplicated {
        /// `"redis"`.
        backend: &'static str,
        /// `"claim"`, `"complete"`, `"fail"`, `"checkpoint"` or `"renew"`.
        operation: &'static str,
        /// The replicas that acknowledged it (`WAIT`'s answer).
        acknowledged: u64,
        /// The replicas the backend waits for.
        required: u32,
    },
    /// A server's setting can break the promise and the backend's checks
    /// refuse it (`idemkv::backend::redis::ServerChecks`): an eviction policy that
    /// can drop a live record, persistence that loses acknowledged answers
    /// at a crash, or settings that cannot be read. Nothing was written;
    /// change the setting, or relax the check knowingly.
    #[error("{backend} at {server}: {setting} is {value:?}: {reason}")]
    UnsafeServerSetting {
        /// `"redis"`.
        backend: &'static str,
        /// The server (`host:port`) with the setting.
        server: String,
        /// The setting (`maxmemory-policy`, `appendonly`, `appendfsync`,
        /// or `CONFIG GET` when none could be read).
        setting: &'static str,
        /// Its value, or the server's refusal to tell it.
        value: String,
        /// What it means for the promise.
        reason: &'static str,
    },
}

/// How a call to a networked backend failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendFailure {
    /// The connection failed, was refused or lost, or the answer did not
    /// come in time: the call **may or may not have taken effect**. A claim
    /// that took effect leaves the key in progress until its lease ends
    /// (then a retry runs as a recovered attempt); a finishing call may be
    /// retried with the same token (a second complete of a completed key
    /// answers `LeaseLost`: check with `get`).
    Unavailable,
    /// The server answered with an error (out of memory under `noeviction`,
    /// a read-only replica, a refused script): the call did nothing, and
    /// may be retried as is.
    Refused,
    /// The server's answer was not one the contract knows (another program
    /// wrote the key, or a version mismatch): nothing is guessed from it.
    Protocol,
}

impl std::fmt::Display for BackendFailure {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(match self {
            BackendFailure::Unavailable => "unavailable (the call may or may not have taken effect)",
            BackendFailure::Refused => "refused by the server (nothing was done)",
            BackendFailure::Protocol => "unexpected answer",
        })
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(operation: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io { operation, path: path.into(), source }
    }

    pub(crate) fn corruption(file: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Self {
        Error::Corruption { file: file.into(), offset, reason: reason.into() }
    }
}

/// Which limit of a `store::Quota` refused a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QuotaLimit {
    /// The scope holds as many live records as `Quota::records` allows.
    Records,
    /// The new record would take the scope over `Quota::bytes`.
    Bytes,
}

impl fmt::Display for QuotaLimit {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            QuotaLimit::Records => "record",
            QuotaLimit::Bytes => "byte",
        })
    }
}
