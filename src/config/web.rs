//! The web config file (`--web.config.file`, `web.config_file`): the YAML format of the
//! Prometheus exporter-toolkit, so one file can serve hcclwatch and the Prometheus
//! exporters next to it. It turns on TLS (with an optional client CA for mutual TLS),
//! HTTP basic auth with bcrypt-hashed passwords, extra response headers and a request
//! rate limit, for the daemon's server and for the remediation receiver's.
//!
//! This module parses and checks the file and reads the PEM files it names; the server
//! (`export::web`) builds the TLS configuration from the result. Relative paths are
//! taken from the web config file's directory, as the toolkit does.
//!
//! Where hcclwatch differs from the toolkit: HTTP/2 is off unless `http2: true` (and then
//! only over TLS, never cleartext); `cipher_suites`, `curve_preferences` and
//! `prefer_server_cipher_suites` are accepted and ignored, because rustls offers only
//! modern suites and curves; TLS below 1.2 is refused.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;

use super::Problem;
use super::enums::config_enum;
use super::file;

/// The whole web config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebConfigFile {
    /// TLS; absent: cleartext HTTP/1.1.
    #[serde(default)]
    pub tls_server_config: Option<TlsServerConfig>,
    /// HTTP options.
    #[serde(default)]
    pub http_server_config: HttpServerConfig,
    /// User name → bcrypt hash; empty: no basic auth.
    #[serde(default)]
    pub basic_auth_users: BTreeMap<String, String>,
    /// A token bucket over all requests; absent or a zero interval: off.
    #[serde(default)]
    pub rate_limit: Option<RateLimitConfig>,
    /// The file's directory, against which relative paths are resolved.
    #[serde(skip)]
    pub base: PathBuf,
}

/// `tls_server_config`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsServerConfig {
    /// Inline PEM certificate chain.
    #[serde(default)]
    pub cert: Option<String>,
    /// Inline PEM private key.
    #[serde(default)]
    pub key: Option<String>,
    /// Inline PEM client CA bundle.
    #[serde(default)]
    pub client_ca: Option<String>,
    /// Certificate chain file (reloaded when it changes).
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// Private key file (reloaded when it changes).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// `NoClientCert`, `RequestClientCert`, `RequireAnyClientCert`,
    /// `VerifyClientCertIfGiven` or `RequireAndVerifyClientCert`.
    #[serde(default)]
    pub client_auth_type: Option<String>,
    /// Client CA bundle file.
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    /// A client certificate must carry one of these SANs (DNS, IP, e-mail or URI).
    #[serde(default)]
    pub client_allowed_sans: Vec<String>,
    /// `TLS12` (default) or `TLS13`.
    #[serde(default)]
    pub min_version: Option<String>,
    /// `TLS12` or `TLS13` (default).
    #[serde(default)]
    pub max_version: Option<String>,
    /// Ignored: rustls offers only modern cipher suites.
    #[serde(default)]
    pub cipher_suites: Vec<String>,
    /// Ignored.
    #[serde(default)]
    pub prefer_server_cipher_suites: Option<bool>,
    /// Ignored: rustls offers only modern curves.
    #[serde(default)]
    pub curve_preferences: Vec<String>,
}

/// `http_server_config`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpServerConfig {
    /// Offer HTTP/2 through TLS ALPN. Off by default (the toolkit's default is on):
    /// hcclwatch's endpoints gain nothing from it, and it never runs over cleartext.
    #[serde(default)]
    pub http2: bool,
    /// Extra response headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// `rate_limit`: at most `burst` requests at once, refilled one per `interval`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Time between two refills, e.g. `"1s"`; zero turns the limit off.
    #[serde(with = "super::duration::serde_str")]
    pub interval: Duration,
    /// Bucket size.
    pub burst: u32,
}

config_enum! {
    /// Who must present a client certificate, and whether it is verified.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum ClientAuth {
        /// None is asked for.
        NoClientCert = "NoClientCert",
        /// One is asked for, not required, not verified.
        RequestClientCert = "RequestClientCert",
        /// One is required, not verified.
        RequireAnyClientCert = "RequireAnyClientCert",
        /// One is verified against the client CA if given.
        VerifyClientCertIfGiven = "VerifyClientCertIfGiven",
        /// One is required and verified against the client CA.
        RequireAndVerifyClientCert = "RequireAndVerifyClientCert",
    }
}

