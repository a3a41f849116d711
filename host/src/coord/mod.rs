//! Redis coordination: instance registry, health monitor, target affinity,
//! deployment state and fail-open dispatch.
//!
//! The key layout is the reference's, byte for byte, under a namespace
//! (`chitin` by default); see `docs/design.md` ("Redis keys"):
//!
//! | key | type | TTL |
//! |---|---|---|
//! | `{ns}:instances:{id}` | string, JSON [`InstanceInfo`] | liveness timeout |
//! | `{ns}:instances:index` | set of instance ids | none |
//! | `{ns}:affinity:{target_id}` | string `{instance_id}:` | liveness timeout |
//! | `{ns}:affinity:by-instance:{id}` | set of target ids | liveness timeout |
//! | `{ns}:deployments:{uuid}` | string, JSON [`Deployment`] | 3600 s active, 86400 s terminal |
//! | `{ns}:deployments:active` | set | none |
//! | `{ns}:deployments:by-instance:{id}` | set | none |
//!
//! Every multi-key update is one Lua script, so several nodes acting at once
//! never see (or cause) half an update. On a Redis Cluster that needs every
//! key of a namespace in one hash slot: the namespace carries a hash tag
//! (`{chitin}`), and the keys read `{chitin}:affinity:…`.
//!
//! Entry point: [`Coordinator::connect`] builds every piece for one node;
//! the pieces ([`Registry`], [`Affinity`], [`Deployments`], [`Monitor`]) can
//! also be built on their own from a [`RedisConn`] and [`Keys`].

pub mod affinity;
pub(crate) mod conn;
pub(crate) mod deployments;
pub(crate) mod fail_open;
pub mod fail_open_window;
pub(crate) mod keys;
pub(crate) mod metrics;
pub(crate) mod monitor;
pub(crate) mod registry;
mod time;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use crate::settings::redis_url::{RedisTarget, hash_tag};
pub use affinity::{Affinity, AffinityError, Claim, DEFAULT_MAX_CLAIMS, MAX_TARGET_BYTES, ReleaseAllReport};
pub use conn::{Conn, ConnError, RedisConn, RedisSettings};
pub use deployments::{
    Deployment, DeploymentError, DeploymentState, DeploymentUpdate, Deployments, ListFilter, Listing, NewDeployment, Progress,
    TransitionError, Unreadable,
};
pub use fail_open::{Declined, Dispatch, Dispatcher, FAIL_OPEN_MESSAGE, FailOpenPolicy, RateLimiter};
pub use fail_open_window::FailOpenWindow;
pub use keys::{InvalidInstanceId, Keys, validate_instance_id};
pub use metrics::{CoordMetrics, MetricsSnapshot};
pub use monitor::{DeadInstanceReport, Monitor, MonitorError, SweepReport};
pub use registry::{HeartbeatOutcome, InstanceInfo, InstanceStatus, Registry, RegistryError};

/// Default namespace (the reference's is `thorax`).
pub const DEFAULT_NAMESPACE: &str = "chitin";

/// Everything one node needs to coordinate through Redis.
#[derive(Debug, Clone)]
pub struct CoordConfig {
    /// Connection, timeouts and reconnect behaviour.
    pub redis: RedisSettings,
    /// Key namespace (`[cluster] namespace`), default `chitin`.
    pub namespace: String,
    /// `[cluster] heartbeat_interval_secs` (default 10 s).
    pub heartbeat_interval: Duration,
    /// `[cluster] liveness_timeout_secs` (default 30 s): TTL of the instance
    /// key, of every affinity claim and of the by-instance claim set.
    pub liveness_timeout: Duration,
    /// How often the health monitor sweeps (default: the heartbeat interval).
    pub monitor_interval: Duration,
    /// Retries before a dispatch fails open.
    pub fail_open: FailOpenPolicy,
    /// Claims this instance may hold at once (`[cluster] max_claims_per_instance`).
    pub max_claims: u64,
}

impl CoordConfig {
    /// Reference defaults: heartbeat 10 s, liveness 30 s, namespace `chitin`.
    pub fn new(redis_url: impl Into<String>) -> Self {
        CoordConfig {
            redis: RedisSettings::new(redis_url),
            namespace: DEFAULT_NAMESPACE.to_string(),
            heartbeat_interval: Duration::from_secs(10),
            liveness_timeout: Duration::from_secs(30),
            monitor_interval: Duration::from_secs(10),
            fail_open: FailOpenPolicy::default(),
            max_claims: affinity::DEFAULT_MAX_CLAIMS,
        }
    }
}

