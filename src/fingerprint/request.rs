//! What "the same request" means, as the service chooses it: a function
//! of a request's head and body to its [`Fingerprint`], and ready-made
//! ones (the bytes as sent; canonical JSON, with fields chosen; headers
//! included; query parameters ignored).

use super::json::{JsonError, Value};
use super::pointer::{JsonPointer, PointerError};
use super::{Fingerprint, FingerprintBuilder};
use http::header::HeaderName;
use http::request::Parts;
use std::fmt;
use std::sync::Arc;

/// Why a request has no fingerprint: it is refused (the HTTP layer's
/// answer is a 400 problem; nothing is claimed, nothing runs).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FingerprintError {
    /// A JSON fingerprint's body is not a JSON document (HTTP: 400
    /// `body-not-json`).
    #[error("the request body is not JSON: {0}")]
    BodyNotJson(#[source] JsonError),
    /// A fingerprint of the service's own refused the request; the
    /// sentence is shown to the client (HTTP: 400 `fingerprint-refused`).
    #[error("the request cannot be fingerprinted: {0}")]
    Refused(&'static str),
}

type FingerprintFn = dyn Fn(&Parts, &[u8]) -> Result<Fingerprint, FingerprintError> + Send + Sync;

/// What makes two requests "the same request" under one key: a function
/// of the request's head and its body to a [`Fingerprint`]. A retry whose
/// fingerprint is not the first request's is refused (HTTP: 422
/// `key-reused`), and never replayed.
///
/// The default, [`RequestFingerprint::bytes`] as it is, is the method,
/// the path, the query and the body's bytes as sent. A service whose
/// clients may re-serialise a JSON body between retries (another key
/// order, other whitespace, `10.0` for `10`) fingerprints its meaning
/// instead with [`RequestFingerprint::json`]; one with a function of its
/// own uses [`RequestFingerprint::new`]. It is a plain function of
/// [`http::request::Parts`] and bytes, cheap to clone, so that every face
/// of a service can share one.
///
/// # Examples
///
/// ```
/// use idemkv::fingerprint::{FingerprintError, RequestFingerprint};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let fingerprint = RequestFingerprint::json().exclude("/metadata/trace_id").build()?;
/// let (parts, _) = http::Request::post("/payments").body(())?.into_parts();
/// let first = fingerprint.of(&parts, br#"{"amount": 10, "currency": "EUR", "metadata": {"trace_id": "a"}}"#)?;
/// let again = fingerprint.of(&parts, br#"{"currency":"EUR","amount":10.0,"metadata":{"trace_id":"b"}}"#)?;
/// let other = fingerprint.of(&parts, br#"{"currency":"EUR","amount":11}"#)?;
/// assert_eq!(first, again);
/// assert_ne!(first, other);
/// assert!(matches!(fingerprint.of(&parts, b"amount=10"), Err(FingerprintError::BodyNotJson(_))));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RequestFingerprint {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    Rules(Arc<Rules>),
    Custom(Arc<FingerprintFn>),
}

impl Default for RequestFingerprint {
    /// [`RequestFingerprint::bytes`]: method, path, query and the body's
    /// bytes.
    fn default() -> Self {
        RequestFingerprint { inner: Inner::Rules(Arc::new(Rules::from(RequestFingerprint::bytes()))) }
    }
}

impl fmt::Debug for RequestFingerprint {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Rules(rules) => rules.fmt(formatter),
            Inner::Custom(_) => formatter.write_str("RequestFingerprint(custom)"),
        }
    }
}

