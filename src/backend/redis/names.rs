//! How the backend names what it keeps: a key's record and channel, and
//! a scope's indexes (see [`super::index`]).
//!
//! A record's name carries a hash tag, so that the record and what a
//! script writes with it sit in one Cluster slot. Two layouts:
//!
//! - [`Layout::Digest`], a standalone server's: `{prefix}:{keyspace:}{D}:r`,
//!   the tag `D` a digest of scope and key. A scope's indexes are named
//!   `{prefix}:{keyspace:}scope:S:keys` (`…:ends`, `…:staged`), `S` a digest
//!   of keyspace and scope; one server holds them all, so a script writes a
//!   record and files it in its scope's indexes in one step. Earlier
//!   builds named a Cluster's records this way too.
//! - [`Layout::Buckets`], a Cluster's: a script may touch one slot alone,
//!   so each scope has [`BUCKETS`] slots of its own, and a record sits in
//!   the one its digest picks, with that bucket's indexes:
//!   `{prefix}:{keyspace:}{S.b}:D:r` and `{prefix}:{keyspace:}scope:{S.b}:keys`
//!   (`b` the bucket, one hex digit). A script then files a record as on a
//!   standalone server, and a scope's page merges its buckets' indexes.

use crate::backend::remote::Address;
use crate::keyspace::Keyspace;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// A scope's slots on a Cluster ([`Layout::Buckets`]): enough that a busy
/// scope spreads over a Cluster's masters, few enough that a page's merge
/// of them is one round of commands.
pub(super) const BUCKETS: u8 = 16;

/// How a server's names are spelt (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    /// A standalone server: each record in the slot of its own digest.
    Digest,
    /// A Cluster: each record in one of its scope's [`BUCKETS`] slots.
    Buckets,
}

/// The names of one key's record and channel: `{prefix}:{{tag}}:r` and
/// `…:w` for the caller's keyspace, `{prefix}:{keyspace}:{{tag}}:r` for
/// each of idemkv's own (see [`Keyspace::name`]), so that a record's
/// keyspace is part of its name and a `SCAN` finds one keyspace's records
/// alone; the tag as the [`Layout`] says. The record's digest is of scope
/// and key (and, for idemkv's own keyspaces, the keyspace: a word no
/// scope's length can be goes first). Every call names the record; the
/// channel and the scope's indexes are made only for the calls that name
/// them (they cost a digest and a name each, on every call).
pub(super) struct Names {
    pub(super) record: Vec<u8>,
    /// The indexes the record is filed in (see [`super::index`]), for a
    /// script that writes the record: its scope's on a standalone server,
    /// its bucket's on a Cluster.
    pub(super) index: Option<Arc<ScopeIndex>>,
    /// The record's bucket ([`Layout::Buckets`] alone).
    bucket: Option<u8>,
}

impl Names {
    /// The record's name alone.
    pub(super) fn of(prefix: &str, layout: Layout, address: Address<'_>) -> Names {
        let digest = record_digest(address);
        let space = keyspace_part(address.keyspace);
        let mut record = Vec::with_capacity(prefix.len() + space.len() + 74);
        record.extend_from_slice(prefix.as_bytes());
        record.push(b':');
        record.extend_from_slice(space.as_bytes());
        record.push(b'{');
        let bucket = (layout == Layout::Buckets).then(|| bucket_of(&digest));
        if let Some(bucket) = bucket {
            push_hex16(&mut record, &scope_digest(address.keyspace, address.scope));
            record.push(b'.');
            record.push(hex_digit(bucket));
            record.extend_from_slice(b"}:");
            push_hex16(&mut record, &digest);
        } else {
            push_hex16(&mut record, &digest);
            record.push(b'}');
        }
        record.extend_from_slice(b":r");
        Names { record, index: None, bucket }
    }

    /// The record, and the indexes a script that writes it files it in
    /// (see [`Names::written`]).
    pub(super) fn filed(prefix: &str, layout: Layout, address: Address<'_>) -> Names {
        let mut names = Names::of(prefix, layout, address);
        names.index = Some(Arc::new(ScopeIndex::of(prefix, address.keyspace, address.scope, names.bucket)));
        names
    }

    /// The key's channel: the record's name ending `w`, in its slot.
    pub(super) fn channel(&self) -> Vec<u8> {
        let mut channel = self.record.clone();
        if let Some(last) = channel.last_mut() {
            *last = b'w';
        }
        channel
    }

    /// The names a script that writes the record takes as its keys: the
    /// record, then the indexes when [`Names::filed`] made them.
    pub(super) fn written(&self) -> Vec<&[u8]> {
        let mut keys = vec![self.record.as_slice()];
        if let Some(index) = &self.index {
            keys.extend(index.all());
        }
        keys
    }
}

/// The names of one scope's indexes.
#[derive(Debug, Clone)]
pub(super) struct ScopeIndex {
    pub(super) keys: Vec<u8>,
    pub(super) ends: Vec<u8>,
    pub(super) staged: Vec<u8>,
}

