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

/// Logging starts here, once the settings are read: they say whether the
/// node also sends traces.
pub fn run(args: NodeArgs, log: super::LogFormat) -> anyhow::Result<ExitCode> {
    let settings = Settings::load_from_process(args.settings.as_deref())?;
    chitin::failpoint::check_env().map_err(anyhow::Error::msg)?;
    chitin::plant::check_env().map_err(anyhow::Error::msg)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let instance = settings.cluster.instance_id.clone().or_else(chitin::node::hostname).unwrap_or_else(|| "chitin".into());
        let traces = chitin::telemetry::init_node(log.json(), &settings.tracing, &instance)?;
        let served = chitin::server::run(settings).await;
        if let Some(t) = traces {
            t.shutdown();
        }
        served.map_err(anyhow::Error::from)
    })?;
    Ok(ExitCode::SUCCESS)
}
