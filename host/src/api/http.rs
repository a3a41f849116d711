//! `/health`, `/livez`, `/readyz`, `/metrics` and the status page `/` on the
//! metrics listener.
//!
//! When `[metrics] auth_token` is set, `/health` and `/metrics` require
//! `Authorization: Bearer <token>`; `/livez` and `/readyz` stay open for
//! probes and load balancers.
//! The status page takes the token as a bearer token too, or as the
//! password of HTTP Basic auth, which a browser asks for.
//! Any other path answers 404 and any other method 405, each with a body
//! naming what is served.

use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::node::control::Control;
use crate::node::metrics;
use crate::settings::LimitSettings;

use super::deadline;
use super::grpc::UNPROVISIONED;
use super::status_page;

pub(crate) fn router(control: Arc<Control>) -> Router {
    let routes = Router::new()
        .route("/", get(status_page))
        .route("/health", get(health))
        .route("/readyz", get(readyz))
        .route("/livez", get(livez))
        .route("/metrics", get(metrics))
        .fallback(unknown_path)
        .method_not_allowed_fallback(wrong_method);
    within_limits(routes, &control.settings.limits).with_state(control)
}

/// `routes` under the listener's `[limits]` that a router carries (the
/// connection limits are the server's): every answer within
/// `request_timeout_secs`, or [`timed_out`].
fn within_limits<S: Clone + Send + Sync + 'static>(routes: Router<S>, limits: &LimitSettings) -> Router<S> {
    deadline::bounded(routes, limits.request_timeout(), timed_out)
}

/// A request whose answer took longer than `[limits] request_timeout_secs`.
/// The health routes read the stores: a stuck one is the usual cause.
fn timed_out(limit: std::time::Duration) -> Response {
    let body = format!(
        "request timed out after {limit:?} ([limits] request_timeout_secs); a store the node reads (its database, \
         Redis) may be stuck or unreachable: /livez answers without them\n"
    );
    (StatusCode::REQUEST_TIMEOUT, body).into_response()
}

async fn unknown_path(uri: Uri) -> Response {
    (
        StatusCode::NOT_FOUND,
        format!(
            "no such path `{}`; this listener serves GET /health, /livez, /readyz, /metrics and / (the status page)\n",
            uri.path()
        ),
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
    let accepted = control.credentials.current();
    if accepted.metrics.is_empty() {
        return Ok(());
    }
    let given = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    match given.and_then(|v| v.strip_prefix("Bearer ")) {
        Some(t) if accepted.metrics_accepts(t) => Ok(()),
        Some(_) => Err((StatusCode::UNAUTHORIZED, "wrong bearer token\n").into_response()),
        None => Err((
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "missing `Authorization: Bearer <metrics.auth_token>`\n",
        )
            .into_response()),
    }
}

/// The status page's check: the metrics token as a bearer token or as the
/// Basic-auth password (any user name), so that a browser can log in.
fn page_authorized(control: &Control, headers: &HeaderMap) -> Result<(), Response> {
    let accepted = control.credentials.current();
    if accepted.metrics.is_empty() {
        return Ok(());
    }
    let given = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or("");
    let password = if let Some(bearer) = given.strip_prefix("Bearer ") {
        Some(bearer.to_string())
    } else if let Some(basic) = given.strip_prefix("Basic ") {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(basic.trim())
            .ok()
            .and_then(|raw| String::from_utf8(raw).ok())
            .and_then(|pair| pair.split_once(':').map(|(_, p)| p.to_string()))
    } else {
        None
    };
    match password {
        Some(p) if accepted.metrics_accepts(&p) => Ok(()),
        _ => Err((
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic realm=\"chitin\", charset=\"UTF-8\"")],
            "the status page needs the metrics token: as the password when the browser asks (any user name), or as \
             `Authorization: Bearer <metrics.auth_token>`\n",
        )
            .into_response()),
    }
}

