//! What "the same request" is: a [`Fingerprint`], SHA-256 over a
//! request's parts, and (feature `tower`) the function of a request that
//! gives it, as the service chooses it — [`RequestFingerprint`]: the
//! bytes as sent by default, or the body as canonical JSON with fields
//! included or left out (by [`JsonPointer`]), headers included, query
//! parameters ignored. One function serves every face of a service. So
//! is where a request's key comes from when it is the request's own: a
//! [`NaturalKey`] (a JSON field, a path segment, a header).
//!
//! # Examples
//!
//! ```
//! # #[cfg(feature = "tower")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use idemkv::fingerprint::RequestFingerprint;
//!
//! // A payment is its amount and currency, whatever else the client sends
//! // and however it spells the JSON.
//! let fingerprint = RequestFingerprint::json().include("/amount").include("/currency").build()?;
//! let (parts, _) = http::Request::post("/payments").body(())?.into_parts();
//! assert_eq!(
//!     fingerprint.of(&parts, br#"{"amount": 10.00, "currency": "EUR", "note": "rent"}"#)?,
//!     fingerprint.of(&parts, br#"{"currency":"EUR","amount":1e1}"#)?,
//! );
//! # Ok(()) }
//! # #[cfg(not(feature = "tower"))]
//! # fn main() {}
//! ```

#[cfg(feature = "tower")]
mod json;
#[cfg(feature = "tower")]
mod natural;
#[cfg(feature = "tower")]
mod pointer;
#[cfg(feature = "tower")]
mod request;

#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use json::{JsonError, JsonErrorKind, DEPTH_MAX as JSON_DEPTH_MAX};
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use natural::{NaturalKey, NaturalKeyError};
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use pointer::{JsonPointer, PointerError};
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use request::{FingerprintError, FingerprintRules, RequestFingerprint};

use sha2::{Digest, Sha256};
use std::fmt;

/// A 32-byte digest of what makes a request "the same request".
///
/// A claim with a known key but another fingerprint is answered with
/// [`crate::Claim::Mismatch`]: the client reused an idempotency key for a
/// different request.
///
/// # Examples
///
/// ```
/// use idemkv::Fingerprint;
///
/// let a = Fingerprint::builder().part(b"POST").part(b"/payments").part(br#"{"amount":10}"#).finish();
/// let b = Fingerprint::builder().part(b"POST").part(b"/payments").part(br#"{"amount":10}"#).finish();
/// assert_eq!(a, b);
/// // Parts are length-prefixed: moving a byte across a boundary changes the digest.
/// assert_ne!(
///     Fingerprint::builder().part(b"ab").part(b"c").finish(),
///     Fingerprint::builder().part(b"a").part(b"bc").finish(),
/// );
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// Size in bytes.
    pub const LEN: usize = 32;

    /// Starts an unambiguous multi-part fingerprint.
    #[must_use]
    pub fn builder() -> FingerprintBuilder {
        let mut hasher = Sha256::new();
        hasher.update(b"idemkv.fingerprint.v1");
        FingerprintBuilder { hasher }
    }

    /// The fingerprint of a single byte string (same as a builder with one part).
    #[must_use]
    pub fn of(bytes: &[u8]) -> Self {
        Self::builder().part(bytes).finish()
    }

    /// Wraps a digest computed elsewhere.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Fingerprint(bytes)
    }

    /// The raw digest.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "Fingerprint({self})")
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in &self.0 {
            write!(formatter, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// Builds a [`Fingerprint`] from parts; each part is hashed with its length
/// in front, so part boundaries matter.
#[derive(Clone)]
pub struct FingerprintBuilder {
    hasher: Sha256,
}

impl fmt::Debug for FingerprintBuilder {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.debug_struct("FingerprintBuilder").finish_non_exhaustive()
    }
}

impl FingerprintBuilder {
    /// Adds one part (method, route, body, API version...).
    #[must_use]
    pub fn part(mut self, bytes: &[u8]) -> Self {
        self.hasher.update((bytes.len() as u64).to_le_bytes());
        self.hasher.update(bytes);
        self
    }

    /// Finishes the digest.
    #[must_use]
    pub fn finish(self) -> Fingerprint {
        Fingerprint(self.hasher.finalize().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_unambiguous() {
        let empty_then_x = Fingerprint::builder().part(b"").part(b"x").finish();
        let x_then_empty = Fingerprint::builder().part(b"x").part(b"").finish();
        let x = Fingerprint::builder().part(b"x").finish();
        assert_ne!(empty_then_x, x_then_empty);
        assert_ne!(x, x_then_empty);
        assert_eq!(Fingerprint::of(b"x"), x);
    }

    #[test]
    fn display_is_hex() {
        let fingerprint = Fingerprint::from_bytes([0xab; 32]);
        assert_eq!(fingerprint.to_string(), "ab".repeat(32));
    }
}
