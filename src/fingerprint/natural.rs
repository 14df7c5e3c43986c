//! Natural keys: the idempotency key taken from the request itself — a
//! field of its JSON body, a segment of its path, a header, or what a
//! function of the service's own says.

use super::json::{JsonError, Value};
use super::pointer::{JsonPointer, PointerError};
use http::header::HeaderName;
use http::request::Parts;
use std::fmt;
use std::sync::Arc;

/// Why a request has no natural key: it is refused (the HTTP layer's
/// answer is a 400 problem; nothing is claimed, nothing runs).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NaturalKeyError {
    /// The request does not carry it: no such member, segment or header,
    /// or an empty one (HTTP: 400 `natural-key-missing`).
    #[error("the request carries no natural key: {0}")]
    Missing(&'static str),
    /// What the request carries there is not a key: a JSON object, array,
    /// boolean or `null`, a header that is not visible ASCII (HTTP: 400
    /// `natural-key-invalid`).
    #[error("the request's natural key is not a key: {0}")]
    Invalid(&'static str),
    /// A JSON natural key's body is not a JSON document (HTTP: 400
    /// `body-not-json`).
    #[error("the request body is not JSON: {0}")]
    BodyNotJson(#[source] JsonError),
}

type NaturalKeyFn = dyn Fn(&Parts, &[u8]) -> Result<Vec<u8>, NaturalKeyError> + Send + Sync;

/// Where a request's idempotency key comes from when it is the request's
/// own: two requests with one natural key are one operation, whatever
/// `Idempotency-Key` each carries, or none.
///
/// - [`NaturalKey::json`]: the value at a JSON Pointer in the body — a
///   string's text, or a number in its one canonical spelling (`42`,
///   `42.0` and `4.2e1` are one key);
/// - [`NaturalKey::path_segment`]: a segment of the path, as sent
///   (`/orders/{id}/pay`: segment 1 is the order's id);
/// - [`NaturalKey::header`]: a header's value, as sent;
/// - [`NaturalKey::new`]: a function of the request's head and body.
///
/// # Examples
///
/// ```
/// use idemkv::fingerprint::{NaturalKey, NaturalKeyError};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let natural = NaturalKey::json("/external_payment_id")?;
/// let (parts, _) = http::Request::post("/payments").body(())?.into_parts();
/// let key = natural.of(&parts, br#"{"external_payment_id": "ord-7", "amount": 10}"#)?;
/// assert_eq!(key, b"ord-7");
/// assert!(matches!(natural.of(&parts, br#"{"amount": 10}"#), Err(NaturalKeyError::Missing(_))));
///
/// let (parts, _) = http::Request::post("/orders/ord-7/pay").body(())?.into_parts();
/// assert_eq!(NaturalKey::path_segment(1).of(&parts, b"")?, b"ord-7");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct NaturalKey {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    Json(JsonPointer),
    PathSegment(usize),
    Header(HeaderName),
    Custom(Arc<NaturalKeyFn>),
}

impl fmt::Debug for NaturalKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Json(pointer) => formatter.debug_tuple("NaturalKey::json").field(&pointer.as_str()).finish(),
            Inner::PathSegment(index) => formatter.debug_tuple("NaturalKey::path_segment").field(index).finish(),
            Inner::Header(name) => formatter.debug_tuple("NaturalKey::header").field(name).finish(),
            Inner::Custom(_) => formatter.write_str("NaturalKey::new(..)"),
        }
    }
}

impl NaturalKey {
    /// The value at `pointer` (RFC 6901) in the JSON body: a string's
    /// text, or a number's canonical spelling. A body that is not JSON is
    /// [`NaturalKeyError::BodyNotJson`]; no value there, or an empty
    /// string, [`NaturalKeyError::Missing`]; an object, array, boolean or
    /// `null` there, [`NaturalKeyError::Invalid`].
    ///
    /// # Errors
    /// [`PointerError`] when `pointer` is not a JSON Pointer.
    pub fn json(pointer: &str) -> Result<NaturalKey, PointerError> {
        Ok(NaturalKey { inner: Inner::Json(JsonPointer::parse(pointer)?) })
    }

    /// The path's segment `index`, counted from 0 after the leading `/`
    /// (`/orders/ord-7/pay`: 0 is `orders`, 1 is `ord-7`), as sent
    /// (percent-encoded as it came). No such segment, or an empty one, is
    /// [`NaturalKeyError::Missing`].
    #[must_use]
    pub fn path_segment(index: usize) -> NaturalKey {
        NaturalKey { inner: Inner::PathSegment(index) }
    }

    /// The value of the header `name`, as sent. No such header, or an
    /// empty one, is [`NaturalKeyError::Missing`]; more than one field,
    /// [`NaturalKeyError::Invalid`].
    #[must_use]
    pub fn header(name: HeaderName) -> NaturalKey {
        NaturalKey { inner: Inner::Header(name) }
    }

    /// What a function of the request's head and body says.
    #[must_use]
    pub fn new(key: impl Fn(&Parts, &[u8]) -> Result<Vec<u8>, NaturalKeyError> + Send + Sync + 'static) -> NaturalKey {
        NaturalKey { inner: Inner::Custom(Arc::new(key)) }
    }

