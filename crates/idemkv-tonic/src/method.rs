//! [`Method`]: what the face needs to know of one unary method — its
//! path, where its key comes from, what "the same request" is.

use crate::refusal::{KeySource, Refusal};
use idemkv::Fingerprint;
use std::fmt;
use tonic::Request;

/// Where a method's key comes from.
enum Key<Req> {
    /// The `idempotency-key` request metadata.
    Metadata,
    /// AIP-155: a `request_id` field of the message, a UUID4 (empty:
    /// none).
    RequestId { field: &'static str, read: fn(&Req) -> &str },
    /// A field of the message the service names (a natural key such as
    /// a merchant reference), `None` when absent.
    Field { field: &'static str, read: fn(&Req) -> Option<&str> },
}

/// A fingerprint function of the service's own.
type FingerprintFn<Req> = Box<dyn Fn(&Req) -> Fingerprint + Send + Sync>;

/// One unary method the face guards: its full path
/// (`/package.Service/Method`), where its key comes from and what "the
/// same request" is. Make it once (a `static` in a `LazyLock`, or a
/// field of the service) and pass it to every
/// [`Idempotency::unary`](crate::Idempotency::unary) call of the method.
///
/// The key comes from the `idempotency-key` request metadata unless
/// [`request_id`](Method::request_id) or [`key_field`](Method::key_field)
/// say otherwise. The fingerprint is by default the method's path and
/// the request message's encoding (prost's `encode_to_vec`): two calls
/// are the same request when their messages encode to the same bytes.
/// prost encodes a message's fields in tag order, but a `map` field
/// generated as a `HashMap` in the order of its hash table: a message
/// with a map field should be generated with `btree_map` or given its
/// own [`fingerprint`](Method::fingerprint).
///
/// # Examples
///
/// ```
/// use idemkv_tonic::Method;
///
/// #[derive(Clone, PartialEq, prost::Message)]
/// struct ChargeRequest {
///     #[prost(string, tag = "1")]
///     request_id: String,
///     #[prost(int64, tag = "2")]
///     amount_cents: i64,
/// }
///
/// // AIP-155: the key is the message's `request_id`, a UUID4.
/// let charge = Method::new("/payments.v1.Payments/Charge")
///     .request_id("request_id", |request: &ChargeRequest| &request.request_id);
/// assert_eq!(charge.path(), "/payments.v1.Payments/Charge");
/// ```
pub struct Method<Req> {
    path: &'static str,
    key: Key<Req>,
    fingerprint: Option<FingerprintFn<Req>>,
    require_key: bool,
}

impl<Req> fmt::Debug for Method<Req> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = match &self.key {
            Key::Metadata => crate::KEY_METADATA,
            Key::RequestId { field, .. } | Key::Field { field, .. } => *field,
        };
        formatter
            .debug_struct("Method")
            .field("path", &self.path)
            .field("key", &key)
            .field("custom_fingerprint", &self.fingerprint.is_some())
            .field("require_key", &self.require_key)
            .finish()
    }
}

/// The key and fingerprint of a guarded call.
pub(crate) struct Identity {
    pub key: Vec<u8>,
    pub fingerprint: Fingerprint,
}

impl<Req> Method<Req> {
    /// The method's path.
    #[must_use]
    pub fn path(&self) -> &'static str {
        self.path
    }
}

impl<Req: prost::Message> Method<Req> {
    /// The method at `path` (`/package.Service/Method`, as in the
    /// generated client), its key in the `idempotency-key` metadata, the
    /// default fingerprint, a key required.
    #[must_use]
    pub fn new(path: &'static str) -> Self {
        Method { path, key: Key::Metadata, fingerprint: None, require_key: true }
    }

    /// The key is the AIP-155 `request_id` of the message, which `read`
    /// returns; `field` is its name in refusals. It must be a UUID (RFC
    /// 9562 form, version 4, either case; kept in lower case): any other
    /// value is refused with `INVALID_ARGUMENT`. An empty one (proto3's
    /// absent string) is no key.
    #[must_use]
    pub fn request_id(mut self, field: &'static str, read: fn(&Req) -> &str) -> Self {
        self.key = Key::RequestId { field, read };
        self
    }

