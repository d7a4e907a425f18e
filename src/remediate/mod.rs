//! `hcclwatch remediate`: the guarded Alertmanager webhook receiver that takes confirmed bad
//! nodes out of scheduling.
//!
//! Alertmanager (webhook payload version 4) posts to `/webhook`, and a daemon may push a
//! hard fault to `/v1/push` ([`push`]); the receiver authenticates
//! the request, validates the whole payload, and hands each alert that matches a rule to
//! the [`engine`], which walks it through the safety rails and, outside dry-run, cordons,
//! taints, sets a node condition, writes an event or runs a hook. It answers 5xx only for
//! transient failures, so Alertmanager retries exactly those; every step is idempotent.
//!
//! - [`config`]: the receiver's own config file;
//! - [`payload`]: the webhook body and its validation;
//! - [`push`]: a daemon's hard-fault push (`/v1/push`), the fast path beside Alertmanager;
//! - [`safety`]: selectors, circuit breaker, rate limit;
//! - [`kube`]: the Kubernetes API and the ownership annotations;
//! - [`isolation`]: which DRA device an NPU alert names, and its `DeviceTaintRule`;
//! - [`dra`]: the `DeviceTaintRule` and `ResourceSlice` API, live or dry-run shadow;
//! - [`hooks`]: exec hook and generic HTTP webhook;
//! - [`audit`]: the fsynced JSON-lines audit log;
//! - [`lifecycle`]: the incidents and escalation of recurring nodes;
//! - [`operator`]: `hcclwatch override`, a person's overrides and releases;
//! - [`outcome`]: how a decision ended, as the audit log and the metrics name it;
//! - [`metrics`]: the receiver's metrics.

pub(crate) mod audit;
pub mod config;
pub(crate) mod dra;
pub(crate) mod engine;
pub(crate) mod hooks;
pub mod isolation;
pub(crate) mod kube;
pub mod lifecycle;
pub(crate) mod metrics;
pub mod operator;
pub(crate) mod outcome;
pub mod payload;
pub mod push;
pub(crate) mod safety;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use self::config::RemediateConfig;
use self::engine::Remediator;
use crate::export::push::wire::{MAX_BODY as PUSH_MAX_BODY, PATH as PUSH_PATH};

