//! A chitin node: one process beside one instance of the sharded service.
//!
//! Layout:
//! - [`shard_map`]: the shards with leases and key routing (pure);
//! - [`plan`]: what one lease round does (pure);
//! - [`leases`]: the held leases, renewal, handoff, ownership events;
//! - [`journal`]: the reference journal (fenced appends, forwarding);
//! - [`metrics`]: counters;
//! - this module: start-up (checks, identity, registration), the round
//!   loop, drain and graceful stop.
//!
//! Lifecycle: `joining` (registered, taking the shards it is preferred for)
//! → `active` (after its first round) → `leaving` (SIGTERM or drain: hands
//! every shard to the recipient the `drain` policy names) → deregistered.

pub mod journal;
pub mod leases;
pub mod metrics;
pub mod plan;
pub mod shard_map;
pub mod stored;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chitin_policy_sdk as sdk;
use tokio::sync::watch;
use uuid::Uuid;

use crate::lease::{self, NodeRecord, NodeState, Store, StoreOptions};
use crate::policy::{Policies, PolicyCallError, PolicyLoadError};
use crate::settings::Settings;
use crate::topology::{self, ClusterConfig};

use leases::Leases;
use metrics::Metrics;
use plan::{Action, LeaseView, LiveNode, RoundInput};
use shard_map::ShardMap;

/// Why a node could not start (or stopped abnormally).
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Policy(#[from] PolicyLoadError),
    #[error(transparent)]
    PolicyCall(#[from] PolicyCallError),
    #[error(transparent)]
    Store(#[from] lease::LeaseError),
    #[error(transparent)]
    StartCheck(#[from] lease::checks::StartCheckError),
    #[error("the cluster config {path} cannot be served: {reason}")]
    ClusterConfig { path: String, reason: String },
    #[error(transparent)]
    Stored(#[from] stored::StoredError),
    #[error(
        "the node name {name:?} {why}; set [cluster] instance_id or CHITIN__CLUSTER__INSTANCE_ID to a non-empty \
         name without `:`"
    )]
    InvalidName { name: String, why: &'static str },
    #[error("Redis coordination: {0}")]
    Coordination(String),
    #[error("this node has no cluster config yet (UNPROVISIONED); bootstrap it first")]
    NoClusterConfig,
    #[error(
        "this node's name `{name}` is not a node of the cluster config (its nodes: {nodes}); set \
         [cluster] instance_id or CHITIN__CLUSTER__INSTANCE_ID to one of them"
    )]
    NotInConfig { name: String, nodes: String },
    #[error("cannot create the data dir {path}: {source}")]
    DataDir { path: String, source: std::io::Error },
    #[error("cannot listen on {addr} ({what}): {source}")]
    Listen {
        addr: String,
        what: &'static str,
        source: std::io::Error,
    },
}

/// Why a new cluster config was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigRefused {
    #[error("the new config breaks the transition rules: {}", .0.join("; "))]
    Rules(Vec<String>),
    #[error(transparent)]
    Store(stored::StoredError),
}

/// Where a node stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    Joining,
    Active,
    Leaving,
    /// Drained by `chitin cluster drain`: holds nothing, takes nothing, runs on.
    Drained,
}

impl Lifecycle {
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Joining => "joining",
            Lifecycle::Active => "active",
            Lifecycle::Leaving => "leaving",
            Lifecycle::Drained => "drained",
        }
    }
}

/// What a drain did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainReport {
    pub handed_over: u32,
    pub rounds: u32,
    /// Shards that found no recipient (no other live replica node).
    pub kept: Vec<String>,
}

/// The cluster config a node serves and the shard map derived from it.
#[derive(Debug)]
pub struct Topology {
    pub config: ClusterConfig,
    pub map: ShardMap,
}

