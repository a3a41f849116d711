//! `chitin node`: run a node.

use std::path::PathBuf;
use std::process::ExitCode;

use chitin::settings::Settings;

/// Runs a node until SIGTERM or Ctrl-C.
#[derive(clap::Args, Debug)]
pub struct NodeArgs {
    /// The node's settings (chitin.toml). Without it: a standalone node on
    /// embedded defaults (SQLite in ./chitin-data, 16 shards, no Redis).
    #[arg(long, env = "CHITIN_SETTINGS")]
    pub settings: Option<PathBuf>,
}

pub fn run(args: NodeArgs) -> anyhow::Result<ExitCode> {
    let settings = Settings::load_from_process(args.settings.as_deref())?;
    chitin::failpoint::check_env().map_err(anyhow::Error::msg)?;
    chitin::plant::check_env().map_err(anyhow::Error::msg)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(chitin::server::run(settings))?;
    Ok(ExitCode::SUCCESS)
}