    /// The key is a field of the message that `read` returns (a natural
    /// key: a merchant reference, an external payment id), `None` when
    /// absent; held to the metadata key's rules (printable ASCII, within
    /// the backend's key length). `field` is its name in refusals.
    #[must_use]
    pub fn key_field(mut self, field: &'static str, read: fn(&Req) -> Option<&str>) -> Self {
        self.key = Key::Field { field, read };
        self
    }

    /// What "the same request" is, instead of the path and the encoded
    /// message: a retry whose fingerprint differs from the first call's is
    /// refused (`FAILED_PRECONDITION`). Put the method's path in it if
    /// two methods may share keys.
    #[must_use]
    pub fn fingerprint(mut self, fingerprint: impl Fn(&Req) -> Fingerprint + Send + Sync + 'static) -> Self {
        self.fingerprint = Some(Box::new(fingerprint));
        self
    }

    /// Whether a call without a key is refused (`true`, the default) or
    /// runs unguarded, as AIP-155 has it for a request without a
    /// `request_id`.
    #[must_use]
    pub fn require_key(mut self, required: bool) -> Self {
        self.require_key = required;
        self
    }

    /// The key and fingerprint of `request`; `None` for a call without a
    /// key that may run unguarded.
    pub(crate) fn identity(&self, request: &Request<Req>, key_bytes_max: usize) -> Result<Option<Identity>, Refusal> {
        let (source_name, key) = match &self.key {
            Key::Metadata => (KeySource::Metadata, metadata_key(request)?),
            Key::RequestId { field, read } => {
                let source_name = KeySource::Field(field);
                let value = read(request.get_ref());
                let key = if value.is_empty() { None } else { Some(request_id(value, &source_name)?) };
                (source_name, key)
            }
            Key::Field { field, read } => (KeySource::Field(field), read(request.get_ref()).map(str::to_owned)),
        };
        let Some(key) = key else {
            return if self.require_key { Err(Refusal::KeyMissing { source_name }) } else { Ok(None) };
        };
        check_key(&key, &source_name, key_bytes_max)?;
        let fingerprint = if let Some(fingerprint) = &self.fingerprint {
            fingerprint(request.get_ref())
        } else {
            let encoded = request.get_ref().encode_to_vec();
            Fingerprint::builder().part(self.path.as_bytes()).part(&encoded).finish()
        };
        Ok(Some(Identity { key: key.into_bytes(), fingerprint }))
    }
}

/// The `idempotency-key` metadata value: `None` when absent; a refusal
/// when repeated or not ASCII.
fn metadata_key<Req>(request: &Request<Req>) -> Result<Option<String>, Refusal> {
    let mut values = request.metadata().get_all(crate::KEY_METADATA).iter();
    let Some(value) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(Refusal::KeyRepeated { source_name: KeySource::Metadata });
    }
    let invalid = Refusal::KeyInvalid { source_name: KeySource::Metadata, reason: "not printable ASCII" };
    value.to_str().map(|key| Some(key.to_owned())).map_err(|_| invalid)
}

/// A key's rules wherever it comes from: not empty, printable ASCII (no
/// control characters), within the backend's length.
fn check_key(key: &str, source_name: &KeySource, key_bytes_max: usize) -> Result<(), Refusal> {
    let invalid = |reason| Refusal::KeyInvalid { source_name: source_name.clone(), reason };
    if key.is_empty() {
        return Err(invalid("empty"));
    }
    if !key.bytes().all(|byte| byte.is_ascii_graphic() || byte == b' ') {
        return Err(invalid("not printable ASCII"));
    }
    if key.len() > key_bytes_max {
        return Err(Refusal::KeyTooLong { source_name: source_name.clone(), length: key.len(), max: key_bytes_max });
    }
    Ok(())
}

