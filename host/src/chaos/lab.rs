//! The lab of one run: its servers, its network, its node processes, and
//! the questions the nemesis asks of them (who holds what, has the cluster
//! recovered).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tonic::transport::Endpoint;

use crate::proto::{self, admin_client::AdminClient};
use crate::testkit::{KitError, NodeProc, PrivateMariadb, PrivatePostgres, PrivateRedis, http_status};

use crate::rollout::plan::{self, Plan, PlanError, Sequence};
use crate::topology::model::ClusterConfig;

use super::ChaosError;
use super::checker::Ranges;
use super::fault::FaultKind;
use super::network::Network;
use super::rng::Rng;

/// How many nodes an `add-node` fault may add in one run (each a spare
/// node process made ready at the start, with its own namespace).
pub const MAX_ADDED_NODES: usize = 2;

/// The servers, network and nodes of a run.
pub struct Lab {
    pub nodes: Vec<NodeProc>,
    /// Node processes not started yet, for `add-node` (unprovisioned: the
    /// sequence's first push gives them the config).
    pub spares: Vec<NodeProc>,
    pub redis: PrivateRedis,
    pub redis_url: String,
    pub namespace: String,
    /// The run's own database server, which the `database` fault crashes.
    pub server: Option<PrivateServer>,
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

/// A database server of the run's own (`--private-postgres`,
/// `--private-mariadb`).
pub enum PrivateServer {
    Postgres(PrivatePostgres),
    Mariadb(PrivateMariadb),
}

impl PrivateServer {
    /// Stops it at once, as a crash would.
    pub fn down(&mut self) -> Result<(), KitError> {
        match self {
            PrivateServer::Postgres(pg) => pg.down(),
            PrivateServer::Mariadb(db) => {
                db.down();
                Ok(())
            }
        }
    }

    /// Starts it again, waiting until it accepts connections.
    pub fn up(&mut self) -> Result<(), KitError> {
        match self {
            PrivateServer::Postgres(pg) => pg.up(),
            PrivateServer::Mariadb(db) => db.up(),
        }
    }

    /// How its stop is described in the report.
    pub fn stop_name(&self) -> &'static str {
        match self {
            PrivateServer::Postgres(_) => "PostgreSQL stopped (immediate)",
            PrivateServer::Mariadb(_) => "MariaDB killed",
        }
    }

    /// `(node URL, local URL, note)`: the nodes reach it on `node_host`,
    /// this process on loopback.
    pub fn urls(&self, node_host: &str) -> (String, String, String) {
        match self {
            PrivateServer::Postgres(pg) => {
                (pg.url(node_host), pg.url("127.0.0.1"), format!("private PostgreSQL on port {}", pg.port))
            }
            PrivateServer::Mariadb(db) => {
                (db.url(node_host), db.url("127.0.0.1"), format!("private MariaDB on port {}", db.port))
            }
        }
    }
}

/// Adds the key range of every shard of `config` to `ranges`.
pub fn note_ranges(config: &crate::topology::model::ClusterConfig, ranges: &mut Ranges) {
    for (_, s) in config.shards() {
        ranges.insert(s.id.clone(), (s.lower, s.upper));
    }
}