/// Errors building a [`Coordinator`].
#[derive(Debug, thiserror::Error)]
pub enum CoordError {
    #[error(transparent)]
    Conn(#[from] ConnError),
    #[error(transparent)]
    InstanceId(#[from] InvalidInstanceId),
    #[error("liveness timeout ({liveness:?}) must be at least one second and longer than the heartbeat interval ({heartbeat:?})")]
    Timing { liveness: Duration, heartbeat: Duration },
    #[error(
        "namespace {namespace:?} has no hash tag, so on Redis Cluster its keys would spread over hash slots, but one \
         claim writes the target's key and the instance's set together: write it with one, e.g. \"{{{namespace}}}\""
    )]
    NoHashTag { namespace: String },
}

/// The coordination pieces of one node, sharing one connection and one set
/// of metrics.
#[derive(Clone)]
pub struct Coordinator {
    pub config: CoordConfig,
    pub conn: RedisConn,
    pub keys: Keys,
    pub metrics: Arc<CoordMetrics>,
    pub registry: Registry,
    pub affinity: Affinity,
    pub dispatcher: Dispatcher,
    pub deployments: Deployments,
    pub monitor: Monitor,
}

impl Coordinator {
    /// Builds every piece for the node described by `info`. Does not touch
    /// Redis yet: the connection is made on first use, so a node whose Redis
    /// is down at start still starts (and fails open). Call
    /// [`Coordinator::start`] to register and run the background tasks.
    pub fn new(config: CoordConfig, info: InstanceInfo) -> Result<Self, CoordError> {
        validate_instance_id(&info.instance_id)?;
        if config.liveness_timeout < Duration::from_secs(1) || config.liveness_timeout <= config.heartbeat_interval {
            return Err(CoordError::Timing { liveness: config.liveness_timeout, heartbeat: config.heartbeat_interval });
        }
        let conn = RedisConn::new(config.redis.clone())?;
        if conn.is_cluster() && hash_tag(&config.namespace).is_none() {
            return Err(CoordError::NoHashTag { namespace: config.namespace.clone() });
        }
        let keys = Keys::new(&config.namespace);
        let metrics = Arc::new(CoordMetrics::default());
        let registry = Registry::new(conn.clone(), keys.clone(), info.clone(), config.liveness_timeout);
        let affinity = Affinity::new(conn.clone(), keys.clone(), &info.instance_id, config.liveness_timeout)?
            .with_max_claims(config.max_claims);
        let dispatcher = Dispatcher::new(affinity.clone(), config.fail_open.clone(), metrics.clone());
        let deployments = Deployments::new(conn.clone(), keys.clone(), &info.instance_id)?;
        let monitor = Monitor::new(conn.clone(), keys.clone(), metrics.clone());
        Ok(Coordinator { config, conn, keys, metrics, registry, affinity, dispatcher, deployments, monitor })
    }

    /// Connects, builds and starts: one registration attempt (a failure is
    /// logged, not returned: the heartbeat task keeps retrying), then the
    /// heartbeat and monitor tasks until `shutdown` turns true.
    pub async fn start(&self, shutdown: watch::Receiver<bool>) -> BackgroundTasks {
        if let Err(e) = self.registry.register().await {
            tracing::warn!(error = %e, "Cluster registration failed; will retry on every heartbeat");
        }
        BackgroundTasks {
            heartbeat: registry::spawn_heartbeat(
                self.registry.clone(),
                Some(self.affinity.clone()),
                self.config.heartbeat_interval,
                shutdown.clone(),
            ),
            monitor: monitor::spawn_monitor(self.monitor.clone(), self.config.monitor_interval, shutdown),
        }
    }

    /// Graceful shutdown, the reference's order for the coordination part:
    /// release every affinity claim at once, then deregister. (Stopping new
    /// connections comes before, letting in-flight work finish after: both
    /// belong to the node.) Errors are logged, never fatal.
    pub async fn shutdown(&self) {
        match self.affinity.release_all().await {
            Ok(r) => tracing::info!(released = r.released, "Released affinity claims"),
            Err(e) => tracing::warn!(error = %e, "Could not release affinity claims; they lapse on their TTL"),
        }
        if let Err(e) = self.registry.deregister().await {
            tracing::warn!(error = %e, "Could not deregister; the instance key lapses on its TTL");
        }
    }

    /// Current figures for `/metrics` and `/health`.
    pub async fn metrics_snapshot(&self) -> MetricsSnapshot {
        metrics::snapshot(&self.conn, &self.keys, self.affinity.instance_id(), &self.metrics).await
    }
}

/// Handles of the background tasks started by [`Coordinator::start`].
pub struct BackgroundTasks {
    pub heartbeat: JoinHandle<()>,
    pub monitor: JoinHandle<()>,
}

impl BackgroundTasks {
    /// Waits for both tasks (after the shutdown signal was sent).
    pub async fn join(self) {
        let _ = self.heartbeat.await;
        let _ = self.monitor.await;
    }
}
