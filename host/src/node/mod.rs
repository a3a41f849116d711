//! A chitin node: one process beside one instance of the sharded service.
//!
//! Layout (the design of record is `docs/design.md`):
//! - [`shard_map`]: the shards with leases and key routing (pure);
//! - [`plan`]: every decision of a round, a drain and an append (pure);
//! - [`leases`]: the held leases, renewal, handoff, ownership events;
//! - [`acks`]: the application's part in a handoff (RELEASED after DRAINING);
//! - [`assignments`]: the whole assignment map streamed to clients;
//! - [`round`]: the lease round loop: read, plan, apply;
//! - [`drain`]: handing every shard over (drain, graceful stop);
//! - [`journal`]: the reference journal (fenced appends, forwarding);
//! - [`peers`]: pooled channels to the other nodes, ownership notices;
//! - [`liveness`]: the liveness session and the watch of the next node;
//! - [`policy_hashes`]: the same policy components on every node;
//! - `records`: the members' releases and components, the cluster version;
//! - [`fallback`]: the embedded default answering for a failing component;
//! - [`control`]: the process's control block (the node once it exists);
//! - [`metrics`]: the node's counters;
//! - [`load`]: append load per shard and sub-range, for the split policy;
//! - [`observed`]: the cluster as the status page and `/metrics` read it, cached;
//! - this module: start-up (checks, identity, registration).
//!
//! Lifecycle: `joining` (registered, taking the shards it is preferred for)
//! → `active` (after its first round) → `leaving` (SIGTERM or drain: hands
//! every shard to the recipient the `drain` policy names) → deregistered.

pub(crate) mod acks;
pub(crate) mod assignments;
pub(crate) mod control;
pub(crate) mod drain;
mod fallback;
pub mod group_commit;
pub mod journal;
pub(crate) mod leases;
pub(crate) mod liveness;
pub mod load;
pub mod metrics;
pub mod observed;
pub(crate) mod peers;
pub mod plan;
pub mod policy_hashes;
pub mod rankings;
mod records;
pub(crate) mod round;
pub(crate) mod routes;
pub mod shard_map;
pub mod stored;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chitin_policy_sdk as sdk;
use tokio::sync::{Notify, watch};
use uuid::Uuid;

use crate::lease::{self, NodeRecord, Store, StoreOptions};
use crate::policy::{Policies, PolicyCallError, PolicyLoadError};
use crate::settings::Settings;
use crate::topology::{self, ClusterConfig, policy_view};

use leases::Leases;
use metrics::Metrics;
use peers::Peers;
use shard_map::ShardMap;

