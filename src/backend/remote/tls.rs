//! TLS for the networked backends (feature `tls`): rustls with its `ring`
//! provider, trusting either the Mozilla roots (`webpki-roots`: a managed
//! service's public certificate) or only the CA certificates given (a
//! private CA). Managed Redis and PostgreSQL services require TLS; a
//! backend connected through [`Tls`] never falls back to plain text.

use crate::error::{Error, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;
use std::sync::Arc;

/// Whom a TLS connection to Redis or PostgreSQL trusts.
///
/// # Examples
///
/// ```
/// use idemkv::backend::Tls;
///
/// // A managed service with a public certificate:
/// let public = Tls::webpki_roots();
/// // A private CA: only it is trusted.
/// let refused = Tls::ca_pem(b"not a certificate");
/// assert!(matches!(refused, Err(idemkv::Error::InvalidConfig(_))));
/// # let _ = public;
/// ```
#[derive(Clone)]
pub struct Tls {
    roots: Arc<RootCertStore>,
    /// The CA certificates as given, for the Redis client, which takes PEM.
    ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Tls").field("roots", &self.roots.len()).field("ca_pem", &self.ca_pem.is_some()).finish()
    }
}

impl Tls {
    /// Trusts the Mozilla root certificates (the `webpki-roots` crate).
    #[must_use]
    pub fn webpki_roots() -> Tls {
        let roots = RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        Tls { roots: Arc::new(roots), ca_pem: None }
    }

    /// Trusts only the CA certificates in `pem` (one or more `CERTIFICATE`
    /// blocks).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `pem` holds no certificate, or one
    /// that is not a usable CA certificate.
    pub fn ca_pem(pem: &[u8]) -> Result<Tls> {
        let mut roots = RootCertStore::empty();
        for certificate in CertificateDer::pem_slice_iter(pem) {
            let certificate = certificate.map_err(|error| Error::InvalidConfig(format!("tls: {error}")))?;
            roots.add(certificate).map_err(|error| Error::InvalidConfig(format!("tls: {error}")))?;
        }
        if roots.is_empty() {
            return Err(Error::InvalidConfig("tls: no CA certificate in the PEM given".into()));
        }
        Ok(Tls { roots: Arc::new(roots), ca_pem: Some(pem.to_vec()) })
    }

    /// The client configuration: these roots, no client certificate.
    #[cfg(feature = "postgres")]
    pub(crate) fn client_config(&self) -> Result<rustls::ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| Error::InvalidConfig(format!("tls: {error}")))?
            .with_root_certificates(Arc::clone(&self.roots))
            .with_no_client_auth();
        Ok(config)
    }

    /// The CA certificates as PEM, when given (else the Mozilla roots).
    #[cfg(feature = "redis")]
    pub(crate) fn ca_pem_bytes(&self) -> Option<&[u8]> {
        self.ca_pem.as_deref()
    }
}

/// The Redis client builds its own rustls configuration from the process's
/// default provider: makes it `ring` when the process has none (rustls
/// panics without one if more than one provider is compiled in).
#[cfg(feature = "redis")]
pub(crate) fn install_default_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _already_installed_meanwhile = rustls::crypto::ring::default_provider().install_default();
    }
}
