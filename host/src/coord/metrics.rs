//! Cluster figures for `/metrics` and `/health`.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use redis::AsyncCommands;
use serde::Serialize;

use super::affinity::orphaned_claims;
use super::conn::RedisConn;
use super::keys::Keys;

/// Counters kept in this process.
#[derive(Debug, Default)]
pub struct CoordMetrics {
    /// Dispatches that proceeded without a claim because Redis was unreachable.
    pub fail_open_total: AtomicU64,
    /// Deployments this node's monitor marked failed as orphaned.
    pub deployments_orphaned_total: AtomicU64,
    /// Claims of dead instances this node's monitor deleted.
    pub claims_swept_total: AtomicU64,
}

/// One reading of every figure. Gauges read from Redis are `None` when
/// Redis could not be reached.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct MetricsSnapshot {
    /// Index entries whose instance key exists.
    pub active_instances: Option<u64>,
    /// Targets this instance owns (`SCARD {ns}:affinity:by-instance:{id}`).
    pub owned_targets: Option<u64>,
    /// Claims whose owner's instance key is gone (cluster-wide).
    pub orphaned_targets: Option<u64>,
    pub fail_open_total: u64,
    /// `SCARD {ns}:deployments:active`.
    pub deployments_active: Option<u64>,
    pub deployments_orphaned_total: u64,
}

impl MetricsSnapshot {
    /// `/health`'s `cluster.healthy`: Redis answered.
    pub fn healthy(&self) -> bool {
        self.active_instances.is_some()
    }

    /// Registers the figures in `registry` (the gauges only when Redis
    /// answered; counter names get `_total` from the encoder).
    pub fn register(&self, registry: &mut Registry) {
        let gauges = [
            ("chitin_cluster_active_instances", "Registered instances whose key has not expired", self.active_instances),
            ("chitin_affinity_owned_targets", "Targets this instance owns", self.owned_targets),
            ("chitin_affinity_orphaned_targets", "Affinity claims whose owner's instance key is gone", self.orphaned_targets),
            ("chitin_deployments_active", "Deployments in the active set", self.deployments_active),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                registry.register(name, help, ConstGauge::new(v as i64));
            }
        }
        registry.register(
            "chitin_affinity_fail_open",
            "Dispatches that proceeded without an affinity check because Redis was unreachable",
            ConstCounter::new(self.fail_open_total),
        );
        registry.register(
            "chitin_deployments_orphaned",
            "Deployments this node's health monitor marked failed because their owner died",
            ConstCounter::new(self.deployments_orphaned_total),
        );
    }

    /// The figures alone in the Prometheus text format.
    pub fn to_prometheus(&self) -> String {
        let mut registry = Registry::default();
        self.register(&mut registry);
        let mut s = String::new();
        prometheus_text::encode(&mut s, &registry).expect("writing to a String cannot fail");
        s
    }
}

/// Reads every figure; a Redis failure leaves the gauges `None`.
pub(crate) async fn snapshot(conn: &RedisConn, keys: &Keys, instance_id: &str, counters: &CoordMetrics) -> MetricsSnapshot {
    let mut snap = MetricsSnapshot {
        fail_open_total: counters.fail_open_total.load(Ordering::Relaxed),
        deployments_orphaned_total: counters.deployments_orphaned_total.load(Ordering::Relaxed),
        ..Default::default()
    };
    let gauges = async {
        let mut c = conn.get().await?;
        let ids: Vec<String> = c.smembers(keys.instances_index()).await?;
        let mut p = redis::pipe();
        for id in &ids {
            p.exists(keys.instance(id));
        }
        p.scard(keys.affinity_by_instance(instance_id));
        p.scard(keys.deployments_active());
        let mut v: Vec<u64> = p.query_async(&mut c).await?;
        let deployments_active = v.pop().unwrap_or(0);
        let owned = v.pop().unwrap_or(0);
        let active = v.iter().filter(|&&x| x > 0).count() as u64;
        let orphaned = orphaned_claims(conn, keys).await?.len() as u64;
        Ok::<_, redis::RedisError>((active, owned, orphaned, deployments_active))
    };
    match gauges.await {
        Ok((a, o, orph, d)) => {
            snap.active_instances = Some(a);
            snap.owned_targets = Some(o);
            snap.orphaned_targets = Some(orph);
            snap.deployments_active = Some(d);
        }
        Err(e) => tracing::debug!(error = %e, "Cluster metrics unavailable"),
    }
    snap
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_names() {
        let s = MetricsSnapshot {
            active_instances: Some(3),
            owned_targets: Some(2),
            orphaned_targets: Some(0),
            fail_open_total: 5,
            deployments_active: Some(1),
            deployments_orphaned_total: 4,
        };
        let text = s.to_prometheus();
        for line in [
            "chitin_cluster_active_instances 3",
            "chitin_affinity_owned_targets 2",
            "chitin_affinity_orphaned_targets 0",
            "chitin_affinity_fail_open_total 5",
            "chitin_deployments_active 1",
            "chitin_deployments_orphaned_total 4",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from\n{text}");
        }
        let down = MetricsSnapshot { fail_open_total: 1, ..Default::default() };
        assert!(!down.healthy());
        assert!(!down.to_prometheus().contains("chitin_cluster_active_instances"));
        assert!(down.to_prometheus().contains("chitin_affinity_fail_open_total 1"));
    }
}
