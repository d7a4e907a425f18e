//! The HTTP endpoints: metrics, liveness, readiness and an index page.
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

use super::metrics::{self, BuildInfo, Format};
use crate::telemetry::store::Store;

#[derive(Clone)]
struct AppState {
    registry: Arc<Registry>,
    store: Arc<Store>,
    index: Arc<String>,
}

/// Builds the router for `telemetry_path`.
pub fn router(store: Arc<Store>, build: BuildInfo, telemetry_path: &str) -> Router {
    let state = AppState {
        registry: Arc::new(metrics::registry(store.clone(), build.clone())),
        store,
        index: Arc::new(metrics::index_page(telemetry_path, &build)),
    };
    Router::new()
        .route(telemetry_path, get(metrics_handler))
        .route("/-/healthy", get(|| async { "Healthy\n" }))
        .route("/-/ready", get(ready_handler))
        .route("/", get(index_handler))
        .with_state(state)
}

async fn metrics_handler(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let format = Format::negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    match metrics::encode(&s.registry, format) {
        Ok(body) => ([(header::CONTENT_TYPE, format.content_type())], body).into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "error encoding metrics\n",
        )
            .into_response(),
    }
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
