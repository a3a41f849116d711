//! Health monitor: finds index entries whose instance key has expired and
//! cleans up after each dead instance in one Lua script (so several nodes
//! sweeping at once never do the same work twice: each dead instance's
//! index entry, claims and deployments are removed by exactly one sweeper,
//! and the reports of concurrent sweepers add up to exactly the dead set).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::AsyncCommands;
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::conn::RedisConn;
use super::deployments::TERMINAL_TTL_SECS;
use super::keys::{InvalidInstanceId, Keys, validate_instance_id};
use super::metrics::CoordMetrics;
use super::time::unix_now;

/// The message a dead instance's deployments are failed with.
pub(crate) fn orphaned_message(instance_id: &str) -> String {
    format!("Deployment orphaned: instance {instance_id} died")
}

/// KEYS: instance key, index, affinity by-instance set, deployments
/// by-instance set, deployments active set. ARGV: namespace, id, now,
/// message, terminal TTL. Returns {-1} when the instance is alive, else
/// {removed from index (0/1), {claims deleted}, {deployments failed}}.
pub(crate) const SWEEP_ONE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return {-1} end
local id = ARGV[2]
local in_index = redis.call('SREM', KEYS[2], id)
local aprefix = ARGV[1] .. ':affinity:'
local dprefix = ARGV[1] .. ':deployments:'
local val = id .. ':'
local n = string.len(val)
local claims = {}
for _, t in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  local k = aprefix .. t
  local v = redis.call('GET', k)
  if v and string.sub(v, 1, n) == val then
    redis.call('DEL', k)
    claims[#claims + 1] = t
  end
end
redis.call('DEL', KEYS[3])
local terminal = {succeeded=true, failed=true, cancelled=true}
local now = tonumber(ARGV[3])
local failed = {}
for _, d in ipairs(redis.call('SMEMBERS', KEYS[4])) do
  local k = dprefix .. d
  local raw = redis.call('GET', k)
  if raw then
    local ok, doc = pcall(cjson.decode, raw)
    if ok and type(doc) == 'table' and not terminal[doc.state] then
      doc.state = 'failed'
      doc.message = ARGV[4]
      doc.updated_at = now
      doc.finished_at = now
      redis.call('SET', k, cjson.encode(doc), 'EX', ARGV[5])
      failed[#failed + 1] = d
    end
  end
  redis.call('SREM', KEYS[5], d)
end
redis.call('DEL', KEYS[4])
return {in_index, claims, failed}
"#;

#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    #[error("instance {id} is alive (its instance key exists); not cleaning it up")]
    InstanceAlive { id: String },
    #[error(transparent)]
    InstanceId(#[from] InvalidInstanceId),
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// What one cleanup of one dead instance removed (by this caller).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct DeadInstanceReport {
    pub instance_id: String,
    /// This caller removed the id from `{ns}:instances:index`.
    pub removed_from_index: bool,
    /// Affinity claims deleted (target ids), sorted.
    pub claims_deleted: Vec<String>,
    /// Deployments marked `failed` as orphaned (ids), sorted.
    pub deployments_failed: Vec<String>,
}

impl DeadInstanceReport {
    /// Nothing was left to do (another sweeper got there first).
    pub fn is_empty(&self) -> bool {
        !self.removed_from_index && self.claims_deleted.is_empty() && self.deployments_failed.is_empty()
    }
}

/// What one sweep removed (only instances this sweeper did work for).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct SweepReport {
    pub instances: Vec<DeadInstanceReport>,
}

impl SweepReport {
    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }
    /// Ids this sweep removed from the index.
    pub fn removed_instances(&self) -> Vec<String> {
        self.instances.iter().filter(|r| r.removed_from_index).map(|r| r.instance_id.clone()).collect()
    }
    pub fn claims_deleted(&self) -> usize {
        self.instances.iter().map(|r| r.claims_deleted.len()).sum()
    }
    pub fn deployments_failed(&self) -> usize {
        self.instances.iter().map(|r| r.deployments_failed.len()).sum()
    }
}

/// Sweeps the registry for dead instances.
#[derive(Clone)]
pub struct Monitor {
    conn: RedisConn,
    keys: Keys,
    metrics: Arc<CoordMetrics>,
    script: Arc<redis::Script>,
}

impl Monitor {
    pub fn new(conn: RedisConn, keys: Keys, metrics: Arc<CoordMetrics>) -> Self {
        Monitor { conn, keys, metrics, script: Arc::new(redis::Script::new(SWEEP_ONE)) }
    }

