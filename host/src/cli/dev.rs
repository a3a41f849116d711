//! `chitin dev cluster`: a local cluster in one command, for trying chitin
//! and for developing an application beside it.
//!
//! It starts a private `redis-server` and a private PostgreSQL (as the chaos
//! lab does, from [`chitin::testkit`]) or uses the servers given with
//! `--redis-url` / `--database-url` (a fresh database in that server and a
//! fresh Redis namespace), writes a cluster config and the nodes' settings
//! under `--dir`, starts the nodes, waits until every shard has a holder,
//! prints how to use the cluster, and on Ctrl-C (or SIGTERM) stops the nodes
//! one by one (each drains), then the servers, and drops the fresh database.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use chitin::proto::{self, admin_client::AdminClient};
use chitin::testkit::settings::{self as node_settings, ClusterNode, ClusterShared};
use chitin::testkit::{FreshDb, NodeProc, PrivatePostgres, PrivateRedis, free_ports};

use super::progress::Progress;

#[derive(clap::Subcommand, Debug)]
pub enum DevCommand {
    /// Start a local cluster and keep it running until Ctrl-C.
    Cluster(ClusterArgs),
}

#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    /// Node processes to start (1 to 9).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Shards of the journal application (a power of two, 2 to 256).
    #[arg(long, default_value_t = 16)]
    shards: u32,
    /// Create the cluster's database in this PostgreSQL or MySQL/MariaDB
    /// server (a fresh database, dropped at stop) instead of a private PostgreSQL.
    #[arg(long, env = "CHITIN_DEV_DATABASE_URL")]
    database_url: Option<String>,
    /// Use this Redis (under a fresh key namespace) instead of a private redis-server.
    #[arg(long, env = "CHITIN_DEV_REDIS_URL")]
    redis_url: Option<String>,
    /// gRPC port of the first node; the others take the next ones. 0: free ports.
    #[arg(long, default_value_t = 50051)]
    api_port: u16,
    /// HTTP port of the first node; the others take the next ones. 0: free ports.
    #[arg(long, default_value_t = 9091)]
    http_port: u16,
    /// Lease TTL in seconds (a crashed node's shards move after about this long).
    #[arg(long, default_value_t = 6.0)]
    lease_ttl: f64,
    /// Lease renew interval in seconds (less than half the TTL).
    #[arg(long, default_value_t = 2.0)]
    renew_interval: f64,
    /// Directory for settings, logs and the private servers' data (kept
    /// after stop). Default: a new directory under the system temp dir.
    #[arg(long)]
    dir: Option<PathBuf>,
}

pub fn run(cmd: DevCommand) -> anyhow::Result<ExitCode> {
    let DevCommand::Cluster(args) = cmd;
    args.check()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(cluster(args))?;
    Ok(ExitCode::SUCCESS)
}

impl ClusterArgs {
    fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!((1..=9).contains(&self.nodes), "--nodes must be from 1 to 9 (got {})", self.nodes);
        anyhow::ensure!(
            self.shards.is_power_of_two() && (2..=256).contains(&self.shards),
            "--shards must be a power of two from 2 to 256 (got {})",
            self.shards
        );
        anyhow::ensure!(
            self.lease_ttl.is_finite() && self.renew_interval > 0.0 && self.renew_interval * 2.0 < self.lease_ttl,
            "--renew-interval ({}) must be positive and less than half of --lease-ttl ({})",
            self.renew_interval,
            self.lease_ttl
        );
        for (flag, port) in [("--api-port", self.api_port), ("--http-port", self.http_port)] {
            anyhow::ensure!(
                port == 0 || usize::from(port) + self.nodes <= 65536,
                "{flag} {port} leaves no room for {} nodes; pick a lower port or 0 for free ports",
                self.nodes
            );
        }
        Ok(())
    }

    /// `count` ports from `first` on, or free ones when `first` is 0.
    fn ports(first: u16, count: usize) -> anyhow::Result<Vec<u16>> {
        if first == 0 {
            return Ok(free_ports(count)?);
        }
        Ok((0..count).map(|k| first + k as u16).collect())
    }
}

/// The servers of a dev cluster; dropped last (private ones stop on drop).
struct Servers {
    redis_url: String,
    _redis: Option<PrivateRedis>,
    _postgres: Option<PrivatePostgres>,
    database: FreshDb,
    note: String,
}