/// The shared state of a running node.
pub struct Node {
    pub name: String,
    pub uuid: Uuid,
    pub address: String,
    pub standalone: bool,
    pub settings: Settings,
    pub store: Store,
    policies: std::sync::RwLock<Arc<Policies>>,
    topology: std::sync::RwLock<Arc<Topology>>,
    pub leases: Leases,
    pub metrics: Arc<Metrics>,
    /// Redis coordination (cluster mode only).
    pub coord: Option<crate::coord::Coordinator>,
    lifecycle: watch::Sender<Lifecycle>,
    /// The latest registrations, refreshed every round.
    registry: Mutex<Vec<NodeRecord>>,
    started: std::time::Instant,
}

impl Node {
    /// Runs the start sequence: policies, name, database checks, cluster
    /// meta, registration. The node is `joining` after it. A cluster-mode
    /// node needs its provisioned config (and the id `bootstrap` gave it).
    pub async fn start(settings: Settings, provisioned: Option<stored::Provisioned>) -> Result<Arc<Node>, NodeError> {
        let standalone = !settings.cluster.enabled;
        let data_dir = settings.node.data_dir.clone();
        std::fs::create_dir_all(&data_dir).map_err(|source| NodeError::DataDir {
            path: data_dir.display().to_string(),
            source,
        })?;
        let policies = Arc::new(Policies::load(&settings.policies, Some(data_dir.join("policy-cache")))?);
        let given = provisioned.as_ref().and_then(|p| p.node_id.clone());
        let name = match given.or_else(|| settings.cluster.instance_id.clone()) {
            Some(name) => name,
            None => {
                let p = policies.clone();
                let ctx = sdk::InstanceContext {
                    env: std::env::vars().collect(),
                    hostname: hostname(),
                };
                tokio::task::spawn_blocking(move || p.instance_id(ctx)).await.expect("policy task")?
            }
        };
        if let Some(why) = crate::policy::invalid_name_reason(&name) {
            return Err(NodeError::InvalidName { name, why });
        }

        let url = settings.database_url();
        lease::checks::check_url(&url, !standalone)?;
        let options = StoreOptions {
            lease_ttl: settings.lease_ttl(),
            // A node is live for lease purposes while it heartbeats within a
            // TTL: a paused node's shards go at their expiry, not later.
            liveness_timeout: settings.lease_ttl(),
            ..StoreOptions::default()
        };
        let store = Store::connect_with(&url, options).await?;
        store.migrate().await?;
        lease::checks::run(&store, !standalone).await?;

        let (config, map, address) = if standalone {
            let address = local_address(&settings.api.listen);
            (standalone_config(&name, &address), ShardMap::standalone(&name, shard_map::STANDALONE_SHARDS), address)
        } else {
            let config = provisioned.ok_or(NodeError::NoClusterConfig)?.config;
            let me = config.node(&name).ok_or_else(|| NodeError::NotInConfig {
                name: name.clone(),
                nodes: config.nodes.iter().map(|n| n.id.as_str()).collect::<Vec<_>>().join(", "),
            })?;
            let address = settings.cluster.advertise.clone().unwrap_or_else(|| me.grpc_address.clone());
            let map = ShardMap::from_config(&config);
            (config, map, address)
        };
        // The shard count every node must agree on is the number of shards
        // the keyspaces were first divided into: splits add children under a
        // parent and leave it unchanged, so a node restarted after a split
        // still agrees with the cluster.
        let shard_count = config.shards().filter(|(_, s)| s.parent_id.is_none()).count();
        let shard_count = if standalone { map.shards().len() } else { shard_count };
        store
            .check_cluster_meta(shard_count as u64, settings.lease_ttl(), settings.renew_interval())
            .await?;
        let uuid = store.register_node(&name, &address).await?;
        tracing::info!(%name, %uuid, %address, standalone, "registered; joining");

        let coord = if standalone { None } else { Some(coordinator(&settings, uuid, &address)?) };
        let metrics = Arc::new(Metrics::default());
        let ttl = settings.lease_ttl();
        let safety = settings.renew_interval().min(ttl / 4);
        let leases = Leases::new(store.clone(), uuid, ttl, safety, metrics.clone());
        Ok(Arc::new(Node {
            name,
            uuid,
            address,
            standalone,
            settings,
            store,
            policies: std::sync::RwLock::new(policies),
            topology: std::sync::RwLock::new(Arc::new(Topology { config, map })),
            leases,
            metrics,
            coord,
            lifecycle: watch::channel(Lifecycle::Joining).0,
            registry: Mutex::new(Vec::new()),
            started: std::time::Instant::now(),
        }))
    }

