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
    /// Faults to inject, one at a time.
    #[arg(long, default_value_t = 20)]
    faults: usize,
    /// Stop injecting after this many seconds, whatever --faults says.
    #[arg(long, default_value_t = 600)]
    duration: u64,
    /// Seed of every random choice; the same seed gives the same schedule.
    /// Default: from the clock (printed, so the run can be repeated).
    #[arg(long)]
    seed: Option<u64>,
    /// Server to create the run's database in (PostgreSQL or MySQL/MariaDB URL).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres", env = "CHITIN_CHAOS_DATABASE_URL")]
    database_url: String,
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
    /// Concurrent journal clients.
    #[arg(long, default_value_t = 3)]
    clients: usize,
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
    /// topology changes split-shard, move-shard and add-node.
    #[arg(long, value_enum, value_delimiter = ',')]
    kinds: Vec<FaultKind>,
    /// Directory for logs, settings and the private servers' data (kept).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Also write the report as JSON here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Run every node with this planted bug (a build with `--features
    /// planted-bugs`): for people who change chitin, to prove the checker
    /// catches the loss of one safety mechanism. `--list-plants` names them.
    #[arg(long, value_parser = parse_plant)]
    plant: Option<Plant>,
    /// List the planted bugs and exit.
    #[arg(long)]
    list_plants: bool,
    /// Arm failpoints in every node (a build with `--features failpoints`):
    /// `name=probability:millis[,…]`, e.g. `append.before_commit=0.01:3000`.
    #[arg(long)]
    failpoints: Option<String>,
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
    let dir = args.dir.unwrap_or_else(|| std::env::temp_dir().join(format!("chitin-chaos-{seed}")));
    let secs = |s: f64, what: &str| {
        Duration::try_from_secs_f64(s).map_err(|_| anyhow::anyhow!("--{what} must be a positive number of seconds"))
    };
    let opts = ChaosOptions {
        nodes: args.nodes,
        faults: args.faults,
        duration: Duration::from_secs(args.duration),
        seed,
        database: match (args.private_postgres, args.private_mariadb) {
            (true, _) => Database::PrivatePostgres,
            (_, true) => Database::PrivateMariadb,
            _ => Database::Configured(args.database_url),
        },
        shards: args.shards,
        clients: args.clients,
        append_interval: Duration::from_millis(args.append_interval_ms),
        lease_ttl: secs(args.lease_ttl, "lease-ttl")?,
        renew_interval: secs(args.renew_interval, "renew-interval")?,
        takeover_slack: secs(args.takeover_slack, "takeover-slack")?,
        kinds: if args.kinds.is_empty() { FaultKind::ALL.to_vec() } else { args.kinds },
        dir: dir.clone(),
        plant: args.plant,
        failpoints: args.failpoints,
        progress: None,
    };
    eprintln!("chaos: seed {seed}; logs and data in {}", dir.display());
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    // On Ctrl-C or SIGTERM the run is dropped mid-way: its nodes, servers
    // and network namespaces are removed by their destructors.
    let report = runtime.block_on(async {
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        let opts = ChaosOptions { progress: Some(done_tx), ..opts };
        let progress = Progress::new(opts.faults as u64, "faults injected");
        let shown = tokio::spawn(async move {
            while let Some(kind) = done_rx.recv().await {
                progress.inc(kind);
            }
            progress.finish("done");
        });
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let report = tokio::select! {
            report = chitin::chaos::run(opts) => report?,
            _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted; the run's processes and namespaces were removed"),
            _ = term.recv() => anyhow::bail!("terminated; the run's processes and namespaces were removed"),
        };
        // The run dropped its sender: the display ends.
        let _ = shown.await;
        Ok::<_, anyhow::Error>(report)
    })?;
    print!("{}", chitin::security::redact(&report.table()));
    if let Some(path) = args.report {
        std::fs::write(&path, chitin::security::redact(&serde_json::to_string_pretty(&report)?))?;
        eprintln!("chaos: report written to {}", path.display());
    }
    Ok(if report.passed { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