impl ClientAuth {
    /// `client_auth_type` as written; unset or empty is `NoClientCert`.
    fn parse(s: Option<&str>) -> Result<Self, Problem> {
        match s.unwrap_or("") {
            "" => Ok(ClientAuth::NoClientCert),
            other => Self::from_name(other).ok_or_else(|| {
                Problem::key(
                    "tls_server_config.client_auth_type",
                    format!("{other:?} is not one of {}", Self::NAMES.join(", ")),
                )
            }),
        }
    }

    /// Whether a client certificate is checked against the client CA.
    pub fn verifies(self) -> bool {
        matches!(
            self,
            ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert
        )
    }

    /// Whether a client must present a certificate.
    pub fn requires(self) -> bool {
        matches!(
            self,
            ClientAuth::RequireAnyClientCert | ClientAuth::RequireAndVerifyClientCert
        )
    }
}

config_enum! {
    /// A TLS protocol version bound.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    pub enum TlsVersion {
        /// TLS 1.2.
        Tls12 = "TLS12",
        /// TLS 1.3.
        Tls13 = "TLS13",
    }
}

fn tls_version(key: &str, s: Option<&str>, default: TlsVersion) -> Result<TlsVersion, Problem> {
    let problem = |reason: String| Problem::key(format!("tls_server_config.{key}"), reason);
    match s {
        None | Some("") => Ok(default),
        Some(v @ ("TLS10" | "TLS11")) => Err(problem(format!(
            "{v} is not offered; TLS 1.2 is the oldest version hcclwatch speaks"
        ))),
        Some(v) => TlsVersion::from_name(v).ok_or_else(|| {
            problem(format!(
                "{v:?} is not one of {}",
                TlsVersion::NAMES.join(", ")
            ))
        }),
    }
}

/// The certificate material, read and parsed.
#[derive(Debug)]
pub struct TlsMaterial {
    /// The chain, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The private key.
    pub key: PrivateKeyDer<'static>,
}

/// A checked TLS section with its paths resolved.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// Where the chain and key come from.
    pub source: TlsSource,
    /// Client certificate policy.
    pub client_auth: ClientAuth,
    /// The client CA, as PEM text (from `client_ca` or `client_ca_file`).
    pub client_ca_pem: Option<String>,
    /// Allowed client SANs.
    pub client_allowed_sans: Vec<String>,
    /// Lowest version.
    pub min_version: TlsVersion,
    /// Highest version.
    pub max_version: TlsVersion,
}

/// Inline PEM, or files that are re-read when they change.
#[derive(Debug, Clone)]
pub enum TlsSource {
    /// `cert` and `key`.
    Inline {
        /// Chain PEM.
        cert: String,
        /// Key PEM.
        key: String,
    },
    /// `cert_file` and `key_file`, resolved.
    Files {
        /// Chain file.
        cert: PathBuf,
        /// Key file.
        key: PathBuf,
    },
}

/// Why the certificate chain or key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file could not be read.
    #[error(transparent)]
    File(#[from] file::FileError),
    /// The chain is not PEM certificates.
    #[error("{what}: {source}")]
    Certs {
        /// `tls_server_config.cert`, or the chain file.
        what: String,
        /// Why.
        source: CertError,
    },
    /// The key is not a PEM private key.
    #[error("{what}: no PEM private key: {reason}")]
    Key {
        /// `tls_server_config.key`, or the key file.
        what: String,
        /// The PEM parser's reason.
        reason: String,
    },
}

/// Why a PEM bundle gave no certificates.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// The PEM is malformed.
    #[error("not PEM certificates: {0}")]
    NotPem(String),
    /// The PEM holds no certificate.
    #[error("no PEM certificate in it")]
    Empty,
}

impl TlsSource {
    /// Reads (for files) and parses the chain and key.
    pub fn load(&self) -> Result<TlsMaterial, TlsError> {
        let (cert, key) = match self {
            TlsSource::Inline { cert, key } => (cert.clone(), key.clone()),
            TlsSource::Files { cert, key } => (
                file::read_text(cert, file::WEB_LIMIT)?,
                file::read_text(key, file::WEB_LIMIT)?,
            ),
        };
        let what = |field: &str| match self {
            TlsSource::Inline { .. } => format!("tls_server_config.{field}"),
            TlsSource::Files { cert, key } => {
                let p = if field == "cert" { cert } else { key };
                p.display().to_string()
            }
        };
        Ok(TlsMaterial {
            chain: parse_certs(&cert).map_err(|source| TlsError::Certs {
                what: what("cert"),
                source,
            })?,
            key: PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| TlsError::Key {
                what: what("key"),
                reason: e.to_string(),
            })?,
        })
    }
}

