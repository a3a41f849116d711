//! `chitin chaos`: a fault-injection run that proves no acknowledged write
//! is lost, in the manner of Jepsen's nemeses.
//!
//! A run starts N `chitin node` processes against a private `redis-server`
//! and a database (a fresh database in the configured server, or a private
//! PostgreSQL cluster that records commit times), runs journal clients that
//! append continuously and dispatch clients that contend for targets'
//! affinity claims, and injects one bounded fault at a time, chosen from
//! `--seed`. Afterwards the [`checker`] judges the database, the lease
//! history and the clients' logs, and the [`verdict`] whether the run proved
//! anything at all.
//!
//! - [`rng`]: the seeded generator behind every choice;
//! - [`network`]: network namespaces, for network cuts;
//! - [`lab`]: the run's servers and nodes (from [`crate::testkit`]), and
//!   recovery checks;
//! - [`clients`]: journal clients and their acknowledgement logs;
//! - [`dispatch`]: dispatch clients, which contend for targets' affinity
//!   claims through `Coordination.Dispatch`;
//! - [`fault`]: the fault kinds and the record of each injected fault
//!   (plain data), and [`nemesis`], which draws and injects them;
//! - [`evidence`]: the stored rows and grants, by commit time where the
//!   database records it;
//! - [`clock`]: the steps of the wall clock against the monotonic clock,
//!   which the checker takes out of what it measures across them;
//! - [`violation`]: what the judgement found (plain data: each broken
//!   rule, the takeovers measured, the verdict's counts);
//! - [`checker`]: the pure rules a run is judged by, and [`claims`], the
//!   one its dispatches are;
//! - [`verdict`]: the pure rules a run passes by;
//! - [`report`]: the summary table and JSON;
//! - [`service`]: an application's own service driven through its API, and
//!   [`ledger`], the rules its own table is judged by;
//! - [`matrix`]: the control and every planted bug on one seed, each judged
//!   by the violation it must cause.

pub(crate) mod checker;
pub(crate) mod claims;
pub(crate) mod clients;
pub(crate) mod clock;
pub(crate) mod dispatch;
pub(crate) mod evidence;
pub(crate) mod fault;
pub mod lab;
pub(crate) mod ledger;
pub mod matrix;
pub(crate) mod nemesis;
pub mod network;
pub(crate) mod report;
pub(crate) mod rng;
pub mod service;
pub(crate) mod verdict;
pub(crate) mod violation;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::lease::{LeaseError, Store};
use crate::plant::Plant;
use crate::testkit::{self, FreshDb, KitError, NodeProc, PrivateMariadb, PrivatePostgres, PrivateRedis, settings};
pub use fault::FaultKind;
use lab::PrivateServer;
use network::Network;
pub use report::Report;

