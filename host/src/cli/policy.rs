//! `chitin policy …`: inspect components, run fixtures against them,
//! compare two components over a cluster snapshot (and make fixtures of
//! it), and scaffold new plugins.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use chitin::policy::{Limits, Plugin, PluginSource, Slot, fixture};
use chitin::rollout::shadow;
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

/// What a snapshot does not record, for `policy diff` and `policy fixture`.
#[derive(clap::Args, Debug, Clone)]
pub struct ShadowArgs {
    /// The nodes' `[leases] max_handoffs_per_round`: the drain's round cap.
    #[arg(long, default_value_t = chitin::rollout::shadow::Options::default().max_handoffs_per_round)]
    pub max_handoffs_per_round: u32,
    /// Deadline of each call in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub deadline_ms: u64,
}

impl ShadowArgs {
    fn options(&self) -> chitin::rollout::shadow::Options {
        chitin::rollout::shadow::Options { max_handoffs_per_round: self.max_handoffs_per_round }
    }

    fn limits(&self) -> anyhow::Result<Limits> {
        Ok(Limits::new(std::time::Duration::from_millis(self.deadline_ms), Limits::default().memory_bytes)?)
    }
}

#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// Show which policy slots a component exports, and at which interface version.
    Inspect {
        /// A component file, or `default` for the embedded default policies.
        plugin: String,
        #[command(flatten)]
        output: super::output::OutputArg,
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
    /// Shadow comparison: run a candidate component and another (the embedded
    /// defaults unless --against) over a cluster snapshot (`chitin cluster
    /// snapshot > snap.json`) and show how their decisions differ: replicas
    /// placed elsewhere, rebalance moves, holder rankings, split points,
    /// drain order and rounds. Differences are no error: exit 0 when it ran.
    Diff {
        /// The candidate component file, or `default`.
        #[arg(long)]
        plugin: String,
        /// The component to compare against: `default` (the embedded default
        /// policies) or a component file.
        #[arg(long, default_value = "default")]
        against: String,
        #[command(flatten)]
        shadow: ShadowArgs,
        #[command(flatten)]
        output: super::output::OutputArg,
        /// The snapshot file (`chitin cluster snapshot`).
        snapshot: PathBuf,
    },
    /// Fixtures from a cluster snapshot: the calls `policy diff` makes, each
    /// with the answer of --plugin (default: the embedded defaults) as the
    /// expected one, for `chitin policy test`. One matching call goes to
    /// stdout; with --out every matching call becomes a file in DIR.
    Fixture {
        /// The snapshot file (`chitin cluster snapshot`).
        #[arg(long = "from", value_name = "SNAPSHOT")]
        from: PathBuf,
        /// Only calls of this slot: placement, split or drain.
        #[arg(long)]
        slot: Option<String>,
        /// Only this call: place-replicas, rebalance, preferred-holders, split-points, plan-drain.
        #[arg(long)]
        call: Option<String>,
        /// Only calls about this application (place-replicas), shard
        /// (split-points) or node (plan-drain).
        #[arg(long)]
        subject: Option<String>,
        /// The component whose answers the fixtures expect.
        #[arg(long, default_value = "default")]
        plugin: String,
        #[command(flatten)]
        shadow: ShadowArgs,
        /// Write JSON fixtures instead of TOML.
        #[arg(long)]
        json: bool,
        /// Write every matching fixture into this directory (created if missing).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
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
        PolicyCommand::Inspect { plugin, output } => inspect(&plugin, output),
        PolicyCommand::Test { plugin, deadline_ms, fixtures } => test(&plugin, deadline_ms, &fixtures),
        PolicyCommand::Diff { plugin, against, shadow, output, snapshot } => diff(&plugin, &against, &shadow, output, &snapshot),
        PolicyCommand::Fixture { from, slot, call, subject, plugin, shadow, json, out } => {
            let filter = CaseFilter { slot, call, subject };
            fixtures(&from, &filter, &plugin, &shadow, json, out.as_deref())
        }
        PolicyCommand::Reload { addr, adopt } => {
            reload(addr.node.single("`policy reload` reloads one node").map_err(anyhow::Error::msg)?, adopt)
        }
        PolicyCommand::New { slot, name, dir, sdk_path } => {
            let root = super::scaffold::new_plugin_with_sdk(&slot, &name, &dir, sdk_path.as_deref())?;
            println!("created {} (slot `{slot}`)", root.display());
            println!("  cd {} && cargo test && cargo build --release --target wasm32-wasip2", root.display());
            println!("  chitin policy test --plugin target/wasm32-wasip2/release/{}.wasm fixtures/", name.replace('-', "_"));
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn load(plugin: &str) -> anyhow::Result<Plugin> {
    Ok(Plugin::load(&PluginSource::parse(plugin), None)?)
}

fn inspect(plugin: &str, output: super::output::OutputArg) -> anyhow::Result<ExitCode> {
    let plugin = load(plugin)?;
    // (slot, status, the export or why there is none)
    let slots: Vec<(String, &str, String)> = Slot::ALL
        .into_iter()
        .map(|slot| match plugin.slot_version(slot) {
            Ok(version) => (slot.to_string(), "ok", format!("chitin:policy/{slot}@{version}")),
            Err(e) => {
                let status = if plugin.exports().iter().any(|x| x.slot == Some(slot)) { "unsupported" } else { "absent" };
                (slot.to_string(), status, e.to_string())
            }
        })
        .collect();
    let others: Vec<&str> = plugin.exports().iter().filter(|e| e.slot.is_none()).map(|e| e.name.as_str()).collect();
    if !output.is_table() {
        let slots: Vec<_> = slots
            .iter()
            .map(|(slot, status, export)| serde_json::json!({ "slot": slot, "status": status, "export": export }))
            .collect();
        output.print_data(&serde_json::json!({ "plugin": plugin.name(), "slots": slots, "other_exports": others }));
        return Ok(ExitCode::SUCCESS);
    }
    println!("plugin: {}", plugin.name());
    println!("{:<12} {:<10} EXPORT", "SLOT", "STATUS");
    for (slot, status, export) in &slots {
        println!("{slot:<12} {status:<10} {export}");
    }
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

/// Reads a snapshot file, its errors naming the file.
fn read_snapshot(path: &std::path::Path) -> anyhow::Result<chitin::topology::snapshot::Snapshot> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the snapshot {}", path.display()))?;
    chitin::topology::snapshot::Snapshot::from_json(&text).with_context(|| format!("{}", path.display()))
}

/// A component for every slot it exports.
fn side(plugin: &str, limits: Limits) -> anyhow::Result<shadow::Side> {
    let plugin = Arc::new(load(plugin)?);
    Ok(shadow::Side::new(plugin, limits)?)
}

fn diff(
    plugin: &str,
    against: &str,
    args: &ShadowArgs,
    output: super::output::OutputArg,
    snapshot: &std::path::Path,
) -> anyhow::Result<ExitCode> {
    let snap = read_snapshot(snapshot)?;
    let limits = args.limits()?;
    let (new, old) = (side(plugin, limits)?, side(against, limits)?);
    let report = shadow::diff(&snap, &new, &old, &args.options());
    if !output.is_table() {
        output.print_data(&report);
    } else {
        print!("{}", report.render());
    }
    Ok(ExitCode::SUCCESS)
}

/// Which of a snapshot's calls `policy fixture` writes.
struct CaseFilter {
    slot: Option<String>,
    call: Option<String>,
    subject: Option<String>,
}

impl CaseFilter {
    fn matches(&self, case: &shadow::Case) -> bool {
        self.slot.as_deref().is_none_or(|s| s == case.request.slot().interface())
            && self.call.as_deref().is_none_or(|c| c == case.request.call())
            && self.subject.as_deref().is_none_or(|s| s == case.subject)
    }
}

fn fixtures(
    from: &std::path::Path,
    filter: &CaseFilter,
    plugin: &str,
    args: &ShadowArgs,
    json: bool,
    out: Option<&std::path::Path>,
) -> anyhow::Result<ExitCode> {
    if let Some(slot) = filter.slot.as_deref() {
        anyhow::ensure!(
            matches!(slot, "placement" | "split" | "drain"),
            "--slot {slot}: a snapshot makes fixtures of placement, split and drain (instance-id needs a node's environment)"
        );
    }
    let snap = read_snapshot(from)?;
    let side = side(plugin, args.limits()?)?;
    let all = shadow::cases(&snap, &args.options());
    let chosen: Vec<&shadow::Case> = all.iter().filter(|c| filter.matches(c)).collect();
    let listing = |cases: &[&shadow::Case]| {
        cases
            .iter()
            .take(12)
            .map(|c| format!("{} {} --subject {}", c.request.slot(), c.request.call(), c.subject))
            .collect::<Vec<_>>()
            .join("; ")
    };
    anyhow::ensure!(
        !chosen.is_empty(),
        "no call of the snapshot matches (its calls: {}{})",
        listing(&all.iter().collect::<Vec<_>>()),
        if all.len() > 12 { "; …" } else { "" }
    );
    if out.is_none() && chosen.len() > 1 {
        anyhow::bail!(
            "{} calls match, and stdout takes one fixture: narrow with --slot, --call and --subject, or write them all with --out DIR (matching: {}{})",
            chosen.len(),
            listing(&chosen),
            if chosen.len() > 12 { "; …" } else { "" }
        );
    }
    let mut written = 0;
    for case in chosen {
        let slot = case.request.slot();
        let runner =
            side.runner(slot).ok_or_else(|| anyhow::anyhow!("{} does not export the `{slot}` slot", side.plugin.name()))?;
        let fixture = shadow::fixture(case, &shadow::run(runner, case), &snap).map_err(anyhow::Error::msg)?;
        let text = if json {
            serde_json::to_string_pretty(&fixture)? + "\n"
        } else {
            shadow::fixture_toml(&fixture).map_err(anyhow::Error::msg)?
        };
        match out {
            None => print!("{text}"),
            Some(dir) => {
                std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
                let subject: String = case
                    .subject
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
                    .collect();
                let path = dir.join(format!("{slot}-{}-{subject}.{}", case.request.call(), if json { "json" } else { "toml" }));
                std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
                written += 1;
            }
        }
    }
    if let Some(dir) = out {
        eprintln!("wrote {written} fixtures to {}", dir.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn reload(address: &str, adopt: bool) -> anyhow::Result<ExitCode> {
    use chitin::proto::ReloadPoliciesRequest;
    super::client::runtime()?.block_on(async {
        let answer = super::client::admin(&super::client::Nodes::one(address)?)
            .await?
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