async fn servers(args: &ClusterArgs, dir: &std::path::Path, id: &str) -> anyhow::Result<Servers> {
    let (redis_url, redis, redis_note) = match &args.redis_url {
        Some(url) => (url.clone(), None, format!("Redis {url}")),
        None => {
            let r = PrivateRedis::start(dir, None).context("start a private redis-server (or pass --redis-url)")?;
            let note = format!("private redis-server on port {}", r.port);
            (r.url("127.0.0.1"), Some(r), note)
        }
    };
    let (admin_url, postgres, db_note) = match &args.database_url {
        Some(url) => (url.clone(), None, format!("in {}", url.split('@').next_back().unwrap_or(url))),
        None => {
            let pg = PrivatePostgres::start(dir, None, "")
                .context("start a private PostgreSQL (or pass --database-url postgres://… of a running server)")?;
            let note = format!("in a private PostgreSQL on port {}", pg.port);
            (pg.url("127.0.0.1"), Some(pg), note)
        }
    };
    let database = FreshDb::create_named(&admin_url, &format!("chitin_dev_{id}"))
        .await
        .with_context(|| format!("create the cluster's database in {admin_url}"))?;
    let note = format!("{redis_note}; database {} {db_note}", database.name);
    Ok(Servers { redis_url, _redis: redis, _postgres: postgres, database, note })
}

async fn cluster(args: ClusterArgs) -> anyhow::Result<()> {
    let mut signals = Signals::new()?;
    let id = format!("{:08x}", rand_id());
    let dir = args.dir.clone().unwrap_or_else(|| std::env::temp_dir().join(format!("chitin-dev-{id}")));
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let exe = std::env::current_exe().context("locate the running chitin binary, which the nodes run")?;
    let servers = servers(&args, &dir, &id).await?;
    let result = run_nodes(&args, &dir, &exe, &servers, &id, &mut signals).await;
    if let Err(e) = servers.database.drop_db().await {
        eprintln!("could not drop the database {}: {e}", servers.database.name);
    }
    result
}

async fn run_nodes(
    args: &ClusterArgs,
    dir: &std::path::Path,
    exe: &std::path::Path,
    servers: &Servers,
    id: &str,
    signals: &mut Signals,
) -> anyhow::Result<()> {
    let api_ports = ClusterArgs::ports(args.api_port, args.nodes)?;
    let http_ports = ClusterArgs::ports(args.http_port, args.nodes)?;
    let names: Vec<String> = (1..=args.nodes).map(|k| format!("node-{k:02}")).collect();
    let apis: Vec<String> = api_ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let https: Vec<String> = http_ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let config_path = dir.join("cluster_config.json");
    let pairs: Vec<(String, String)> = names.iter().cloned().zip(apis.iter().cloned()).collect();
    let config = chitin::chaos::lab::cluster_config(&pairs, args.shards, args.nodes.min(3));
    std::fs::write(&config_path, config).with_context(|| format!("write {}", config_path.display()))?;
    let namespace = format!("chitin-dev-{id}");
    let shared = ClusterShared {
        redis_url: &servers.redis_url,
        namespace: &namespace,
        database_url: &servers.database.url,
        ttl: Duration::from_secs_f64(args.lease_ttl),
        renew: Duration::from_secs_f64(args.renew_interval),
    };
    let mut nodes = Vec::new();
    for k in 0..args.nodes {
        let node = ClusterNode {
            name: &names[k],
            api: &apis[k],
            metrics: &https[k],
            data_dir: dir.join(&names[k]),
            config_file: Some(&config_path),
        };
        let settings = dir.join(format!("{}.toml", names[k]));
        node_settings::write(&settings, &node_settings::cluster_node(&node, &shared))?;
        let log = dir.join(format!("{}.log", names[k]));
        nodes.push(NodeProc::new(exe, names[k].clone(), apis[k].clone(), https[k].clone(), settings, log));
    }

    let started = tokio::select! {
        r = start(&mut nodes, args.shards) => Some(r),
        _ = signals.stop_asked() => None,
    };
    let outcome = match started {
        Some(Ok(())) => {
            print_usage(&nodes, servers, dir);
            supervise(&mut nodes, signals).await
        }
        Some(Err(e)) => Err(e),
        None => Ok(()),
    };
    stop(&mut nodes);
    outcome
}