/// Why the receiver could not start.
#[derive(Debug, thiserror::Error)]
pub enum RemediateError {
    /// A secret file could not be read or is not one token.
    #[error("{what}: {source}")]
    Secret {
        /// Which secret.
        what: &'static str,
        /// Why.
        source: crate::config::file::SecretError,
    },
    /// The config names no credentials for the webhook.
    #[error(
        "auth: no credentials configured; set auth.bearer_token_file, or auth.basic_username with auth.basic_password_file"
    )]
    NoCredentials,
    /// The secret file holds nothing.
    #[error("{what}: the auth secret file is empty; put the token (or password) in it")]
    EmptySecret {
        /// Which secret.
        what: &'static str,
    },
    /// The audit log could not be opened.
    #[error(
        "opening the audit log {}: {source}; the receiver does not act without one (check audit_log and its directory's permissions)",
        path.display()
    )]
    AuditLog {
        /// `audit_log`.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The async runtime could not be built (threads or file descriptors exhausted).
    #[error("tokio runtime: {0}; check the process's thread and file-descriptor limits")]
    Runtime(#[source] std::io::Error),
    /// The Kubernetes API client could not be set up.
    #[error(transparent)]
    Kubernetes(#[from] kube::ConnectError),
    /// The web config (`web_config_file`) could not be applied.
    #[error(transparent)]
    Web(#[from] crate::export::web::WebError),
    /// A rule's selectors do not parse.
    #[error(transparent)]
    Selector(#[from] safety::SelectorError),
    /// The listen address could not be bound.
    #[error("binding {address}: {source}; choose another listen_address or stop what holds it")]
    Bind {
        /// `listen_address`.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The bound listener has no local address (the socket went away at once).
    #[error("reading the bound listener's address: {0}")]
    LocalAddr(#[source] std::io::Error),
    /// The server stopped with an error.
    #[error("serving: {0}")]
    Serve(#[source] std::io::Error),
}

/// The credentials a request must present.
#[derive(Clone)]
enum Credentials {
    Bearer(String),
    Basic { user: String, password: String },
}

/// Compares in constant time (`subtle`), so response time does not leak how much of a
/// guessed secret matched. Only the length can show, as it always could.
fn same(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq as _;
    a.ct_eq(b).into()
}

impl Credentials {
    fn load(cfg: &RemediateConfig) -> Result<Self, RemediateError> {
        let read = |what: &'static str, path: &std::path::Path| {
            // One token, surrounding whitespace trimmed, from a regular file.
            crate::config::file::read_secret(path, crate::config::file::SECRET_LIMIT, 1)
                .map(|s| String::from_utf8_lossy(&s.bytes).into_owned())
                .map_err(|source| RemediateError::Secret { what, source })
        };
        let a = &cfg.auth;
        let c = match (
            &a.bearer_token_file,
            &a.basic_username,
            &a.basic_password_file,
        ) {
            (Some(p), _, _) => Credentials::Bearer(read("auth.bearer_token_file", p)?),
            (None, Some(u), Some(p)) => Credentials::Basic {
                user: u.clone(),
                password: read("auth.basic_password_file", p)?,
            },
            _ => return Err(RemediateError::NoCredentials),
        };
        let empty = match &c {
            Credentials::Bearer(t) => t.is_empty().then_some("auth.bearer_token_file"),
            Credentials::Basic { password, .. } => {
                password.is_empty().then_some("auth.basic_password_file")
            }
        };
        if let Some(what) = empty {
            return Err(RemediateError::EmptySecret { what });
        }
        Ok(c)
    }

    /// The caller's identity if the header carries these credentials.
    fn check(&self, headers: &HeaderMap) -> Option<String> {
        use base64::Engine as _;
        let h = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
        match self {
            Credentials::Bearer(t) => {
                let got = h.strip_prefix("Bearer ")?;
                same(got.trim().as_bytes(), t.as_bytes()).then(|| "bearer".to_string())
            }
            Credentials::Basic { user, password } => {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(h.strip_prefix("Basic ")?.trim())
                    .ok()?;
                let text = String::from_utf8(raw).ok()?;
                let (u, p) = text.split_once(':')?;
                (same(u.as_bytes(), user.as_bytes()) & same(p.as_bytes(), password.as_bytes()))
                    .then(|| format!("basic:{u}"))
            }
        }
    }
}

#[derive(Clone)]
struct AppState {
    engine: Arc<Remediator>,
    creds: Credentials,
    ready: Arc<AtomicBool>,
}

fn reply(engine: &Remediator, code: StatusCode, body: String) -> Response {
    engine.metrics().request(code.as_u16());
    (
        code,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

/// The checks every request that may act passes: the nodes read once, the credentials,
/// the body within `limit`. Returns the caller's identity and the body, or the answer.
async fn admit(
    s: &AppState,
    peer: SocketAddr,
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<(String, bytes::Bytes), Response> {
    let e = &s.engine;
    // Nothing is decided before the nodes have been read once: until then the fleet size
    // (the breaker's denominator) and the breaker's window are unknown.
    if !s.ready.load(Ordering::SeqCst) {
        tracing::warn!(peer = %peer, "request before the first read of the nodes; answered 503 so the sender retries");
        return Err(reply(
            e,
            StatusCode::SERVICE_UNAVAILABLE,
            "retry: the receiver has not read the nodes yet\n".into(),
        ));
    }
    let Some(who) = s.creds.check(headers) else {
        tracing::warn!(peer = %peer, "request without valid credentials rejected");
        let mut r = reply(e, StatusCode::UNAUTHORIZED, "unauthorized\n".into());
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer, Basic realm=\"hcclwatch\""),
        );
        return Err(r);
    };
    let who = format!("{who}@{peer}");
    match axum::body::to_bytes(body, limit).await {
        Ok(b) => Ok((who, b)),
        Err(_) => {
            tracing::warn!(who = %who, limit, "payload rejected: larger than the limit or unreadable");
            Err(reply(
                e,
                StatusCode::BAD_REQUEST,
                format!("payload larger than {limit} bytes or unreadable\n"),
            ))
        }
    }
}

/// Hands a checked notification to the engine: 200, or 503 for a transient failure (the
/// sender retries; every step is idempotent).
async fn decide(e: &Remediator, n: &payload::Notification, who: &str) -> Response {
    match e.handle(n, who).await {
        Ok(()) => reply(e, StatusCode::OK, "ok\n".into()),
        Err(why) => {
            tracing::warn!(who = %who, error = %why, "transient failure; the sender will retry");
            reply(
                e,
                StatusCode::SERVICE_UNAVAILABLE,
                format!("retry: {why}\n"),
            )
        }
    }
}

async fn webhook(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let e = &s.engine;
    let (who, bytes) = match admit(&s, peer, &headers, body, e.config().max_body_bytes).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let node_label = e.config().node_label.clone();
    let n = match payload::parse(&bytes, &node_label, |a| e.rule_for(a).is_some()) {
        Ok(n) => n,
        Err(why) => {
            tracing::warn!(who = %who, reason = %why, "webhook payload rejected; nothing was acted on");
            return reply(e, StatusCode::BAD_REQUEST, format!("bad payload: {why}\n"));
        }
    };
    decide(e, &n, &who).await
}

/// `/v1/push`: a daemon's hard-fault verdict, through the same engine as a webhook.
async fn push_handler(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let e = &s.engine;
    let limit = e.config().max_body_bytes.min(PUSH_MAX_BODY);
    let (who, bytes) = match admit(&s, peer, &headers, body, limit).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let n = match push::parse(&bytes, &e.config().node_label) {
        Ok(n) => n,
        Err(why) => {
            tracing::warn!(who = %who, reason = %why, "push rejected; nothing was acted on");
            return reply(e, StatusCode::BAD_REQUEST, format!("bad push: {why}\n"));
        }
    };
    if n.alerts.iter().all(|a| e.rule_for(a).is_none()) {
        tracing::warn!(who = %who, "push received but no rule acts on {} with reason=hard_fault; nothing done", push::ALERTNAME);
    }
    decide(e, &n, &format!("push:{who}")).await
}

async fn metrics_handler(State(s): State<AppState>, headers: HeaderMap) -> Response {
    crate::export::server::metrics_response(s.engine.metrics().registry(), &headers)
}

async fn ready_handler(State(s): State<AppState>) -> Response {
    if s.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "Ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "Not ready: the nodes have not been read yet\n",
        )
            .into_response()
    }
}

/// Runs the receiver until SIGINT or SIGTERM.
pub fn run(cfg: RemediateConfig) -> Result<(), RemediateError> {
    let address = cfg.listen_address.addr();
    let creds = Credentials::load(&cfg)?;
    let audit =
        audit::AuditLog::open(&cfg.audit_log).map_err(|source| RemediateError::AuditLog {
            path: cfg.audit_log.clone(),
            source,
        })?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("hcclwatch-remediate")
        .enable_all()
        .build()
        .map_err(RemediateError::Runtime)?;
    let result = runtime.block_on(async move {
        let kube = kube::Kube::connect(
            cfg.kubernetes.kubeconfig.as_deref(),
            &cfg.kubernetes.event_namespace,
            cfg.kubernetes.timeout,
        )
            .await?;
        let dry = cfg.dry_run;
        let interval = cfg.reconcile_interval;
        let limits = crate::export::web::Limits {
            max_connections: cfg.max_connections as usize,
            header_read_timeout: cfg.header_read_timeout,
            max_header_bytes: 16 << 10,
            ..crate::export::web::Limits::default()
        };
        // TLS everywhere; the web config's basic auth guards /metrics (the webhook has its
        // own credentials, and Alertmanager sends one Authorization header).
        let security = Arc::new(
            crate::export::web::Security::from_file(
                cfg.web_config_file.as_deref(),
                &["/-/healthy", "/-/ready", "/webhook", PUSH_PATH],
            )?,
        );
        let engine = Arc::new(
            Remediator::new(cfg, kube, audit, metrics::Metrics::new())?,
        );
        let ready = Arc::new(AtomicBool::new(false));
        // The state comes from the nodes' annotations: read them before acting, and keep
        // re-reading them (manual uncordons, fleet size, breaker window).
        {
            let engine = engine.clone();
            let ready = ready.clone();
            tokio::spawn(async move {
                loop {
                    match engine.reconcile().await {
                        Ok(()) => {
                            if !ready.swap(true, Ordering::SeqCst) {
                                tracing::info!("node state rebuilt from annotations; receiver ready");
                            }
                        }
                        Err(e) => tracing::error!(error = %e, "reading the nodes failed; will retry"),
                    }
                    tokio::time::sleep(interval).await;
                }
            });
        }
        let state = AppState { engine, creds, ready };
        let app = Router::new()
            .route("/webhook", post(webhook))
            .route(PUSH_PATH, post(push_handler))
            .route("/metrics", get(metrics_handler))
            .route("/-/healthy", get(|| async { "Healthy\n" }))
            .route("/-/ready", get(ready_handler))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|source| RemediateError::Bind { address, source })?;
        let bound = listener.local_addr().map_err(RemediateError::LocalAddr)?;
        let shutdown = crate::shutdown::signal();
        if dry {
            tracing::warn!("DRY RUN: decisions are logged, counted and audited, but no node is changed (set dry_run = false to act)");
        }
        tracing::info!(address = %bound, dry_run = dry, "hcclwatch remediate listening");
        crate::export::web::serve(listener, app, limits, security, shutdown)
            .await
            .map_err(RemediateError::Serve)
    });
    // A hook or an API call still running is not waited for.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}
