//! The lab of one run: its servers, its network, its node processes, and
//! the questions the nemesis asks of them (who holds what, has the cluster
//! recovered).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tonic::transport::Endpoint;

use crate::proto::{self, admin_client::AdminClient};
use crate::testkit::{NodeProc, PrivatePostgres, PrivateRedis, http_status};

use super::ChaosError;
use super::checker::Ranges;
use super::network::Network;
use super::rng::Rng;

/// The servers, network and nodes of a run.
pub struct Lab {
    pub nodes: Vec<NodeProc>,
    pub redis: PrivateRedis,
    pub redis_url: String,
    pub namespace: String,
    pub postgres: Option<PrivatePostgres>,
    pub network: Option<Network>,
    /// The run's database, as this process reaches it.
    pub database_url: String,
    pub ttl: Duration,
    pub renew: Duration,
    /// Database clock minus this process's clock, in microseconds.
    pub clock_offset_us: i64,
    /// Node processes that exited on their own and were started again.
    pub supervisor_restarts: Vec<String>,
    /// The cluster config file, which control sequences (a split) rewrite.
    pub config: PathBuf,
    /// The key range of every shard of every config the run pushed.
    pub ranges: Ranges,
}

/// Adds the key range of every shard of `config` to `ranges`.
pub fn note_ranges(config: &crate::topology::model::ClusterConfig, ranges: &mut Ranges) {
    for (_, s) in config.shards() {
        ranges.insert(s.id.clone(), (s.lower, s.upper));
    }
}

