//! The command groups of the `chitin` binary.

mod chaos;
pub mod client;
mod cluster;
mod config;
mod coord;
mod dev;
mod exit;
mod journal;
mod node;
mod output;
mod policy;
mod probe;
mod progress;
mod rollout;
mod scaffold;
mod settings;
mod shell;
mod upgrade;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

pub(crate) use exit::Exit;

/// chitin: a cluster control plane for sharded services, with WebAssembly policy plugins.
#[derive(Parser, Debug)]
#[command(name = "chitin", version, about, after_help = exit::TABLE)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value = "human", env = "CHITIN_LOG_FORMAT")]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub tls: client::TlsArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    Human,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a node (standalone on embedded defaults without --settings).
    Node(node::NodeArgs),
    /// Append to and read the reference journal.
    #[command(subcommand)]
    Journal(journal::JournalCommand),
    /// Cluster status, load, snapshot and drain; bootstrap, add-node, move-shard, split-shard, rebalance, get-config.
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
    /// Dispatch a command to a target: claims the target for the node.
    Dispatch(coord::DispatchArgs),
    /// Target affinity claims.
    #[command(subcommand)]
    Affinity(coord::AffinityCommand),
    /// Deployment state.
    #[command(subcommand)]
    Deployments(coord::DeploymentsCommand),
    /// Operator shortcuts (`chitin admin drain NAME`).
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Create, change, validate and compare cluster configs (cluster_config.json).
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Inspect, test, compare (over a cluster snapshot) and scaffold policy plugins.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Fault-injection run: nodes, clients, kills, pauses, restarts, drains,
    /// Redis and database restarts, network cuts; then a check that no
    /// acknowledged append was lost.
    Chaos(chaos::ChaosArgs),
    /// Check a settings file without starting a node.
    #[command(subcommand)]
    Settings(settings::SettingsCommand),
    /// Ask a node's gRPC health service whether it serves: exit 0 if so, 1 if
    /// not (container health checks, scripts).
    Probe(probe::ProbeArgs),
    /// Local development: `chitin dev cluster --nodes 3` starts a cluster
    /// with private Redis and PostgreSQL and stops it all on Ctrl-C.
    #[command(subcommand)]
    Dev(dev::DevCommand),
    /// Print the shell completion script of bash, zsh, fish, elvish or PowerShell.
    Completions(shell::CompletionsArgs),
    /// Write the man pages (`chitin.1`, `chitin-<command>.1`) into a directory.
    Manpages(shell::ManpagesArgs),
}

#[derive(Subcommand, Debug)]
pub enum AdminCommand {
    /// Same as `chitin cluster drain --node NAME`.
    Drain {
        /// The node (by name) to drain.
        name: String,
        /// Nodes of the cluster (comma-separated, tried in order).
        #[arg(long, env = "CHITIN_NODES", value_name = "ADDR[,ADDR...]", default_value = client::default_nodes())]
        via: chitin_client::Nodes,
    },
}

pub fn run(command: Command, log: LogFormat) -> anyhow::Result<ExitCode> {
    match command {
        Command::Node(args) => node::run(args, log),
        Command::Journal(cmd) => journal::run(cmd),
        Command::Cluster(cmd) => cluster::run(cmd),
        Command::Admin(AdminCommand::Drain { name, via }) => {
            cluster::run(cluster::ClusterCommand::Drain(cluster::DrainArgs { name: Some(name), via }))
        }
        Command::Config(cmd) => config::run(cmd),
        Command::Dispatch(args) => coord::dispatch(args),
        Command::Affinity(cmd) => coord::affinity(cmd),
        Command::Deployments(cmd) => coord::deployments(cmd),
        Command::Policy(cmd) => policy::run(cmd),
        Command::Chaos(args) => chaos::run(args),
        Command::Dev(cmd) => dev::run(cmd),
        Command::Probe(args) => probe::run(args),
        Command::Settings(cmd) => settings::run(cmd),
        Command::Completions(args) => shell::completions(args),
        Command::Manpages(args) => shell::manpages(args),
    }
}

impl LogFormat {
    fn json(self) -> bool {
        matches!(self, LogFormat::Json)
    }
}

/// Logs go to stderr, filtered by `RUST_LOG` (default `info`). A node sets
/// up its own once its settings are read ([`node::run`]).
pub fn init_logging(format: LogFormat, command: &Command) {
    if !matches!(command, Command::Node(_)) {
        chitin::telemetry::init_logging(format.json());
    }
}

/// A reader that went away (`chitin … | head`) ends the command quietly,
/// with the status a shell gives a process ended by SIGPIPE (141), instead
/// of the panic of the next print. SIGPIPE itself stays ignored (Rust's
/// default): a server or client writing to a socket its peer closed must get
/// the error, not die of the signal.
pub fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload.downcast_ref::<String>().map(String::as_str).or_else(|| payload.downcast_ref::<&str>().copied());
        if message.is_some_and(|m| m.starts_with("failed printing to stdout") && m.contains("Broken pipe")) {
            std::process::exit(141);
        }
        default(info);
    }));
}

/// What `main` prints for a failed command: the error and each cause its
/// message does not already quote (most of ours quote the I/O error they
/// wrap, and `{:#}` would print it twice).
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text = format!("{text}: {cause}");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_the_message_quotes_is_printed_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory (os error 2)");
        let quoted = chitin::policy::PolicyLoadError::Read { path: "x.wasm".into(), source: io() };
        assert_eq!(error_text(&quoted.into()), "cannot read plugin x.wasm: No such file or directory (os error 2)");
        let wrapped = anyhow::Error::new(io()).context("loading the policies");
        assert_eq!(error_text(&wrapped), "loading the policies: No such file or directory (os error 2)");
    }
}
