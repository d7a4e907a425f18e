//! TLS with rustls for the web config's `tls_server_config`: TLS 1.2 and 1.3 only, a
//! client CA for mutual TLS, `client_allowed_sans`, and certificate reload.
//!
//! The certificate, key and client CA files are watched (size, modification time and
//! inode, checked every [`RELOAD_EVERY`] off the async workers): when one changes the
//! whole server configuration is rebuilt and used by the next handshake, so cert-manager
//! or a kubelet secret refresh takes effect without a restart. A file that does not parse
//! keeps the previous configuration and logs an error, once per change.

use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};
use rustls_pki_types::{CertificateDer, UnixTime};

use crate::config::web::{
    CertError, ClientAuth, TlsError, TlsSettings, TlsSource, TlsVersion, parse_certs,
};

/// How often the certificate files are checked for changes.
pub const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// The TLS side of one server.
pub struct Tls {
    config: RwLock<Arc<ServerConfig>>,
    settings: TlsSettings,
    http2: bool,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("http2", &self.http2).finish()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Accepts any client certificate without checking its issuer (the toolkit's
/// `RequestClientCert` and `RequireAnyClientCert`); the handshake signature is still
/// checked, so the client holds the certificate's key.
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Why the web config's `tls_server_config` gives no server configuration.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The certificate chain or key could not be read or parsed.
    #[error(transparent)]
    Material(#[from] TlsError),
    /// rustls refused the `min_version`..`max_version` range.
    #[error("TLS versions: {0}; check tls_server_config.min_version and max_version")]
    Versions(#[source] rustls::Error),
    /// Client certificates are to be verified but there is no CA to verify them with.
    #[error(
        "no client CA: client_auth_type verifies client certificates; set tls_server_config.client_ca or client_ca_file"
    )]
    NoClientCa,
    /// The client CA file is not PEM certificates.
    #[error("client CA: {0}; check tls_server_config.client_ca or client_ca_file")]
    ClientCaPem(#[source] CertError),
    /// A client CA certificate is not one rustls can use as a trust anchor.
    #[error("client CA certificate: {0}; check tls_server_config.client_ca or client_ca_file")]
    ClientCaCert(#[source] rustls::Error),
    /// The client certificate verifier could not be built from the client CA.
    #[error("client CA: {0}; check tls_server_config.client_ca or client_ca_file")]
    Verifier(#[source] rustls::server::VerifierBuilderError),
    /// The certificate and the key do not make a server identity (a key of another
    /// certificate, say).
    #[error("certificate and key: {0}; check that tls_server_config.key belongs to cert")]
    CertAndKey(#[source] rustls::Error),
}

/// Why a client's certificate is refused by `client_allowed_sans`.
#[derive(Debug, thiserror::Error)]
pub enum ClientRefused {
    /// The client sent no certificate.
    #[error("no client certificate")]
    NoCertificate,
    /// The client's certificate cannot be parsed as an end-entity certificate.
    #[error("the client certificate cannot be parsed: {0}")]
    Unparsable(webpki::Error),
    /// The certificate names none of the allowed subjects.
    #[error("the client certificate has none of client_allowed_sans")]
    NotAllowed,
}

/// Builds a server configuration from the settings, reading the files now.
pub fn build(s: &TlsSettings, http2: bool) -> Result<ServerConfig, BuildError> {
    let material = s.source.load()?;
    let provider = provider();
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
        (TlsVersion::Tls12, &rustls::version::TLS12),
        (TlsVersion::Tls13, &rustls::version::TLS13),
    ]
    .into_iter()
    .filter(|(v, _)| *v >= s.min_version && *v <= s.max_version)
    .map(|(_, p)| p)
    .collect();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(BuildError::Versions)?;
    let verifier: Option<Arc<dyn ClientCertVerifier>> = match s.client_auth {
        ClientAuth::NoClientCert => None,
        ClientAuth::RequestClientCert | ClientAuth::RequireAnyClientCert => {
            Some(Arc::new(AnyClientCert {
                mandatory: s.client_auth.requires(),
                algorithms: provider.signature_verification_algorithms,
            }))
        }
        ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert => {
            let pem = s.client_ca_pem.as_deref().ok_or(BuildError::NoClientCa)?;
            let mut roots = RootCertStore::empty();
            for c in parse_certs(pem).map_err(BuildError::ClientCaPem)? {
                roots.add(c).map_err(BuildError::ClientCaCert)?;
            }
            let mut b = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            if !s.client_auth.requires() {
                b = b.allow_unauthenticated();
            }
            Some(b.build().map_err(BuildError::Verifier)?)
        }
    };
    let builder = match verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder
        .with_single_cert(material.chain, material.key)
        .map_err(BuildError::CertAndKey)?;
    cfg.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(cfg)
}

/// What identifies a file's version: (size, mtime ns, inode); `None` if it cannot be read.
fn stamp(paths: &[PathBuf]) -> Vec<Option<(u64, i64, u64)>> {
    paths
        .iter()
        .map(|p| {
            std::fs::metadata(p)
                .ok()
                .map(|m| (m.len(), m.mtime() * 1_000_000_000 + m.mtime_nsec(), m.ino()))
        })
        .collect()
}

impl Tls {
    /// Builds the configuration and, for files, starts watching them (inside a runtime).
    pub fn start(settings: TlsSettings, http2: bool) -> Result<Arc<Self>, BuildError> {
        let cfg = build(&settings, http2)?;
        let tls = Arc::new(Self {
            config: RwLock::new(Arc::new(cfg)),
            settings,
            http2,
        });
        if let TlsSource::Files { cert, key } = &tls.settings.source {
            let paths = vec![cert.clone(), key.clone()];
            let weak = Arc::downgrade(&tls);
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(watch(weak, paths));
            }
        }
        Ok(tls)
    }

    /// The configuration the next handshake uses.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Runs the server side of a handshake.
    pub async fn accept<IO>(&self, io: IO) -> std::io::Result<tokio_rustls::server::TlsStream<IO>>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        tokio_rustls::TlsAcceptor::from(self.current())
            .accept(io)
            .await
    }

    /// Checks `client_allowed_sans` on the verified client certificate.
    pub fn check_client(
        &self,
        certs: Option<&[CertificateDer<'static>]>,
    ) -> Result<(), ClientRefused> {
        let allowed = &self.settings.client_allowed_sans;
        if allowed.is_empty() {
            return Ok(());
        }
        let leaf = certs
            .and_then(<[_]>::first)
            .ok_or(ClientRefused::NoCertificate)?;
        let ee = webpki::EndEntityCert::try_from(leaf).map_err(ClientRefused::Unparsable)?;
        let dns: Vec<String> = ee.valid_dns_names().map(str::to_ascii_lowercase).collect();
        let uris: Vec<&str> = ee.valid_uri_names().collect();
        let ok = allowed.iter().any(|a| {
            if let Ok(ip) = a.parse::<std::net::IpAddr>() {
                let name = rustls_pki_types::ServerName::IpAddress(ip.into());
                ee.verify_is_valid_for_subject_name(&name).is_ok()
            } else {
                dns.contains(&a.to_ascii_lowercase()) || uris.contains(&a.as_str())
            }
        });
        if ok {
            Ok(())
        } else {
            Err(ClientRefused::NotAllowed)
        }
    }
}

/// Rebuilds the configuration when a file changes, until the server is gone.
async fn watch(tls: std::sync::Weak<Tls>, paths: Vec<PathBuf>) {
    let p = paths.clone();
    let mut seen = tokio::task::spawn_blocking(move || stamp(&p))
        .await
        .unwrap_or_default();
    loop {
        tokio::time::sleep(RELOAD_EVERY).await;
        let Some(t) = tls.upgrade() else { return };
        let p = paths.clone();
        // stat(2) can hang on a dead mount: off the workers, and bounded.
        let now = match tokio::time::timeout(
            Duration::from_secs(5),
            tokio::task::spawn_blocking(move || stamp(&p)),
        )
        .await
        {
            Ok(Ok(s)) => s,
            _ => continue,
        };
        if now == seen {
            continue;
        }
        seen = now;
        let (settings, http2) = (t.settings.clone(), t.http2);
        match tokio::task::spawn_blocking(move || build(&settings, http2)).await {
            Ok(Ok(cfg)) => {
                *t.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(cfg);
                tracing::info!("TLS certificate reloaded");
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, "TLS certificate changed but cannot be loaded; still serving the previous one")
            }
            Err(_) => {}
        }
    }
}
