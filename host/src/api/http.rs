//! `/health`, `/readyz` and `/metrics` on the metrics listener.
//!
//! When `[metrics] auth_token` is set, `/health` and `/metrics` require
//! `Authorization: Bearer <token>`; `/readyz` stays open for load balancers.
//! Any other path answers 404 and any other method 405, each with a body
//! naming what is served.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::node::metrics::gauge;
use crate::node::control::Control;

use super::grpc::UNPROVISIONED;

pub fn router(control: Arc<Control>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(unknown_path)
        .method_not_allowed_fallback(wrong_method)
        .with_state(control)
}

async fn unknown_path(uri: Uri) -> Response {
    (
        StatusCode::NOT_FOUND,
        format!("no such path `{}`; this listener serves GET /health, /readyz and /metrics\n", uri.path()),
    )
        .into_response()
}

async fn wrong_method(method: Method, uri: Uri) -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "GET,HEAD")],
        format!("method {method} is not allowed on `{}`; use GET\n", uri.path()),
    )
        .into_response()
}

fn authorized(control: &Control, headers: &HeaderMap) -> Result<(), Response> {
    let Some(token) = control.settings.metrics.auth_token.as_deref() else {
        return Ok(());
    };
    let given = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    match given.and_then(|v| v.strip_prefix("Bearer ")) {
        Some(t) if constant_time_eq(t.as_bytes(), token.as_bytes()) => Ok(()),
        Some(_) => Err((StatusCode::UNAUTHORIZED, "wrong bearer token\n").into_response()),
        None => Err((
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "missing `Authorization: Bearer <metrics.auth_token>`\n",
        )
            .into_response()),
    }
}

pub(crate) use crate::security::auth::constant_time_eq;

async fn health(State(control): State<Arc<Control>>, headers: HeaderMap) -> Response {
    if let Err(denied) = authorized(&control, &headers) {
        return denied;
    }
    let Some(node) = control.node() else {
        let body = json!({
            "status": UNPROVISIONED,
            "state": UNPROVISIONED,
            "version": env!("CARGO_PKG_VERSION"),
            "cluster": {"healthy": false, "active_instances": 0},
            "insecure_listen": crate::security::exposure::insecure(&control.settings),
        });
        return (StatusCode::OK, axum::Json(body)).into_response();
    };
    let cluster = match &node.coord {
        Some(coord) => {
            let m = coord.metrics_snapshot().await;
            json!({
                "healthy": m.healthy(),
                "active_instances": m.active_instances,
                "active_deployments": m.deployments_active,
            })
        }
        None => json!({"healthy": true, "active_instances": 1, "active_deployments": 0}),
    };
    let body = json!({
        "status": if node.is_ready() { "ok" } else { node.lifecycle().as_str() },
        "instance_id": node.uuid.to_string(),
        "name": node.name,
        "version": env!("CARGO_PKG_VERSION"),
        "state": node.lifecycle().as_str(),
        "mode": if node.standalone { "standalone" } else { "cluster" },
        "config_version": node.topology().config.version,
        "shards_held": node.leases.held().len(),
        "cluster": cluster,
        "insecure_listen": crate::security::exposure::insecure(&control.settings),
    });
    (StatusCode::OK, axum::Json(body)).into_response()
}

async fn readyz(State(control): State<Arc<Control>>) -> Response {
    match control.node() {
        Some(node) if node.is_ready() => (StatusCode::OK, "ready\n").into_response(),
        Some(node) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {}\n", node.lifecycle().as_str())).into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {UNPROVISIONED}\n")).into_response(),
    }
}

async fn metrics(State(control): State<Arc<Control>>, headers: HeaderMap) -> Response {
    if let Err(denied) = authorized(&control, &headers) {
        return denied;
    }
    let Some(node) = control.node() else {
        let mut out = String::new();
        gauge(&mut out, "chitin_node_ready", "1 while the node takes work (joining or active).", 0);
        return ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response();
    };
    let mut out = String::new();
    gauge(&mut out, "chitin_leases_held", "Shard leases this node serves now.", node.leases.held().len());
    gauge(
        &mut out,
        "chitin_node_ready",
        "1 while the node takes work (joining or active).",
        u8::from(node.is_ready()),
    );
    match &node.coord {
        Some(coord) => out.push_str(&coord.metrics_snapshot().await.to_prometheus()),
        None => gauge(&mut out, "chitin_cluster_active_instances", "Live instances (standalone: this one).", 1),
    }
    node.metrics.render_counters(&mut out);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}