/// Why a run could not be carried out (violations are in the report).
#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    /// The options asked for something the run cannot do.
    #[error("{0}")]
    Options(String),
    #[error("none of the fault kinds asked for can be injected here: {0:?}")]
    NoKinds(BTreeMap<String, String>),
    #[error(transparent)]
    Kit(#[from] KitError),
    #[error("the run's database: {0}")]
    Store(#[from] LeaseError),
    #[error("{what}: {source}")]
    Sql {
        what: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("ip {args}: {stderr}")]
    Ip { args: String, stderr: String },
    #[error("{dir} holds files that are not a chaos run's; choose a new or empty --dir")]
    ForeignDir { dir: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the cluster did not recover within {within:?} (unowned shards: {unowned:?})\n{tails}")]
    NotRecovered { within: Duration, unowned: Option<Vec<String>>, tails: String },
    #[error("{0}")]
    Unavailable(&'static str),
    #[error("a journal client failed: {0}")]
    Client(#[from] tokio::task::JoinError),
    #[error("fault {index} ({kind}): {source}")]
    Fault {
        index: usize,
        kind: &'static str,
        #[source]
        source: Box<ChaosError>,
    },
}

fn io_error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ChaosError {
    let what = what.into();
    move |source| ChaosError::Io { what, source }
}

/// The file that marks a directory as a chaos run's own.
const RUN_MARKER: &str = ".chitin-chaos-run";

/// Gives the run an empty `dir`. A run again with the same seed (or the same
/// `--dir`) must not start from what the last one left: its nodes would come
/// up on the configs its splits wrote while the lab writes a fresh version 1,
/// and initdb refuses a directory that is not empty. So an earlier run's
/// directory is kept aside as `<dir>.previous` (replacing an older one) for
/// comparison; its path is returned. A non-empty directory that is not a
/// run's own is refused, never moved.
fn fresh_run_dir(dir: &std::path::Path) -> Result<Option<std::path::PathBuf>, ChaosError> {
    let occupied = std::fs::read_dir(dir).map(|mut d| d.next().is_some()).unwrap_or(false);
    let mut kept = None;
    if occupied {
        if !dir.join(RUN_MARKER).exists() {
            return Err(ChaosError::ForeignDir { dir: dir.display().to_string() });
        }
        let aside = dir.with_extension("previous");
        if aside.exists() {
            std::fs::remove_dir_all(&aside).map_err(io_error(format!("remove {}", aside.display())))?;
        }
        std::fs::rename(dir, &aside).map_err(io_error(format!("move {} aside", dir.display())))?;
        kept = Some(aside);
    }
    std::fs::create_dir_all(dir).map_err(io_error(format!("create {}", dir.display())))?;
    std::fs::write(dir.join(RUN_MARKER), "").map_err(io_error(format!("mark {}", dir.display())))?;
    Ok(kept)
}

/// Where the run's database lives.
#[derive(Clone, Debug)]
pub enum Database {
    /// A fresh database created in this server (its URL names any existing
    /// database to connect to) and dropped afterwards. Never restarted.
    Configured(String),
    /// A private PostgreSQL cluster on a free port, which the nemesis restarts.
    PrivatePostgres,
    /// A private MariaDB server on a free port, which the nemesis crashes
    /// and restarts.
    PrivateMariadb,
}

/// What a run does.
#[derive(Clone, Debug)]
pub struct ChaosOptions {
    pub nodes: usize,
    pub faults: usize,
    /// The run stops injecting when this has passed, faults or not.
    pub duration: Duration,
    pub seed: u64,
    pub database: Database,
    pub shards: u32,
    pub clients: usize,
    pub append_interval: Duration,
    pub lease_ttl: Duration,
    pub renew_interval: Duration,
    /// Added to TTL + renew interval for the takeover bound.
    pub takeover_slack: Duration,
    /// Fault kinds to draw from.
    pub kinds: Vec<FaultKind>,
    /// Logs, settings and the private servers' data; kept after the run.
    pub dir: PathBuf,
    /// A planted bug every node runs with (`CHITIN_PLANT`), for proving
    /// that the checker catches its loss.
    pub plant: Option<Plant>,
    /// Failpoints every node arms (`CHITIN_FAILPOINTS`, see [`crate::failpoint`]).
    pub failpoints: Option<String>,
    /// An application's own service to drive and judge besides the journal
    /// ([`service`]).
    pub service: Option<service::ServiceOptions>,
    /// Told the kind of each fault once it is done (for a progress bar).
    pub progress: Option<tokio::sync::mpsc::UnboundedSender<&'static str>>,
}

impl ChaosOptions {
    /// Spare node processes the run prepares for `add-node`: at most
    /// [`lab::MAX_ADDED_NODES`], and never past five nodes in all.
    fn spares(&self) -> usize {
        if self.kinds.contains(&FaultKind::AddNode) { lab::MAX_ADDED_NODES.min(5usize.saturating_sub(self.nodes)) } else { 0 }
    }

    /// Replicas per shard: one on every node, but one node fewer when
    /// `move-shard` is asked for (and the nodes allow the minimum of
    /// three), so that every shard has a node to move to.
    fn replication_factor(&self) -> usize {
        let min = crate::topology::validate::MIN_REPLICATION_FACTOR as usize;
        if self.kinds.contains(&FaultKind::MoveShard) { (self.nodes - 1).max(min).min(self.nodes) } else { self.nodes }
    }

    fn validate(&self) -> Result<(), ChaosError> {
        let refuse = |why: String| Err(ChaosError::Options(why));
        if !(3..=5).contains(&self.nodes) {
            return refuse(format!("--nodes must be 3, 4 or 5 (got {})", self.nodes));
        }
        if !self.shards.is_power_of_two() || !(2..=256).contains(&self.shards) {
            return refuse(format!("--shards must be a power of two from 2 to 256 (got {})", self.shards));
        }
        if self.clients == 0 {
            return refuse("--clients must be at least 1".into());
        }
        if self.kinds.is_empty() {
            return refuse("--kinds names no fault kind".into());
        }
        if self.renew_interval >= self.lease_ttl {
            return refuse("the renew interval must be shorter than the lease TTL".into());
        }
        if self.kinds.contains(&FaultKind::MoveShard) && self.replication_factor() == self.nodes && self.spares() == 0 {
            return refuse(format!(
                "move-shard needs a node without a replica, and {} nodes hold every shard at the minimum replication factor: \
                 run --nodes 4 or more, or add `add-node` to --kinds",
                self.nodes
            ));
        }
        if let Some(spec) = &self.failpoints {
            crate::failpoint::parse(spec).map_err(|e| ChaosError::Options(format!("--failpoints: {e}")))?;
            if !cfg!(feature = "failpoints") {
                return refuse("--failpoints needs a build with `--features failpoints`".into());
            }
        }
        if let Some(why) = self.service.as_ref().and_then(service::ServiceOptions::problem) {
            return refuse(why);
        }
        if self.plant.is_some() && !cfg!(feature = "planted-bugs") {
            return refuse("--plant needs a build with `--features planted-bugs`".into());
        }
        Ok(())
    }
}

/// Why a kind cannot be injected in this run, if it cannot; `network` is
/// the run's namespaces or why there are none.
fn unavailable(kind: FaultKind, private_server: bool, network: &Result<Network, String>, spares: usize) -> Option<String> {
    match kind {
        FaultKind::AddNode if spares == 0 => Some("the run has five nodes already, the most it runs".into()),
        FaultKind::Database if !private_server => {
            Some("the configured database is not the run's to restart (use --private-postgres or --private-mariadb)".into())
        }
        FaultKind::Partition => match network {
            Ok(_) => None,
            Err(e) => Some(format!("no network namespaces: {e}")),
        },
        _ => None,
    }
}

/// postgresql.conf of the private PostgreSQL: commit times are the
/// checker's evidence (see [`evidence`]).
const PRIVATE_POSTGRES_CONF: &str = "track_commit_timestamp = on";

/// Runs the whole thing and judges it. An error means the run could not be
/// carried out (a server would not start); violations are in the report.
pub async fn run(opts: ChaosOptions) -> Result<Report, ChaosError> {
    opts.validate()?;
    if let Some(kept) = fresh_run_dir(&opts.dir)? {
        tracing::warn!(previous = %kept.display(), "an earlier run used this directory: kept aside, this run starts clean");
    }
    // Names the run's bridge and namespaces; distinct for concurrent runs.
    let salt = (opts.seed ^ u64::from(std::process::id())).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    let run_id = format!("{salt:06x}");
    let private_server = !matches!(opts.database, Database::Configured(_));

    // Network namespaces need the servers on the bridge, so only with a
    // private database server.
    let network = if !opts.kinds.contains(&FaultKind::Partition) {
        Err("not asked for".to_string())
    } else if !private_server {
        Err("the nodes reach the configured database only on loopback (use --private-postgres or --private-mariadb)".to_string())
    } else {
        Network::create(&run_id, opts.nodes + opts.spares(), salt).map_err(|e| e.to_string())
    };
    let mut skipped = BTreeMap::new();
    let kinds: Vec<FaultKind> = opts
        .kinds
        .iter()
        .copied()
        .filter(|&k| match unavailable(k, private_server, &network, opts.spares()) {
            Some(why) => {
                skipped.insert(k.name().to_string(), why);
                false
            }
            None => true,
        })
        .collect();
    if kinds.is_empty() {
        return Err(ChaosError::NoKinds(skipped));
    }
    let network_note = match &network {
        Ok(n) => format!("network namespaces on {}", n.subnet()),
        Err(e) => format!("skipped ({e})"),
    };
    let network = network.ok();
    let server_host = network.as_ref().map_or("127.0.0.1".to_string(), |n| n.host());

    let redis = PrivateRedis::start(&opts.dir, network.as_ref().map(|n| n.host()).as_deref())?;
    let (server, created, (node_db_url, local_db_url, database_note)) = match &opts.database {
        Database::PrivatePostgres => {
            let extra = network.as_ref().map(|n| (n.host(), n.subnet()));
            let extra = extra.as_ref().map(|(a, b)| (a.as_str(), b.as_str()));
            let server = PrivateServer::Postgres(PrivatePostgres::start(&opts.dir, extra, PRIVATE_POSTGRES_CONF)?);
            let urls = server.urls(&server_host);
            (Some(server), None, urls)
        }
        Database::PrivateMariadb => {
            let server = PrivateServer::Mariadb(PrivateMariadb::start(&opts.dir, network.as_ref().map(|n| n.host()).as_deref())?);
            let urls = server.urls(&server_host);
            (Some(server), None, urls)
        }
        Database::Configured(url) => {
            let db = FreshDb::create_named(url, &format!("chitin_chaos_{run_id}_{}", opts.seed % 1_000_000)).await?;
            let note = format!("fresh database {} in {}", db.name, crate::security::redact(url));
            let urls = (db.url.clone(), db.url.clone(), note);
            (None, Some(db), urls)
        }
    };

    let outcome = run_in(&opts, kinds, redis, server, network, node_db_url, local_db_url.clone(), server_host, &run_id).await;
    if let Some(db) = created
        && let Err(e) = db.drop_db().await
    {
        tracing::warn!(error = %e, "could not drop the run's database {}", db.name);
    }
    let (facts, verdict) = outcome?;
    let mut facts = report::RunFacts { skipped, ..facts };
    facts.run.database = database_note;
    facts.run.network = network_note;
    Ok(Report::new(facts, verdict))
}

#[allow(clippy::too_many_arguments)]
async fn run_in(
    opts: &ChaosOptions,
    kinds: Vec<FaultKind>,
    redis: PrivateRedis,
    server: Option<PrivateServer>,
    network: Option<Network>,
    node_db_url: String,
    local_db_url: String,
    server_host: String,
    run_id: &str,
) -> Result<(report::RunFacts, violation::Verdict), ChaosError> {
    let mut lab = assemble(opts, redis, server, network, &node_db_url, local_db_url, &server_host)?;
    let store = Store::connect(&lab.database_url).await?;
    bring_up(&mut lab).await?;
    lab.clock_offset_us = clock_offset(&store).await?;
    let service = match &opts.service {
        Some(s) => {
            let nodes: Vec<String> = lab.nodes.iter().map(|n| n.api.clone()).collect();
            Some(service::Service::start(s, &nodes, &lab.database_url, &opts.dir, run_id).await?)
        }
        None => None,
    };
    tracing::info!(nodes = lab.nodes.len(), service = service.is_some(), "cluster up; starting clients and the nemesis");

    let load = Load::start(opts, &lab, service.as_ref());
    let (faults, deaths, failure) = inject_faults(opts, &kinds, &mut lab, load.start).await;
    // Steady load after the last fault, then stop the clients.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let start = load.start;
    let stopped = load.stop().await;
    let duration_ms = start.elapsed().as_millis() as u64;
    // Read before anything can end the run, so that its database is
    // dropped on every path.
    let service_rows = match (service, &opts.service) {
        (Some(running), Some(s)) => Some(running.finish(&s.table, matches!(opts.database, Database::Configured(_))).await),
        _ => None,
    };
    let Stopped { log, dispatches, clock_steps, streams, service_log } = stopped?;
    if let Some(e) = failure {
        return Err(e);
    }
    let all_streams: Vec<String> = streams.iter().flatten().cloned().collect();
    let evidence = evidence::read(&store, &lab.database_url, &all_streams).await?;
    store.close().await;
    let service = service_rows.transpose()?.map(|rows| (service_log, rows));
    let supervisor_restarts = std::mem::take(&mut lab.supervisor_restarts);
    let run = Run { faults, deaths, log, dispatches, clock_steps, duration_ms, supervisor_restarts };
    Ok(judge(opts, &lab, run, evidence, service))
}

/// The run's nodes (started later) and the lab around them: the cluster
/// config file and each node's settings written, ports taken.
fn assemble(
    opts: &ChaosOptions,
    redis: PrivateRedis,
    server: Option<PrivateServer>,
    network: Option<Network>,
    node_db_url: &str,
    local_db_url: String,
    server_host: &str,
) -> Result<lab::Lab, ChaosError> {
    let exe = std::env::current_exe().map_err(io_error(
        "cannot locate the running chitin binary, which the run starts as its nodes; run `chitin chaos` from an installed binary",
    ))?;
    let namespace = format!("chitin-chaos-{}", uuid::Uuid::new_v4().simple());
    let node_redis_url = redis.url(server_host);
    let all = opts.nodes + opts.spares();
    let ports = testkit::free_ports(all * 2)?;
    let names: Vec<String> = (0..all).map(|k| format!("node-{:02}", k + 1)).collect();
    let hosts: Vec<String> = (0..all).map(|k| network.as_ref().map_or("127.0.0.1".to_string(), |n| n.node_ip(k))).collect();
    let apis: Vec<String> = (0..all).map(|k| format!("{}:{}", hosts[k], ports[2 * k])).collect();
    let config = opts.dir.join("cluster_config.json");
    let pairs: Vec<(String, String)> = names.iter().cloned().zip(apis.iter().cloned()).take(opts.nodes).collect();
    std::fs::write(&config, lab::cluster_config(&pairs, opts.shards, opts.replication_factor()))
        .map_err(io_error(format!("write {}", config.display())))?;
    let shared = settings::ClusterShared {
        redis_url: &node_redis_url,
        namespace: &namespace,
        database_url: node_db_url,
        ttl: opts.lease_ttl,
        renew: opts.renew_interval,
    };
    let peer_token = format!("chaos-peer-{}", uuid::Uuid::new_v4().simple());
    crate::security::redact::register_secret(&peer_token);
    crate::security::redact::register_url_password(node_db_url);
    let mut nodes = Vec::new();
    for k in 0..all {
        let (name, api) = (&names[k], &apis[k]);
        let metrics = format!("{}:{}", hosts[k], ports[2 * k + 1]);
        let settings_path = opts.dir.join(format!("{name}.toml"));
        // A spare starts unprovisioned: add-node's first push gives it the config.
        let config_file = (k < opts.nodes).then_some(config.as_path());
        let node = settings::ClusterNode { name, api, metrics: &metrics, data_dir: opts.dir.join(name), config_file };
        let mut node_settings = settings::cluster_node(&node, &shared);
        // Forwards and notices carry a peer token, as in production; the
        // lab's own clients stay unauthenticated, so nodes on the private
        // namespaced network listen there knowingly insecure.
        node_settings.cluster.peer_token = Some(peer_token.as_str().into());
        node_settings.api.insecure_listen = network.is_some();
        settings::write(&settings_path, &node_settings)?;
        let ns = network.as_ref().map(|n| n.namespace(k).to_string());
        let log = opts.dir.join(format!("{name}.log"));
        let mut node = NodeProc::new(&exe, name.clone(), api.clone(), metrics, settings_path, log).in_namespace(ns);
        if let Some(plant) = opts.plant {
            node = node.with_env(crate::plant::ENV, plant.name());
        }
        if let Some(spec) = &opts.failpoints {
            node = node.with_env(crate::failpoint::ENV, spec);
        }
        nodes.push(node);
    }
    let mut ranges = checker::Ranges::new();
    lab::note_ranges(&crate::topology::file::load(&config).map_err(|e| ChaosError::Options(e.to_string()))?, &mut ranges);
    let spares = nodes.split_off(opts.nodes);
    Ok(lab::Lab {
        nodes,
        spares,
        redis_url: redis.url("127.0.0.1"),
        redis,
        namespace,
        server,
        network,
        database_url: local_db_url,
        ttl: opts.lease_ttl,
        renew: opts.renew_interval,
        clock_offset_us: 0,
        supervisor_restarts: Vec::new(),
        config: config.clone(),
        ranges,
    })
}

/// Starts the nodes: the first creates the schema, the others follow; then
/// waits until every shard is held.
async fn bring_up(lab: &mut lab::Lab) -> Result<(), ChaosError> {
    lab.nodes[0].start()?;
    lab.nodes[0].wait_ready(Duration::from_secs(120)).await?;
    for n in &mut lab.nodes[1..] {
        n.start()?;
    }
    for n in &mut lab.nodes[1..] {
        n.wait_ready(Duration::from_secs(120)).await?;
    }
    lab.wait_recovered(Duration::from_secs(120)).await?;
    Ok(())
}

/// The clients, the dispatchers and the clock watch, running until
/// [`Load::stop`].
struct Load {
    start: Instant,
    streams: Vec<Vec<String>>,
    stop_tx: watch::Sender<bool>,
    client_tasks: tokio::task::JoinSet<clients::ClientLog>,
    dispatchers: tokio::task::JoinSet<dispatch::DispatchLog>,
    clock_watch: tokio::task::JoinHandle<Vec<clock::Step>>,
    start_unix_ms: u64,
    writers: tokio::task::JoinSet<service::ServiceLog>,
}

/// What the load saw, once stopped.
struct Stopped {
    log: clients::ClientLog,
    dispatches: dispatch::DispatchLog,
    clock_steps: Vec<clock::Step>,
    /// The journal streams each client appended to.
    streams: Vec<Vec<String>>,
    service_log: service::ServiceLog,
}

impl Load {
    fn start(opts: &ChaosOptions, lab: &lab::Lab, service: Option<&service::Service>) -> Load {
        let start = Instant::now();
        let start_unix_ms = crate::coord::fail_open_window::unix_now_ms();
        let (stop_tx, stop_rx) = watch::channel(false);
        let clock_watch = tokio::spawn(clock::watch(stop_rx.clone()));
        let streams = clients::streams(opts.clients, 8);
        let addresses: Vec<String> = lab.nodes.iter().map(|n| n.api.clone()).collect();
        let mut client_tasks = tokio::task::JoinSet::new();
        for (id, streams) in streams.iter().enumerate() {
            let plan = clients::ClientPlan {
                id,
                streams: streams.clone(),
                nodes: addresses.clone(),
                interval: opts.append_interval,
                attempt_timeout: opts.lease_ttl + opts.renew_interval + Duration::from_secs(4),
                grace: Duration::from_secs(30),
                start,
            };
            client_tasks.spawn(clients::run(plan, stop_rx.clone()));
        }
        let mut dispatchers = tokio::task::JoinSet::new();
        for (id, n) in lab.nodes.iter().enumerate() {
            let plan = dispatch::DispatchPlan { id, node: n.name.clone(), address: n.api.clone(), start, start_unix_ms };
            dispatchers.spawn(dispatch::run(plan, stop_rx.clone()));
        }
        let mut writers = tokio::task::JoinSet::new();
        if let (Some(running), Some(s)) = (service, &opts.service) {
            for id in 0..s.writers {
                let plan = service::WriterPlan {
                    id,
                    instances: running.instances(),
                    keys: s.keys,
                    interval: opts.append_interval,
                    attempt_timeout: opts.lease_ttl + opts.renew_interval + Duration::from_secs(4),
                    grace: Duration::from_secs(30),
                };
                writers.spawn(service::run_writer(plan, stop_rx.clone()));
            }
        }
        Load { start, streams, stop_tx, client_tasks, dispatchers, clock_watch, start_unix_ms, writers }
    }

    /// Stops the load and merges what it saw, the nodes' windows put on the
    /// run's monotonic clock.
    async fn stop(mut self) -> Result<Stopped, ChaosError> {
        let _ = self.stop_tx.send(true);
        let mut logs = Vec::new();
        while let Some(log) = self.client_tasks.join_next().await {
            logs.push(log?);
        }
        let log = clients::merge(logs);
        let mut dispatch_logs = Vec::new();
        while let Some(log) = self.dispatchers.join_next().await {
            dispatch_logs.push(log?);
        }
        let mut dispatches = dispatch::DispatchLog::merge(dispatch_logs);
        let clock_steps = self.clock_watch.await?;
        // The nodes' windows on the run's monotonic clock, as the dispatches are.
        for w in dispatches.granted.iter_mut().filter_map(|g| g.window.as_mut()) {
            let run_ms = |wall_ms| clock::run_ms(&clock_steps, self.start_unix_ms, wall_ms);
            (w.start_ms, w.end_ms) = (run_ms(w.start_ms), run_ms(w.end_ms));
        }
        let mut service_logs = Vec::new();
        while let Some(log) = self.writers.join_next().await {
            service_logs.push(log?);
        }
        let service_log = service::ServiceLog::merge(service_logs);
        Ok(Stopped { log, dispatches, clock_steps, streams: self.streams, service_log })
    }
}

/// The faults of the run, drawn by its seed, one after another until the
/// count or the duration is reached; a fault that cannot be carried out
/// ends them (the error, third).
async fn inject_faults(
    opts: &ChaosOptions,
    kinds: &[FaultKind],
    lab: &mut lab::Lab,
    start: Instant,
) -> (Vec<fault::FaultRecord>, Vec<checker::Death>, Option<ChaosError>) {
    let mut rng = rng::Rng::new(opts.seed);
    let mut faults = Vec::new();
    let mut deaths = Vec::new();
    let mut failure = None;
    let mut bag: Vec<FaultKind> = Vec::new();
    for index in 0..opts.faults {
        if start.elapsed() >= opts.duration {
            break;
        }
        tokio::time::sleep(rng.between(Duration::from_millis(500), Duration::from_secs(2))).await;
        let Some(kind) = nemesis::draw(&mut bag, kinds, &mut rng, |k| lab.can_inject(k)) else { break };
        tracing::info!(index, kind = kind.name(), "fault");
        match nemesis::inject(lab, &mut rng, index, kind, start).await {
            Ok((record, death)) => {
                tracing::info!(index, detail = %record.detail, recovered_ms = record.recovered_ms, "fault done");
                if let Some(progress) = &opts.progress {
                    let _ = progress.send(kind.name());
                }
                faults.push(record);
                deaths.extend(death);
            }
            Err(e) => {
                failure = Some(ChaosError::Fault { index, kind: kind.name(), source: Box::new(e) });
                break;
            }
        }
    }
    (faults, deaths, failure)
}

/// What a run saw, for [`judge`].
struct Run {
    faults: Vec<fault::FaultRecord>,
    deaths: Vec<checker::Death>,
    log: clients::ClientLog,
    dispatches: dispatch::DispatchLog,
    clock_steps: Vec<clock::Step>,
    duration_ms: u64,
    /// Nodes that exited on their own, with what they last logged.
    supervisor_restarts: Vec<String>,
}

/// The checks over what the clients were told and what the database
/// holds, and the facts the report shows.
fn judge(
    opts: &ChaosOptions,
    lab: &lab::Lab,
    run: Run,
    evidence: evidence::Evidence,
    service: Option<(service::ServiceLog, Vec<ledger::LedgerRow>)>,
) -> (report::RunFacts, violation::Verdict) {
    let Run { faults, deaths, log, dispatches, clock_steps, duration_ms, supervisor_restarts } = run;
    let bounds = checker::Bounds::of(opts.lease_ttl, opts.renew_interval, opts.takeover_slack, opts.failpoints.is_some());
    let answers: Vec<clients::Ack> = log.acks.iter().chain(&log.resends).cloned().collect();
    let db_steps = clock::shifted(&clock_steps, lab.clock_offset_us);
    let mut verdict = checker::check(&answers, &log.abandoned, &evidence.rows, &evidence.grants, &deaths, bounds, &db_steps);
    checker::check_ownership(&answers, &evidence.rows, &evidence.grants, &evidence.retirements, &lab.ranges, &mut verdict);
    let claim_ttl = settings::LIVENESS_TIMEOUT;
    let disturbances = claims::disturbances(&faults, claim_ttl, settings::HEARTBEAT_INTERVAL);
    let dispatch_summary = claims::check_dispatches(&dispatches.granted, &disturbances, claim_ttl, &mut verdict);
    let service = service.map(|(log, rows)| {
        ledger::check(&log.acked, &rows, &mut verdict);
        report::ServiceFacts { log, stored: rows.len() }
    });
    let facts = report::RunFacts {
        run: report::RunInfo {
            seed: opts.seed,
            nodes: opts.nodes,
            shards: opts.shards,
            clients: opts.clients,
            database: String::new(),
            network: String::new(),
            duration_ms,
            plant: opts.plant.map(|p| p.name().to_string()),
            failpoints: opts.failpoints.clone(),
        },
        faults,
        skipped: BTreeMap::new(),
        log,
        stored: evidence.rows.len(),
        evidence: evidence.basis,
        ack_floor: verdict::ack_floor(
            opts.clients,
            Duration::from_millis(duration_ms),
            opts.append_interval,
            opts.failpoints.as_deref().map_or(Duration::ZERO, crate::failpoint::expected_append_pause),
        ),
        takeover_bounds: bounds,
        supervisor_restarts,
        dispatches,
        dispatch_summary,
        clock_steps,
        service,
    };
    (facts, verdict)
}

/// Database clock minus ours (µs), from the midpoint of a query.
async fn clock_offset(store: &Store) -> Result<i64, ChaosError> {
    let before = chrono::Utc::now().timestamp_micros();
    let db = store.now().await?.timestamp_micros();
    let after = chrono::Utc::now().timestamp_micros();
    Ok(db - (before + after) / 2)
}

#[cfg(test)]
mod tests {
    use crate::testkit::PrivatePostgres;

    #[test]
    fn a_run_starts_clean_and_keeps_the_previous_run_aside() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("chitin-chaos-7");
        assert_eq!(super::fresh_run_dir(&dir).unwrap(), None, "a new directory");
        // What a run leaves: a server's data, a node's config and log.
        let server = PrivatePostgres::base(&dir).join("data");
        std::fs::create_dir_all(&server).unwrap();
        std::fs::write(server.join("PG_VERSION"), "17").unwrap();
        std::fs::create_dir_all(dir.join("node-01")).unwrap();
        std::fs::write(dir.join("node-01").join("cluster.json"), "{\"version\": 3}").unwrap();

        let kept = super::fresh_run_dir(&dir).unwrap().expect("the previous run kept");
        assert_eq!(kept, parent.path().join("chitin-chaos-7.previous"));
        assert!(kept.join("node-01").join("cluster.json").exists());
        assert!(PrivatePostgres::base(&kept).join("data").join("PG_VERSION").exists());
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, [std::ffi::OsString::from(super::RUN_MARKER)], "the run starts from nothing");
        // A third run replaces the older copy.
        assert_eq!(super::fresh_run_dir(&dir).unwrap(), Some(kept.clone()));
        assert!(!kept.join("node-01").exists());
    }

    #[test]
    fn a_directory_of_something_else_is_refused_not_moved() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("thesis.tex"), "precious").unwrap();
        let e = super::fresh_run_dir(dir.path()).unwrap_err().to_string();
        assert!(e.contains("choose a new or empty --dir"), "{e}");
        assert!(dir.path().join("thesis.tex").exists());
    }
}