    /// The natural key of the request with head `parts` and body `body`.
    ///
    /// # Errors
    /// [`NaturalKeyError`] when the request carries none.
    pub fn of(&self, parts: &Parts, body: &[u8]) -> Result<Vec<u8>, NaturalKeyError> {
        let key = match &self.inner {
            Inner::Json(pointer) => json_key(pointer, body)?,
            Inner::PathSegment(index) => path_key(parts.uri.path(), *index)?,
            Inner::Header(name) => header_key(parts, name)?,
            Inner::Custom(key) => key(parts, body)?,
        };
        if key.is_empty() {
            return Err(NaturalKeyError::Missing("The request's natural key is empty."));
        }
        Ok(key)
    }
}

fn json_key(pointer: &JsonPointer, body: &[u8]) -> Result<Vec<u8>, NaturalKeyError> {
    let document = Value::parse(body).map_err(NaturalKeyError::BodyNotJson)?;
    match pointer.find(&document) {
        None => Err(NaturalKeyError::Missing("The request body lacks the field its idempotency key is taken from.")),
        Some(Value::String(text)) => Ok(text.as_bytes().to_vec()),
        Some(number @ Value::Number(_)) => Ok(number.canonical().into_bytes()),
        Some(_) => {
            Err(NaturalKeyError::Invalid("The field the idempotency key is taken from must be a string or a number."))
        }
    }
}

fn path_key(path: &str, index: usize) -> Result<Vec<u8>, NaturalKeyError> {
    let segment = path.strip_prefix('/').unwrap_or(path).split('/').nth(index);
    match segment {
        Some(segment) if !segment.is_empty() => Ok(segment.as_bytes().to_vec()),
        _ => Err(NaturalKeyError::Missing("The request path lacks the segment its idempotency key is taken from.")),
    }
}

fn header_key(parts: &Parts, name: &HeaderName) -> Result<Vec<u8>, NaturalKeyError> {
    let mut values = parts.headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Err(NaturalKeyError::Missing("The request lacks the header its idempotency key is taken from."));
    };
    if values.next().is_some() {
        return Err(NaturalKeyError::Invalid("Send the header the idempotency key is taken from once."));
    }
    Ok(value.as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(uri: &str) -> Parts {
        http::Request::post(uri).header("x-order", "o-1").body(()).expect("request").into_parts().0
    }

    #[test]
    fn json_keys_are_strings_and_numbers_in_one_spelling() {
        let natural = NaturalKey::json("/order/id").expect("pointer");
        let of = |body: &str| natural.of(&parts("/"), body.as_bytes());
        assert_eq!(of(r#"{"order":{"id":"a\u0062"}}"#), Ok(b"ab".to_vec()));
        assert_eq!(of(r#"{"order":{"id":42}}"#), of(r#"{"order":{"id":4.2e1}}"#));
        assert!(matches!(of(r#"{"order":{}}"#), Err(NaturalKeyError::Missing(_))));
        assert!(matches!(of(r#"{"order":{"id":""}}"#), Err(NaturalKeyError::Missing(_))));
        for not_a_key in ["null", "true", "[1]", "{}"] {
            let body = format!(r#"{{"order":{{"id":{not_a_key}}}}}"#);
            assert!(matches!(of(&body), Err(NaturalKeyError::Invalid(_))), "{body}");
        }
        assert!(matches!(of("id=1"), Err(NaturalKeyError::BodyNotJson(_))));
        assert!(NaturalKey::json("order").is_err());
    }

    #[test]
    fn path_segments_count_from_zero_after_the_leading_slash() {
        let key = |uri: &str, index| NaturalKey::path_segment(index).of(&parts(uri), b"");
        assert_eq!(key("/orders/o-7/pay?x=1", 1), Ok(b"o-7".to_vec()));
        assert_eq!(key("/orders/o-7/pay", 0), Ok(b"orders".to_vec()));
        assert!(matches!(key("/orders/o-7", 2), Err(NaturalKeyError::Missing(_))));
        assert!(matches!(key("/orders//pay", 1), Err(NaturalKeyError::Missing(_))));
    }

    #[test]
    fn header_keys_are_one_field() {
        let natural = NaturalKey::header(HeaderName::from_static("x-order"));
        assert_eq!(natural.of(&parts("/"), b""), Ok(b"o-1".to_vec()));
        let mut two = parts("/");
        two.headers.append("x-order", http::HeaderValue::from_static("o-2"));
        assert!(matches!(natural.of(&two, b""), Err(NaturalKeyError::Invalid(_))));
        let other = NaturalKey::header(HeaderName::from_static("x-other"));
        assert!(matches!(other.of(&parts("/"), b""), Err(NaturalKeyError::Missing(_))));
    }

    #[test]
    fn a_services_function_is_asked() {
        let natural = NaturalKey::new(|parts, _| Ok(parts.method.as_str().as_bytes().to_vec()));
        assert_eq!(natural.of(&parts("/"), b""), Ok(b"POST".to_vec()));
        let empty = NaturalKey::new(|_, _| Ok(Vec::new()));
        assert!(matches!(empty.of(&parts("/"), b""), Err(NaturalKeyError::Missing(_))));
        assert_eq!(format!("{:?}", NaturalKey::path_segment(1)), "NaturalKey::path_segment(1)");
    }
}