impl RequestFingerprint {
    /// A fingerprint of the service's own: `fingerprint` gets the
    /// request's head and its whole body, and gives its [`Fingerprint`]
    /// (a [`Fingerprint::builder`] with the parts that matter), or
    /// [`FingerprintError::Refused`] to refuse the request.
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::fingerprint::{FingerprintError, RequestFingerprint};
    /// use idemkv::Fingerprint;
    ///
    /// // The path and the body; the API version header too, which must be there.
    /// let fingerprint = RequestFingerprint::new(|parts, body| {
    ///     let version = parts.headers.get("x-api-version").ok_or(FingerprintError::Refused("Send X-Api-Version."))?;
    ///     Ok(Fingerprint::builder().part(parts.uri.path().as_bytes()).part(version.as_bytes()).part(body).finish())
    /// });
    /// let (parts, _) = http::Request::post("/payments").body(()).unwrap().into_parts();
    /// assert_eq!(fingerprint.of(&parts, b"{}"), Err(FingerprintError::Refused("Send X-Api-Version.")));
    /// ```
    pub fn new(
        fingerprint: impl Fn(&Parts, &[u8]) -> Result<Fingerprint, FingerprintError> + Send + Sync + 'static,
    ) -> Self {
        RequestFingerprint { inner: Inner::Custom(Arc::new(fingerprint)) }
    }

    /// The fingerprint of the method, the path, the query and the body's
    /// bytes as sent — the default — with headers to include and query
    /// parameters to ignore still to choose. As it is, it is the digest
    /// of exactly those four parts, in that order
    /// (`Fingerprint::builder().part(method).part(path).part(query).part(body)`).
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::fingerprint::RequestFingerprint;
    /// use idemkv::Fingerprint;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let fingerprint = RequestFingerprint::bytes().build()?;
    /// let (parts, _) = http::Request::post("/payments?dry_run=1").body(())?.into_parts();
    /// let expected = Fingerprint::builder().part(b"POST").part(b"/payments").part(b"dry_run=1").part(b"amount=10").finish();
    /// assert_eq!(fingerprint.of(&parts, b"amount=10")?, expected);
    /// # Ok(()) }
    /// ```
    pub fn bytes() -> FingerprintRules {
        FingerprintRules {
            body: BodyRule::Bytes,
            include: Vec::new(),
            exclude: Vec::new(),
            headers: Vec::new(),
            ignored_query: Vec::new(),
        }
    }

    /// The fingerprint of the method, the path, the query and the body
    /// read as JSON (RFC 8259) in canonical form: members in any order,
    /// any whitespace, numbers compared as numbers, exactly (`1`, `1.0`
    /// and `1e0` are one; `0.1` and `0.10000000000000001` are two),
    /// strings compared after their escapes. A body that is not JSON —
    /// an empty one too, or one with two members of one name — is
    /// refused with [`FingerprintError::BodyNotJson`]. Fields to include
    /// or leave out, headers to include and query parameters to ignore
    /// are still to choose.
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::fingerprint::RequestFingerprint;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let fingerprint = RequestFingerprint::json().build()?;
    /// let (parts, _) = http::Request::post("/payments").body(())?.into_parts();
    /// assert_eq!(
    ///     fingerprint.of(&parts, br#"{"amount": 1e1, "to": "\u0041"}"#)?,
    ///     fingerprint.of(&parts, br#"{"to":"A","amount":10}"#)?,
    /// );
    /// # Ok(()) }
    /// ```
    pub fn json() -> FingerprintRules {
        FingerprintRules { body: BodyRule::Json, ..RequestFingerprint::bytes() }
    }

    /// The fingerprint of the request of head `parts` and body `body`.
    ///
    /// # Errors
    /// [`FingerprintError`]: the body is not JSON under a JSON
    /// fingerprint, or a fingerprint of the service's own refused the
    /// request.
    pub fn of(&self, parts: &Parts, body: &[u8]) -> Result<Fingerprint, FingerprintError> {
        match &self.inner {
            Inner::Rules(rules) => rules.of(parts, body),
            Inner::Custom(fingerprint) => fingerprint(parts, body),
        }
    }
}

/// How a ready-made fingerprint reads the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyRule {
    Bytes,
    Json,
}

/// A ready-made fingerprint being chosen ([`RequestFingerprint::bytes`],
/// [`RequestFingerprint::json`]); [`build`](FingerprintRules::build)
/// makes it a [`RequestFingerprint`].
#[derive(Debug, Clone)]
#[must_use]
pub struct FingerprintRules {
    body: BodyRule,
    include: Vec<String>,
    exclude: Vec<String>,
    headers: Vec<HeaderName>,
    ignored_query: Vec<Vec<u8>>,
}

