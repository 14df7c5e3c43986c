//! Signed webhooks (feature `webhooks`): the [Standard Webhooks] scheme,
//! verified and signed, and Stripe's `Stripe-Signature`, verified — each a
//! [`WebhookVerifier`] that
//! `http::WebhookLayer` runs before anything
//! else, and whose id it deduplicates by.
//!
//! # Examples
//!
//! ```
//! use idemkv::webhook::{StandardWebhooks, WebhookError, WebhookVerifier};
//! use std::time::{Duration, SystemTime, UNIX_EPOCH};
//!
//! # fn main() -> Result<(), idemkv::Error> {
//! let webhooks = StandardWebhooks::new(["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"])?;
//! let now = SystemTime::now();
//! let timestamp = now.duration_since(UNIX_EPOCH).unwrap().as_secs();
//! let body = br#"{"type":"invoice.paid"}"#;
//! let headers = webhooks.headers("msg_1", timestamp, body);
//! assert_eq!(webhooks.verify(&headers, body, now).unwrap().id, "msg_1");
//! // A body changed on the way, or a capture replayed an hour later: refused.
//! assert_eq!(webhooks.verify(&headers, b"{}", now), Err(WebhookError::InvalidSignature));
//! let later = now + Duration::from_secs(3600);
//! assert!(matches!(webhooks.verify(&headers, body, later), Err(WebhookError::Stale { .. })));
//! # Ok(()) }
//! ```
//!
//! **Standard Webhooks.** Three headers: `webhook-id` (the message id,
//! the same at every redelivery), `webhook-timestamp` (seconds since the
//! epoch) and `webhook-signature`: one or more `v1,<base64>` separated by
//! spaces, each the HMAC-SHA256 of `<id>.<timestamp>.<body>` under a secret
//! (`whsec_` and the secret's bytes in base64). Several secrets verify at
//! once (a rotation: the old and the new); [`StandardWebhooks::sign`]
//! signs with every one, so a receiver that holds either verifies.
//!
//! **Stripe.** One header, `Stripe-Signature: t=<timestamp>,v1=<hex>`
//! (more `v1=` during a rotation), the HMAC-SHA256 of `<t>.<body>` under
//! the endpoint's secret, taken as it is written (`whsec_...`). The id is
//! the event's, the body's top-level `"id"`.
//!
//! **Several signatures.** A webhook verifies when any one of its
//! signatures matches any one secret. An entry the verifier cannot read —
//! a version to come (`v1a,…`, Stripe's `v0=`), bad base64 or hex, no
//! version at all — is passed over, never held against a good one beside
//! it, as a sender changing keys or algorithms lists several. A signature
//! header with no readable `v1` signature is
//! [`InvalidHeader`](WebhookError::InvalidHeader) (400); one whose `v1`
//! signatures all fail is [`InvalidSignature`](WebhookError::InvalidSignature)
//! (401).
//!
//! Both refuse a timestamp further than the tolerance (5 minutes by
//! default) from now, either way: a replayed capture is refused even with a
//! good signature. Signatures are compared in constant time
//! ([`hmac::Mac::verify_slice`]).
//!
//! [Standard Webhooks]: https://www.standardwebhooks.com/
//!

mod stripe;

pub use stripe::StripeSignature;

use crate::error::{Error, Result};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use http::{HeaderMap, HeaderValue};
use sha2::Sha256;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

type HmacSha256 = Hmac<Sha256>;

/// How far a webhook's timestamp may be from now, either way, by default.
pub const TOLERANCE_DEFAULT: Duration = Duration::from_secs(5 * 60);

/// Why a webhook was refused. [`status`](WebhookError::status) is the
/// HTTP status the layer answers with: 400 for a request that is not a
/// signed webhook, 401 for one whose signature does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// A header the scheme needs is missing.
    #[error("the webhook has no {0} header")]
    MissingHeader(&'static str),
    /// A header is there but not in the scheme's form — for a signature
    /// header: no signature in it the scheme can read.
    #[error("the webhook's {0} header is malformed")]
    InvalidHeader(&'static str),
    /// The webhook names no id to deduplicate by (Stripe: the body has no
    /// top-level `"id"` string).
    #[error("the webhook names no id")]
    MissingId,
    /// The timestamp is further from now than the tolerance.
    #[error("the webhook's timestamp is {skew_seconds} s from now, beyond the tolerance")]
    Stale {
        /// Now minus the timestamp, in seconds (negative: from the future).
        skew_seconds: i64,
    },
    /// Signatures were read, and none matches the body under any secret.
    #[error("no signature of the webhook matches")]
    InvalidSignature,
}

impl WebhookError {
    /// The HTTP status of the refusal.
    #[must_use]
    pub fn status(&self) -> u16 {
        match self {
            WebhookError::MissingHeader(_) | WebhookError::InvalidHeader(_) | WebhookError::MissingId => 400,
            WebhookError::Stale { .. } | WebhookError::InvalidSignature => 401,
        }
    }
}

/// A webhook whose signature holds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Verified {
    /// The id to deduplicate by: the same at every redelivery.
    pub id: String,
    /// The timestamp it was signed with, in seconds since the epoch.
    pub timestamp: u64,
}

/// Checks a webhook's signature before anything runs.
pub trait WebhookVerifier: Send + Sync + 'static {
    /// Verifies `body` as signed by `headers` at `now`.
    ///
    /// # Errors
    /// A [`WebhookError`]: nothing about the webhook is to be trusted.
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> std::result::Result<Verified, WebhookError>;
}

/// The Standard Webhooks scheme with one or more secrets (see the module
/// docs).
#[derive(Clone)]
pub struct StandardWebhooks {
    keys: Vec<Vec<u8>>,
    tolerance: Duration,
}

