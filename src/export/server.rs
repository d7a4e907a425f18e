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
        .route("/api/v1/state", get(state_handler))
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

async fn state_handler(State(s): State<AppState>) -> Response {
    let Some(p) = s.store.probe() else {
        let body = serde_json::json!({"error": "probing is not enabled (probe.enabled = false)"});
        return (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response();
    };
    let node = |i: usize| p.nodes.get(i).cloned().unwrap_or_else(|| i.to_string());
    let body = serde_json::json!({
        "active": p.active,
        "last_error": p.last_error,
        "rounds": {"ok": p.rounds_ok, "failed": p.rounds_failed},
        "fabric_degraded": p.fabric_degraded,
        "link_degraded": p.link_degraded.iter().map(|(a, b)| serde_json::json!({"src": node(*a), "dst": node(*b)})).collect::<Vec<_>>(),
        "membership": {"group_members": p.members, "stale": p.membership_stale},
        "members": p.nodes.iter().enumerate().map(|(i, n)| serde_json::json!({
            "node": n,
            "up": p.peer_up.get(i).copied().unwrap_or(false),
            "state": p.states.get(i).map(|s| s.as_str()),
            "score": p.scores.get(i).filter(|v| v.is_finite()),
            "arrival_lag_seconds": p.arrival_lag.get(i).filter(|v| v.is_finite()),
        })).collect::<Vec<_>>(),
        "matrix": p.links.iter().map(|(a, b, v)| serde_json::json!({"src": node(*a), "dst": node(*b), "bytes_per_second": v})).collect::<Vec<_>>(),
        "transitions": p.transitions.iter().map(|t| serde_json::json!({
            "round": t.round, "node": node(t.node), "from": t.from.as_str(), "to": t.to.as_str(),
            "reason": t.reason,
            "evidence": t.evidence.iter().map(|(k, v)| serde_json::json!({"what": k, "value": v})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
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
