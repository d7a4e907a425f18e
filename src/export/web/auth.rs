//! What the web config asks of every request: basic auth against bcrypt hashes, a
//! request rate limit, and extra response headers.
//!
//! bcrypt costs tens of milliseconds by design, so a verified (user, password) pair is
//! remembered (by a SHA-256 of the password, never the password) and later requests with
//! it cost a hash lookup, as the exporter-toolkit does. A failed check is not remembered;
//! bcrypt runs off the async workers, one at a time, so a client guessing passwords costs
//! one core at most and never delays a scrape that is already authenticated. An unknown
//! user is checked against a dummy hash, so the answer takes as long as for a known one.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Response, StatusCode, header};
use axum::response::IntoResponse as _;
use sha2::Digest as _;

use super::tls::Tls;
use crate::config::web::WebConfigFile;

/// Why the web config could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// The file has problems.
    #[error("web config: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<crate::config::Problem>),
    /// TLS could not be set up from it.
    #[error("web config: {0}")]
    Tls(#[from] super::tls::BuildError),
}

/// Remembered successful verifications at most (users × passwords in use).
const CACHE_LIMIT: usize = 1024;

/// A token bucket over all requests.
#[derive(Debug)]
struct Bucket {
    interval: Duration,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    fn take(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let refill = now.duration_since(s.1).as_secs_f64() / self.interval.as_secs_f64();
        s.0 = (s.0 + refill).min(self.burst);
        s.1 = now;
        if s.0 >= 1.0 {
            s.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

/// TLS, basic auth, rate limit and headers of one server.
pub struct Security {
    /// TLS, when configured.
    pub tls: Option<Arc<Tls>>,
    users: BTreeMap<String, String>,
    verified: Mutex<HashSet<(String, [u8; 32])>>,
    bcrypt: tokio::sync::Semaphore,
    dummy_hash: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    rate: Option<Bucket>,
    open_paths: Vec<String>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("tls", &self.tls.is_some())
            .field("users", &self.users.len())
            .field("open_paths", &self.open_paths)
            .finish()
    }
}

impl Security {
    /// No TLS, no auth, no limit: plain HTTP/1.1.
    pub fn plain() -> Self {
        Self {
            tls: None,
            users: BTreeMap::new(),
            verified: Mutex::new(HashSet::new()),
            bcrypt: tokio::sync::Semaphore::new(1),
            dummy_hash: String::new(),
            headers: Vec::new(),
            rate: None,
            open_paths: Vec::new(),
        }
    }

    /// From a web config file; `open_paths` never ask for basic auth (health checks, and
    /// the receiver's webhook, which has its own credentials). Must run inside the tokio
    /// runtime when the file names certificate files (they are watched for changes).
    pub fn from_file(path: Option<&Path>, open_paths: &[&str]) -> Result<Self, WebError> {
        let Some(path) = path else {
            return Ok(Self::plain());
        };
        let cfg = WebConfigFile::load(path).map_err(WebError::Invalid)?;
        Self::from_config(&cfg, open_paths)
    }

    /// From a parsed web config.
    pub fn from_config(cfg: &WebConfigFile, open_paths: &[&str]) -> Result<Self, WebError> {
        let tls = match cfg.tls().map_err(WebError::Invalid)? {
            Some(t) => Some(Tls::start(t, cfg.http_server_config.http2)?),
            None => None,
        };
        let mut s = Self::plain();
        s.tls = tls;
        s.users = cfg.basic_auth_users.clone();
        if !s.users.is_empty() {
            // Same cost as the first user's hash, so a miss takes as long as a hit.
            let cost = s
                .users
                .values()
                .next()
                .and_then(|h| h.parse::<bcrypt::HashParts>().ok())
                .map_or(10, |p| p.get_cost());
            s.dummy_hash = bcrypt::hash("hcclwatch-dummy", cost).unwrap_or_default();
        }
        s.headers = cfg
            .http_server_config
            .headers
            .iter()
            .filter_map(|(k, v)| {
                Some((
                    HeaderName::try_from(k.as_str()).ok()?,
                    HeaderValue::try_from(v.as_str()).ok()?,
                ))
            })
            .collect();
        s.rate = cfg
            .rate_limit
            .as_ref()
            .filter(|r| !r.interval.is_zero())
            .map(|r| Bucket {
                interval: r.interval,
                burst: f64::from(r.burst),
                state: Mutex::new((f64::from(r.burst), Instant::now())),
            });
        s.open_paths = open_paths.iter().map(|p| (*p).to_string()).collect();
        Ok(s)
    }

    /// `Ok` if the request may go on, else the answer to send instead.
    pub async fn check(
        &self,
        path: &str,
        headers: &axum::http::HeaderMap,
        peer: SocketAddr,
    ) -> Result<(), Response<Body>> {
        if let Some(b) = &self.rate
            && !b.take()
        {
            return Err((StatusCode::TOO_MANY_REQUESTS, "rate limit exceeded\n").into_response());
        }
        if self.users.is_empty() || self.open_paths.iter().any(|p| p == path) {
            return Ok(());
        }
        let creds = headers
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(parse_basic);
        if let Some((user, password)) = creds
            && self.verify(&user, &password).await
        {
            return Ok(());
        }
        tracing::debug!(peer = %peer, path, "request without valid basic auth");
        let mut r = (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"hcclwatch\""),
        );
        Err(r)
    }

    async fn verify(&self, user: &str, password: &str) -> bool {
        let digest: [u8; 32] = sha2::Sha256::digest(password.as_bytes()).into();
        let key = (user.to_string(), digest);
        if self
            .verified
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&key)
        {
            return true;
        }
        let (hash, known) = match self.users.get(user) {
            Some(h) => (h.clone(), true),
            None => (self.dummy_hash.clone(), false),
        };
        let Ok(_permit) = self.bcrypt.acquire().await else {
            return false;
        };
        let password = password.to_string();
        let ok = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(false)
            && known;
        if ok {
            let mut v = self.verified.lock().unwrap_or_else(|p| p.into_inner());
            if v.len() >= CACHE_LIMIT {
                v.clear();
            }
            v.insert(key);
        }
        ok
    }

