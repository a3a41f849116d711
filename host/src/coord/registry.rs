//! Instance registry: `{ns}:instances:{id}` (JSON, TTL liveness) and the
//! `{ns}:instances:index` set.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::affinity::Affinity;
use super::conn::RedisConn;
use super::keys::Keys;
use super::time::{ttl_secs, unix_now};

/// The JSON stored at `{ns}:instances:{id}`, field for field the reference's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceInfo {
    /// The UUID the database assigned at registration (never the configured name).
    pub instance_id: String,
    pub hostname: String,
    pub grpc_address: String,
    /// Unix seconds.
    pub started_at: u64,
    /// Unix seconds.
    pub last_heartbeat: u64,
    pub version: String,
}

impl InstanceInfo {
    /// Info for an instance starting now.
    pub fn new(
        instance_id: impl Into<String>,
        hostname: impl Into<String>,
        grpc_address: impl Into<String>,
        version: impl Into<String>,
    ) -> Self {
        let now = unix_now();
        InstanceInfo {
            instance_id: instance_id.into(),
            hostname: hostname.into(),
            grpc_address: grpc_address.into(),
            started_at: now,
            last_heartbeat: now,
            version: version.into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("instance info is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("refreshing affinity claims: {0}")]
    Affinity(#[from] super::affinity::AffinityError),
}

/// One index entry as `chitin cluster instances` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceStatus {
    pub instance_id: String,
    /// The instance key exists (its TTL has not lapsed).
    pub alive: bool,
    /// The stored info, when alive and readable.
    pub info: Option<InstanceInfo>,
}

impl InstanceStatus {
    pub fn grpc_address(&self) -> Option<&str> {
        self.info.as_ref().map(|i| i.grpc_address.as_str())
    }
    pub fn last_heartbeat(&self) -> Option<u64> {
        self.info.as_ref().map(|i| i.last_heartbeat)
    }
}

/// What a heartbeat found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatOutcome {
    /// The key was there; rewritten and its TTL refreshed.
    Refreshed,
    /// The key was gone (TTL lapsed, Redis restarted, or swept): registered again.
    Restored,
}

/// `SET` the info with its TTL and `SADD` the index in one step; returns
/// whether the key existed before.
const REGISTER: &str = r#"
local existed = redis.call('EXISTS', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
return existed
"#;

const DEREGISTER: &str = r#"
redis.call('DEL', KEYS[1])
return redis.call('SREM', KEYS[2], ARGV[1])
"#;

/// This node's entry in the registry.
#[derive(Clone)]
pub struct Registry {
    conn: RedisConn,
    keys: Keys,
    info: Arc<Mutex<InstanceInfo>>,
    liveness: Duration,
    register_script: Arc<redis::Script>,
    deregister_script: Arc<redis::Script>,
}

impl Registry {
    pub fn new(conn: RedisConn, keys: Keys, info: InstanceInfo, liveness: Duration) -> Self {
        Registry {
            conn,
            keys,
            info: Arc::new(Mutex::new(info)),
            liveness,
            register_script: Arc::new(redis::Script::new(REGISTER)),
            deregister_script: Arc::new(redis::Script::new(DEREGISTER)),
        }
    }

    pub fn instance_id(&self) -> String {
        self.info.lock().expect("info lock").instance_id.clone()
    }

    /// The info as last written.
    pub fn info(&self) -> InstanceInfo {
        self.info.lock().expect("info lock").clone()
    }

    /// `SET {ns}:instances:{id} json EX liveness` + `SADD {ns}:instances:index id`.
    pub async fn register(&self) -> Result<HeartbeatOutcome, RegistryError> {
        self.write().await
    }

    /// Rewrites the info with a fresh `last_heartbeat` and refreshes the TTL;
    /// re-registers (and says so) when the key had gone.
    pub async fn heartbeat(&self) -> Result<HeartbeatOutcome, RegistryError> {
        self.write().await
    }

    async fn write(&self) -> Result<HeartbeatOutcome, RegistryError> {
        let (id, json) = {
            let mut info = self.info.lock().expect("info lock");
            info.last_heartbeat = unix_now();
            (info.instance_id.clone(), serde_json::to_string(&*info)?)
        };
        let mut c = self.conn.get().await?;
        let existed: i64 = self
            .register_script
            .key(self.keys.instance(&id))
            .key(self.keys.instances_index())
            .arg(json)
            .arg(ttl_secs(self.liveness))
            .arg(&id)
            .invoke_async(&mut c)
            .await?;
        Ok(if existed == 1 { HeartbeatOutcome::Refreshed } else { HeartbeatOutcome::Restored })
    }

    /// `DEL` the key and `SREM` the index entry (graceful shutdown).
    pub async fn deregister(&self) -> Result<(), RegistryError> {
        let id = self.instance_id();
        let mut c = self.conn.get().await?;
        let _: i64 = self
            .deregister_script
            .key(self.keys.instance(&id))
            .key(self.keys.instances_index())
            .arg(&id)
            .invoke_async(&mut c)
            .await?;
        Ok(())
    }

    /// Every index entry, alive or stale.
    pub async fn list_instances(&self) -> Result<Vec<InstanceStatus>, RegistryError> {
        list_instances(&self.conn, &self.keys).await
    }
}

/// Every id in `{ns}:instances:index` with alive/stale and its stored info,
/// sorted by id.
pub(crate) async fn list_instances(conn: &RedisConn, keys: &Keys) -> Result<Vec<InstanceStatus>, RegistryError> {
    let mut c = conn.get().await?;
    let mut ids: Vec<String> = c.smembers(keys.instances_index()).await?;
    ids.sort();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let inst_keys: Vec<String> = ids.iter().map(|id| keys.instance(id)).collect();
    let values: Vec<Option<String>> = redis::cmd("MGET").arg(&inst_keys).query_async(&mut c).await?;
    Ok(ids
        .into_iter()
        .zip(values)
        .map(|(instance_id, v)| InstanceStatus {
            alive: v.is_some(),
            info: v.and_then(|s| serde_json::from_str(&s).ok()),
            instance_id,
        })
        .collect())
}

/// Heartbeats every `interval` until `shutdown` turns true (or its sender
/// is dropped). Each beat rewrites the instance key (re-registering when it
/// had gone) and then refreshes this node's affinity claims. Failures are
/// logged once when they start and once when they end, never fatal: when
/// Redis returns, the next beat restores the registration.
pub(crate) fn spawn_heartbeat(
    registry: Registry,
    affinity: Option<Affinity>,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the first tick is immediate; start() registered already
        let mut failing = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                r = shutdown.changed() => {
                    if r.is_err() || *shutdown.borrow() { break; }
                    continue;
                }
            }
            let result = async {
                let outcome = registry.heartbeat().await?;
                if let Some(a) = &affinity {
                    a.refresh_all().await?;
                }
                Ok::<_, RegistryError>(outcome)
            }
            .await;
            match result {
                Ok(outcome) => {
                    if failing {
                        tracing::info!("Cluster heartbeat recovered");
                        failing = false;
                    }
                    if outcome == HeartbeatOutcome::Restored {
                        tracing::info!(instance_id = %registry.instance_id(), "Instance key was missing; re-registered in the cluster registry");
                    }
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(error = %e, "Cluster heartbeat failed; retrying every heartbeat interval");
                        failing = true;
                    } else {
                        tracing::debug!(error = %e, "Cluster heartbeat still failing");
                    }
                }
            }
        }
        tracing::debug!("Heartbeat task stopped");
    })
}
