//! One bounded HTTPS (or plain HTTP) POST to the remediation receiver.
//!
//! A push is rare (a hard fault, its resolution), so each one opens its own connection:
//! TCP, then TLS verified against the configured CA only (no system roots: the receiver
//! is the cluster's own service, its certificate the cluster's), then one HTTP/1.1
//! request with the bearer token. The whole exchange is bounded by one deadline.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;

/// Why the client could not be built from its settings.
#[derive(Debug, thiserror::Error)]
pub enum ClientSetupError {
    /// The URL does not parse, or lacks a host.
    #[error("remediation.push.url {url:?}: {why}")]
    Url {
        /// The URL.
        url: String,
        /// Why.
        why: String,
    },
    /// The CA file could not be read or holds no certificate.
    #[error("remediation.push.ca_file {path}: {why}")]
    Ca {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
    /// An `https` URL without a CA file.
    #[error(
        "remediation.push.url is https but remediation.push.ca_file is not set; the receiver's certificate is verified against that CA only"
    )]
    NoCa,
}

/// Why one request failed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The deadline passed.
    #[error("no answer within {0:?} (remediation.push.timeout)")]
    Timeout(Duration),
    /// Connecting failed.
    #[error("connecting: {0}")]
    Connect(std::io::Error),
    /// The TLS handshake failed (the receiver's certificate among the reasons).
    #[error("TLS: {0}")]
    Tls(std::io::Error),
    /// The HTTP exchange failed.
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    /// The request could not be built.
    #[error("request: {0}")]
    Request(#[from] hyper::http::Error),
}

/// The receiver's answer: status and the start of its body (for the log).
#[derive(Debug)]
pub struct Answer {
    /// HTTP status.
    pub status: StatusCode,
    /// Up to 512 bytes of the body, as text.
    pub text: String,
}

/// A client for one receiver URL.
pub struct Client {
    uri: Uri,
    host: String,
    port: u16,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
    token: String,
    timeout: Duration,
}

impl Client {
    /// A client for `url` (`https://…` with `ca_pem`, or `http://…`), sending `token`.
    pub fn new(
        url: &str,
        ca: Option<(&str, &[u8])>,
        token: String,
        timeout: Duration,
    ) -> Result<Self, ClientSetupError> {
        let bad = |why: &str| ClientSetupError::Url {
            url: url.to_string(),
            why: why.to_string(),
        };
        let uri: Uri = url.parse().map_err(|e| bad(&format!("{e}")))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(bad("the scheme must be https (or http)")),
        };
        let host = uri.host().ok_or_else(|| bad("no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tls = if https {
            let (path, pem) = ca.ok_or(ClientSetupError::NoCa)?;
            Some(connector(path, pem, &host)?)
        } else {
            None
        };
        let uri = format!(
            "{}://{}{}",
            uri.scheme_str().unwrap_or("https"),
            uri.authority().map_or("", |a| a.as_str()),
            super::wire::PATH
        )
        .parse()
        .map_err(|e| bad(&format!("{e}")))?;
        Ok(Self {
            uri,
            host,
            port,
            tls,
            token,
            timeout,
        })
    }

    /// Where pushes go.
    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    /// POSTs `body` (JSON) within the deadline.
    pub async fn post(&self, body: Vec<u8>) -> Result<Answer, SendError> {
        tokio::time::timeout(self.timeout, self.exchange(body))
            .await
            .unwrap_or(Err(SendError::Timeout(self.timeout)))
    }

    async fn exchange(&self, body: Vec<u8>) -> Result<Answer, SendError> {
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(SendError::Connect)?;
        let _ = tcp.set_nodelay(true);
        // Origin form on the request line; the authority goes in Host.
        let req = Request::post(super::wire::PATH)
            .header(
                hyper::header::HOST,
                self.uri.authority().map_or("", |a| a.as_str()),
            )
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", self.token),
            )
            .body(Full::new(Bytes::from(body)))?;
        match &self.tls {
            Some((c, name)) => {
                let s = c.connect(name.clone(), tcp).await.map_err(SendError::Tls)?;
                send(TokioIo::new(s), req).await
            }
            None => send(TokioIo::new(tcp), req).await,
        }
    }
}

async fn send<I>(io: I, req: Request<Full<Bytes>>) -> Result<Answer, SendError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    let driver = tokio::spawn(conn);
    let resp = sender.send_request(req).await;
    let out = match resp {
        Ok(r) => {
            let status = r.status();
            let mut body = r.into_body();
            let mut text = Vec::new();
            while text.len() < 512 {
                match body.frame().await {
                    Some(Ok(f)) => {
                        if let Some(d) = f.data_ref() {
                            text.extend_from_slice(d);
                        }
                    }
                    _ => break,
                }
            }
            text.truncate(512);
            Ok(Answer {
                status,
                text: String::from_utf8_lossy(&text).trim().to_string(),
            })
        }
        Err(e) => Err(SendError::Http(e)),
    };
    driver.abort();
    out
}

/// A TLS connector that trusts only the certificates in `pem`.
fn connector(
    path: &str,
    pem: &[u8],
    host: &str,
) -> Result<(tokio_rustls::TlsConnector, ServerName<'static>), ClientSetupError> {
    let ca = |why: String| ClientSetupError::Ca {
        path: path.to_string(),
        why,
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| ca(format!("not PEM certificates: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| ca(format!("not a usable CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(ca("no certificate in the file".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ca(format!("TLS setup: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(host.to_string()).map_err(|e| ClientSetupError::Url {
        url: host.to_string(),
        why: format!("not a TLS server name: {e}"),
    })?;
    Ok((tokio_rustls::TlsConnector::from(Arc::new(cfg)), name))
}