pub use observed::{ClusterView, Observed};
pub use records::PolicyRecords;

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
        "the node name {name:?} {why}; set [cluster] instance_id or CHITIN__CLUSTER__INSTANCE_ID to a name of 1 \
         to {} bytes without `:`, whitespace or control characters",
        crate::names::MAX_NODE_NAME
    )]
    InvalidName { name: String, why: &'static str },
    #[error(transparent)]
    Upgrade(#[from] crate::upgrade::JoinError),
    #[error("Redis coordination: {0}")]
    Coordination(#[from] crate::coord::CoordError),
    #[error("this node has no cluster config yet (UNPROVISIONED); bootstrap it first")]
    NoClusterConfig,
    #[error(
        "this node's name `{name}` is not a node of the cluster config (its nodes: {nodes}); set \
         [cluster] instance_id or CHITIN__CLUSTER__INSTANCE_ID to one of them"
    )]
    NotInConfig { name: String, nodes: String },
    #[error("cannot create the data dir {path}: {source}")]
    DataDir { path: String, source: std::io::Error },
    #[error(
        "this node's registration {uuid} was marked down by the cluster: either its heartbeat was older than the \
         liveness timeout (the process was paused, starved or cut off from the database that long), or a peer \
         found its liveness session ended and could not reach this node's address; it stopped serving and exits \
         so that its supervisor restarts it with a fresh registration"
    )]
    RegistrationLost { uuid: Uuid },
    #[error(transparent)]
    TokenFile(#[from] crate::security::auth::TokenFileError),
    #[error(transparent)]
    Tls(#[from] crate::security::tls::TlsError),
    /// TLS to a store failed on a certificate: a settings mistake, not an
    /// outage, so the node does not start.
    #[error(
        "TLS to {store} failed: {reason}; check that {key} holds the CA that signed the server's certificate, \
         and that the host name of the URL is one of that certificate's names"
    )]
    StoreTls { store: &'static str, key: &'static str, reason: String },
    #[error(
        "this node takes its cluster's lease timing (TTL {ttl:?}, renew interval {round:?}: leases.ttl_secs and \
         leases.renew_interval_secs are unset), which its other settings do not fit: {source}"
    )]
    ClusterTiming { ttl: Duration, round: Duration, source: crate::settings::SettingsError },
    #[error("cannot listen on {addr} ({what}): {source}")]
    Listen { addr: String, what: &'static str, source: std::io::Error },
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
    /// Only the node reaches the store; the API asks it.
    store: Store,
    policies: std::sync::RwLock<Arc<Policies>>,
    topology: std::sync::RwLock<Arc<Topology>>,
    /// Held by [`Node::update_config`] for a whole update: one at a time.
    config_update: Mutex<()>,
    pub leases: Leases,
    pub metrics: Arc<Metrics>,
    /// Redis coordination (cluster mode only).
    pub coord: Option<crate::coord::Coordinator>,
    lifecycle: watch::Sender<Lifecycle>,
    /// The latest registrations, refreshed every round.
    registry: Mutex<Vec<NodeRecord>>,
    /// Channels to the other nodes.
    pub peers: Arc<Peers>,
    /// Wakes the round loop for a round now (a new config, a notice).
    kick: Notify,
    /// Set when the node must stop on its own: its registration is gone.
    fatal: watch::Sender<bool>,
    started: std::time::Instant,
    /// The liveness session opened at start, until its task takes it.
    session: Mutex<Option<lease::session::LiveSession>>,
    /// Since when the liveness session is being taken again (`None` while
    /// it is up): the node serves what it holds and takes nothing new
    /// meanwhile, for a TTL at most ([`liveness::may_take_leases`]).
    session_down_since: Mutex<Option<std::time::Instant>>,
    /// The slots whose component differs from the cluster's, as last read.
    policy_mismatch: Mutex<Vec<policy_hashes::Mismatch>>,
    /// The embedded default, for a slot whose component fails.
    fallback: Arc<fallback::Fallback>,
    /// Appends counted per shard and sub-range.
    pub load: load::Load,
    /// Concurrent appends to one shard, committed together.
    group_commit: Arc<group_commit::GroupCommit>,
    /// Shards whose last action in a round waited out its lock bound: tried
    /// last in the next rounds ([`plan::defer_waited`]).
    lock_waited: Mutex<std::collections::HashSet<String>>,
    /// The last preferred holders and what they were ranked on.
    rankings: rankings::Memo<rankings::RankingKey, rankings::Rankings>,
    /// Where shards held elsewhere were last found: forwards without a read.
    routes: routes::Routes,
    /// The assignment map for `WatchAssignments`.
    pub assignments: assignments::Publisher,
    /// The last read the status page and `/metrics` show.
    observed: observed::Cache,
}

