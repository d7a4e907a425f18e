//! The HTTP endpoints: metrics, liveness, readiness, the state API and an index page.
//!
//! Handlers only encode what the store already holds, so every request answers in the
//! time it takes to format a few kilobytes, whatever the devices are doing; `/metrics`
//! reuses that encoding until the store changes ([`ExpositionCache`]).

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;

use super::prometheus::cache::ExpositionCache;
use super::prometheus::{self, Format};
use super::state;
use crate::snapshot::Store;
use crate::snapshot::status::BuildInfo;

#[derive(Clone)]
struct AppState {
    metrics: Arc<ExpositionCache>,
    store: Arc<Store>,
    index: Arc<String>,
}

/// Routes the server answers besides the telemetry path; `config::RESERVED_PATHS` must
/// list each (a unit test checks it), so `check-config` refuses a colliding path.
pub const FIXED_ROUTES: &[&str] = &["/-/healthy", "/-/ready", "/api/v1/state", "/"];

/// Paths that never ask for basic auth: process health, for kubelet probes.
pub const OPEN_PATHS: &[&str] = &["/-/healthy", "/-/ready"];

/// `web.telemetry_path` names a route of its own, or is not a path axum can route.
#[derive(Debug, thiserror::Error)]
#[error("web.telemetry_path {path:?}: {reason}")]
pub struct RouteError {
    /// The path.
    pub path: String,
    /// Why.
    pub reason: &'static str,
}

/// Builds the router for `telemetry_path`, refusing a path that collides with another
/// route (axum would panic) or that axum cannot route. `options` are what `/metrics` adds
/// (npu-exporter names, the node label).
pub fn router(
    store: Arc<Store>,
    build: BuildInfo,
    telemetry_path: &str,
    options: &prometheus::Options,
) -> Result<Router, RouteError> {
    let err = |reason| RouteError {
        path: telemetry_path.to_string(),
        reason,
    };
    if FIXED_ROUTES.contains(&telemetry_path) {
        return Err(err("is another endpoint's path"));
    }
    if !telemetry_path.starts_with('/')
        || !telemetry_path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/_.-".contains(c))
    {
        return Err(err(
            "must start with '/' and hold only letters, digits, '/', '_', '.', '-'",
        ));
    }
    let state = AppState {
        metrics: Arc::new(ExpositionCache::new(
            prometheus::registry_with(store.clone(), build.clone(), options),
            store.clone(),
        )),
        store,
        index: Arc::new(prometheus::index_page(telemetry_path, &build)),
    };
    Ok(Router::new()
        .route(telemetry_path, get(metrics_handler))
        .route("/-/healthy", get(|| async { "Healthy\n" }))
        .route("/-/ready", get(ready_handler))
        .route("/api/v1/state", get(state_handler))
        .route("/", get(index_handler))
        .with_state(state))
}

/// Encodes `registry` in the format the request's `Accept` header asks for: the one
/// `/metrics` answer, shared by the daemon and the remediation receiver.
pub fn metrics_response(registry: &Registry, headers: &HeaderMap) -> Response {
    let format = Format::negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    match prometheus::encode(registry, format) {
        Ok(body) => ([(header::CONTENT_TYPE, format.content_type())], body).into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "error encoding metrics\n",
        )
            .into_response(),
    }
}

/// Whether an `Accept-Encoding` header accepts gzip: a `gzip` (or its alias `x-gzip`)
/// token whose quality is a number above zero (RFC 9110 §12.5.3; `*` is not taken as
/// gzip, as most servers do not).
pub fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or("");
            let quality_ok = parts.all(|p| match p.split_once('=') {
                Some((k, q)) if k.trim().eq_ignore_ascii_case("q") => q
                    .trim()
                    .parse::<f32>()
                    .is_ok_and(|q| q.is_finite() && q > 0.0),
                _ => true,
            });
            (coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip"))
                && quality_ok
        })
}

