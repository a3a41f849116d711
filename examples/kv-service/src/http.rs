//! The API: `POST /write?key=K&request_id=R[&value=V]` and `GET /health`.
//!
//! A write's answer says what the caller should do next:
//! - `200`: stored (or stored before, under the same request id); the body
//!   is the shard and epoch it was stored under;
//! - `421 Misdirected Request`: another instance serves the key; the body
//!   is the gRPC address of the chitin node holding its shard (the caller
//!   sends the same request to the instance beside that node);
//! - `503`: not now (no holder yet, the lease just moved, the database
//!   failed): send the same request again, here or elsewhere.

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use chitin_client::AssignmentMap;
use serde::Deserialize;

use crate::ledger::{Db, Write, WriteError};
use crate::owner::Owner;

/// What the handlers share.
#[derive(Clone)]
pub struct Api {
    /// The cluster's assignment map, kept current by the node's stream.
    pub map: AssignmentMap,
    /// The shards this instance serves.
    pub owner: Owner,
    /// The service's database.
    pub db: Db,
    /// The chitin application whose shards partition the keys.
    pub application: String,
    /// Whether writes run the fence's check (off only for the planted bug).
    pub check_fence: bool,
}

/// The routes.
pub fn router(api: Api) -> Router {
    Router::new().route("/write", post(write)).route("/health", get(health)).with_state(api)
}

/// A write's query string.
#[derive(Deserialize)]
struct WriteQuery {
    key: String,
    request_id: String,
    #[serde(default)]
    value: String,
}

async fn write(State(api): State<Api>, Query(q): Query<WriteQuery>) -> (StatusCode, String) {
    let map = api.map.current();
    let Some(shard) = map.route(&api.application, chitin_client::stream_key(&q.key)) else {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("no shard of {} covers the key yet", api.application));
    };
    let Some(permit) = api.owner.permit(&shard.shard) else {
        if shard.holder_address.is_empty() {
            return (StatusCode::SERVICE_UNAVAILABLE, format!("shard {} has no holder now", shard.shard));
        }
        return (StatusCode::MISDIRECTED_REQUEST, shard.holder_address.clone());
    };
    let w = Write { request_id: &q.request_id, key: &q.key, value: &q.value };
    match api.db.write(&permit.token, api.check_fence, &w).await {
        Ok(()) => (StatusCode::OK, format!("{} {}", permit.token.shard, permit.token.epoch)),
        Err(WriteError::Fence(e)) => {
            api.owner.lost(&permit.token);
            (StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

async fn health(State(api): State<Api>) -> String {
    format!("serving {} shards\n", api.owner.count())
}