    /// Adds the configured headers to a response.
    pub fn decorate(&self, mut resp: Response<Body>) -> Response<Body> {
        for (k, v) in &self.headers {
            resp.headers_mut().insert(k.clone(), v.clone());
        }
        resp
    }
}

/// `Basic base64(user:password)` → (user, password).
fn parse_basic(h: &str) -> Option<(String, String)> {
    use base64::Engine as _;
    let b64 = h.strip_prefix("Basic ")?.trim();
    let raw = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn security(users: &[(&str, &str)]) -> Security {
        let mut text = String::from("basic_auth_users:\n");
        for (u, p) in users {
            text.push_str(&format!("  {u}: {}\n", bcrypt::hash(p, 4).unwrap()));
        }
        let cfg = WebConfigFile::from_str(&text, Path::new("/")).unwrap();
        Security::from_config(&cfg, &["/-/healthy"]).unwrap()
    }

    fn req(path: &str, auth: Option<&str>) -> (String, axum::http::HeaderMap) {
        let mut h = axum::http::HeaderMap::new();
        if let Some(a) = auth {
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(a).unwrap());
        }
        (path.to_string(), h)
    }

    async fn check(
        s: &Security,
        r: (String, axum::http::HeaderMap),
        peer: SocketAddr,
    ) -> Result<(), Response<Body>> {
        s.check(&r.0, &r.1, peer).await
    }

    #[tokio::test]
    async fn basic_auth_against_bcrypt_hashes() {
        use base64::Engine as _;
        let s = security(&[("alice", "wonder")]);
        let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let enc = |u: &str, p: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
            )
        };
        assert!(
            check(&s, req("/metrics", Some(&enc("alice", "wonder"))), peer)
                .await
                .is_ok()
        );
        // Cached now; still right.
        assert!(
            check(&s, req("/metrics", Some(&enc("alice", "wonder"))), peer)
                .await
                .is_ok()
        );
        let r = check(&s, req("/metrics", Some(&enc("alice", "wrong"))), peer).await;
        assert_eq!(r.unwrap_err().status(), StatusCode::UNAUTHORIZED);
        let r = check(&s, req("/metrics", Some(&enc("bob", "wonder"))), peer).await;
        assert_eq!(r.unwrap_err().status(), StatusCode::UNAUTHORIZED);
        let r = check(&s, req("/metrics", None), peer).await.unwrap_err();
        assert!(r.headers().get(header::WWW_AUTHENTICATE).is_some());
        assert!(check(&s, req("/-/healthy", None), peer).await.is_ok());
    }

    #[tokio::test]
    async fn rate_limit_refuses_past_the_burst() {
        let cfg =
            WebConfigFile::from_str("rate_limit:\n  interval: 1h\n  burst: 2\n", Path::new("/"))
                .unwrap();
        let s = Security::from_config(&cfg, &[]).unwrap();
        let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert!(check(&s, req("/", None), peer).await.is_ok());
        assert!(check(&s, req("/", None), peer).await.is_ok());
        let r = check(&s, req("/", None), peer).await.unwrap_err();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    }
}