    /// The policy components in use.
    pub fn policies(&self) -> Arc<Policies> {
        self.policies.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Loads the configured policy components again (after they changed on
    /// disk). A reload that fails keeps the components in use and says why;
    /// calls in progress finish on the components they started with.
    pub fn reload_policies(&self) -> Result<Vec<String>, PolicyLoadError> {
        let fresh = Policies::load(&self.settings.policies, Some(self.settings.node.data_dir.join("policy-cache")))?;
        let loaded = crate::policy::Slot::ALL
            .iter()
            .map(|slot| format!("{slot}: {}", fresh.slot(*slot).plugin().name()))
            .collect();
        *self.policies.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(fresh);
        tracing::info!(?loaded, "policies reloaded");
        Ok(loaded)
    }

    /// The cluster config served now and its shard map.
    pub fn topology(&self) -> Arc<Topology> {
        self.topology.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Moves to a newer cluster config: every transition rule must hold
    /// between the served config and `new`. Stored before it is served.
    pub fn update_config(&self, new: ClusterConfig) -> Result<u64, ConfigRefused> {
        let mut topology = self.topology.write().unwrap_or_else(|p| p.into_inner());
        let report = topology::validate_transition(&topology.config, &new);
        if !report.is_valid() {
            let all = report.old.iter().chain(&report.new).chain(&report.transition);
            return Err(ConfigRefused::Rules(all.map(ToString::to_string).collect()));
        }
        if new.node(&self.name).is_none() {
            return Err(ConfigRefused::Rules(vec![format!(
                "[node-removed] the new config no longer has this node `{}`; drain and stop it instead",
                self.name
            )]));
        }
        stored::save(&self.settings.node.data_dir, &new, None).map_err(ConfigRefused::Store)?;
        let version = new.version;
        let map = ShardMap::from_config(&new);
        *topology = Arc::new(Topology { config: new, map });
        tracing::info!(version, "serving a new cluster config");
        Ok(version)
    }

    /// The node's lifecycle state.
    pub fn lifecycle(&self) -> Lifecycle {
        *self.lifecycle.borrow()
    }

    /// How long the node has been running.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    fn set_lifecycle(&self, to: Lifecycle) {
        self.lifecycle.send_replace(to);
    }

    /// Whether the node takes work: registered, not leaving.
    pub fn is_ready(&self) -> bool {
        matches!(self.lifecycle(), Lifecycle::Joining | Lifecycle::Active)
    }

    /// The latest registrations seen.
    pub fn registry(&self) -> Vec<NodeRecord> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the registrations again.
    pub async fn refresh_registry(&self) -> Result<Vec<NodeRecord>, lease::LeaseError> {
        let nodes = self.store.nodes().await?;
        *self.registry.lock().unwrap_or_else(|p| p.into_inner()) = nodes.clone();
        Ok(nodes)
    }

    /// The live registration of node `name` (the newest one).
    pub fn live_node(&self, name: &str) -> Option<NodeRecord> {
        self.registry().into_iter().find(|n| n.name == name && n.live)
    }

    /// The live registration with id `uuid`.
    pub fn registration(&self, uuid: Uuid) -> Option<NodeRecord> {
        self.registry().into_iter().find(|n| n.id == uuid)
    }

    /// The policy records of the config's nodes, with their current states.
    fn policy_nodes(&self, registry: &[NodeRecord]) -> Vec<sdk::Node> {
        let me = self.lifecycle();
        self.topology()
            .config
            .nodes
            .iter()
            .map(|n| {
                let state = if n.id == self.name {
                    match me {
                        Lifecycle::Joining => sdk::NodeState::Joining,
                        Lifecycle::Active => sdk::NodeState::Active,
                        Lifecycle::Leaving | Lifecycle::Drained => sdk::NodeState::Leaving,
                    }
                } else {
                    match registry.iter().find(|r| r.name == n.id && r.live).map(|r| r.state) {
                        Some(NodeState::Joining) => sdk::NodeState::Joining,
                        Some(NodeState::Active) => sdk::NodeState::Active,
                        Some(NodeState::Leaving) => sdk::NodeState::Leaving,
                        Some(NodeState::Down) | None => sdk::NodeState::Down,
                    }
                };
                let labels: Vec<sdk::Label> =
                    n.metadata.iter().map(|m| sdk::Label { key: m.key.clone(), value: m.value.clone() }).collect();
                sdk::Node {
                    id: n.id.clone(),
                    address: n.grpc_address.clone(),
                    zone: labels.iter().find(|l| l.key == "zone").map(|l| l.value.clone()),
                    labels,
                    state,
                }
            })
            .collect()
    }

    fn policy_shards(&self) -> (Vec<sdk::Shard>, Vec<sdk::Replica>) {
        let topology = self.topology();
        let shards = topology
            .map
            .shards()
            .iter()
            .map(|s| sdk::Shard {
                id: s.id.clone(),
                application: s.application.clone(),
                lower: s.lower,
                upper: s.upper,
                state: match s.state {
                    topology::ShardState::Active => sdk::ShardState::Active,
                    topology::ShardState::Splitting => sdk::ShardState::Splitting,
                    topology::ShardState::Activating => sdk::ShardState::Activating,
                    topology::ShardState::Inactive => sdk::ShardState::Inactive,
                },
                parent: s.parent.clone(),
            })
            .collect();
        let replicas = topology
            .map
            .shards()
            .iter()
            .flat_map(|s| {
                s.replica_nodes.iter().map(|n| sdk::Replica {
                    id: format!("{}@{n}", s.id),
                    shard: s.id.clone(),
                    node: n.clone(),
                })
            })
            .collect();
        (shards, replicas)
    }

    /// Calls a policy off the async runtime and counts it.
    async fn call_policy<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Policies) -> Result<T, PolicyCallError> + Send + 'static,
    ) -> Result<T, PolicyCallError> {
        let policies = self.policies();
        self.metrics.policy_calls.inc();
        let result = tokio::task::spawn_blocking(move || f(&policies)).await.expect("policy task");
        if result.is_err() {
            self.metrics.policy_errors.inc();
        }
        result
    }