impl FingerprintRules {
    /// Only the JSON body's value at `pointer` (RFC 6901, `/amount`)
    /// counts, beside any other included; its absence counts as well
    /// (absent and `null` are two). Without any, the whole body counts.
    /// The body is read as JSON, even under
    /// [`RequestFingerprint::bytes`].
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::fingerprint::RequestFingerprint;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let fingerprint = RequestFingerprint::json().include("/amount").include("/currency").build()?;
    /// let (parts, _) = http::Request::post("/payments").body(())?.into_parts();
    /// let first = fingerprint.of(&parts, br#"{"amount":10,"currency":"EUR","note":"rent"}"#)?;
    /// assert_eq!(first, fingerprint.of(&parts, br#"{"amount":10,"currency":"EUR","note":"May"}"#)?);
    /// assert_ne!(first, fingerprint.of(&parts, br#"{"amount":12,"currency":"EUR","note":"rent"}"#)?);
    /// # Ok(()) }
    /// ```
    pub fn include(mut self, pointer: impl Into<String>) -> Self {
        self.body = BodyRule::Json;
        self.include.push(pointer.into());
        self
    }

    /// The JSON body's value at `pointer` (RFC 6901) does not count: an
    /// object's member at it is left out, present or not; an array's
    /// element at it is left out in its place (the elements after it keep
    /// their indexes). Left out of the included fields too. The body is
    /// read as JSON, even under [`RequestFingerprint::bytes`].
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::fingerprint::RequestFingerprint;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let fingerprint = RequestFingerprint::json().exclude("/sent_at").build()?;
    /// let (parts, _) = http::Request::post("/payments").body(())?.into_parts();
    /// assert_eq!(
    ///     fingerprint.of(&parts, br#"{"amount":10,"sent_at":"12:00:00"}"#)?,
    ///     fingerprint.of(&parts, br#"{"amount":10,"sent_at":"12:00:05"}"#)?,
    /// );
    /// # Ok(()) }
    /// ```
    pub fn exclude(mut self, pointer: impl Into<String>) -> Self {
        self.body = BodyRule::Json;
        self.exclude.push(pointer.into());
        self
    }

    /// The values of header `name` count too (all of them, in order;
    /// none is a value of its own): for a header that changes what a
    /// request does, such as an API version or a tenant's currency.
    ///
    /// # Examples
    ///
    /// ```
    /// use http::header::HeaderName;
    /// use idemkv::fingerprint::RequestFingerprint;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let fingerprint = RequestFingerprint::bytes().header(HeaderName::from_static("x-api-version")).build()?;
    /// let (v1, _) = http::Request::post("/payments").header("x-api-version", "1").body(())?.into_parts();
    /// let (v2, _) = http::Request::post("/payments").header("x-api-version", "2").body(())?.into_parts();
    /// assert_ne!(fingerprint.of(&v1, b"amount=10")?, fingerprint.of(&v2, b"amount=10")?);
    /// # Ok(()) }
    /// ```
    pub fn header(mut self, name: HeaderName) -> Self {
        self.headers.push(name);
        self
    }

    /// Query parameters named `name` (compared after percent-decoding,
    /// `+` as a space) do not count: for a tracking or cache-busting
    /// parameter a client may change between retries. The other
    /// parameters count as sent, in their order.
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::fingerprint::RequestFingerprint;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let fingerprint = RequestFingerprint::bytes().ignore_query("utm_source").build()?;
    /// let (plain, _) = http::Request::post("/payments?dry_run=0").body(())?.into_parts();
    /// let (tracked, _) = http::Request::post("/payments?utm_source=mail&dry_run=0").body(())?.into_parts();
    /// assert_eq!(fingerprint.of(&plain, b"amount=10")?, fingerprint.of(&tracked, b"amount=10")?);
    /// # Ok(()) }
    /// ```
    pub fn ignore_query(mut self, name: &str) -> Self {
        self.ignored_query.push(name.as_bytes().to_vec());
        self
    }

