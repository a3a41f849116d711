//! `[limits] request_timeout_secs` on both listeners: a call whose answer
//! takes longer is cut and answered in the listener's own terms (a gRPC
//! status, an HTTP 408), each naming the setting.

use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

/// A listener's answer to a call cut at the limit (the limit given).
pub(crate) type Late = fn(Duration) -> Response;

/// `router` with every route's answer bounded by `limit`, a cut call
/// answered by `late`.
pub(crate) fn bounded<S: Clone + Send + Sync + 'static>(router: Router<S>, limit: Duration, late: Late) -> Router<S> {
    router.layer(axum::middleware::from_fn_with_state((limit, late), within))
}

async fn within(State((limit, late)): State<(Duration, Late)>, req: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(response) => response,
        Err(_) => late(limit),
    }
}