/// Every certificate of a PEM bundle; at least one.
pub fn parse_certs(pem: &str) -> Result<Vec<CertificateDer<'static>>, CertError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| CertError::NotPem(e.to_string()))?;
    if certs.is_empty() {
        return Err(CertError::Empty);
    }
    Ok(certs)
}

impl WebConfigFile {
    /// Reads, parses and checks the file; every problem is returned, placed in the file.
    pub fn load(path: &Path) -> Result<Self, Vec<Problem>> {
        let text = file::read_text(path, file::WEB_LIMIT).map_err(|e| vec![Problem::reason(e)])?;
        let base = path.parent().map_or_else(PathBuf::new, Path::to_path_buf);
        Self::from_str(&text, &base).map_err(|problems| {
            let at = path.display().to_string();
            problems.into_iter().map(|p| p.at(at.clone())).collect()
        })
    }

    /// Parses and checks YAML text; `base` resolves relative paths.
    pub fn from_str(text: &str, base: &Path) -> Result<Self, Vec<Problem>> {
        // An empty file is a valid, empty configuration, as for the toolkit.
        let mut cfg: WebConfigFile = if text.trim().is_empty() {
            WebConfigFile::default()
        } else {
            serde_yaml::from_str(text).map_err(|e| vec![Problem::reason(e)])?
        };
        cfg.base = base.to_path_buf();
        let mut problems = Vec::new();
        if let Err(mut p) = cfg.tls() {
            problems.append(&mut p);
        }
        for (user, hash) in &cfg.basic_auth_users {
            if user.is_empty() || user.contains(':') {
                problems.push(Problem::key(
                    "basic_auth_users",
                    format!("user {user:?} must be non-empty, without ':'"),
                ));
            }
            if hash.parse::<bcrypt::HashParts>().is_err() {
                problems.push(Problem::key(
                    format!("basic_auth_users.{user}"),
                    "not a bcrypt hash (create one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`)",
                ));
            }
        }
        if let Some(r) = &cfg.rate_limit
            && !r.interval.is_zero()
            && r.burst == 0
        {
            problems.push(Problem::key(
                "rate_limit.burst",
                "at least 1 when an interval is set",
            ));
        }
        for (name, value) in &cfg.http_server_config.headers {
            if axum::http::HeaderName::try_from(name.as_str()).is_err()
                || axum::http::HeaderValue::try_from(value.as_str()).is_err()
            {
                problems.push(Problem::key(
                    "http_server_config.headers",
                    format!("{name:?}: {value:?} is not a valid header"),
                ));
            }
        }
        if cfg.http_server_config.http2 && cfg.tls_server_config.is_none() {
            problems.push(Problem::key(
                "http_server_config.http2",
                "HTTP/2 is only offered over TLS; add tls_server_config or remove http2",
            ));
        }
        if problems.is_empty() {
            Ok(cfg)
        } else {
            Err(problems)
        }
    }

    fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base.join(p)
        }
    }

    /// Where the chain and key come from; `None` (with the problem) when the section gives
    /// neither or a mix.
    fn source(&self, t: &TlsServerConfig, p: &mut Vec<Problem>) -> Option<TlsSource> {
        let problem = |reason| Problem::key("tls_server_config", reason);
        match (&t.cert, &t.key, &t.cert_file, &t.key_file) {
            (Some(c), Some(k), None, None) => Some(TlsSource::Inline {
                cert: c.clone(),
                key: k.clone(),
            }),
            (None, None, Some(c), Some(k)) => Some(TlsSource::Files {
                cert: self.resolve(c),
                key: self.resolve(k),
            }),
            (None, None, None, None) => {
                p.push(problem("set cert_file and key_file (or cert and key)"));
                None
            }
            _ => {
                p.push(problem("give the certificate and key either both inline (cert, key) or both as files (cert_file, key_file)"));
                None
            }
        }
    }

    /// The client CA as PEM text, from `client_ca` or `client_ca_file`.
    fn client_ca(&self, t: &TlsServerConfig, p: &mut Vec<Problem>) -> Option<String> {
        let pem = match (&t.client_ca, &t.client_ca_file) {
            (Some(_), Some(_)) => {
                p.push(Problem::key(
                    "tls_server_config",
                    "set client_ca or client_ca_file, not both",
                ));
                None
            }
            (Some(pem), None) => Some(pem.clone()),
            (None, Some(f)) => match file::read_text(&self.resolve(f), file::WEB_LIMIT) {
                Ok(pem) => Some(pem),
                Err(e) => {
                    p.push(Problem::key("tls_server_config.client_ca_file", e));
                    None
                }
            },
            (None, None) => None,
        };
        if let Some(pem) = &pem
            && let Err(e) = parse_certs(pem)
        {
            p.push(Problem::reason(format!("tls_server_config client CA: {e}")));
        }
        pem
    }

    /// The TLS section, checked and with its files read once; `None` without TLS.
    pub fn tls(&self) -> Result<Option<TlsSettings>, Vec<Problem>> {
        let Some(t) = &self.tls_server_config else {
            return Ok(None);
        };
        let mut p = Vec::new();
        let source = self.source(t, &mut p);
        if let Some(s) = &source
            && let Err(e) = s.load()
        {
            p.push(Problem::reason(e));
        }
        let client_auth = ClientAuth::parse(t.client_auth_type.as_deref()).unwrap_or_else(|e| {
            p.push(e);
            ClientAuth::NoClientCert
        });
        let client_ca_pem = self.client_ca(t, &mut p);
        if client_auth.verifies() && client_ca_pem.is_none() {
            p.push(Problem::key(
                "tls_server_config.client_ca_file",
                "required when client_auth_type verifies client certificates",
            ));
        }
        if !t.client_allowed_sans.is_empty() && !client_auth.requires() {
            p.push(Problem::key(
                "tls_server_config.client_allowed_sans",
                "needs client_auth_type RequireAnyClientCert or RequireAndVerifyClientCert",
            ));
        }
        let min = tls_version("min_version", t.min_version.as_deref(), TlsVersion::Tls12)
            .unwrap_or_else(|e| {
                p.push(e);
                TlsVersion::Tls12
            });
        let max = tls_version("max_version", t.max_version.as_deref(), TlsVersion::Tls13)
            .unwrap_or_else(|e| {
                p.push(e);
                TlsVersion::Tls13
            });
        if min > max {
            p.push(Problem::key(
                "tls_server_config",
                "min_version is above max_version",
            ));
        }
        match (source, p.is_empty()) {
            (Some(source), true) => Ok(Some(TlsSettings {
                source,
                client_auth,
                client_ca_pem,
                client_allowed_sans: t.client_allowed_sans.clone(),
                min_version: min,
                max_version: max,
            })),
            _ => Err(p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<String> {
        WebConfigFile::from_str(text, Path::new("/nonexistent"))
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn empty_file_is_plain_http() {
        let c = WebConfigFile::from_str("", Path::new("/")).unwrap();
        assert!(c.tls().unwrap().is_none());
        assert!(c.basic_auth_users.is_empty());
        assert!(!c.http_server_config.http2);
    }

    /// Pins: every problem of the file is reported, each naming its key.
    #[test]
    fn every_problem_is_named() {
        let p = problems(
            "tls_server_config:\n  cert_file: a.crt\n  client_auth_type: Sometimes\n  min_version: TLS10\n  client_allowed_sans: [x]\nbasic_auth_users:\n  alice: plaintext\nhttp_server_config:\n  http2: true\n",
        );
        let text = p.join("\n");
        for want in [
            "give the certificate and key either both inline",
            "client_auth_type: \"Sometimes\"",
            "min_version: TLS10 is not offered",
            "client_allowed_sans: needs",
            "basic_auth_users.alice: not a bcrypt hash",
        ] {
            assert!(text.contains(want), "missing {want:?} in:\n{text}");
        }
        let p = problems("tls_server_config: {}\nbogus: 1\n").join("\n");
        assert!(p.contains("bogus"), "{p}");
        let p = problems("http_server_config:\n  http2: true\n").join("\n");
        assert!(p.contains("only offered over TLS"), "{p}");
    }

    #[test]
    fn valid_bcrypt_users_and_rate_limit() {
        let hash = bcrypt::hash("pw", 4).unwrap();
        let c = WebConfigFile::from_str(
            &format!(
                "basic_auth_users:\n  alice: {hash}\nrate_limit:\n  interval: 1s\n  burst: 5\n"
            ),
            Path::new("/"),
        )
        .unwrap();
        assert_eq!(c.basic_auth_users.len(), 1);
        assert_eq!(c.rate_limit.unwrap().burst, 5);
    }
}