impl Node {
    /// Runs the start sequence: policies, name, database checks, cluster
    /// meta, registration. The node is `joining` after it. A cluster-mode
    /// node needs its provisioned config (and the id `bootstrap` gave it).
    pub async fn start(mut settings: Settings, provisioned: Option<stored::Provisioned>) -> Result<Arc<Node>, NodeError> {
        let standalone = !settings.cluster.enabled;
        let data_dir = settings.node.data_dir.clone();
        std::fs::create_dir_all(&data_dir)
            .map_err(|source| NodeError::DataDir { path: data_dir.display().to_string(), source })?;
        let policies = Arc::new(Policies::load(&settings.policies, Some(data_dir.join("policy-cache")))?);
        let given = provisioned.as_ref().and_then(|p| p.node_id.clone());
        let name = node_name(given, &settings, &policies).await?;
        let store = open_store(&mut settings, standalone).await?;
        let (config, map, address) = serving(&settings, provisioned, &name)?;
        // The shard count every node must agree on is the number of shards
        // the keyspaces were first divided into: splits add children under a
        // parent and leave it unchanged, so a node restarted after a split
        // still agrees with the cluster.
        let shard_count = config.shards().filter(|(_, s)| s.parent_id.is_none()).count();
        store.check_cluster_meta(shard_count as u64, settings.lease_ttl(), settings.renew_interval()).await?;
        let uuid = store.register_node(&name, &address).await?;
        // Recorded before anything else, so that peers see this node's
        // components as soon as they can see the node (a peer hands no
        // lease to a node whose components differ).
        let cluster_policies = if standalone {
            None
        } else {
            let allow = settings.policies.allow_mismatch;
            Some(policy_hashes::record(&store, uuid, &name, &policies.hashes(), allow, false).await?)
        };
        crate::upgrade::join(&store, uuid).await?;
        let session = if !standalone && settings.cluster.session_liveness && lease::session::supported(store.dialect()) {
            Some(store.open_session(uuid, settings.lease_ttl(), liveness::OWN_LOCK_WAIT).await?)
        } else {
            None
        };
        tracing::info!(%name, %uuid, %address, standalone, session = session.is_some(), "registered; joining");

        let coord = if standalone { None } else { Some(coordinator(&settings, uuid, &address).await?) };
        let metrics = Arc::new(Metrics::default());
        let ttl = settings.lease_ttl();
        let safety = settings.renew_interval().min(ttl / 4);
        let acks = acks::Acks::new(settings.leases.release_timeout(), settings.leases.ready_timeout());
        let leases = Leases::new(store.clone(), uuid, ttl, safety, acks, metrics.clone());
        let peers = Arc::new(Peers::new(&settings)?);
        let node = Arc::new(Node {
            name,
            uuid,
            address,
            standalone,
            settings,
            store,
            policies: std::sync::RwLock::new(policies),
            topology: std::sync::RwLock::new(Arc::new(Topology { config, map })),
            config_update: Mutex::new(()),
            leases,
            metrics,
            coord,
            lifecycle: watch::channel(Lifecycle::Joining).0,
            registry: Mutex::new(Vec::new()),
            peers,
            kick: Notify::new(),
            fatal: watch::channel(false).0,
            started: std::time::Instant::now(),
            session: Mutex::new(session),
            session_down_since: Mutex::new(None),
            policy_mismatch: Mutex::new(Vec::new()),
            lock_waited: Mutex::default(),
            fallback: Arc::default(),
            load: load::Load::default(),
            group_commit: Arc::default(),
            rankings: Default::default(),
            routes: Default::default(),
            observed: Default::default(),
            assignments: Default::default(),
        });
        if let Some(cluster) = cluster_policies {
            node.compare_policies(&cluster);
        }
        Ok(node)
    }