    /// One lease round: heartbeat, renew, read the cluster, rank, act.
    pub async fn round(&self) -> Result<(), NodeError> {
        self.store.heartbeat(self.uuid).await?;
        self.leases.renew_all().await;
        let registry = self.refresh_registry().await?;
        let rows = self.store.holders().await?;
        self.take_up_handed_over(&rows).await;

        let (shards, replicas) = self.policy_shards();
        let nodes = self.policy_nodes(&registry);
        let rankings = self
            .call_policy(move |p| p.preferred_holders(sdk::RankingRequest { nodes, shards, replicas }))
            .await?;
        let rankings: Vec<(String, Vec<String>)> = rankings.into_iter().map(|r| (r.shard, r.nodes)).collect();

        let live: HashMap<String, LiveNode> = registry
            .iter()
            .filter(|r| r.live && r.name != self.name)
            .map(|r| {
                (
                    r.name.clone(),
                    LiveNode {
                        uuid: r.id,
                        leaving: r.state == NodeState::Leaving,
                    },
                )
            })
            .collect();
        let leases: HashMap<String, LeaseView> = rows
            .into_iter()
            .map(|r| (r.shard, LeaseView { live_holder: r.holder.filter(|_| r.live) }))
            .collect();
        let held: HashSet<String> = self.leases.held_ids();
        let lifecycle = self.lifecycle();
        let input = RoundInput {
            me: &self.name,
            my_uuid: self.uuid,
            leaving: matches!(lifecycle, Lifecycle::Leaving | Lifecycle::Drained),
            rankings: &rankings,
            live: &live,
            leases: &leases,
            held: &held,
            max_handoffs: self.settings.leases.max_handoffs_per_round as usize,
        };
        for action in plan::plan_round(&input) {
            match action {
                Action::Acquire { shard } => {
                    if let Err(e) = self.leases.acquire(&shard).await {
                        tracing::warn!(%shard, error = %e, "cannot acquire lease");
                    }
                }
                Action::Handover { shard, to, to_uuid } => match self.leases.hand_over(&shard, to_uuid).await {
                    Ok(lease) => tracing::info!(%shard, %to, epoch = lease.epoch, "handed over"),
                    Err(e) => tracing::warn!(%shard, %to, error = %e, "handoff failed; keeping the shard"),
                },
            }
        }
        if lifecycle == Lifecycle::Joining {
            self.store.set_node_state(self.uuid, NodeState::Active).await?;
            self.set_lifecycle(Lifecycle::Active);
            tracing::info!(name = %self.name, "active");
        }
        Ok(())
    }

