//! Request fingerprints: SHA-256 over the request's semantic parts.

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