async fn health(State(control): State<Arc<Control>>, headers: HeaderMap) -> Response {
    if let Err(denied) = authorized(&control, &headers) {
        return denied;
    }
    let body = health_body(&control).await;
    // A probe or load balancer reads the code, not the body.
    let code = if body["status"] == "healthy" { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, axum::Json(body)).into_response()
}

/// `/health` as the reference documents it: `status` (`healthy` while the
/// node takes work, else `unhealthy`, answered with 503), `instance_id`, `version`, and a
/// `cluster` object only when clustering is enabled. Counts that cannot be
/// read (Redis down, no node yet) are `null`, never made up.
async fn health_body(control: &Control) -> serde_json::Value {
    let clustered = control.settings.cluster.enabled;
    let Some(node) = control.node() else {
        let mut body = json!({
            "status": "unhealthy",
            "state": UNPROVISIONED,
            "version": env!("CARGO_PKG_VERSION"),
            "mode": "cluster",
            "insecure_listen": crate::security::exposure::insecure(&control.settings),
        });
        if clustered {
            body["cluster"] = json!({"healthy": false, "active_instances": null, "active_deployments": null});
        }
        return body;
    };
    let mut body = json!({
        "status": if node.is_ready() { "healthy" } else { "unhealthy" },
        "instance_id": node.uuid.to_string(),
        "name": node.name,
        "version": env!("CARGO_PKG_VERSION"),
        "state": node.lifecycle().as_str(),
        "mode": if node.standalone { "standalone" } else { "cluster" },
        "config_version": node.topology().config.version,
        "shards_held": node.leases.held().len(),
        "insecure_listen": crate::security::exposure::insecure(&control.settings),
        "policy_mismatch": node.policy_mismatch(),
    });
    if let Some(coord) = node.coord.as_ref().filter(|_| clustered) {
        let m = coord.metrics_snapshot().await;
        body["cluster"] = json!({
            "healthy": m.healthy(),
            "active_instances": m.active_instances,
            "active_deployments": m.deployments_active,
        });
    }
    body
}

async fn status_page(
    State(control): State<Arc<Control>>,
    headers: HeaderMap,
    query: Result<Query<status_page::PageQuery>, QueryRejection>,
) -> Response {
    if let Err(denied) = page_authorized(&control, &headers) {
        return denied;
    }
    let Query(query) = match query {
        Ok(q) => q,
        Err(e) => {
            let why = format!(
                "{}: the page takes app, holder, state, q and page (from 1), e.g. /?state=unowned&page=2\n",
                e.body_text()
            );
            return (StatusCode::BAD_REQUEST, why).into_response();
        }
    };
    let html = match control.node() {
        Some(node) => status_page::render(&status_page::view(&node).await, &query),
        None => status_page::render_unprovisioned(),
    };
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-store")], html).into_response()
}

/// Liveness: the process answers. It says nothing of the database or the
/// node's state (that is `/readyz`), so an outage of a store never gets a
/// live node restarted.
async fn livez() -> Response {
    (StatusCode::OK, "alive\n").into_response()
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
    let text = metrics::exposition(control.node().as_deref(), &control.counts).await;
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use tower::ServiceExt;

    use super::*;

    /// Without the bound the route's late answer would come, 200 after 30 s.
    #[tokio::test]
    async fn a_request_answered_later_than_the_request_timeout_gets_408_naming_the_setting() {
        let slow = Router::new().route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "late"
            }),
        );
        let limits = LimitSettings { request_timeout_secs: 0.2, ..LimitSettings::default() };
        let slow = within_limits(slow, &limits);
        let started = Instant::now();
        let request = axum::http::Request::get("/slow").body(axum::body::Body::empty()).unwrap();
        let response = slow.oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        let body = axum::body::to_bytes(response.into_body(), 1024).await.unwrap();
        let body = String::from_utf8_lossy(&body);
        assert!(body.starts_with("request timed out after 200ms ([limits] request_timeout_secs)"), "{body}");
    }
}