    /// A live lease the database gives this node that its lease table lacks
    /// was handed over by a peer (or outlived a late renewal here): serve it
    /// from this round on, not from the first append that happens to arrive,
    /// and so that a drain of this node hands it on. Renewal is the check:
    /// it succeeds only for the current epoch, unexpired.
    async fn take_up_handed_over(&self, rows: &[lease::LeaseRow]) {
        for row in plan::handed_to_me(rows, self.uuid, &self.leases.held_ids()) {
            match self.leases.adopt(self.lease_of(row)).await {
                Ok(()) => tracing::info!(shard = %row.shard, epoch = row.epoch, "took up a lease handed to this node"),
                Err(e) => tracing::debug!(shard = %row.shard, error = %e, "cannot take up lease"),
            }
        }
    }

    /// This node's lease as `row` records it.
    fn lease_of(&self, row: &lease::LeaseRow) -> lease::Lease {
        lease::Lease {
            shard: row.shard.clone(),
            holder: self.uuid,
            holder_name: self.name.clone(),
            epoch: row.epoch,
            expires_at: row.expires_at.unwrap_or_default(),
        }
    }

    /// Runs rounds every renew interval until `shutdown` fires; a watchdog
    /// stops serving leases whose renewals did not get through in time.
    pub async fn run_rounds(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let interval = self.settings.renew_interval();
        let watchdog = {
            let node = self.clone();
            let mut shutdown = shutdown.clone();
            tokio::spawn(async move {
                let tick = (interval / 4).clamp(Duration::from_millis(20), Duration::from_millis(250));
                loop {
                    tokio::select! {
                        _ = shutdown.changed() => break,
                        _ = tokio::time::sleep(tick) => node.leases.expire_overdue(),
                    }
                }
            })
        };
        loop {
            if let Err(e) = self.round().await {
                tracing::warn!(error = %e, "lease round failed; retrying next round");
            }
            tokio::select! {
                _ = shutdown.changed() => break,
                _ = tokio::time::sleep(interval) => {}
            }
        }
        watchdog.abort();
    }