impl ScopeIndex {
    /// The indexes of `scope` of `keyspace` under `prefix`: the scope's on
    /// a standalone server (`bucket` `None`), one bucket's on a Cluster
    /// (see [`super::names`]).
    pub(super) fn of(prefix: &str, keyspace: Keyspace, scope: &[u8], bucket: Option<u8>) -> ScopeIndex {
        let space = keyspace_part(keyspace);
        let mut base = Vec::with_capacity(prefix.len() + space.len() + 51);
        base.extend_from_slice(prefix.as_bytes());
        base.push(b':');
        base.extend_from_slice(space.as_bytes());
        base.extend_from_slice(b"scope:");
        let digest = scope_digest(keyspace, scope);
        if let Some(bucket) = bucket {
            base.push(b'{');
            push_hex16(&mut base, &digest);
            base.push(b'.');
            base.push(hex_digit(bucket));
            base.extend_from_slice(b"}:");
        } else {
            push_hex16(&mut base, &digest);
            base.push(b':');
        }
        let name = |suffix: &[u8]| [&base[..], suffix].concat();
        ScopeIndex { keys: name(b"keys"), ends: name(b"ends"), staged: name(b"staged") }
    }

    /// The three, in the order the scripts take them.
    pub(super) fn all(&self) -> [&[u8]; 3] {
        [&self.keys, &self.ends, &self.staged]
    }
}

/// Whether names under `prefix` keep the hash tags [`Names`] gives them
/// on a Cluster: a prefix without `{`, or whose first `{` a `}` closes
/// with something between (then every name has the prefix's tag, so all
/// sit in one slot). A Cluster hashes the first `{…}` of a name; under a
/// prefix with an unclosed `{` (`app{x`) or an empty `{}` a record's tag
/// and its index's would differ.
pub(super) fn tags_hold(prefix: &str) -> bool {
    prefix.find('{').is_none_or(|open| prefix[open + 1..].find('}').is_some_and(|close| close > 0))
}

/// The digest a record's name is made of.
fn record_digest(address: Address<'_>) -> [u8; 32] {
    let Address { keyspace, scope, key } = address;
    let mut hasher = Sha256::new();
    hasher.update(b"idemkv.redis.v1");
    if keyspace.is_internal() {
        hasher.update([0xff, 0xff, 0xff, keyspace.to_byte()]);
    }
    hasher.update(u32::try_from(scope.len()).unwrap_or(u32::MAX).to_be_bytes());
    hasher.update(scope);
    hasher.update(key);
    hasher.finalize().into()
}

/// The digest a scope's indexes (and on a Cluster its records' tags) are
/// named after.
pub(super) fn scope_digest(keyspace: Keyspace, scope: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(b"idemkv.redis.scope.v1");
    hasher.update([keyspace.to_byte()]);
    hasher.update(scope);
    hasher.finalize().into()
}

/// The bucket of the record whose digest is `digest`, below [`BUCKETS`].
fn bucket_of(digest: &[u8; 32]) -> u8 {
    digest[31] % BUCKETS
}

/// `value` (below 16) as a lower-case hex digit.
pub(super) fn hex_digit(value: u8) -> u8 {
    b"0123456789abcdef"[usize::from(value & 0x0f)]
}

/// Appends the first 16 bytes of `digest` to `name`, in lower-case hex.
pub(super) fn push_hex16(name: &mut Vec<u8>, digest: &[u8]) {
    for byte in digest.iter().take(16) {
        name.push(hex_digit(byte >> 4));
        name.push(hex_digit(byte & 0x0f));
    }
}