/// The daemon's `/metrics`: the cached exposition (see [`ExpositionCache`]), gzipped when
/// the scraper accepts it, as Prometheus does.
async fn metrics_handler(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let format = Format::negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let gzip = accepts_gzip(&headers);
    match s.metrics.get(format, gzip) {
        Ok(body) => {
            let mut resp = (
                [
                    (header::CONTENT_TYPE, format.content_type()),
                    (header::VARY, "Accept, Accept-Encoding"),
                ],
                body,
            )
                .into_response();
            if gzip {
                resp.headers_mut().insert(
                    header::CONTENT_ENCODING,
                    axum::http::HeaderValue::from_static("gzip"),
                );
            }
            resp
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot serve /metrics");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "error encoding metrics\n",
            )
                .into_response()
        }
    }
}

async fn ready_handler(State(s): State<AppState>) -> Response {
    let not_ready = s.store.not_ready();
    if not_ready.is_empty() {
        (StatusCode::OK, "Ready\n").into_response()
    } else {
        let why: Vec<String> = not_ready.iter().map(|(c, r)| format!("{c}: {r}")).collect();
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("Not ready: {}\n", why.join("; ")),
        )
            .into_response()
    }
}

fn json<T: serde::Serialize>(code: StatusCode, body: &T) -> Response {
    match serde_json::to_string(body) {
        Ok(text) => (code, [(header::CONTENT_TYPE, "application/json")], text).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "error encoding state\n").into_response(),
    }
}

async fn state_handler(State(s): State<AppState>) -> Response {
    let view = s.store.view();
    match &view.probe {
        Some(p) => json(
            StatusCode::OK,
            &state::State::from(p.as_ref()).with_overrides(p, view.overrides.as_deref()),
        ),
        None => json(StatusCode::NOT_FOUND, &state::NotEnabled::PROBING_OFF),
    }
}

async fn index_handler(State(s): State<AppState>) -> Html<String> {
    Html(s.index.as_ref().clone())
}

/// Serves `router` on `listener` until `shutdown` completes, with the limits and the
/// web config of [`super::web`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: super::web::Limits,
    security: Arc<super::web::Security>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    super::web::serve(listener, router, limits, security, shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoding(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT_ENCODING, v.parse().unwrap());
        h
    }

    /// What Prometheus, browsers and curl send, and the refusals a client may state.
    #[test]
    fn gzip_is_served_only_when_accepted() {
        assert!(accepts_gzip(&encoding("gzip")));
        assert!(accepts_gzip(&encoding("deflate, GZIP;q=0.5")));
        assert!(accepts_gzip(&encoding("gzip, deflate, br")));
        assert!(!accepts_gzip(&encoding("gzip;q=0")));
        assert!(!accepts_gzip(&encoding("gzip; Q=0")));
        assert!(!accepts_gzip(&encoding("gzip;q=NaN")));
        assert!(!accepts_gzip(&encoding("gzip;q=banana")));
        assert!(accepts_gzip(&encoding("x-gzip")));
        assert!(!accepts_gzip(&encoding("identity")));
        assert!(!accepts_gzip(&encoding("*")));
        assert!(!accepts_gzip(&encoding("x-gzip-ish")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    /// Pins: the config's reserved paths are exactly the routes served here.
    #[test]
    fn reserved_paths_are_the_fixed_routes() {
        let mut a: Vec<&str> = FIXED_ROUTES.to_vec();
        let mut b: Vec<&str> = crate::config::RESERVED_PATHS.to_vec();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
        let store = Arc::new(Store::new(false, false));
        for p in FIXED_ROUTES {
            assert!(
                router(store.clone(), BuildInfo::current(), p, &Default::default()).is_err(),
                "{p}"
            );
        }
        assert!(
            router(
                store.clone(),
                BuildInfo::current(),
                "/{x}",
                &Default::default()
            )
            .is_err()
        );
        assert!(router(store, BuildInfo::current(), "/metrics", &Default::default()).is_ok());
    }
}
