//! `chitin chaos`: the fault-injection run (see [`chitin::chaos`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use chitin::chaos::{ChaosOptions, Database, FaultKind};
use chitin::plant::Plant;

use super::progress::Progress;

#[derive(clap::Args, Debug)]
pub struct ChaosArgs {
    /// Node processes to start (3 to 5).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Faults to inject, one at a time. Default: 20; with --plant-matrix,
    /// one of each kind.
    #[arg(long)]
    faults: Option<usize>,
    /// Stop injecting after this many seconds, whatever --faults says.
    #[arg(long, default_value_t = 600)]
    duration: u64,
    /// Seed of every random choice; the same seed gives the same schedule.
    /// Default: from the clock (printed, so the run can be repeated).
    #[arg(long)]
    seed: Option<u64>,
    /// Server to create the run's database in (PostgreSQL or MySQL/MariaDB
    /// URL). Default: the local PostgreSQL; with --plant-matrix, a private
    /// PostgreSQL cluster (so that database restarts and cuts are drawn).
    #[arg(long, env = "CHITIN_CHAOS_DATABASE_URL")]
    database_url: Option<String>,
    /// Use a private PostgreSQL cluster on a free port instead (enables the
    /// database restart and network cut faults).
    #[arg(long)]
    private_postgres: bool,
    /// Use a private MariaDB server on a free port instead (enables the
    /// database restart and network cut faults against MariaDB).
    #[arg(long, conflicts_with = "private_postgres")]
    private_mariadb: bool,
    /// Shards of the journal application (power of two).
    #[arg(long, default_value_t = 16)]
    shards: u32,
    /// Concurrent journal clients. Default: 3; with --plant-matrix, 8.
    #[arg(long)]
    clients: Option<usize>,
    /// Pause of each client between appends, in milliseconds.
    #[arg(long, default_value_t = 10)]
    append_interval_ms: u64,
    /// Lease TTL of the nodes, in seconds.
    #[arg(long, default_value_t = 2.0)]
    lease_ttl: f64,
    /// Lease renew interval, in seconds.
    #[arg(long, default_value_t = 0.5)]
    renew_interval: f64,
    /// Slack added to TTL + renew interval for the takeover bound, in seconds.
    #[arg(long, default_value_t = 1.0)]
    takeover_slack: f64,
    /// Fault kinds to draw from (comma-separated). Default: all but the
    /// topology changes split-shard, move-shard and add-node; with
    /// --plant-matrix, all of them.
    #[arg(long, value_enum, value_delimiter = ',')]
    kinds: Vec<FaultKind>,
    /// Directory for logs, settings and the private servers' data (kept).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Also write the report (with --plant-matrix, the matrix) as JSON here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Run every node with this planted bug (a build with `--features
    /// planted-bugs`): for people who change chitin, to prove the checker
    /// catches the loss of one safety mechanism. `--list-plants` names them.
    #[arg(long, value_parser = parse_plant)]
    plant: Option<Plant>,
    /// Run the control and then every planted bug on one seed (a build with
    /// `--features planted-bugs,failpoints`), each in its own directory under
    /// --dir, and fail unless the control passes and each plant is caught by
    /// a violation of its own. Defaults to the proof's general
    /// configuration (docs/reliability.md): every fault kind, the three
    /// append failpoints, 8 clients, a private PostgreSQL.
    #[arg(long, conflicts_with = "plant")]
    plant_matrix: bool,
    /// The plants the matrix runs after its control (comma-separated).
    /// Default: all of them.
    #[arg(long, value_parser = parse_plant, value_delimiter = ',', requires = "plant_matrix")]
    matrix_plants: Vec<Plant>,
    /// List the planted bugs and exit.
    #[arg(long)]
    list_plants: bool,
    /// Arm failpoints in every node (a build with `--features failpoints`):
    /// `name=probability:millis[,…]`, e.g. `append.before_commit=0.01:3000`.
    /// With --plant-matrix the proof's three append failpoints unless given
    /// (`--failpoints ''` arms none).
    #[arg(long)]
    failpoints: Option<String>,
    /// Also drive an application's own service and judge its own table: the
    /// program is started beside each node with `--listen <addr> --node
    /// <node's gRPC address> --database <a fresh database>` and written to
    /// with `POST /write?key=&request_id=` (examples/kv-service/README.md).
    #[arg(long)]
    service: Option<PathBuf>,
    /// An argument added to every service instance's command line
    /// (repeatable).
    #[arg(long = "service-arg", allow_hyphen_values = true, requires = "service")]
    service_args: Vec<String>,
    /// The table the service records its writes in (columns seq,
    /// request_id, item_key, shard, epoch).
    #[arg(long, default_value = "kv_writes", requires = "service")]
    service_table: String,
    /// Concurrent writers to the service.
    #[arg(long, default_value_t = 3, requires = "service")]
    service_writers: usize,
    /// Keys the service's writers spread over.
    #[arg(long, default_value_t = 64, requires = "service")]
    service_keys: u32,
}

fn parse_plant(name: &str) -> Result<Plant, String> {
    Plant::from_name(name).ok_or_else(|| {
        let known: Vec<&str> = Plant::ALL.iter().map(|p| p.name()).collect();
        format!("no plant `{name}`; known: {} (see --list-plants)", known.join(", "))
    })
}

