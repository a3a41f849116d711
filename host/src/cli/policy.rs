//! `chitin policy …`: inspect components, run fixtures against them, and
//! scaffold new plugins.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use chitin::policy::{Limits, Plugin, PluginSource, Slot, fixture};
use clap::Subcommand;

/// The components a command that decides placement, rebalancing or split
/// points calls: those of the nodes' chitin.toml, so that the CLI decides as
/// the cluster does.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct PolicyArgs {
    /// The chitin.toml whose `[policies]` the nodes run (its component
    /// paths as the nodes see them); without it, the embedded defaults.
    #[arg(long, env = "CHITIN_SETTINGS", value_name = "FILE")]
    pub settings: Option<PathBuf>,
}

impl PolicyArgs {
    /// Loads the components; with where they came from, for messages.
    pub fn load(&self) -> anyhow::Result<(chitin::policy::Policies, String)> {
        match &self.settings {
            None => Ok((
                chitin::policy::Policies::embedded_defaults().context("cannot load the embedded default policies")?,
                "the embedded defaults".to_string(),
            )),
            Some(path) => {
                let settings = chitin::settings::Settings::load_from_process(Some(path))?;
                let policies = chitin::policy::Policies::load(&settings.policies, None)
                    .with_context(|| format!("cannot load the policies of {}", path.display()))?;
                Ok((policies, format!("the [policies] of {}", path.display())))
            }
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// Show which policy slots a component exports, and at which interface version.
    Inspect {
        /// A component file, or `default` for the embedded default policies.
        plugin: String,
    },
    /// Run fixture files (or directories of them) against a component.
    Test {
        /// A component file, or `default` for the embedded default policies.
        #[arg(long)]
        plugin: String,
        /// Deadline of each call in milliseconds.
        #[arg(long, default_value_t = 100)]
        deadline_ms: u64,
        /// Fixture files or directories (searched for *.json and *.toml).
        #[arg(required = true)]
        fixtures: Vec<PathBuf>,
    },
    /// Scaffold a plugin crate for one slot with the policy SDK, one fixture and a README.
    New {
        /// The slot the plugin serves: instance-id, placement, split or drain.
        #[arg(long)]
        slot: String,
        /// The crate name (letters, digits, `-`, `_`); the crate is written to DIR/NAME.
        name: String,
        /// Where to create the crate.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// The SDK directory (plugins/sdk of a chitin checkout); default: the
        /// checkout this binary was built from.
        #[arg(long, env = "CHITIN_SDK_PATH")]
        sdk_path: Option<PathBuf>,
    },
    /// Make a running node load its configured policy components again (as
    /// SIGHUP does); a reload that fails keeps the previous ones.
    Reload {
        #[command(flatten)]
        addr: super::client::NodeAddr,
        /// Record the reloaded components as the cluster's: the nodes still
        /// running the previous ones take no leases until they reload too
        /// (roll a new policy out node by node, this one first).
        #[arg(long)]
        adopt: bool,
    },
}

pub fn run(cmd: PolicyCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        PolicyCommand::Inspect { plugin } => inspect(&plugin),
        PolicyCommand::Test {
            plugin,
            deadline_ms,
            fixtures,
        } => test(&plugin, deadline_ms, &fixtures),
        PolicyCommand::Reload { addr, adopt } => {
            reload(addr.node.single("`policy reload` reloads one node").map_err(anyhow::Error::msg)?, adopt)
        }
        PolicyCommand::New {
            slot,
            name,
            dir,
            sdk_path,
        } => {
            let root = super::scaffold::new_plugin_with_sdk(&slot, &name, &dir, sdk_path.as_deref())?;
            println!("created {} (slot `{slot}`)", root.display());
            println!("  cd {} && cargo test && cargo build --release --target wasm32-wasip2", root.display());
            println!(
                "  chitin policy test --plugin target/wasm32-wasip2/release/{}.wasm fixtures/",
                name.replace('-', "_")
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn load(plugin: &str) -> anyhow::Result<Plugin> {
    Ok(Plugin::load(&PluginSource::parse(plugin), None)?)
}

fn inspect(plugin: &str) -> anyhow::Result<ExitCode> {
    let plugin = load(plugin)?;
    println!("plugin: {}", plugin.name());
    println!("{:<12} {:<10} {}", "SLOT", "STATUS", "EXPORT");
    for slot in Slot::ALL {
        match plugin.slot_version(slot) {
            Ok(version) => println!("{:<12} {:<10} chitin:policy/{slot}@{version}", slot.to_string(), "ok"),
            Err(e) => {
                let status = if plugin.exports().iter().any(|x| x.slot == Some(slot)) {
                    "unsupported"
                } else {
                    "absent"
                };
                println!("{:<12} {:<10} {e}", slot.to_string(), status);
            }
        }
    }
    let others: Vec<&str> = plugin.exports().iter().filter(|e| e.slot.is_none()).map(|e| e.name.as_str()).collect();
    if !others.is_empty() {
        println!("other exports: {}", others.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

fn test(plugin: &str, deadline_ms: u64, paths: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let limits = Limits::new(std::time::Duration::from_millis(deadline_ms), Limits::default().memory_bytes)?;
    let plugin = Arc::new(load(plugin)?);
    let files = fixture::collect(paths).context("cannot list the fixtures")?;
    anyhow::ensure!(!files.is_empty(), "no fixture files (*.json, *.toml) found under {paths:?}");
    let mut runner = fixture::Runner::new(plugin, limits);
    let (mut passed, mut failed) = (0, 0);
    for file in files {
        let outcome = runner.run_file(&file);
        match &outcome.failure {
            None => {
                passed += 1;
                println!("ok   {}  {}", file.display(), outcome.description);
            }
            Some(why) => {
                failed += 1;
                println!("FAIL {}  {}", file.display(), outcome.description);
                for line in why.lines() {
                    println!("     {line}");
                }
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn reload(address: &str, adopt: bool) -> anyhow::Result<ExitCode> {
    use chitin::proto::ReloadPoliciesRequest;
    super::client::runtime()?.block_on(async {
        let answer = super::client::admin(&super::client::Nodes::one(address)?).await?
            .reload_policies(ReloadPoliciesRequest { adopt })
            .await
            .map_err(|s| anyhow::anyhow!("{}", s.message()))?
            .into_inner();
        println!("reloaded{}:", if adopt { " and adopted as the cluster's" } else { "" });
        for slot in answer.slots {
            println!("  {slot}");
        }
        if answer.mismatch.is_empty() {
            return Ok(ExitCode::SUCCESS);
        }
        for m in &answer.mismatch {
            eprintln!("mismatch: {m}");
        }
        eprintln!("this node takes no leases until its components are the cluster's (or run with --adopt)");
        Ok(ExitCode::FAILURE)
    })
}