/// An AIP-155 `request_id`: a UUID in its hyphenated form
/// (`8-4-4-4-12` hexadecimal digits), version 4, RFC 9562 variant; in
/// lower case, as UUIDs compare regardless of case.
fn request_id(value: &str, source_name: &KeySource) -> Result<String, Refusal> {
    let invalid = |reason| Refusal::KeyInvalid { source_name: source_name.clone(), reason };
    let bytes = value.as_bytes();
    if bytes.len() != 36 {
        return Err(invalid("not a UUID (36 characters, 8-4-4-4-12 hexadecimal digits)"));
    }
    for (at, byte) in bytes.iter().enumerate() {
        let hyphen = matches!(at, 8 | 13 | 18 | 23);
        if hyphen != (*byte == b'-') || (!hyphen && !byte.is_ascii_hexdigit()) {
            return Err(invalid("not a UUID (8-4-4-4-12 hexadecimal digits)"));
        }
    }
    if bytes[14] != b'4' {
        return Err(invalid("not a version 4 UUID"));
    }
    if !matches!(bytes[19].to_ascii_lowercase(), b'8' | b'9' | b'a' | b'b') {
        return Err(invalid("not an RFC 9562 variant UUID"));
    }
    Ok(value.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, PartialEq, prost::Message)]
    struct Charge {
        #[prost(string, tag = "1")]
        request_id: String,
        #[prost(int64, tag = "2")]
        amount: i64,
    }

    fn charge(request_id: &str, amount: i64) -> Request<Charge> {
        Request::new(Charge { request_id: request_id.into(), amount })
    }

    fn by_request_id() -> Method<Charge> {
        Method::new("/p.P/Charge").request_id("request_id", |charge: &Charge| &charge.request_id)
    }

    #[test]
    fn a_uuid4_request_id_is_the_key_in_lower_case() {
        let identity = by_request_id().identity(&charge("8E03978E-40D5-43E8-BC93-6894A57F9324", 1), 255);
        let identity = identity.expect("valid").expect("a key");
        assert_eq!(identity.key, b"8e03978e-40d5-43e8-bc93-6894a57f9324");
    }

    #[test]
    fn a_malformed_request_id_is_refused_and_names_its_field() {
        let malformed = [
            "order-1",
            "8e03978e-40d5-13e8-bc93-6894a57f9324", // version 1
            "8e03978e-40d5-43e8-cc93-6894a57f9324", // variant
            "8e03978e40d5-43e8-bc93-6894a57f93241", // hyphens
            "8e03978e-40d5-43e8-bc93-6894a57f932g", // not hex
            "8e03978e-40d5-43e8-bc93-6894a57f9324é",
        ];
        for value in malformed {
            let refused = by_request_id().identity(&charge(value, 1), 255).err();
            assert!(
                matches!(&refused, Some(Refusal::KeyInvalid { source_name: KeySource::Field("request_id"), .. })),
                "{value}: {refused:?}"
            );
        }
    }

    #[test]
    fn no_key_is_refused_unless_the_method_lets_it_run_unguarded() {
        let refused = by_request_id().identity(&charge("", 1), 255).err();
        assert!(matches!(refused, Some(Refusal::KeyMissing { .. })), "{refused:?}");
        let unguarded = by_request_id().require_key(false).identity(&charge("", 1), 255);
        assert!(matches!(unguarded, Ok(None)));
    }

    #[test]
    fn metadata_keys_are_one_printable_ascii_value_within_the_limit() {
        let method = Method::<Charge>::new("/p.P/Charge");
        let with = |values: &[&str]| {
            let mut request = charge("", 1);
            for value in values {
                request.metadata_mut().append(crate::KEY_METADATA, value.parse().expect("ascii"));
            }
            method.identity(&request, 8)
        };
        assert_eq!(with(&["k-1"]).expect("valid").expect("a key").key, b"k-1");
        assert!(matches!(with(&["a", "b"]), Err(Refusal::KeyRepeated { .. })));
        assert!(matches!(with(&["123456789"]), Err(Refusal::KeyTooLong { length: 9, max: 8, .. })));
        assert!(matches!(with(&[]), Err(Refusal::KeyMissing { .. })));
    }

    #[test]
    fn the_default_fingerprint_is_path_and_message() {
        let method = Method::<Charge>::new("/p.P/Charge");
        let fingerprint = |request: &Request<Charge>, path| {
            let mut request = Request::new(request.get_ref().clone());
            request.metadata_mut().insert(crate::KEY_METADATA, "k".parse().expect("ascii"));
            Method::<Charge>::new(path).identity(&request, 255).expect("valid").expect("a key").fingerprint
        };
        let one = fingerprint(&charge("", 10), method.path());
        assert_eq!(one, fingerprint(&charge("", 10), "/p.P/Charge"));
        assert_ne!(one, fingerprint(&charge("", 11), "/p.P/Charge"));
        assert_ne!(one, fingerprint(&charge("", 10), "/p.P/Refund"));
    }
}
