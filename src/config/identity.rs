//! The probe group's per-node identity files (`collective.identity_cert_file`,
//! `identity_key_file`, `identity_ca_file`): PEM, as cert-manager or a SPIFFE provider
//! writes them. They are read (bounded) at every formation of the group, so a rotated
//! certificate is used from the next formation on, and by `check-config`.

use std::path::PathBuf;

use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject;

use super::file::{self, FileError};
use super::web::{CertError, parse_certs};
use crate::collective::identity::{Identity, IdentityError};

/// Where this node's identity is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The certificate's private key.
    pub key: PathBuf,
    /// The cluster CA's certificates.
    pub ca: PathBuf,
}

/// Why this node's identity cannot be used, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum IdentityFileError {
    /// A file cannot be read.
    #[error(transparent)]
    File(#[from] FileError),
    /// The certificate or CA file holds no PEM certificate.
    #[error("{path}: {source}")]
    Certs {
        /// The file.
        path: PathBuf,
        /// Why.
        source: CertError,
    },
    /// The key file holds no PEM private key.
    #[error("{path}: no PEM private key: {reason}")]
    Key {
        /// The file.
        path: PathBuf,
        /// The parser's reason.
        reason: String,
    },
    /// The three do not make an identity (key and certificate apart, no chain to the CA).
    #[error("{cert}: {source}")]
    Identity {
        /// The certificate file.
        cert: PathBuf,
        /// Why.
        source: IdentityError,
    },
}

impl IdentityFiles {
    /// Reads and checks the three files.
    pub fn load(&self) -> Result<Identity, IdentityFileError> {
        let read = |path: &PathBuf| file::read_text(path, file::WEB_LIMIT);
        from_pem(
            &read(&self.cert)?,
            &read(&self.key)?,
            &read(&self.ca)?,
            self,
        )
    }
}

/// An identity from the PEM texts of the three files (`at` names them in errors).
pub fn from_pem(
    cert: &str,
    key: &str,
    ca: &str,
    at: &IdentityFiles,
) -> Result<Identity, IdentityFileError> {
    let certs = |text: &str, path: &PathBuf| {
        parse_certs(text).map_err(|source| IdentityFileError::Certs {
            path: path.clone(),
            source,
        })
    };
    let chain = certs(cert, &at.cert)?;
    let roots = certs(ca, &at.ca)?;
    let key =
        PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| IdentityFileError::Key {
            path: at.key.clone(),
            reason: e.to_string(),
        })?;
    Identity::new(chain, &key, roots).map_err(|source| IdentityFileError::Identity {
        cert: at.cert.clone(),
        source,
    })
}
