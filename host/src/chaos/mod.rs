//! `chitin chaos`: a fault-injection run that proves no acknowledged write
//! is lost, in the manner of Jepsen's nemeses.
//!
//! A run starts N `chitin node` processes against a private `redis-server`
//! and a database (a fresh database in the configured server, or a private
//! PostgreSQL cluster), runs journal clients that append continuously, and
//! injects one bounded fault at a time, chosen from `--seed`. Afterwards the
//! [`checker`] judges the database, the lease history and the clients' logs.
//!
//! - [`rng`]: the seeded generator behind every choice;
//! - [`servers`]: the private Redis and PostgreSQL, fresh databases;
//! - [`procs`]: node processes and network namespaces;
//! - [`lab`]: the run's servers and nodes, and recovery checks;
//! - [`clients`]: journal clients and their acknowledgement logs;
//! - [`nemesis`]: the faults;
//! - [`checker`]: the pure rules a run is judged by;
//! - [`report`]: the summary table and JSON.

pub mod checker;
pub mod clients;
pub mod lab;
pub mod nemesis;
pub mod procs;
pub mod report;
pub mod rng;
pub mod servers;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::sync::watch;

use crate::lease::Store;
use checker::{Grant, Row};
pub use nemesis::FaultKind;
use procs::{Network, NodeProc, NodeSettings};
pub use report::Report;
use servers::{PrivatePostgres, PrivateRedis};

/// Where the run's database lives.
#[derive(Clone, Debug)]
pub enum Database {
    /// A fresh database created in this server (its URL names any existing
    /// database to connect to) and dropped afterwards. Never restarted.
    Configured(String),
    /// A private PostgreSQL cluster on a free port, which the nemesis restarts.
    PrivatePostgres,
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
}

impl ChaosOptions {
    fn validate(&self) -> Result<()> {
        if !(3..=5).contains(&self.nodes) {
            bail!("--nodes must be 3, 4 or 5 (got {})", self.nodes);
        }
        if !self.shards.is_power_of_two() || !(2..=256).contains(&self.shards) {
            bail!("--shards must be a power of two from 2 to 256 (got {})", self.shards);
        }
        if self.clients == 0 {
            bail!("--clients must be at least 1");
        }
        if self.kinds.is_empty() {
            bail!("--kinds names no fault kind");
        }
        if self.renew_interval >= self.lease_ttl {
            bail!("the renew interval must be shorter than the lease TTL");
        }
        Ok(())
    }
}

/// Why a kind cannot be injected in this run, if it cannot.
fn unavailable(kind: FaultKind, private_pg: bool, network: &Result<Network>) -> Option<String> {
    match kind {
        FaultKind::Database if !private_pg => {
            Some("the configured database is not the run's to restart (use --private-postgres)".into())
        }
        FaultKind::Partition => match network {
            Ok(_) => None,
            Err(e) => Some(format!("no network namespaces: {e:#}")),
        },
        _ => None,
    }
}

