//! How a record's keyspace is stored: in the first bytes of the `scope`
//! column, so that every statement and function keeps its `(scope, key)`
//! and the primary key tells every keyspace apart (schema version 5).
//!
//! | record | `scope` column |
//! |---|---|
//! | the caller's, scope not starting with a zero byte | the scope as it is |
//! | the caller's, scope starting with a zero byte | `0x00` then the scope |
//! | idemkv's own keyspace `k` (1..=7, see [`Keyspace`]) | `0x00`, `k`, then the scope |
//!
//! The mapping is one-to-one: a stored scope that starts with `0x00` is
//! the caller's when its second byte is `0x00` too, and keyspace `k`'s
//! otherwise; no caller's scope is ever stored as `0x00 k …`. A caller's
//! scope is stored as it was before keyspaces unless it starts with a zero
//! byte; version 5's migration moves those rows, and the rows of the
//! earlier `idemkv.hold/`-style scopes, to where this mapping puts them.

use crate::Keyspace;
use std::borrow::Cow;
use std::fmt::Write as _;

/// The byte that starts every stored scope but the caller's plain ones.
const MARK: u8 = 0;

/// The `scope` column of `scope` in `keyspace`.
pub(super) fn stored(keyspace: Keyspace, scope: &[u8]) -> Cow<'_, [u8]> {
    if keyspace.is_internal() {
        Cow::Owned([&[MARK, keyspace.to_byte()][..], scope].concat())
    } else if scope.first() == Some(&MARK) {
        Cow::Owned([&[MARK][..], scope].concat())
    } else {
        Cow::Borrowed(scope)
    }
}

/// Bytes a stored scope may take beyond the scope itself.
pub(super) const OVERHEAD: usize = 2;

/// The keyspace and scope a `scope` column stands for; `None` for one no
/// keyspace this build knows maps to.
#[cfg(test)]
fn read(stored: &[u8]) -> Option<(Keyspace, &[u8])> {
    match stored {
        [MARK, MARK, ..] => Some((Keyspace::Caller, &stored[1..])),
        [MARK, byte, rest @ ..] => {
            Keyspace::from_byte(*byte).filter(|keyspace| keyspace.is_internal()).map(|k| (k, rest))
        }
        [MARK] => None,
        _ => Some((Keyspace::Caller, stored)),
    }
}

/// What version 5's migration does to the rows of `table` (qualified):
/// a caller's scope that starts with a zero byte gets a second one first,
/// then each earlier prefix's rows move to their keyspace.
pub(super) fn migration(table: &str) -> String {
    let mut sql =
        format!("UPDATE {table} SET scope = '\\x00'::bytea || scope WHERE substr(scope, 1, 1) = '\\x00'::bytea;\n");
    for keyspace in Keyspace::ALL {
        let Some(prefix) = keyspace.legacy_prefix() else { continue };
        let prefix = String::from_utf8_lossy(prefix);
        let start = prefix.len() + 1;
        let _ = writeln!(
            sql,
            "UPDATE {table} SET scope = '\\x00{:02x}'::bytea || substr(scope, {start}) \
             WHERE substr(scope, 1, {}) = convert_to('{prefix}', 'UTF8');",
            keyspace.to_byte(),
            prefix.len(),
        );
    }
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_keyspace_and_scope_is_stored_apart_and_read_back() {
        let scopes: [&[u8]; 7] = [b"", b"T", b"\x00", b"\x00\x01T", b"\x00\x00", b"idemkv.hold/T", b"\x01T"];
        let mut seen = std::collections::HashSet::new();
        for keyspace in Keyspace::ALL {
            for scope in scopes {
                let column = stored(keyspace, scope);
                assert!(seen.insert(column.to_vec()), "{keyspace} {scope:?} met another record");
                assert_eq!(read(&column), Some((keyspace, scope)));
                assert!(column.len() <= scope.len() + OVERHEAD);
            }
        }
        assert_eq!(stored(Keyspace::Caller, b"acct-7"), Cow::Borrowed(&b"acct-7"[..]));
        assert_eq!(read(b"\x00\x08T"), None);
    }

    #[test]
    fn the_migration_names_every_earlier_prefix() {
        let sql = migration("s.idempo_store");
        assert!(sql.starts_with("UPDATE s.idempo_store SET scope = '\\x00'::bytea || scope"));
        assert!(sql
            .contains("'\\x0001'::bytea || substr(scope, 13) WHERE substr(scope, 1, 12) = convert_to('idemkv.hold/'"));
        assert!(sql
            .contains("'\\x0006'::bytea || substr(scope, 14) WHERE substr(scope, 1, 13) = convert_to('idemkv.relay/'"));
    }
}