impl std::fmt::Debug for StandardWebhooks {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("StandardWebhooks")
            .field("secrets", &self.keys.len())
            .field("tolerance", &self.tolerance)
            .finish()
    }
}

impl StandardWebhooks {
    /// The scheme with `secrets` (`whsec_<base64>`, or the base64 alone),
    /// the first the one [`sign`](StandardWebhooks::sign) lists first.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for no secret, or one that is not base64
    /// or is empty.
    pub fn new<S: AsRef<str>>(secrets: impl IntoIterator<Item = S>) -> Result<Self> {
        let keys = secrets
            .into_iter()
            .map(|secret| {
                let secret = secret.as_ref();
                let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
                match STANDARD.decode(encoded) {
                    Ok(key) if !key.is_empty() => Ok(key),
                    _ => Err(Error::InvalidConfig("a webhook secret is whsec_ and non-empty base64".into())),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        if keys.is_empty() {
            return Err(Error::InvalidConfig("a webhook verifier needs at least one secret".into()));
        }
        Ok(StandardWebhooks { keys, tolerance: TOLERANCE_DEFAULT })
    }

    /// Sets how far a timestamp may be from now ([`TOLERANCE_DEFAULT`]).
    #[must_use]
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    fn mac(key: &[u8], id: &str, timestamp: u64, body: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }

    /// The `webhook-signature` value of `body` sent as `id` at
    /// `timestamp`: `v1,<base64>` under each secret, space-separated.
    #[must_use]
    pub fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        let signatures = self
            .keys
            .iter()
            .map(|key| format!("v1,{}", STANDARD.encode(Self::mac(key, id, timestamp, body).finalize().into_bytes())));
        signatures.collect::<Vec<_>>().join(" ")
    }

    /// The three headers of `body` sent as `id` at `timestamp`.
    ///
    /// # Panics
    /// When `id` is not a valid header value (a control character).
    #[must_use]
    pub fn headers(&self, id: &str, timestamp: u64, body: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("webhook-id", HeaderValue::from_str(id).expect("a webhook id is a header value"));
        headers.insert("webhook-timestamp", HeaderValue::from(timestamp));
        let signature = HeaderValue::from_str(&self.sign(id, timestamp, body)).expect("base64 is a header value");
        headers.insert("webhook-signature", signature);
        headers
    }
}

/// The one value of header `name`, as text.
pub(crate) fn header<'a>(headers: &'a HeaderMap, name: &'static str) -> std::result::Result<&'a str, WebhookError> {
    let mut values = headers.get_all(name).iter();
    let value = values.next().ok_or(WebhookError::MissingHeader(name))?;
    if values.next().is_some() {
        return Err(WebhookError::InvalidHeader(name));
    }
    // UTF-8, not only visible ASCII: what `StandardWebhooks::headers`
    // signs (an id with a non-ASCII letter) verifies.
    std::str::from_utf8(value.as_bytes()).map_err(|_| WebhookError::InvalidHeader(name))
}

/// `timestamp` within `tolerance` of `now`.
pub(crate) fn check_time(
    timestamp: u64,
    now: SystemTime,
    tolerance: Duration,
) -> std::result::Result<(), WebhookError> {
    let now = now.duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs());
    let skew = i128::from(now) - i128::from(timestamp);
    if skew.unsigned_abs() > u128::from(tolerance.as_secs()) {
        let skew_seconds = i64::try_from(skew).unwrap_or(if skew < 0 { i64::MIN } else { i64::MAX });
        return Err(WebhookError::Stale { skew_seconds });
    }
    Ok(())
}

/// A timestamp of decimal digits only (no sign, no spaces).
pub(crate) fn parse_timestamp(text: &str, name: &'static str) -> std::result::Result<u64, WebhookError> {
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(WebhookError::InvalidHeader(name));
    }
    text.parse().map_err(|_| WebhookError::InvalidHeader(name))
}

/// The signature of a `v1,<base64>` entry of `webhook-signature`;
/// `None` for any other entry.
fn v1(entry: &str) -> Option<Vec<u8>> {
    STANDARD.decode(entry.strip_prefix("v1,")?).ok().filter(|signature| !signature.is_empty())
}

/// Whether any of `candidates` is the signature one of `macs` computed, each
/// compared in constant time.
pub(crate) fn any_matches(macs: impl IntoIterator<Item = HmacSha256>, candidates: &[Vec<u8>]) -> bool {
    macs.into_iter().any(|mac| candidates.iter().any(|candidate| mac.clone().verify_slice(candidate).is_ok()))
}

impl WebhookVerifier for StandardWebhooks {
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> std::result::Result<Verified, WebhookError> {
        let id = header(headers, "webhook-id")?;
        if id.is_empty() {
            return Err(WebhookError::InvalidHeader("webhook-id"));
        }
        let timestamp = parse_timestamp(header(headers, "webhook-timestamp")?, "webhook-timestamp")?;
        // Every entry that is a `v1` signature; any other (a version to
        // come such as `v1a`, bad base64, no version at all) is passed
        // over, so that it cannot hide a good signature beside it.
        let candidates: Vec<Vec<u8>> = header(headers, "webhook-signature")?.split(' ').filter_map(v1).collect();
        if candidates.is_empty() {
            return Err(WebhookError::InvalidHeader("webhook-signature"));
        }
        // The signature first: a stale timestamp of a good signature is
        // a replay, told apart from a forgery in the answer.
        if !any_matches(self.keys.iter().map(|key| Self::mac(key, id, timestamp, body)), &candidates) {
            return Err(WebhookError::InvalidSignature);
        }
        check_time(timestamp, now, self.tolerance)?;
        Ok(Verified { id: id.to_owned(), timestamp })
    }
}

#[cfg(test)]
mod tests;
