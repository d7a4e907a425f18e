//! The HTTP endpoints: metrics, liveness, readiness, the state API and an index page.
//!
//! Handlers only encode what the store already holds, so every request answers in the
//! time it takes to format a few kilobytes, whatever the devices are doing.

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;

use super::prometheus::{self, Format};
use super::state;
use crate::snapshot::Store;
use crate::snapshot::status::BuildInfo;

#[derive(Clone)]
struct AppState {
    registry: Arc<Registry>,
    store: Arc<Store>,
    index: Arc<String>,
}

/// Builds the router for `telemetry_path`.
pub fn router(store: Arc<Store>, build: BuildInfo, telemetry_path: &str) -> Router {
    let state = AppState {
        registry: Arc::new(prometheus::registry(store.clone(), build.clone())),
        store,
        index: Arc::new(prometheus::index_page(telemetry_path, &build)),
    };
    Router::new()
        .route(telemetry_path, get(metrics_handler))
        .route("/-/healthy", get(|| async { "Healthy\n" }))
        .route("/-/ready", get(ready_handler))
        .route("/api/v1/state", get(state_handler))
        .route("/", get(index_handler))
        .with_state(state)
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

async fn metrics_handler(State(s): State<AppState>, headers: HeaderMap) -> Response {
    metrics_response(&s.registry, &headers)
}

async fn ready_handler(State(s): State<AppState>) -> Response {
    if s.store.ready() {
        (StatusCode::OK, "Ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "Not ready: first collection still running\n",
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
    match s.store.probe() {
        Some(p) => json(StatusCode::OK, &state::State::from(p.as_ref())),
        None => json(StatusCode::NOT_FOUND, &state::NotEnabled::PROBING_OFF),
    }
}

async fn index_handler(State(s): State<AppState>) -> Html<String> {
    Html(s.index.as_ref().clone())
}

/// Serves `router` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}
