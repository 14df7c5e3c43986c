//! Keyspaces: whose records a `(scope, key)` addresses.
//!
//! A caller's records — what [`Store::claim`](crate::Store::claim), the
//! HTTP layer and every `(scope, key)` a service passes address — live in
//! [`Keyspace::Caller`]. The records idemkv keeps for itself (a resource's
//! hold and version, an inbox's entries, dead letters and re-drive marks,
//! the relay's progress, a long operation's told answer) each live in a keyspace of their own. A scope is
//! data in every keyspace, never a path into another: a tenant named
//! `idemkv.hold/acct-7`, or anything else, addresses the caller's keyspace
//! and nothing but it.
//!
//! The keyspace is part of a record's identity on every backend: a byte of
//! the embedded store's frame (`docs/format.md`), a part of a Redis
//! record's name, a column of PostgreSQL's primary key. Listings, scans,
//! export and import, verify, repair and the `idemkv` tool name it.
//!
//! ```
//! use idemkv::{Claim, ClaimRequest, Config, Fingerprint, Keyspace, Store};
//! # fn main() -> Result<(), idemkv::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(dir.path(), Config::new())?;
//! // A tenant whose name looks like one of idemkv's own records...
//! let tenant = ClaimRequest::new("acct-7", Fingerprint::of(b"POST /x")).scope("idemkv.hold/T");
//! let Claim::Acquired(lease) = store.claim(&tenant)? else { unreachable!() };
//! lease.complete(b"200")?;
//! // ...is a caller's record, and nothing of idemkv's own sees it.
//! let record = store.get(b"idemkv.hold/T", b"acct-7")?.expect("the tenant's record");
//! assert_eq!(record.keyspace, Keyspace::Caller);
//! assert_eq!(store.get_in(Keyspace::Hold, b"T", b"acct-7")?, None);
//! assert_eq!("hold".parse::<Keyspace>(), Ok(Keyspace::Hold));
//! # Ok(()) }
//! ```

use std::fmt;
use std::str::FromStr;

/// A record's keyspace, scope and key.
pub(crate) type Name = (Keyspace, Vec<u8>, Vec<u8>);

/// Whose records a `(scope, key)` addresses (see the [module
/// docs](crate::keyspace)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[non_exhaustive]
pub enum Keyspace {
    /// The caller's records: every `(scope, key)` a service claims.
    #[default]
    Caller,
    /// A resource's hold (one request at a time per resource): scope the
    /// caller's scope, key the resource.
    Hold,
    /// A resource's version (conditional writes): scope the caller's
    /// scope, key the resource.
    Version,
    /// An inbox's entry: scope the consumer, key the message id.
    Inbox,
    /// A dead letter: scope the consumer, key the message id.
    DeadLetter,
    /// A dead letter's re-drive mark: scope the consumer, key the message
    /// id.
    Redrive,
    /// The relay's progress through a completion's messages: scope the
    /// completion's scope, key its key.
    Relay,
    /// A long operation's answer told at its status resource after its key
    /// was freed (`Idempotency-Stored: false`): scope the caller's scope,
    /// key the request's key.
    Operation,
}

impl Keyspace {
    /// Every keyspace, the caller's first.
    pub const ALL: [Keyspace; 8] = [
        Keyspace::Caller,
        Keyspace::Hold,
        Keyspace::Version,
        Keyspace::Inbox,
        Keyspace::DeadLetter,
        Keyspace::Redrive,
        Keyspace::Relay,
        Keyspace::Operation,
    ];