/// `cluster_config.json` with one `journal` application of `shards` equal
/// shards (a power of two) and `replication_factor` (at most the number of
/// nodes): shard `i` has a replica on `replication_factor` nodes from node
/// `i` on, round the ring, so that with fewer replicas than nodes every
/// shard has a node to move to.
pub fn cluster_config(nodes: &[(String, String)], shards: u32, replication_factor: usize) -> String {
    let shard_list: Vec<serde_json::Value> = crate::topology::ops::equal_ranges(shards)
        .into_iter()
        .enumerate()
        .map(|(i, (lower, upper))| {
            let id = crate::topology::ops::shard_id("journal", lower, upper);
            let (lower, upper) = crate::topology::bounds::format_bounds(lower, upper);
            let mut on: Vec<usize> = (0..replication_factor).map(|j| (i + j) % nodes.len()).collect();
            on.sort_unstable();
            serde_json::json!({
                "id": id,
                "lower_bound": lower,
                "upper_bound": upper,
                "state": "active",
                "replicas": on.iter().map(|&k| serde_json::json!({
                    "id": format!("{id}_{k:08x}"), "node_id": nodes[k].0
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

/// The moves `move-shard` may draw from: each active shard with a node of
/// the config that has no replica of it, as (shard, its replicas' nodes,
/// the nodes without one).
pub fn movable(config: &crate::topology::model::ClusterConfig) -> Vec<(String, Vec<String>, Vec<String>)> {
    use crate::topology::model::ShardState;
    config
        .shards()
        .map(|(_, s)| s)
        .filter(|s| s.state == ShardState::Active)
        .filter_map(|s| {
            let on: Vec<String> = s.replicas.iter().map(|r| r.node_id.clone()).collect();
            let off: Vec<String> = config.nodes.iter().map(|n| n.id.clone()).filter(|n| !on.contains(n)).collect();
            (!off.is_empty() && !on.is_empty()).then(|| (s.id.clone(), on, off))
        })
        .collect()
}

/// Whether the admin plane of the node at `api` answers (an unprovisioned
/// node answers before it is ready).
async fn admin_answers(api: &str) -> bool {
    let Ok(ep) = Endpoint::from_shared(format!("http://{api}")) else { return false };
    let ep = ep.connect_timeout(Duration::from_secs(1)).timeout(Duration::from_secs(3));
    match ep.connect().await {
        Ok(ch) => AdminClient::new(ch).get_config(proto::GetConfigRequest {}).await.is_ok(),
        Err(_) => false,
    }
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

    /// The shards each node holds (in the order of `nodes`), by one status
    /// of the cluster. Asked again for up to 10 s while no node answers or
    /// none holds anything: a status right after a database restart can
    /// fail, and a node fault would then take a node holding nothing.
    pub async fn held_by_each(&self) -> Vec<Vec<String>> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let status = self.status().await;
            let of = |node: &str| -> Vec<String> {
                let leases = status.iter().flat_map(|s| &s.leases);
                leases.filter(|l| l.holder == node).map(|l| l.shard.clone()).collect()
            };
            let by_node: Vec<Vec<String>> = self.nodes.iter().map(|n| of(&n.name)).collect();
            if by_node.iter().any(|h| !h.is_empty()) || Instant::now() >= deadline {
                return by_node;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
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
            let exists: bool =
                redis::cmd("EXISTS").arg(format!("{}:instances:{id}", self.namespace)).query_async(&mut c).await.ok()?;
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
                let tails: String = self.nodes.iter().map(|n| format!("---- {}\n{}\n", n.name, n.log_tail(15))).collect();
                let unowned = self.status().await.map(|s| s.unowned);
                return Err(ChaosError::NotRecovered { within, unowned, tails });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Splits an active shard drawn from `rng` in two at its middle, with
    /// the control sequence `chitin cluster split-shard --split-at` runs.
    /// Its error is the fault's outcome, not the run's.
    pub async fn split(&mut self, rng: &mut Rng) -> Result<String, String> {
        use crate::topology::model::ShardState;
        let config = crate::topology::file::load(&self.config).map_err(|e| e.to_string())?;
        let active: Vec<_> =
            config.shards().map(|(_, s)| s).filter(|s| s.state == ShardState::Active && s.upper > s.lower).collect();
        if active.is_empty() {
            return Err("no active shard to split".into());
        }
        let s = active[rng.below(active.len())];
        let (shard, range, at) = (s.id.clone(), s.range_string(), s.lower + (s.upper - s.lower) / 2 + 1);
        let seq = Sequence::SplitShard { shard_id: shard.clone(), split_at: Some(format!("{at:08x}")), children: 2 };
        self.run_sequence(seq, |c| plan::split_shard(c, &shard, &[at])).await?;
        Ok(format!("split {shard} ({range}) at {at:08x}"))
    }

    /// Whether the cluster as it is now can take a fault of `kind`: an
    /// add-node needs a spare node left, a move-shard a shard some node
    /// holds no replica of.
    pub fn can_inject(&self, kind: FaultKind) -> bool {
        match kind {
            FaultKind::AddNode => !self.spares.is_empty(),
            FaultKind::MoveShard => crate::topology::file::load(&self.config).is_ok_and(|c| !movable(&c).is_empty()),
            _ => true,
        }
    }

    /// Moves one replica of an active shard, drawn from `rng`, to a node
    /// that has none, with the control sequence `chitin cluster move-shard`
    /// runs. Its error is the fault's outcome, not the run's.
    pub async fn move_shard(&mut self, rng: &mut Rng) -> Result<String, String> {
        let config = crate::topology::file::load(&self.config).map_err(|e| e.to_string())?;
        let moves = movable(&config);
        if moves.is_empty() {
            return Err("every node holds a replica of every active shard: move-shard needs more --nodes than the \
                        replication factor, or an add-node before it"
                .into());
        }
        let (shard, on, off) = &moves[rng.below(moves.len())];
        let (from, to) = (&on[rng.below(on.len())], &off[rng.below(off.len())]);
        let seq = Sequence::MoveShard { shard_id: shard.clone(), from_node: from.clone(), to_node: to.clone() };
        self.run_sequence(seq, |c| plan::move_shard(c, shard, from, to)).await?;
        Ok(format!("moved {shard} from {from} to {to}"))
    }

    /// Starts the next spare node and adds it with the control sequence
    /// `chitin cluster add-node --rebalance` runs (the embedded placement
    /// policy's moves, which the nodes run too). A node added is one of the
    /// run's from then on; one that failed to join is stopped. Its error is
    /// the fault's outcome, not the run's.
    pub async fn add_node(&mut self) -> Result<String, String> {
        if self.spares.is_empty() {
            return Err(format!("no spare node left (at most {MAX_ADDED_NODES} a run)"));
        }
        let mut node = self.spares.remove(0);
        node.start().map_err(|e| e.to_string())?;
        match self.join(&node).await {
            Ok(detail) => {
                self.nodes.push(node);
                Ok(detail)
            }
            Err(why) => {
                let _ = node.kill9();
                Err(why)
            }
        }
    }

    async fn join(&mut self, node: &NodeProc) -> Result<String, String> {
        let start = Instant::now();
        while !admin_answers(&node.api).await {
            if start.elapsed() > Duration::from_secs(60) {
                return Err(format!("{} did not answer its admin plane within 60 s:\n{}", node.name, node.log_tail(15)));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let policies = crate::policy::Policies::embedded_defaults().map_err(|e| format!("the embedded policies: {e}"))?;
        let max = crate::settings::Settings::default().leases.max_handoffs_per_round;
        let (name, api) = (node.name.clone(), node.api.clone());
        let seq = Sequence::AddNode { node_id: name.clone(), node_address: api.clone(), rebalance: true };
        self.run_sequence(seq, |c| plan::add_node_and_rebalance(c, &name, &api, vec![], max, |r| policies.rebalance(r))).await?;
        let on = crate::topology::file::load(&self.config)
            .map(|c| c.shards().flat_map(|(_, s)| &s.replicas).filter(|r| r.node_id == name).count())
            .unwrap_or(0);
        Ok(format!("added {name} ({api}) with a rebalance ({on} replicas on it)"))
    }

    /// Plans `seq` and runs it as `chitin cluster` would (pushed to every
    /// node, each step converged, a 1 s bake), then notes the ranges of
    /// every config it wrote (every step that converged rewrote the file:
    /// its shards are the run's, done or not).
    async fn run_sequence(
        &mut self,
        seq: Sequence,
        plan: impl FnOnce(&ClusterConfig) -> Result<Plan, PlanError>,
    ) -> Result<(), String> {
        use crate::rollout::exec::{self, Prepared};
        let verb = seq.verb();
        let Prepared::Run { checkpoint, from, resumed } = exec::prepare(&self.config, seq, plan).map_err(|e| e.to_string())?
        else {
            return Err(format!("{verb} planned nothing"));
        };
        let opts = exec::Options { bake: Duration::from_secs(1), token: None, tls: None, ..exec::Options::default() };
        let mut progress = |line: &str| tracing::info!(%line, "{verb}");
        let outcome = exec::execute(&self.config, *checkpoint, from, resumed, &opts, &mut progress).await;
        let config = crate::topology::file::load(&self.config).map_err(|e| e.to_string())?;
        note_ranges(&config, &mut self.ranges);
        outcome.map(|_| ()).map_err(|e| e.to_string())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(n: usize) -> Vec<(String, String)> {
        (1..=n).map(|k| (format!("node-{k:02}"), format!("127.0.0.1:{}", 5000 + k))).collect()
    }

    fn config(n: usize, rf: usize) -> ClusterConfig {
        ClusterConfig::from_json(&cluster_config(&nodes(n), 4, rf)).unwrap()
    }

    #[test]
    fn with_fewer_replicas_than_nodes_every_shard_has_a_node_to_move_to() {
        let full = config(3, 3);
        assert!(movable(&full).is_empty(), "each of three nodes holds every shard");
        let c = config(4, 3);
        let moves = movable(&c);
        assert_eq!(moves.len(), 4);
        for (shard, on, off) in &moves {
            assert_eq!((on.len(), off.len()), (3, 1), "{shard}");
            assert!(!on.contains(&off[0]));
        }
        // Round the ring: shard i leaves out node i + 3, so each node is left out once.
        let mut left_out: Vec<&str> = moves.iter().map(|(_, _, off)| off[0].as_str()).collect();
        left_out.sort_unstable();
        assert_eq!(left_out, ["node-01", "node-02", "node-03", "node-04"]);
        // A split parent is not moved: only active shards are.
        let mut c = c;
        c.applications[0].shards[0].state = crate::topology::model::ShardState::Splitting;
        assert_eq!(movable(&c).len(), 3);
    }
}