/// The part of a name that says its keyspace: nothing for the caller's
/// (the names of the first schema), `{name}:` for idemkv's own.
pub(super) fn keyspace_part(keyspace: Keyspace) -> String {
    if keyspace.is_internal() {
        format!("{}:", keyspace.name())
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(digest: &[u8]) -> String {
        digest.iter().take(16).fold(String::new(), |mut hex, byte| {
            let _ = std::fmt::Write::write_fmt(&mut hex, format_args!("{byte:02x}"));
            hex
        })
    }

    /// The names as every earlier build spelt them: a fleet's instances,
    /// old and new, must name each record, channel and index alike.
    fn spelt_before(prefix: &str, address: Address<'_>) -> (String, String, [String; 3]) {
        let Address { keyspace, scope, key } = address;
        let mut hasher = Sha256::new();
        hasher.update(b"idemkv.redis.v1");
        if keyspace.is_internal() {
            hasher.update([0xff, 0xff, 0xff, keyspace.to_byte()]);
        }
        hasher.update(u32::try_from(scope.len()).expect("short scope").to_be_bytes());
        hasher.update(scope);
        hasher.update(key);
        let tag = hex(&hasher.finalize());
        let space = if keyspace.is_internal() { format!("{}:", keyspace.name()) } else { String::new() };
        let mut hasher = Sha256::new();
        hasher.update(b"idemkv.redis.scope.v1");
        hasher.update([keyspace.to_byte()]);
        hasher.update(scope);
        let digest = hex(&hasher.finalize());
        let index = ["keys", "ends", "staged"].map(|suffix| format!("{prefix}:{space}scope:{digest}:{suffix}"));
        (format!("{prefix}:{space}{{{tag}}}:r"), format!("{prefix}:{space}{{{tag}}}:w"), index)
    }

    const ADDRESSES: [(&[u8], &[u8]); 3] = [(b"", b"k"), (b"shop", b"order-1"), (&[0xff, 0], &[0, 0xfe, 7])];

    fn spelt(names: &[&[u8]]) -> Vec<String> {
        names.iter().map(|name| String::from_utf8_lossy(name).into_owned()).collect()
    }

    #[test]
    fn a_standalone_servers_names_are_spelt_as_before() {
        for keyspace in Keyspace::ALL {
            for (scope, key) in ADDRESSES {
                let address = Address { keyspace, scope, key };
                let (record, channel, index) = spelt_before("idemkv", address);
                let names = Names::of("idemkv", Layout::Digest, address);
                assert_eq!(String::from_utf8_lossy(&names.record), record);
                assert_eq!(String::from_utf8_lossy(&names.channel()), channel);
                assert!(names.index.is_none(), "the record's name alone");
                let filed = Names::filed("idemkv", Layout::Digest, address);
                assert_eq!(spelt(&filed.written()), [vec![record], index.to_vec()].concat());
            }
        }
    }

    /// The hash tag of `name`, as a Cluster reads it: what the first `{`
    /// and the `}` after it enclose.
    fn tag(name: &[u8]) -> &[u8] {
        let open = name.iter().position(|&byte| byte == b'{').expect("a {");
        let close = name[open..].iter().position(|&byte| byte == b'}').expect("a }");
        &name[open + 1..open + close]
    }

    #[test]
    fn on_a_cluster_a_record_its_channel_and_its_buckets_indexes_share_one_tag_of_its_scope() {
        let mut buckets = std::collections::BTreeSet::new();
        for keyspace in Keyspace::ALL {
            for (scope, key) in ADDRESSES {
                let address = Address { keyspace, scope, key };
                let names = Names::filed("idemkv", Layout::Buckets, address);
                let record_tag = tag(&names.record).to_vec();
                assert!(names.written().iter().all(|name| tag(name) == record_tag), "{:?}", spelt(&names.written()));
                assert_eq!(tag(&names.channel()), record_tag);
                let (digest_record, ..) = spelt_before("idemkv", address);
                let scope_hex = hex(&scope_digest(keyspace, scope));
                assert!(String::from_utf8_lossy(&record_tag).starts_with(&format!("{scope_hex}.")));
                // The record's digest follows the tag: names of two keys
                // in one bucket differ.
                let digest =
                    &digest_record[digest_record.find('{').expect("{") + 1..digest_record.find('}').expect("}")];
                assert!(String::from_utf8_lossy(&names.record).ends_with(&format!("}}:{digest}:r")));
            }
        }
        for n in 0..400 {
            let key = format!("k-{n}");
            let address = Address { keyspace: Keyspace::Caller, scope: b"shop", key: key.as_bytes() };
            buckets.insert(tag(&Names::of("idemkv", Layout::Buckets, address).record).to_vec());
        }
        assert_eq!(buckets.len(), usize::from(BUCKETS), "a scope's keys spread over its buckets");
    }

    #[test]
    fn each_scope_and_keyspace_has_indexes_of_its_own() {
        let caller = ScopeIndex::of("idemkv", Keyspace::Caller, b"shop", None);
        assert!(caller.keys.starts_with(b"idemkv:scope:"), "{:?}", String::from_utf8_lossy(&caller.keys));
        assert!(caller.keys.ends_with(b":keys") && caller.ends.ends_with(b":ends"));
        assert!(caller.staged.ends_with(b":staged"));
        let other = ScopeIndex::of("idemkv", Keyspace::Caller, b"shop2", None);
        assert_ne!(caller.keys, other.keys);
        let relay = ScopeIndex::of("idemkv", Keyspace::Relay, b"shop", None);
        assert!(relay.keys.starts_with(format!("idemkv:{}:scope:", Keyspace::Relay.name()).as_bytes()));
        // No index is ever taken for a record: a record's name ends `:r`.
        assert!(caller.all().iter().all(|name| !name.ends_with(b":r")));
    }

    #[test]
    fn a_prefix_keeps_the_tags_unless_it_opens_one_it_does_not_close() {
        for prefix in ["idemkv", "app:v2", "app}x", "app{t}", "a{b}c{", "{t}"] {
            assert!(tags_hold(prefix), "{prefix}");
        }
        for prefix in ["app{x", "a{}b", "{", "x{}{t}"] {
            assert!(!tags_hold(prefix), "{prefix}");
        }
        // What a Cluster would hash, for the two kinds.
        let address = Address { keyspace: Keyspace::Caller, scope: b"shop", key: b"k" };
        let names = Names::filed("app{t}", Layout::Buckets, address);
        assert!(names.written().iter().all(|name| tag(name) == b"t"));
        let names = Names::filed("app{x", Layout::Buckets, address);
        assert_ne!(tag(&names.record), tag(names.written()[1]), "split: refused");
    }
}
