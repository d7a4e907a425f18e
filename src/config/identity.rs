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
        let certs = |path: &PathBuf| -> Result<_, IdentityFileError> {
            let text = file::read_text(path, file::WEB_LIMIT)?;
            parse_certs(&text).map_err(|source| IdentityFileError::Certs {
                path: path.clone(),
                source,
            })
        };
        let chain = certs(&self.cert)?;
        let roots = certs(&self.ca)?;
        let key_text = file::read_text(&self.key, file::WEB_LIMIT)?;
        let key = PrivateKeyDer::from_pem_slice(key_text.as_bytes()).map_err(|e| {
            IdentityFileError::Key {
                path: self.key.clone(),
                reason: e.to_string(),
            }
        })?;
        Identity::new(chain, &key, roots).map_err(|source| IdentityFileError::Identity {
            cert: self.cert.clone(),
            source,
        })
    }
}