/// Starts every node and waits until each is ready and every shard held.
async fn start(nodes: &mut [NodeProc], shards: u32) -> anyhow::Result<()> {
    for n in nodes.iter_mut() {
        n.start()?;
    }
    let progress = Progress::new(nodes.len() as u64, "nodes ready");
    for n in nodes.iter_mut() {
        n.wait_ready(Duration::from_secs(90)).await.with_context(|| format!("{} did not become ready", n.name))?;
        progress.inc(&n.name);
    }
    progress.finish("every node is ready");
    let progress = Progress::new(u64::from(shards), "shards with a holder");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(s) = status(&nodes[0].api).await {
            progress.set(s.leases.len() as u64, "");
            if s.unowned.is_empty() && !s.leases.is_empty() {
                progress.finish("every shard has a holder");
                return Ok(());
            }
        }
        anyhow::ensure!(Instant::now() < deadline, "shards still without a holder after 90 s; see the logs");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn status(api: &str) -> Option<proto::StatusResponse> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{api}"))
        .ok()?
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(3))
        .connect()
        .await
        .ok()?;
    AdminClient::new(channel).status(proto::StatusRequest {}).await.ok().map(|r| r.into_inner())
}

fn print_usage(nodes: &[NodeProc], servers: &Servers, dir: &std::path::Path) {
    let first = &nodes[0];
    let mut out = format!("chitin dev cluster: {} node(s) up; {}\n", nodes.len(), servers.note);
    for n in nodes {
        out.push_str(&format!("  {}  gRPC {}  status page http://{}/\n", n.name, n.api, n.metrics));
    }
    out.push_str(&format!(
        "\nTry, in another shell (commands fail over between the nodes):\n  export CHITIN_NODES={api}\n  chitin journal append --stream orders --payload hello\n  \
         chitin journal read --stream orders\n  chitin cluster status\n  chitin cluster drain --node {last}\n  \
         curl -s http://{http}/health\n\nSettings, config and logs: {dir}\nCtrl-C stops every node (each drains first), \
         then the servers.\n",
        api = nodes.iter().map(|n| n.api.as_str()).collect::<Vec<_>>().join(","),
        last = nodes[nodes.len() - 1].name,
        http = first.metrics,
        dir = dir.display(),
    ));
    print!("{out}");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
}

/// Ctrl-C and SIGTERM, listened for from the start: the nodes and private
/// servers run in their own process groups, so without these handlers a
/// Ctrl-C would end this process and leave them running.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals { int: signal(SignalKind::interrupt())?, term: signal(SignalKind::terminate())? })
    }

    /// Resolves at the first Ctrl-C or SIGTERM (also one received earlier).
    async fn stop_asked(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }
}

/// Runs until Ctrl-C or SIGTERM; a node that exits on its own is started
/// again, as a supervisor would, and said so.
async fn supervise(nodes: &mut [NodeProc], signals: &mut Signals) -> anyhow::Result<()> {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = signals.stop_asked() => return Ok(()),
            _ = tick.tick() => {
                for n in nodes.iter_mut() {
                    if !n.is_running() {
                        eprintln!("{} exited on its own; starting it again (log: {})\n{}", n.name, n.log.display(), n.log_tail(5));
                        n.start()?;
                    }
                }
            }
        }
    }
}

/// Stops the nodes one at a time, last first: each drains to those still running.
fn stop(nodes: &mut [NodeProc]) {
    eprintln!("stopping {} node(s)", nodes.len());
    let progress = Progress::new(nodes.len() as u64, "nodes stopped");
    for n in nodes.iter_mut().rev() {
        if n.is_running() {
            match n.terminate(Duration::from_secs(60)) {
                Ok(status) if status.success() => {}
                Ok(status) => eprintln!("{} exited with {status}; its log: {}", n.name, n.log.display()),
                Err(e) => eprintln!("{e}"),
            }
        }
        progress.inc(&n.name);
    }
    progress.finish("every node stopped; stopping the servers");
}

fn rand_id() -> u32 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    nanos ^ std::process::id().rotate_left(16)
}