    /// The keyspace's name, as listings and the tool print it and
    /// [`FromStr`] reads it: `caller`, `hold`, `version`, `inbox`,
    /// `dead-letter`, `redrive`, `relay`, `operation`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Keyspace::Caller => "caller",
            Keyspace::Hold => "hold",
            Keyspace::Version => "version",
            Keyspace::Inbox => "inbox",
            Keyspace::DeadLetter => "dead-letter",
            Keyspace::Redrive => "redrive",
            Keyspace::Relay => "relay",
            Keyspace::Operation => "operation",
        }
    }

    /// Whether this is one of idemkv's own keyspaces (not the caller's).
    #[must_use]
    pub fn is_internal(self) -> bool {
        self != Keyspace::Caller
    }

    /// The byte that stands for the keyspace on disk and in the remote
    /// backends' names and columns; the caller's is 0.
    pub(crate) fn to_byte(self) -> u8 {
        match self {
            Keyspace::Caller => 0,
            Keyspace::Hold => 1,
            Keyspace::Version => 2,
            Keyspace::Inbox => 3,
            Keyspace::DeadLetter => 4,
            Keyspace::Redrive => 5,
            Keyspace::Relay => 6,
            Keyspace::Operation => 7,
        }
    }

    /// The keyspace of `byte`, `None` for one this build does not know.
    pub(crate) fn from_byte(byte: u8) -> Option<Keyspace> {
        Keyspace::ALL.into_iter().find(|keyspace| keyspace.to_byte() == byte)
    }

    /// The scope prefix under which builds before keyspaces kept this
    /// keyspace's records among the caller's (format 2, and the remote
    /// backends' first schema), for their migration; `None` for the
    /// caller's, and for the operations' told answers, which came after.
    pub(crate) fn legacy_prefix(self) -> Option<&'static [u8]> {
        match self {
            Keyspace::Caller | Keyspace::Operation => None,
            Keyspace::Hold => Some(b"idemkv.hold/"),
            Keyspace::Version => Some(b"idemkv.version/"),
            Keyspace::Inbox => Some(b"idemkv.inbox/"),
            Keyspace::DeadLetter => Some(b"idemkv.dead/"),
            Keyspace::Redrive => Some(b"idemkv.redrive/"),
            Keyspace::Relay => Some(b"idemkv.relay/"),
        }
    }

    /// The keyspace and scope that a scope of the layout before keyspaces
    /// (format 2 stores, the remote backends' first schema, export files
    /// of format 1) stands for: a scope under `idemkv.hold/`,
    /// `idemkv.version/`, `idemkv.inbox/`, `idemkv.dead/`,
    /// `idemkv.redrive/` or `idemkv.relay/` was that keyspace's record of
    /// the rest; any other is the caller's. Migrations use it, once.
    ///
    /// ```
    /// use idemkv::Keyspace;
    /// assert_eq!(Keyspace::from_legacy_scope(b"idemkv.hold/T"), (Keyspace::Hold, &b"T"[..]));
    /// assert_eq!(Keyspace::from_legacy_scope(b"tenant"), (Keyspace::Caller, &b"tenant"[..]));
    /// ```
    #[must_use]
    pub fn from_legacy_scope(scope: &[u8]) -> (Keyspace, &[u8]) {
        for keyspace in Keyspace::ALL {
            if let Some(rest) = keyspace.legacy_prefix().and_then(|prefix| scope.strip_prefix(prefix)) {
                return (keyspace, rest);
            }
        }
        (Keyspace::Caller, scope)
    }
}

impl fmt::Display for Keyspace {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

/// A name that is no keyspace's (see [`Keyspace::name`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown keyspace {0:?} (one of caller, hold, version, inbox, dead-letter, redrive, relay, operation)")]
pub struct UnknownKeyspace(pub String);

impl FromStr for Keyspace {
    type Err = UnknownKeyspace;

    fn from_str(name: &str) -> Result<Keyspace, UnknownKeyspace> {
        Keyspace::ALL
            .into_iter()
            .find(|keyspace| keyspace.name() == name)
            .ok_or_else(|| UnknownKeyspace(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_names_round_trip() {
        for keyspace in Keyspace::ALL {
            assert_eq!(Keyspace::from_byte(keyspace.to_byte()), Some(keyspace));
            assert_eq!(keyspace.name().parse::<Keyspace>(), Ok(keyspace));
            // Every keyspace of idemkv's own had a scope prefix before
            // keyspaces, but the operations' told answers, which came after.
            let had_prefix = keyspace.is_internal() && keyspace != Keyspace::Operation;
            assert_eq!(keyspace.legacy_prefix().is_some(), had_prefix, "{keyspace}");
        }
        assert_eq!(Keyspace::ALL.iter().filter(|keyspace| !keyspace.is_internal()).count(), 1);
        assert_eq!(Keyspace::from_byte(8), None);
        assert_eq!(Keyspace::from_byte(255), None);
        assert!("Hold".parse::<Keyspace>().is_err());
    }

    #[test]
    fn legacy_scopes_map_to_their_keyspace_and_near_misses_stay_the_callers() {
        assert_eq!(Keyspace::from_legacy_scope(b"idemkv.hold/T"), (Keyspace::Hold, &b"T"[..]));
        assert_eq!(Keyspace::from_legacy_scope(b"idemkv.dead/c"), (Keyspace::DeadLetter, &b"c"[..]));
        assert_eq!(Keyspace::from_legacy_scope(b"idemkv.relay/"), (Keyspace::Relay, &b""[..]));
        for near in [&b"idemkv.hold"[..], b"idemkv.hol/T", b"Idemkv.hold/T", b" idemkv.hold/T", b"tenant"] {
            assert_eq!(Keyspace::from_legacy_scope(near), (Keyspace::Caller, near));
        }
    }
}