/// Runs the whole thing and judges it. An error means the run could not be
/// carried out (a server would not start); violations are in the report.
pub async fn run(opts: ChaosOptions) -> Result<Report> {
    opts.validate()?;
    std::fs::create_dir_all(&opts.dir).with_context(|| format!("create {}", opts.dir.display()))?;
    // Names the run's bridge and namespaces; distinct for concurrent runs.
    let salt = (opts.seed ^ u64::from(std::process::id())).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    let run_id = format!("{salt:06x}");
    let private_pg = matches!(opts.database, Database::PrivatePostgres);

    // Network namespaces need the servers on the bridge, so only with a
    // private PostgreSQL.
    let network = if !opts.kinds.contains(&FaultKind::Partition) {
        Err(anyhow::anyhow!("not asked for"))
    } else if !private_pg {
        Err(anyhow::anyhow!("the nodes reach the configured database only on loopback (use --private-postgres)"))
    } else {
        Network::create(&run_id, opts.nodes, salt)
    };
    let mut skipped = BTreeMap::new();
    let kinds: Vec<FaultKind> = opts
        .kinds
        .iter()
        .copied()
        .filter(|&k| match unavailable(k, private_pg, &network) {
            Some(why) => {
                skipped.insert(k.name().to_string(), why);
                false
            }
            None => true,
        })
        .collect();
    if kinds.is_empty() {
        bail!("none of the fault kinds asked for can be injected here: {skipped:?}");
    }
    let network_note = match &network {
        Ok(n) => format!("network namespaces on {}", n.subnet()),
        Err(e) => format!("skipped ({e:#})"),
    };
    let network = network.ok();
    let server_host = network.as_ref().map_or("127.0.0.1".to_string(), |n| n.host());

    let redis = PrivateRedis::start(&opts.dir, network.as_ref().map(|n| n.host()).as_deref())?;
    let (postgres, node_db_url, local_db_url, created, database_note) = match &opts.database {
        Database::PrivatePostgres => {
            let extra = network.as_ref().map(|n| (n.host(), n.subnet()));
            let pg = PrivatePostgres::start(&opts.dir, extra.as_ref().map(|(a, b)| (a.as_str(), b.as_str())), "")?;
            let (node, local) = (pg.url(&server_host), pg.url("127.0.0.1"));
            let note = format!("private PostgreSQL on port {}", pg.port);
            (Some(pg), node, local, None, note)
        }
        Database::Configured(url) => {
            let db = format!("chitin_chaos_{run_id}_{}", opts.seed % 1_000_000);
            servers::create_database(url, &db).await?;
            let u = servers::with_database(url, &db);
            let note = format!("fresh database {db} in {}", url.split('@').next_back().unwrap_or(url));
            (None, u.clone(), u, Some((url.clone(), db)), note)
        }
    };

    let outcome = run_in(&opts, kinds, redis, postgres, network, node_db_url, local_db_url.clone(), server_host).await;
    if let Some((admin, db)) = created {
        if let Err(e) = servers::drop_database(&admin, &db).await {
            tracing::warn!(error = %e, "could not drop the run's database {db}");
        }
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
    postgres: Option<PrivatePostgres>,
    network: Option<Network>,
    node_db_url: String,
    local_db_url: String,
    server_host: String,
) -> Result<(report::RunFacts, checker::Verdict)> {
    let exe = std::env::current_exe().context("cannot locate the running chitin binary, which the run starts as its nodes; run `chitin chaos` from an installed binary")?;
    let namespace = format!("chitin-chaos-{}", uuid::Uuid::new_v4().simple());
    let node_redis_url = redis.url(&server_host);
    let mut nodes = Vec::new();
    let ports = (0..opts.nodes * 2).map(|_| servers::free_port()).collect::<Result<Vec<u16>>>()?;
    for k in 0..opts.nodes {
        let name = format!("node-{:02}", k + 1);
        let (host, ns) = match &network {
            Some(n) => (n.node_ip(k), Some(n.namespace(k).to_string())),
            None => ("127.0.0.1".to_string(), None),
        };
        let api = format!("{host}:{}", ports[2 * k]);
        let http = format!("{host}:{}", ports[2 * k + 1]);
        nodes.push(NodeProc::new(name, api, http, &opts.dir, ns));
    }
    let config = opts.dir.join("cluster_config.json");
    let pairs: Vec<(String, String)> = nodes.iter().map(|n| (n.name.clone(), n.api.clone())).collect();
    std::fs::write(&config, lab::cluster_config(&pairs, opts.shards, opts.nodes))?;
    let settings = NodeSettings {
        data_dir: &opts.dir,
        config_file: &config,
        redis_url: &node_redis_url,
        namespace: &namespace,
        database_url: &node_db_url,
        ttl: opts.lease_ttl,
        renew: opts.renew_interval,
    };
    for n in &nodes {
        settings.write(n)?;
    }
    let store = Store::connect(&local_db_url).await.context("connect to the run's database")?;
    let mut lab = lab::Lab {
        exe,
        dir: opts.dir.clone(),
        nodes,
        redis_url: redis.url("127.0.0.1"),
        redis,
        namespace,
        postgres,
        network,
        database_url: local_db_url,
        ttl: opts.lease_ttl,
        renew: opts.renew_interval,
        clock_offset_us: 0,
        supervisor_restarts: Vec::new(),
    };
    // The first node creates the schema; the others follow.
    lab.start_node(0)?;
    lab.wait_ready(0, Duration::from_secs(120)).await?;
    for k in 1..lab.nodes.len() {
        lab.start_node(k)?;
    }
    for k in 1..lab.nodes.len() {
        lab.wait_ready(k, Duration::from_secs(120)).await?;
    }
    lab.wait_recovered(Duration::from_secs(120)).await?;
    lab.clock_offset_us = clock_offset(&store).await?;
    tracing::info!(nodes = lab.nodes.len(), "cluster up; starting clients and the nemesis");

    let start = Instant::now();
    let (stop_tx, stop_rx) = watch::channel(false);
    let streams = clients::streams(opts.clients, 8);
    let addresses: Vec<String> = lab.nodes.iter().map(|n| n.api.clone()).collect();
    let mut tasks = tokio::task::JoinSet::new();
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
        tasks.spawn(clients::run(plan, stop_rx.clone()));
    }

    let mut rng = rng::Rng::new(opts.seed);
    let mut faults = Vec::new();
    let mut deaths = Vec::new();
    let mut failure = None;
    // Kinds are drawn from shuffled bags of all of them, so that every kind
    // comes round once in each stretch of `kinds.len()` faults.
    let mut bag: Vec<FaultKind> = Vec::new();
    for index in 0..opts.faults {
        if start.elapsed() >= opts.duration {
            break;
        }
        tokio::time::sleep(rng.between(Duration::from_millis(500), Duration::from_secs(2))).await;
        if bag.is_empty() {
            bag = kinds.clone();
            rng.shuffle(&mut bag);
        }
        let kind = bag.pop().expect("refilled");
        tracing::info!(index, kind = kind.name(), "fault");
        match nemesis::inject(&mut lab, &mut rng, index, kind, start).await {
            Ok((record, death)) => {
                tracing::info!(index, detail = %record.detail, recovered_ms = record.recovered_ms, "fault done");
                faults.push(record);
                deaths.extend(death);
            }
            Err(e) => {
                failure = Some(e.context(format!("fault {index} ({})", kind.name())));
                break;
            }
        }
    }
    // Steady load after the last fault, then stop the clients.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _ = stop_tx.send(true);
    let mut logs = Vec::new();
    while let Some(log) = tasks.join_next().await {
        logs.push(log.context("client task")?);
    }
    let log = clients::merge(logs);
    let duration_ms = start.elapsed().as_millis() as u64;
    if let Some(e) = failure {
        return Err(e);
    }

    let all_streams: Vec<String> = streams.iter().flatten().cloned().collect();
    let rows = read_rows(&store, &all_streams).await?;
    let grants: Vec<Grant> = store
        .history(None)
        .await?
        .into_iter()
        .map(|h| Grant { shard: h.shard, epoch: h.epoch, holder: h.holder_name, acquired_us: h.acquired_at.timestamp_micros() })
        .collect();
    store.close().await;
    let bound = opts.lease_ttl + opts.renew_interval + opts.takeover_slack;
    let verdict = checker::check(&log.acks, &rows, &grants, &deaths, bound.as_millis() as u64);
    let facts = report::RunFacts {
        run: report::RunInfo {
            seed: opts.seed,
            nodes: opts.nodes,
            shards: opts.shards,
            clients: opts.clients,
            database: String::new(),
            network: String::new(),
            duration_ms,
        },
        faults,
        skipped: BTreeMap::new(),
        log,
        stored: rows.len(),
        takeover_bound_ms: bound.as_millis() as u64,
        supervisor_restarts: std::mem::take(&mut lab.supervisor_restarts),
    };
    Ok((facts, verdict))
}

/// Database clock minus ours (µs), from the midpoint of a query.
async fn clock_offset(store: &Store) -> Result<i64> {
    let before = chrono::Utc::now().timestamp_micros();
    let db = store.now().await?.timestamp_micros();
    let after = chrono::Utc::now().timestamp_micros();
    Ok(db - (before + after) / 2)
}

async fn read_rows(store: &Store, streams: &[String]) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for s in streams {
        let mut from = 0;
        loop {
            let page = store.read(s, from, 5000).await?;
            let Some(last) = page.last() else { break };
            from = last.seq + 1;
            rows.extend(page.into_iter().map(|e| Row {
                stream: e.stream,
                seq: e.seq,
                request_id: e.request_id,
                shard: e.shard,
                epoch: e.epoch,
                committed_us: e.committed_at.timestamp_micros(),
            }));
        }
    }
    Ok(rows)
}