    /// Hands every held shard to the recipient the `drain` policy names, in
    /// rounds of at most `max_handoffs_per_round`. The node takes nothing
    /// afterwards (`leaving`, then `drained` unless `stopping`).
    pub async fn drain(&self, stopping: bool) -> Result<DrainReport, NodeError> {
        self.set_lifecycle(Lifecycle::Leaving);
        self.store.set_node_state(self.uuid, NodeState::Leaving).await?;
        let registry = self.refresh_registry().await?;
        let (shards, replicas) = self.policy_shards();
        let holders: Vec<sdk::Holder> = self
            .leases
            .held_ids()
            .into_iter()
            .map(|shard| sdk::Holder { shard, node: self.name.clone() })
            .collect();
        let request = sdk::DrainRequest {
            leaving: self.name.clone(),
            nodes: self.policy_nodes(&registry),
            shards,
            replicas,
            holders,
            load: Vec::new(),
            max_per_round: self.settings.leases.max_handoffs_per_round,
        };
        let rounds = match self.call_policy(move |p| p.plan_drain(request)).await {
            Ok(rounds) => rounds,
            Err(e) => {
                tracing::warn!(error = %e, "the drain policy refused; leases will expire instead");
                Vec::new()
            }
        };
        let mut report = DrainReport::default();
        for round in rounds {
            report.rounds += 1;
            // Handoffs of one round go one after another: each is one short
            // transaction, and the round bound is what limits churn.
            for h in &round {
                let to = registry.iter().find(|r| r.name == h.target && r.live).map(|r| r.id);
                let handed = match to {
                    Some(to) => self.leases.hand_over(&h.shard, to).await.is_ok(),
                    None => false,
                };
                if handed {
                    report.handed_over += 1;
                } else {
                    report.kept.push(h.shard.clone());
                }
            }
        }
        if !stopping {
            self.set_lifecycle(Lifecycle::Drained);
        }
        tracing::info!(?report, "drained");
        Ok(report)
    }

    /// Graceful stop: drain (or, standalone, release) and deregister.
    pub async fn stop(&self) {
        if self.standalone {
            self.set_lifecycle(Lifecycle::Leaving);
            self.leases.release_all().await;
        } else if let Err(e) = self.drain(true).await {
            tracing::warn!(error = %e, "drain failed during stop; remaining leases will expire");
        }
        // Whatever could not be handed over is released so the next replica
        // node need not wait for the TTL.
        self.leases.release_all().await;
        if let Some(coord) = &self.coord {
            coord.shutdown().await;
        }
        if let Err(e) = self.store.deregister(self.uuid).await {
            tracing::warn!(error = %e, "cannot deregister");
        }
    }
}

/// The Redis coordinator of a cluster-mode node; it connects on first use,
/// so a node whose Redis is down still starts (and fails open).
fn coordinator(settings: &Settings, uuid: Uuid, address: &str) -> Result<crate::coord::Coordinator, NodeError> {
    let url = settings.cluster.redis_url.clone().unwrap_or_default();
    let mut config = crate::coord::CoordConfig::new(url);
    config.namespace = settings.cluster.namespace.clone();
    config.heartbeat_interval = settings.heartbeat_interval();
    config.liveness_timeout = settings.liveness_timeout();
    config.monitor_interval = settings.heartbeat_interval();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    let info = crate::coord::InstanceInfo {
        instance_id: uuid.to_string(),
        hostname: hostname().unwrap_or_default(),
        grpc_address: address.to_string(),
        started_at: now,
        last_heartbeat: now,
        version: env!("CARGO_PKG_VERSION").to_string(),
    };
    crate::coord::Coordinator::new(config, info).map_err(|e| NodeError::Coordination(e.to_string()))
}

/// The one-node config of standalone mode.
fn standalone_config(name: &str, address: &str) -> ClusterConfig {
    ClusterConfig {
        applications: Vec::new(),
        nodes: vec![topology::Node {
            id: name.to_string(),
            grpc_address: address.to_string(),
            metadata: Vec::new(),
        }],
        version: 1,
        metadata: Vec::new(),
    }
}

/// A dialable address for a listen address (`0.0.0.0` becomes loopback).
pub fn local_address(listen: &str) -> String {
    match listen.rsplit_once(':') {
        Some(("0.0.0.0" | "[::]" | "", port)) => format!("127.0.0.1:{port}"),
        _ => listen.to_string(),
    }
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}
