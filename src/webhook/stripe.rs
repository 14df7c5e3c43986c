//! [`StripeSignature`]: Stripe's `Stripe-Signature` header, verified.

use super::{any_matches, check_time, header, parse_timestamp, HmacSha256, Verified, WebhookError, WebhookVerifier};
use super::{Error, Result, TOLERANCE_DEFAULT};
use hmac::Mac;
use http::{HeaderMap, HeaderValue};
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

/// Stripe's scheme with one or more endpoint secrets (see the module
/// docs of [`webhook`](super)).
///
/// # Examples
///
/// ```
/// use idemkv::webhook::{StripeSignature, WebhookVerifier};
/// use std::time::{SystemTime, UNIX_EPOCH};
///
/// # fn main() -> Result<(), idemkv::Error> {
/// let stripe = StripeSignature::new(["whsec_test_secret"])?;
/// let body = br#"{"id":"evt_1","type":"charge.succeeded"}"#;
/// let now = SystemTime::now();
/// let headers = stripe.headers(now.duration_since(UNIX_EPOCH).unwrap().as_secs(), body);
/// assert_eq!(stripe.verify(&headers, body, now).unwrap().id, "evt_1");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct StripeSignature {
    secrets: Vec<Vec<u8>>,
    tolerance: Duration,
}

impl std::fmt::Debug for StripeSignature {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("StripeSignature")
            .field("secrets", &self.secrets.len())
            .field("tolerance", &self.tolerance)
            .finish()
    }
}

const HEADER: &str = "stripe-signature";

impl StripeSignature {
    /// The scheme with the endpoint's `secrets` (`whsec_...`, used as
    /// written).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for no secret or an empty one.
    pub fn new<S: AsRef<str>>(secrets: impl IntoIterator<Item = S>) -> Result<Self> {
        let secrets: Vec<Vec<u8>> = secrets.into_iter().map(|secret| secret.as_ref().as_bytes().to_vec()).collect();
        if secrets.is_empty() || secrets.iter().any(Vec::is_empty) {
            return Err(Error::InvalidConfig("a Stripe verifier needs at least one non-empty secret".into()));
        }
        Ok(StripeSignature { secrets, tolerance: TOLERANCE_DEFAULT })
    }

    /// Sets how far a timestamp may be from now
    /// ([`TOLERANCE_DEFAULT`](super::TOLERANCE_DEFAULT)).
    #[must_use]
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    fn mac(secret: &[u8], timestamp: u64, body: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes a key of any length");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }

    /// The `Stripe-Signature` header of `body` at `timestamp`, a `v1`
    /// under each secret (what Stripe sends; for tests and tools).
    #[must_use]
    pub fn headers(&self, timestamp: u64, body: &[u8]) -> HeaderMap {
        let mut value = format!("t={timestamp}");
        for secret in &self.secrets {
            value.push_str(",v1=");
            for byte in Self::mac(secret, timestamp, body).finalize().into_bytes() {
                let _ = write!(value, "{byte:02x}");
            }
        }
        let mut headers = HeaderMap::new();
        // Digits, letters, `=` and `,`: always a header value.
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HEADER, value);
        }
        headers
    }
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok()).collect()
}

impl WebhookVerifier for StripeSignature {
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> std::result::Result<Verified, WebhookError> {
        let value = header(headers, HEADER)?;
        let (mut timestamp, mut candidates) = (None, Vec::new());
        for item in value.split(',') {
            // An item that is no `name=value`, a `v1` that is not hex, `v0`
            // and schemes to come are passed over: none of them may hide a
            // good `v1` beside it. The timestamp is signed: it must be one,
            // and well formed.
            let Some((name, text)) = item.trim().split_once('=') else { continue };
            match name {
                "t" if timestamp.is_none() => timestamp = Some(parse_timestamp(text, HEADER)?),
                "t" => return Err(WebhookError::InvalidHeader(HEADER)),
                "v1" => candidates.extend(unhex(text).filter(|signature| !signature.is_empty())),
                _ => {}
            }
        }
        let timestamp = timestamp.ok_or(WebhookError::InvalidHeader(HEADER))?;
        if candidates.is_empty() {
            return Err(WebhookError::InvalidHeader(HEADER));
        }
        if !any_matches(self.secrets.iter().map(|secret| Self::mac(secret, timestamp, body)), &candidates) {
            return Err(WebhookError::InvalidSignature);
        }
        check_time(timestamp, now, self.tolerance)?;
        let event: serde_json::Value = serde_json::from_slice(body).map_err(|_| WebhookError::MissingId)?;
        let id = event.get("id").and_then(serde_json::Value::as_str).filter(|id| !id.is_empty());
        Ok(Verified { id: id.ok_or(WebhookError::MissingId)?.to_owned(), timestamp })
    }
}