fn list_plants() {
    println!(
        "planted bugs (compiled in: {}):",
        if cfg!(feature = "planted-bugs") { "yes" } else { "no, build with --features planted-bugs" }
    );
    for p in Plant::ALL {
        println!("  {:<18} disables {}", p.name(), p.disables());
    }
    println!(
        "failpoints (compiled in: {}):",
        if cfg!(feature = "failpoints") { "yes" } else { "no, build with --features failpoints" }
    );
    for (name, at) in chitin::failpoint::POINTS {
        println!("  {name:<24} {at}");
    }
}

pub fn run(args: ChaosArgs) -> anyhow::Result<ExitCode> {
    if args.list_plants {
        list_plants();
        return Ok(ExitCode::SUCCESS);
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    let dir = args.dir.clone().unwrap_or_else(|| std::env::temp_dir().join(format!("chitin-chaos-{seed}")));
    let opts = options(&args, seed, dir.clone())?;
    eprintln!("chaos: seed {seed}; logs and data in {}", dir.display());
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let plants = if args.matrix_plants.is_empty() { Plant::ALL.to_vec() } else { args.matrix_plants.clone() };
    let runs = if args.plant_matrix { plants.len() + 1 } else { 1 };
    let (passed, table, json) = runtime.block_on(async {
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        let opts = ChaosOptions { progress: Some(done_tx), ..opts };
        let progress = Progress::new((opts.faults * runs) as u64, "faults injected");
        let shown = tokio::spawn(async move {
            while let Some(kind) = done_rx.recv().await {
                progress.inc(kind);
            }
            progress.finish("done");
        });
        let outcome = if args.plant_matrix {
            let matrix = until_interrupted(chitin::chaos::matrix::run(opts, &plants)).await??;
            (matrix.passed(), matrix.table(), serde_json::to_string_pretty(&matrix)?)
        } else {
            let report = until_interrupted(chitin::chaos::run(opts)).await??;
            (report.passed, report.table(), serde_json::to_string_pretty(&report)?)
        };
        // The run dropped its sender: the display ends.
        let _ = shown.await;
        Ok::<_, anyhow::Error>(outcome)
    })?;
    print!("{}", chitin::security::redact(&table));
    if let Some(path) = args.report {
        std::fs::write(&path, chitin::security::redact(&json))?;
        eprintln!("chaos: report written to {}", path.display());
    }
    Ok(if passed { super::Exit::Done } else { super::Exit::Failed }.into())
}

/// The run's options from the command line: the defaults of one run, or
/// with --plant-matrix those of the proof's general configuration.
fn options(args: &ChaosArgs, seed: u64, dir: PathBuf) -> anyhow::Result<ChaosOptions> {
    let proof = args.plant_matrix.then_some(&chitin::chaos::matrix::PROOF);
    let secs = |s: f64, what: &str| {
        Duration::try_from_secs_f64(s).map_err(|_| anyhow::anyhow!("--{what} must be a positive number of seconds"))
    };
    let kinds = match (args.kinds.is_empty(), proof) {
        (false, _) => args.kinds.clone(),
        (true, Some(p)) => p.kinds.to_vec(),
        (true, None) => FaultKind::ALL.to_vec(),
    };
    Ok(ChaosOptions {
        nodes: args.nodes,
        faults: args.faults.or(proof.map(|p| p.faults())).unwrap_or(20),
        duration: Duration::from_secs(args.duration),
        seed,
        database: match (args.private_postgres, args.private_mariadb, &args.database_url) {
            (true, _, _) => Database::PrivatePostgres,
            (_, true, _) => Database::PrivateMariadb,
            (_, _, Some(url)) => Database::Configured(url.clone()),
            _ if proof.is_some() => Database::PrivatePostgres,
            _ => Database::Configured(DEFAULT_DATABASE_URL.to_string()),
        },
        shards: args.shards,
        clients: args.clients.or(proof.map(|p| p.clients)).unwrap_or(3),
        append_interval: Duration::from_millis(args.append_interval_ms),
        lease_ttl: secs(args.lease_ttl, "lease-ttl")?,
        renew_interval: secs(args.renew_interval, "renew-interval")?,
        takeover_slack: secs(args.takeover_slack, "takeover-slack")?,
        kinds,
        dir,
        plant: args.plant,
        failpoints: args.failpoints.clone().or(proof.map(|p| p.failpoints.to_string())),
        service: args.service.clone().map(|program| chitin::chaos::service::ServiceOptions {
            program,
            args: args.service_args.clone(),
            table: args.service_table.clone(),
            writers: args.service_writers,
            keys: args.service_keys,
        }),
        progress: None,
    })
}

/// The server a run makes its database in unless told otherwise.
const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Runs `work` until it ends or Ctrl-C or SIGTERM comes: then the work is
/// dropped mid-way, and its nodes, servers and network namespaces are
/// removed by their destructors.
async fn until_interrupted<T>(work: impl std::future::Future<Output = T>) -> anyhow::Result<T> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        done = work => Ok(done),
        _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted; the run's processes and namespaces were removed"),
        _ = term.recv() => anyhow::bail!("terminated; the run's processes and namespaces were removed"),
    }
}
