//! The keyspaces' scenario: no scope of a caller's reaches a record of
//! idemkv's own, on any backend (see [`Keyspace`]).

use super::Setting;
use crate::backend::{BackendClaim, ClaimOptions};
use crate::{backend::IdempotencyBackend, Fingerprint, Keyspace, LeaseToken, State};

/// The scopes a hostile tenant might pick to reach the record of `own` in
/// keyspace `keyspace`: the prefix the layout before keyspaces used (or
/// `idemkv.<name>/` for a keyspace that came after it), and near misses
/// of it, and the bytes a backend might store the record under (a zero
/// byte and the keyspace's number before it, the keyspace's name with a
/// colon).
fn hostile(keyspace: Keyspace, own: &[u8]) -> Vec<Vec<u8>> {
    let prefix =
        keyspace.legacy_prefix().map_or_else(|| format!("idemkv.{}/", keyspace.name()).into_bytes(), <[u8]>::to_vec);
    let prefix = prefix.as_slice();
    let bare = prefix.strip_suffix(b"/").unwrap_or(prefix);
    vec![
        [prefix, own].concat(),
        prefix.to_vec(),
        [bare, own].concat(),
        [bare, b".", own].concat(),
        [&prefix.to_ascii_uppercase()[..], own].concat(),
        [b" ", prefix, own].concat(),
        [&[0, keyspace.to_byte()][..], own].concat(),
        [&[0, 0, keyspace.to_byte()][..], own].concat(),
        [&[keyspace.to_byte()][..], own].concat(),
        [keyspace.name().as_bytes(), b":", own].concat(),
        own.to_vec(),
    ]
}

async fn acquire<B: IdempotencyBackend>(backend: &B, keyspace: Keyspace, scope: &[u8], key: &[u8]) -> LeaseToken {
    let options = ClaimOptions::new();
    match backend.claim_in(keyspace, scope, key, Fingerprint::of(key), options).await.expect("claim") {
        BackendClaim::Acquired { token, .. } => token,
        other => panic!("{keyspace} {scope:?}: {other:?}"),
    }
}

/// For every keyspace of idemkv's own: a record of its own stays as it is
/// while tenants with every hostile scope (the old prefixes, near misses,
/// the bytes backends store keyspaces under) claim, complete, read,
/// replace, scan and remove the same key; each tenant's record is its
/// own, in the caller's keyspace; a caller's lease token cannot finish
/// the record of idemkv's own, and the other way round.
///
/// # Panics
/// When the backend answers otherwise.
pub async fn keyspaces<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let own = setting.key("tenant");
    let key = b"acct-7";
    for keyspace in Keyspace::ALL.into_iter().filter(|keyspace| keyspace.is_internal()) {
        let token = acquire(backend, keyspace, &own, key).await;
        assert_eq!(token.keyspace, keyspace);
        backend.complete(&token, b"idemkv's own").await.expect("complete");
        for scope in hostile(keyspace, &own) {
            tenant_cannot_reach(backend, keyspace, (&own, key), &scope).await;
        }
        let page = backend.scan_in(keyspace, &own, None, 10).await.expect("scan_in");
        let keys: Vec<_> = page.iter().map(|record| (record.keyspace, record.key.as_slice())).collect();
        assert_eq!(keys, [(keyspace, &key[..])], "{keyspace}: its scan lists its own record alone");
        assert!(backend.remove_in(keyspace, &own, key).await.expect("remove_in"));
        assert_eq!(backend.get_in(keyspace, &own, key).await.expect("get_in"), None);
    }
}

/// A tenant of `scope` works on `key` while keyspace `keyspace`'s record
/// `(own, key)` holds `idemkv's own`.
async fn tenant_cannot_reach<B: IdempotencyBackend>(
    backend: &B,
    keyspace: Keyspace,
    (own, key): (&[u8], &[u8]),
    scope: &[u8],
) {
    let check = |what: &str| format!("{keyspace}, tenant {scope:?}: {what}");
    assert_eq!(backend.get(scope, key).await.expect("get"), None, "{}", check("nothing there for the tenant"));
    let tenant = acquire(backend, Keyspace::Caller, scope, key).await;
    // The tenant's token names the caller's record: it cannot finish
    // idemkv's, whose own token cannot finish the tenant's.
    let forged = LeaseToken { keyspace, scope: own.to_vec(), ..tenant.clone() };
    assert!(backend.complete(&forged, b"forged").await.is_err(), "{}", check("a forged token"));
    backend.complete(&tenant, b"the tenant's").await.expect("complete");
    assert!(!backend.replace(scope, key, b"idemkv's own", b"x").await.expect("replace"), "{}", check("replace"));
    let listed = backend.scan(scope, None, 10).await.expect("scan");
    assert!(listed.iter().all(|record| record.keyspace == Keyspace::Caller), "{}", check("scan"));
    assert_eq!(listed.len(), 1, "{}", check("scan lists the tenant's record"));
    assert!(backend.remove(scope, key).await.expect("remove"), "{}", check("remove"));
    let record = backend.get_in(keyspace, own, key).await.expect("get_in").expect("idemkv's record stays");
    assert_eq!((record.keyspace, record.state), (keyspace, State::Completed), "{}", check("untouched"));
    assert_eq!(record.response, b"idemkv's own", "{}", check("its answer stays"));
}