    /// The fingerprint chosen. The order in which fields and headers
    /// were given does not change it.
    ///
    /// # Errors
    /// [`PointerError`] when a pointer given to
    /// [`include`](FingerprintRules::include) or
    /// [`exclude`](FingerprintRules::exclude) is not a JSON Pointer.
    pub fn build(self) -> Result<RequestFingerprint, PointerError> {
        let mut include: Vec<JsonPointer> =
            self.include.iter().map(|text| JsonPointer::parse(text)).collect::<Result<_, _>>()?;
        let exclude = self.exclude.iter().map(|text| JsonPointer::parse(text)).collect::<Result<_, _>>()?;
        // In one order, once each: the order they were given in does not
        // change a fingerprint.
        include.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        include.dedup();
        let mut rules = Rules { include, exclude, ..Rules::from(self) };
        rules.headers.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        rules.headers.dedup();
        Ok(RequestFingerprint { inner: Inner::Rules(Arc::new(rules)) })
    }
}

/// A ready-made fingerprint, its pointers read.
#[derive(Debug)]
struct Rules {
    body: BodyRule,
    include: Vec<JsonPointer>,
    exclude: Vec<JsonPointer>,
    headers: Vec<HeaderName>,
    ignored_query: Vec<Vec<u8>>,
}

impl From<FingerprintRules> for Rules {
    /// The rules without their pointers.
    fn from(rules: FingerprintRules) -> Self {
        let FingerprintRules { body, headers, ignored_query, .. } = rules;
        Rules { body, include: Vec::new(), exclude: Vec::new(), headers, ignored_query }
    }
}

impl Rules {
    fn of(&self, parts: &Parts, body: &[u8]) -> Result<Fingerprint, FingerprintError> {
        let query = parts.uri.query().unwrap_or("");
        let builder = Fingerprint::builder().part(parts.method.as_str().as_bytes()).part(parts.uri.path().as_bytes());
        let mut builder = if self.ignored_query.is_empty() {
            builder.part(query.as_bytes())
        } else {
            builder.part(kept_query(query, &self.ignored_query).as_bytes())
        };
        builder = match self.body {
            BodyRule::Bytes => builder.part(body),
            BodyRule::Json => self.json_parts(builder.part(b"json"), body)?,
        };
        for name in &self.headers {
            let values = parts.headers.get_all(name);
            let count = values.iter().count() as u64;
            builder = builder.part(name.as_str().as_bytes()).part(&count.to_le_bytes());
            for value in values {
                builder = builder.part(value.as_bytes());
            }
        }
        Ok(builder.finish())
    }

    /// The parts of a JSON body: its canonical text with the excluded
    /// fields left out, or each included pointer and its value's
    /// canonical text (an empty part when absent: no canonical text is
    /// empty).
    fn json_parts(&self, mut builder: FingerprintBuilder, body: &[u8]) -> Result<FingerprintBuilder, FingerprintError> {
        let mut document = Value::parse(body).map_err(FingerprintError::BodyNotJson)?;
        for pointer in &self.exclude {
            pointer.exclude(&mut document);
        }
        if self.include.is_empty() {
            return Ok(builder.part(document.canonical().as_bytes()));
        }
        for pointer in &self.include {
            let value = pointer.find(&document).map(Value::canonical).unwrap_or_default();
            builder = builder.part(pointer.as_str().as_bytes()).part(value.as_bytes());
        }
        Ok(builder)
    }
}

/// `query` without the parameters whose percent-decoded name is one of
/// `ignored`, the others as sent, in order.
fn kept_query(query: &str, ignored: &[Vec<u8>]) -> String {
    let kept = query.split('&').filter(|pair| {
        let name = pair.split('=').next().unwrap_or_default();
        !ignored.iter().any(|ignored| *ignored == percent_decoded(name))
    });
    kept.collect::<Vec<_>>().join("&")
}

/// `text` percent-decoded, `+` as a space; a `%` not followed by two hex
/// digits stays as it is.
fn percent_decoded(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while let Some(&byte) = bytes.get(at) {
        let hex = |offset: usize| bytes.get(at + offset).and_then(|digit| char::from(*digit).to_digit(16));
        match (byte, hex(1), hex(2)) {
            (b'%', Some(high), Some(low)) => {
                out.push(u8::try_from(high * 16 + low).unwrap_or_default());
                at += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                at += 1;
            }
            (other, _, _) => {
                out.push(other);
                at += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