    /// Index entries whose instance key has expired, sorted.
    pub async fn stale_instances(&self) -> Result<Vec<String>, MonitorError> {
        let mut c = self.conn.get().await?;
        let mut ids: Vec<String> = c.smembers(self.keys.instances_index()).await?;
        if ids.is_empty() {
            return Ok(ids);
        }
        ids.sort();
        let mut p = redis::pipe();
        for id in &ids {
            p.exists(self.keys.instance(id));
        }
        let alive: Vec<bool> = p.query_async(&mut c).await?;
        Ok(ids.into_iter().zip(alive).filter(|(_, a)| !a).map(|(id, _)| id).collect())
    }

    /// Cleans up after `id` (atomically): removes it from the index, deletes
    /// the claims still its own and its by-instance claim set, marks each of
    /// its non-terminal deployments `failed` with
    /// `Deployment orphaned: instance <id> died` (TTL 86400 s), removes them
    /// from the active set and drops its by-instance deployment set.
    /// Refused while the instance key exists.
    pub async fn cleanup_dead_instance(&self, id: &str) -> Result<DeadInstanceReport, MonitorError> {
        validate_instance_id(id)?;
        let mut c = self.conn.get().await?;
        let v: redis::Value = self
            .script
            .key(self.keys.instance(id))
            .key(self.keys.instances_index())
            .key(self.keys.affinity_by_instance(id))
            .key(self.keys.deployments_by_instance(id))
            .key(self.keys.deployments_active())
            .arg(self.keys.namespace())
            .arg(id)
            .arg(unix_now())
            .arg(orphaned_message(id))
            .arg(TERMINAL_TTL_SECS)
            .invoke_async(&mut c)
            .await?;
        let items: Vec<redis::Value> = redis::from_redis_value(&v)?;
        if items.len() == 1 {
            return Err(MonitorError::InstanceAlive { id: id.to_string() });
        }
        let (in_index, mut claims, mut failed): (i64, Vec<String>, Vec<String>) = redis::from_redis_value(&v)?;
        claims.sort();
        failed.sort();
        self.metrics.deployments_orphaned_total.fetch_add(failed.len() as u64, Ordering::Relaxed);
        self.metrics.claims_swept_total.fetch_add(claims.len() as u64, Ordering::Relaxed);
        Ok(DeadInstanceReport {
            instance_id: id.to_string(),
            removed_from_index: in_index == 1,
            claims_deleted: claims,
            deployments_failed: failed,
        })
    }

    /// One sweep: every stale index entry is cleaned up
    /// ([`Monitor::cleanup_dead_instance`]). Reports only what this sweeper
    /// removed; an instance that came back meanwhile is left alone.
    pub async fn sweep(&self) -> Result<SweepReport, MonitorError> {
        let mut report = SweepReport::default();
        for id in self.stale_instances().await? {
            match self.cleanup_dead_instance(&id).await {
                Ok(r) if r.is_empty() => {}
                Ok(r) => report.instances.push(r),
                Err(MonitorError::InstanceAlive { .. }) => {}
                Err(MonitorError::InstanceId(e)) => {
                    tracing::warn!(error = %e, "Skipping an index entry that is not a valid instance id");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(report)
    }

    /// The reference's `cleanup_stale`: a sweep, returning the ids removed
    /// from the index. (Removal from the index and the dead instance's
    /// cleanup are one atomic step, so nothing is left half done.)
    pub async fn cleanup_stale(&self) -> Result<Vec<String>, MonitorError> {
        Ok(self.sweep().await?.removed_instances())
    }
}

/// Sweeps every `interval` until `shutdown` turns true (or its sender is
/// dropped). Logs what it removed; errors are logged, never fatal.
pub(crate) fn spawn_monitor(monitor: Monitor, interval: Duration, mut shutdown: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                r = shutdown.changed() => {
                    if r.is_err() || *shutdown.borrow() { break; }
                    continue;
                }
            }
            match monitor.sweep().await {
                Ok(report) => {
                    if failing {
                        tracing::info!("Health monitor sweep recovered");
                        failing = false;
                    }
                    for r in &report.instances {
                        tracing::info!(
                            instance_id = %r.instance_id,
                            claims_deleted = r.claims_deleted.len(),
                            deployments_failed = r.deployments_failed.len(),
                            "Cleaned up dead instance"
                        );
                    }
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(error = %e, "Health monitor sweep failed");
                        failing = true;
                    }
                }
            }
        }
        tracing::debug!("Health monitor task stopped");
    })
}