    /// The liveness session opened at start, for [`Node::run_liveness`]
    /// (`None` without one, or once taken).
    pub fn take_session(&self) -> Option<lease::session::LiveSession> {
        self.session.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// The slots whose component differs from the cluster's record.
    pub fn policy_mismatch(&self) -> Vec<policy_hashes::Mismatch> {
        self.policy_mismatch.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// `slot: error` for each slot whose component failed its last call
    /// and the embedded default answers for.
    pub fn policy_fallbacks(&self) -> Vec<String> {
        self.fallback.failing()
    }

    /// Whether this node's components are the cluster's, or
    /// `policies.allow_mismatch` lets it run with others: one that ranks
    /// holders differently would pull leases back and forth.
    fn runs_cluster_components(&self) -> bool {
        self.settings.policies.allow_mismatch || self.policy_mismatch.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    /// Records this node's components (and, with `adopt`, makes them the
    /// cluster's), then compares them with the cluster's record.
    pub async fn record_policies(&self, adopt: bool) -> Result<(), lease::LeaseError> {
        let allow = self.settings.policies.allow_mismatch;
        let cluster = policy_hashes::record(&self.store, self.uuid, &self.name, &self.policies().hashes(), allow, adopt).await?;
        self.compare_policies(&cluster);
        Ok(())
    }

    /// Reads the cluster's record again (another node may have adopted new
    /// components) and compares; the registrations that take no leases.
    pub async fn check_policies(&self) -> Result<std::collections::HashSet<Uuid>, lease::LeaseError> {
        let cluster = policy_hashes::cluster(&self.store).await?;
        self.compare_policies(&cluster);
        Ok(policy_hashes::refusing(&policy_hashes::by_node(&self.store).await?, &cluster))
    }

    /// `registry` as this node plans a round or a drain with it: the peers
    /// that take no leases count as leaving ([`plan::refusing_as_leaving`]).
    /// A standalone node has no peers and nothing to compare.
    pub(crate) async fn planning_registry(&self, registry: Vec<NodeRecord>) -> Result<Vec<NodeRecord>, lease::LeaseError> {
        if self.standalone {
            return Ok(registry);
        }
        let refusing = self.check_policies().await?;
        Ok(plan::refusing_as_leaving(&registry, &refusing))
    }

    fn compare_policies(&self, cluster: &policy_hashes::Hashes) {
        let found = policy_hashes::mismatches(&self.policies().hashes(), cluster);
        let mut current = self.policy_mismatch.lock().unwrap_or_else(|p| p.into_inner());
        if *current != found {
            for m in &found {
                if self.settings.policies.allow_mismatch {
                    tracing::warn!(%m, "policy mismatch allowed by policies.allow_mismatch; taking leases anyway");
                } else {
                    tracing::error!(
                        %m,
                        "policy mismatch: this node takes no leases until it runs the cluster's component (or \
                         `chitin policy reload --adopt` makes this one the cluster's; policies.allow_mismatch = true \
                         lets it run with others)"
                    );
                }
            }
            if found.is_empty() && !current.is_empty() {
                tracing::info!("policies match the cluster's again");
            }
            *current = found;
        }
    }

    /// Loads the configured components again and records them (with
    /// `adopt`, as the cluster's); the slots loaded.
    pub async fn reload(self: &Arc<Self>, adopt: bool) -> Result<Vec<String>, NodeError> {
        let node = self.clone();
        let slots = tokio::task::spawn_blocking(move || node.reload_policies()).await.expect("policy task")?;
        if !self.standalone {
            self.record_policies(adopt).await?;
        }
        Ok(slots)
    }

    /// The policy components in use.
    pub fn policies(&self) -> Arc<Policies> {
        self.policies.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Loads the configured policy components again (after they changed on
    /// disk). A reload that fails keeps the components in use and says why;
    /// calls in progress finish on the components they started with.
    pub fn reload_policies(&self) -> Result<Vec<String>, NodeError> {
        let fresh = Policies::load(&self.settings.policies, Some(self.settings.node.data_dir.join("policy-cache")))?;
        self.ask_instance_id(&fresh)?;
        let loaded =
            crate::policy::Slot::ALL.iter().map(|slot| format!("{slot}: {}", fresh.slot(*slot).plugin().name())).collect();
        *self.policies.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(fresh);
        tracing::info!(?loaded, "policies reloaded");
        Ok(loaded)
    }

    /// Asks the instance-id policy of components about to be reloaded for
    /// this node's name, as the node did at start: a policy that fails or
    /// names nothing valid fails the reload (the previous components stay).
    /// A node cannot change its name while it runs, so a different answer
    /// is logged and takes effect at the next start. A name set by
    /// `cluster.instance_id` never asked the policy, and is not asked now.
    fn ask_instance_id(&self, fresh: &Policies) -> Result<(), NodeError> {
        if self.settings.cluster.instance_id.is_some() {
            return Ok(());
        }
        let ctx = sdk::InstanceContext { env: crate::policy::instance_env(&self.settings.policies), hostname: hostname() };
        let name = fresh.instance_id(ctx)?;
        if let Some(why) = crate::names::problem(&name) {
            return Err(NodeError::InvalidName { name, why });
        }
        if name != self.name {
            tracing::warn!(
                current = %self.name,
                reloaded = %name,
                "the reloaded instance-id policy names this node differently; it keeps its name until it restarts"
            );
        }
        Ok(())
    }

    /// The cluster config served now and its shard map.
    pub fn topology(&self) -> Arc<Topology> {
        self.topology.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Moves to a newer cluster config: every transition rule must hold
    /// between the served config and `new`. Stored before it is served.
    /// Blocking (validation, fsync): call it off the async threads. One
    /// update runs at a time, and readers of the served config never wait
    /// for its validation or its fsync, only for the swap.
    pub fn update_config(&self, new: ClusterConfig) -> Result<u64, ConfigRefused> {
        let _one = self.config_update.lock().unwrap_or_else(|p| p.into_inner());
        let served = self.topology();
        let report = topology::validate_transition(&served.config, &new);
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
        *self.topology.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(Topology { config: new, map });
        tracing::info!(version, "serving a new cluster config");
        // Requests waiting for a holder route again; the round acts at once
        // (a finished split is seeded without waiting for the interval).
        self.leases.notify_change();
        self.assignments.poke();
        self.kick.notify_one();
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

    /// The live registration with id `uuid`.
    pub fn registration(&self, uuid: Uuid) -> Option<NodeRecord> {
        self.registry().into_iter().find(|n| n.id == uuid)
    }

    /// The policy input of the served config: its nodes with the states
    /// this node knows (its own lifecycle, the registry's), its shards and
    /// replicas. The rollout builds the same records with every node active.
    fn policy_input(&self, registry: &[NodeRecord]) -> (Vec<sdk::Node>, Vec<sdk::Shard>, Vec<sdk::Replica>) {
        let topology = self.topology();
        (self.policy_nodes(registry), policy_view::shards(&topology.config), policy_view::replicas(&topology.config))
    }

    /// The config's nodes with the states the policies see.
    fn policy_nodes(&self, registry: &[NodeRecord]) -> Vec<sdk::Node> {
        let mine = self.lifecycle();
        policy_view::nodes_with_states(&self.topology().config, |id| plan::node_state(id, &self.name, mine, registry))
    }

    /// Calls a policy off the async runtime and counts it.
    async fn call_policy<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Policies) -> Result<T, PolicyCallError> + Send + 'static,
    ) -> Result<T, PolicyCallError> {
        let policies = self.policies();
        self.metrics.policy_calls.inc();
        // The call's span is a child of the caller's (the round's, say).
        let span = tracing::Span::current();
        let result = tokio::task::spawn_blocking(move || span.in_scope(|| f(&policies))).await.expect("policy task");
        if result.is_err() {
            self.metrics.policy_errors.inc();
        }
        result
    }

    /// Calls `slot`'s component with `f`; when the call fails, the embedded
    /// default answers it (loudly: see [`fallback`]), so that a broken
    /// component never stops takeovers or drains. The answer, and whether
    /// the default gave it.
    async fn call_policy_or_default<T: Send + 'static>(
        &self,
        slot: crate::policy::Slot,
        f: impl Fn(&Policies) -> Result<T, PolicyCallError> + Clone + Send + 'static,
    ) -> Result<(T, bool), PolicyCallError> {
        let failure = match self.call_policy(f.clone()).await {
            Ok(answer) => {
                self.fallback.record(slot, None);
                return Ok((answer, false));
            }
            Err(e) => e,
        };
        if self.fallback.record(slot, Some(&failure)) {
            tracing::warn!(
                %slot,
                error = %failure,
                "the policy component failed; the embedded default answers for it until it answers again"
            );
        }
        self.metrics.policy_fallbacks.inc();
        let fallback = self.fallback.clone();
        let answer = tokio::task::spawn_blocking(move || fallback.defaults().and_then(|d| f(&d))).await.expect("policy task")?;
        Ok((answer, true))
    }

    /// This node's lease of `shard` at `epoch`, to take up with
    /// [`Leases::adopt`], whose renewal proves it and sets the expiry.
    fn own_lease(&self, shard: &str, epoch: i64) -> lease::Lease {
        lease::Lease {
            shard: shard.to_string(),
            holder: self.uuid,
            holder_name: self.name.clone(),
            epoch,
            liveness_epoch: None,
            expires_at: Default::default(),
        }
    }

    /// The lease row of one shard.
    pub async fn lease_row(&self, shard: &str) -> Result<Option<lease::LeaseRow>, lease::LeaseError> {
        self.store.lease(shard).await
    }

    /// One shard's lease row and the database clock that judges it.
    pub async fn lease_now(
        &self,
        shard: &str,
    ) -> Result<(Option<lease::LeaseRow>, chrono::DateTime<chrono::Utc>), lease::LeaseError> {
        let row = self.store.lease(shard).await?;
        Ok((row, self.store.now().await?))
    }

    /// The registrations, every lease row and the database's clock, read
    /// together for a status answer.
    pub async fn cluster_view(&self) -> Result<ClusterView, lease::LeaseError> {
        let registry = self.refresh_registry().await?;
        let rows = self.store.holders().await?;
        let now = self.store.now().await?;
        Ok(ClusterView { registry, rows, now })
    }

    /// The cluster and its versions as the status page and `/metrics` show
    /// them: one database read shared by every caller within
    /// [`observed::FRESH`], answered while the next one runs within
    /// [`observed::STALE`]. The error says why the database could not be read.
    pub async fn observed(&self) -> Result<Arc<Observed>, String> {
        let store = self.store.clone();
        self.observed.get(move || async move { observed::read(&store).await }).await
    }

    /// Whether the node must stop on its own (its registration is gone).
    pub fn is_fatal(&self) -> bool {
        *self.fatal.borrow()
    }

    /// Resolves when the node must stop on its own, with the reason.
    pub async fn fatal(&self) -> NodeError {
        let mut rx = self.fatal.subscribe();
        if rx.wait_for(|lost| *lost).await.is_err() {
            std::future::pending::<()>().await;
        }
        NodeError::RegistrationLost { uuid: self.uuid }
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
/// Runs at the cluster's recorded lease timing when `settings` leave it to
/// the cluster ([`crate::settings::LeaseSettings::at_cluster_timing`]).
/// The node's name: the one `bootstrap` gave it, else `cluster.instance_id`,
/// else the instance-id policy's answer; refused unless it is a node name.
async fn node_name(given: Option<String>, settings: &Settings, policies: &Arc<Policies>) -> Result<String, NodeError> {
    let name = match given.or_else(|| settings.cluster.instance_id.clone()) {
        Some(name) => name,
        None => {
            let p = policies.clone();
            let ctx = sdk::InstanceContext { env: crate::policy::instance_env(&settings.policies), hostname: hostname() };
            tokio::task::spawn_blocking(move || p.instance_id(ctx)).await.expect("policy task")?
        }
    };
    match crate::names::problem(&name) {
        Some(why) => Err(NodeError::InvalidName { name, why }),
        None => Ok(name),
    }
}

/// The store, checked, migrated, and with the cluster's lease timing taken
/// into `settings` where they leave it unset.
async fn open_store(settings: &mut Settings, standalone: bool) -> Result<Store, NodeError> {
    let url = settings.database_url();
    lease::checks::check_url(&url, !standalone)?;
    let options = StoreOptions {
        lease_ttl: settings.lease_ttl(),
        // A node is live for lease purposes while it heartbeats within a
        // TTL: a paused node's shards go at their expiry, not later.
        liveness_timeout: settings.lease_ttl(),
        max_handoffs_per_round: settings.leases.max_handoffs_per_round,
        handoff_window: settings.renew_interval(),
        max_connections: settings.database.max_connections,
        acquire_timeout: std::time::Duration::from_secs_f64(settings.database.acquire_timeout_secs),
    };
    let mut store = Store::connect_with(&url, options).await.map_err(|e| match crate::security::tls::tls_cause(&e) {
        Some(reason) => NodeError::StoreTls { store: "the database", key: "database.ca_file", reason },
        None => e.into(),
    })?;
    lease::checks::run(&store, !standalone).await?;
    store.migrate().await?;
    take_cluster_timing(settings, &mut store).await?;
    Ok(store)
}

/// The config the node serves, its shard map, and the address it is
/// reached at: its own one-node config when standalone, else the
/// provisioned one, which must name it.
fn serving(
    settings: &Settings,
    provisioned: Option<stored::Provisioned>,
    name: &str,
) -> Result<(ClusterConfig, ShardMap, String), NodeError> {
    let (config, address) = if !settings.cluster.enabled {
        let address = local_address(&settings.api.listen);
        (shard_map::standalone_config(name, &address, shard_map::STANDALONE_SHARDS), address)
    } else {
        let config = provisioned.ok_or(NodeError::NoClusterConfig)?.config;
        let me = config.node(name).ok_or_else(|| NodeError::NotInConfig {
            name: name.to_owned(),
            nodes: config.nodes.iter().map(|n| n.id.as_str()).collect::<Vec<_>>().join(", "),
        })?;
        let address = settings.cluster.advertise.clone().unwrap_or_else(|| me.grpc_address.clone());
        (config, address)
    };
    let map = ShardMap::from_config(&config);
    Ok((config, map, address))
}

async fn take_cluster_timing(settings: &mut Settings, store: &mut Store) -> Result<(), NodeError> {
    let recorded = store.recorded_meta().await?.map(|m| (m.lease_ttl, m.renew_interval));
    if let Some(leases) = settings.leases.at_cluster_timing(recorded) {
        settings.leases = leases;
        let (ttl, round) = (settings.lease_ttl(), settings.renew_interval());
        settings.validate().map_err(|source| NodeError::ClusterTiming { ttl, round, source })?;
        store.set_lease_timing(ttl, round);
        tracing::info!(?ttl, ?round, "lease timing: the cluster's (leases.ttl_secs and renew_interval_secs unset)");
    }
    Ok(())
}

/// The Redis coordinator of a cluster-mode node, its TLS checked.
async fn coordinator(settings: &Settings, uuid: Uuid, address: &str) -> Result<crate::coord::Coordinator, NodeError> {
    let url = settings.cluster.redis_url.clone().unwrap_or_default();
    let mut config = crate::coord::CoordConfig::new(url);
    config.namespace = settings.cluster.namespace.clone();
    config.heartbeat_interval = settings.heartbeat_interval();
    config.liveness_timeout = settings.liveness_timeout();
    config.monitor_interval = settings.heartbeat_interval();
    config.redis.ca_file = settings.cluster.redis_ca_file.clone();
    config.max_claims = settings.cluster.max_claims_per_instance;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    let info = crate::coord::InstanceInfo {
        instance_id: uuid.to_string(),
        hostname: hostname().unwrap_or_default(),
        grpc_address: address.to_string(),
        started_at: now,
        last_heartbeat: now,
        version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let coordinator = crate::coord::Coordinator::new(config, info)?;
    // Redis is connected lazily and may be down at start; a certificate it
    // refuses is no outage but a settings mistake.
    coordinator.conn.check_tls().await.map_err(|reason| NodeError::StoreTls {
        store: "Redis",
        key: "cluster.redis_ca_file",
        reason,
    })?;
    Ok(coordinator)
}

/// A dialable address for a listen address (`0.0.0.0` becomes loopback).
pub fn local_address(listen: &str) -> String {
    match listen.rsplit_once(':') {
        Some(("0.0.0.0" | "[::]" | "", port)) => format!("127.0.0.1:{port}"),
        _ => listen.to_string(),
    }
}

pub fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}