/// `cluster_config.json` with one `journal` application of `shards` equal
/// shards (a power of two), a replica on every node, and
/// `replication_factor` (at most the number of nodes).
pub fn cluster_config(nodes: &[(String, String)], shards: u32, replication_factor: usize) -> String {
    let shard_list: Vec<serde_json::Value> = crate::topology::ops::equal_ranges(shards)
        .into_iter()
        .map(|(lower, upper)| {
            let id = crate::topology::ops::shard_id("journal", lower, upper);
            let (lower, upper) = crate::topology::bounds::format_bounds(lower, upper);
            serde_json::json!({
                "id": id,
                "lower_bound": lower,
                "upper_bound": upper,
                "state": "active",
                "replicas": nodes.iter().enumerate().map(|(k, (n, _))| serde_json::json!({
                    "id": format!("{id}_{k:08x}"), "node_id": n
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::to_string_pretty(&serde_json::json!({
        "applications": [{
            "name": "journal",
            "implementation": "chitin-journal",
            "replication_factor": replication_factor,
            "shards": shard_list,
        }],
        "nodes": nodes.iter().map(|(n, a)| serde_json::json!({"id": n, "grpc_address": a})).collect::<Vec<_>>(),
        "version": 1,
    }))
    .expect("JSON")
}

impl Lab {
    /// This process's now on the database clock, in microseconds.
    pub fn db_now_us(&self) -> i64 {
        chrono::Utc::now().timestamp_micros() + self.clock_offset_us
    }

    /// Status as the first reachable node reports it.
    pub async fn status(&self) -> Option<proto::StatusResponse> {
        for n in &self.nodes {
            let Ok(ep) = Endpoint::from_shared(format!("http://{}", n.api)) else { continue };
            let ep = ep.connect_timeout(Duration::from_secs(1)).timeout(Duration::from_secs(3));
            let Ok(ch) = ep.connect().await else { continue };
            if let Ok(s) = AdminClient::new(ch).status(proto::StatusRequest {}).await {
                return Some(s.into_inner());
            }
        }
        None
    }

    /// Shards `node` holds by the cluster's status.
    pub async fn held_by(&self, node: &str) -> Vec<String> {
        match self.status().await {
            Some(s) => s.leases.into_iter().filter(|l| l.holder == node).map(|l| l.shard).collect(),
            None => Vec::new(),
        }
    }

    /// Live instance keys in the run's Redis namespace.
    async fn registered_instances(&self) -> Option<usize> {
        let client = redis::Client::open(self.redis_url.as_str()).ok()?;
        let mut c = tokio::time::timeout(Duration::from_secs(2), client.get_multiplexed_async_connection()).await.ok()?.ok()?;
        let index = format!("{}:instances:index", self.namespace);
        let ids: Vec<String> = redis::cmd("SMEMBERS").arg(&index).query_async(&mut c).await.ok()?;
        let mut live = 0;
        for id in ids {
            let exists: bool = redis::cmd("EXISTS").arg(format!("{}:instances:{id}", self.namespace)).query_async(&mut c).await.ok()?;
            live += usize::from(exists);
        }
        Some(live)
    }

    /// Waits until every node is ready, every shard has a live holder and
    /// every node is in the Redis registry. A node that exited on its own is
    /// started again, as its supervisor would, and noted.
    pub async fn wait_recovered(&mut self, within: Duration) -> Result<Duration, ChaosError> {
        let start = Instant::now();
        loop {
            for k in 0..self.nodes.len() {
                if !self.nodes[k].is_running() {
                    let name = self.nodes[k].name.clone();
                    tracing::warn!(node = %name, "node exited on its own; starting it again");
                    self.supervisor_restarts.push(format!("{name}: {}", self.nodes[k].log_tail(5)));
                    self.nodes[k].start()?;
                }
            }
            let mut ready = true;
            for n in &self.nodes {
                ready &= http_status(&n.metrics, "/readyz").await == 200;
            }
            if ready {
                let owned = self.status().await.is_some_and(|s| s.unowned.is_empty() && !s.leases.is_empty());
                if owned && self.registered_instances().await == Some(self.nodes.len()) {
                    return Ok(start.elapsed());
                }
            }
            if start.elapsed() > within {
                let tails: String =
                    self.nodes.iter().map(|n| format!("---- {}\n{}\n", n.name, n.log_tail(15))).collect();
                let unowned = self.status().await.map(|s| s.unowned);
                return Err(ChaosError::NotRecovered { within, unowned, tails });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Splits an active shard drawn from `rng` in two at its middle, with
    /// the control sequence `chitin cluster split-shard --split-at` runs
    /// (pushed to every node, each step converged, a 1 s bake); notes the
    /// children's ranges. Its error is the fault's outcome, not the run's.
    pub async fn split(&mut self, rng: &mut Rng) -> Result<String, String> {
        use crate::rollout::exec::{self, Prepared};
        use crate::rollout::plan::{self, Sequence};
        use crate::topology::model::ShardState;
        let config = crate::topology::file::load(&self.config).map_err(|e| e.to_string())?;
        let active: Vec<_> = config.shards().map(|(_, s)| s).filter(|s| s.state == ShardState::Active && s.upper > s.lower).collect();
        if active.is_empty() {
            return Err("no active shard to split".into());
        }
        let s = active[rng.below(active.len())];
        let (shard, range, at) = (s.id.clone(), s.range_string(), s.lower + (s.upper - s.lower) / 2 + 1);
        let seq = Sequence::SplitShard { shard_id: shard.clone(), split_at: Some(format!("{at:08x}")), children: 2 };
        let Prepared::Run { checkpoint, from, resumed } =
            exec::prepare(&self.config, seq, |c| plan::split_shard(c, &shard, &[at])).map_err(|e| e.to_string())?
        else {
            return Err(format!("split-shard of {shard} planned nothing"));
        };
        let opts = exec::Options { bake: Duration::from_secs(1), token: None, tls: None, ..exec::Options::default() };
        let mut progress = |line: &str| tracing::info!(%line, "split-shard");
        let outcome = exec::execute(&self.config, *checkpoint, from, resumed, &opts, &mut progress).await;
        // Every step that converged rewrote the file: its shards are the run's, done or not.
        let config = crate::topology::file::load(&self.config).map_err(|e| e.to_string())?;
        note_ranges(&config, &mut self.ranges);
        outcome.map_err(|e| e.to_string())?;
        Ok(format!("split {shard} ({range}) at {at:08x}"))
    }

    /// Hands every shard of node `k` over (Admin.Drain).
    /// Its error is the fault's outcome, not the run's: a drain that fails
    /// is a fault that did not take effect.
    pub async fn drain(&self, k: usize) -> Result<proto::DrainResponse, String> {
        let ep = Endpoint::from_shared(format!("http://{}", self.nodes[k].api))
            .map_err(|e| e.to_string())?
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(60));
        let ch = ep.connect().await.map_err(|e| format!("connect to {}: {e}", self.nodes[k].name))?;
        match AdminClient::new(ch).drain(proto::DrainRequest {}).await {
            Ok(r) => Ok(r.into_inner()),
            Err(s) => Err(format!("{:?}: {}", s.code(), s.message())),
        }
    }
}
