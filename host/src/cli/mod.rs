//! The command groups of the `chitin` binary.

mod policy;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// chitin: a cluster control plane for sharded services, with WebAssembly policy plugins.
#[derive(Parser, Debug)]
#[command(name = "chitin", version, about)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value = "human", env = "CHITIN_LOG_FORMAT")]
    pub log_format: LogFormat,
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
    /// Inspect, test and scaffold policy plugins.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
}

pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Policy(cmd) => policy::run(cmd),
    }
}

/// Logs go to stderr, filtered by `RUST_LOG` (default `info`).
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
