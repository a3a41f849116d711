//! `chitin cluster …` rollout verbs: bootstrap nodes, run control sequences
//! (`add-node`, `move-shard`, `split-shard`, `rebalance`) and fetch a node's
//! live config.
//!
//! A control sequence plans small valid versions from `--config`, pushes
//! each to every node over the admin plane, waits until every node reports
//! it, and checkpoints next to the config file (`<config>.rollout.json`).
//! Running the same command again after an interruption resumes it; another
//! sequence is refused while one is unfinished. The admin plane's bearer
//! token comes from `CHITIN_ADMIN_TOKEN`.
//!
//! Exit status: 0 done (or nothing to do), 1 refused or failed (the message
//! says why and how to go on), 2 usage error.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use chitin::policy::Policies;
use chitin::rollout::exec::{self, Bootstrapped, Options, Prepared};
use chitin::rollout::plan::{self, Plan, PlanError, Sequence};
use chitin::topology::file;
use chitin::topology::model::{ClusterConfig, Metadata};

use super::client::runtime;
use super::policy::PolicyArgs;
use super::progress::Progress;

const DEFAULT_FILE: &str = "cluster_config.json";

#[derive(clap::Subcommand, Debug)]
pub enum RolloutCommand {
    /// Give every node of the config its id and the config (each dialled at its grpc_address).
    BootstrapNodes {
        /// The cluster config file (read; a sequence that changes the cluster writes it back).
        #[arg(long, default_value = DEFAULT_FILE, value_name = "FILE")]
        config: PathBuf,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Give one node of the config its id and the config (e.g. a replaced node).
    BootstrapNode {
        /// The cluster config file (read; a sequence that changes the cluster writes it back).
        #[arg(long, default_value = DEFAULT_FILE, value_name = "FILE")]
        config: PathBuf,
        /// The node's id in the config.
        #[arg(long, value_name = "ID")]
        node_id: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Add a node to the running cluster (one version), optionally followed by a rebalance.
    AddNode {
        /// The cluster config file (read; a sequence that changes the cluster writes it back).
        #[arg(long, default_value = DEFAULT_FILE, value_name = "FILE")]
        config: PathBuf,
        /// The node's id in the config.
        #[arg(long, value_name = "ID")]
        node_id: String,
        /// The node's gRPC address (host:port).
        #[arg(long, value_name = "ADDR")]
        node_address: String,
        /// Node metadata as KEY=VALUE, repeatable (`zone=…` reaches the policies as the zone).
        #[arg(long = "metadata", value_name = "KEY=VALUE", value_parser = parse_metadata)]
        metadata: Vec<Metadata>,
        /// Then move replicas onto it as the placement policy's rebalance plan says.
        #[arg(long)]
        rebalance: bool,
        /// Replica moves per rebalance round (each move hands a lease over).
        #[arg(long, default_value_t = 4, value_name = "N")]
        max_handoffs_per_round: u32,
        #[command(flatten)]
        policies: PolicyArgs,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Move a shard's replica to another node: add the new replica, bake, remove the old one.
    MoveShard {
        /// The cluster config file (read; a sequence that changes the cluster writes it back).
        #[arg(long, default_value = DEFAULT_FILE, value_name = "FILE")]
        config: PathBuf,
        /// The shard's id in the config.
        #[arg(long, value_name = "ID")]
        shard_id: String,
        /// The node that gives the replica up.
        #[arg(long, value_name = "ID")]
        from_node: String,
        /// The node that takes the replica.
        #[arg(long, value_name = "ID")]
        to_node: String,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Split an active shard: children activating on the parent's nodes, then active (parent inactive).
    SplitShard {
        /// The cluster config file (read; a sequence that changes the cluster writes it back).
        #[arg(long, default_value = DEFAULT_FILE, value_name = "FILE")]
        config: PathBuf,
        /// The shard's id in the config.
        #[arg(long, value_name = "ID")]
        shard_id: String,
        /// The first key of the second child, 8 hex digits (e.g. 08000000); without it the split policy chooses.
        #[arg(long, value_name = "HEX")]
        split_at: Option<String>,
        /// How many children (2 or 4) when the split policy chooses; --split-at makes 2.
        #[arg(long, value_name = "N")]
        children: Option<u32>,
        #[command(flatten)]
        policies: PolicyArgs,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Even out replicas across nodes as the placement policy's rebalance plan says.
    Rebalance {
        /// The cluster config file (read; a sequence that changes the cluster writes it back).
        #[arg(long, default_value = DEFAULT_FILE, value_name = "FILE")]
        config: PathBuf,
        /// Replica moves per round (each move hands a lease over).
        #[arg(long, default_value_t = 4, value_name = "N")]
        max_handoffs_per_round: u32,
        #[command(flatten)]
        policies: PolicyArgs,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Print the config a node runs (cluster_config.json).
    GetConfig {
        /// The node's gRPC address (host:port).
        #[arg(long, value_name = "ADDR")]
        node_address: String,
        /// Write it to this file instead of stdout.
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
        #[command(flatten)]
        output: super::output::OutputArg,
    },
}

/// How long to wait for nodes.
#[derive(clap::Args, Debug, Clone)]
pub struct WaitArgs {
    /// How long to keep dialling a node that does not answer.
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    pub timeout_secs: u64,
}

/// How a control sequence runs.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Pause after a step converged before removing replicas or completing a split.
    #[arg(long, default_value_t = 5, value_name = "SECS")]
    pub bake_secs: u64,
    /// How long one step may take to reach every node before the sequence stops (resumable).
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    pub timeout_secs: u64,
}

impl RunArgs {
    fn options(&self) -> Options {
        Options {
            timeout: Duration::from_secs(self.timeout_secs.max(1)),
            bake: Duration::from_secs(self.bake_secs),
            ..defaults()
        }
    }
}

/// The executor's defaults, with this invocation's TLS to the nodes.
fn defaults() -> Options {
    Options { tls: super::client::tls(), ..Options::default() }
}

fn parse_metadata(s: &str) -> Result<Metadata, String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok(Metadata::new(k, v)),
        _ => Err(format!("`{s}` is not KEY=VALUE")),
    }
}

/// The components a sequence plans with, once they are known to be the
/// cluster's: a plan from other components than the nodes run would be
/// undone by their rounds (or thrash), so a difference refuses the sequence.
fn cluster_policies(config: &Path, args: &PolicyArgs) -> anyhow::Result<Policies> {
    let (policies, source) = args.load()?;
    let cluster = runtime()?.block_on(recorded_policies(config))?;
    if let Some(why) = chitin::node::policy_hashes::refuse_mismatch(&policies.hashes(), &cluster, &source) {
        anyhow::bail!(why);
    }
    Ok(policies)
}

/// The cluster's recorded components, from the first node of the config
/// that answers (none answering: nothing recorded to compare, and the
/// sequence's own push reports the unreachable nodes).
async fn recorded_policies(config: &Path) -> anyhow::Result<chitin::node::policy_hashes::Hashes> {
    let config = file::load(config)?;
    let (token, tls) = (exec::token_from_env(), super::client::tls());
    for node in &config.nodes {
        let Ok(mut admin) = exec::admin_client(&node.grpc_address, token.as_deref(), tls.as_ref(), Duration::from_secs(5)) else {
            continue;
        };
        if let Ok(status) = admin.status(chitin::proto::StatusRequest {}).await {
            return Ok(status.into_inner().cluster_policies.into_iter().collect());
        }
    }
    Ok(Default::default())
}

/// The append load the nodes of the config counted on `shard`: the split
/// policy's samples (a node that does not answer is named and skipped).
fn split_load(config: &Path, shard: &str) -> anyhow::Result<Option<chitin::node::load::ShardLoad>> {
    let config = file::load(config)?;
    let addresses: Vec<String> = config.nodes.iter().map(|n| n.grpc_address.clone()).collect();
    let (loads, silent) = runtime()?.block_on(exec::cluster_load(&addresses, Some(shard), &defaults()));
    for node in &silent {
        eprintln!("load of {shard}: no answer from {node}; its appends are not in the split policy's samples");
    }
    Ok(loads.into_iter().next())
}

fn policy_error(slot: &'static str) -> impl Fn(anyhow::Error) -> PlanError {
    move |e| PlanError::Policy { slot, message: format!("{e:#}") }
}

pub fn run(cmd: RolloutCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        RolloutCommand::BootstrapNodes { config, wait } => bootstrap(&config, None, &wait),
        RolloutCommand::BootstrapNode { config, node_id, wait } => bootstrap(&config, Some(&node_id), &wait),
        RolloutCommand::AddNode { config, node_id, node_address, metadata, rebalance, max_handoffs_per_round, policies, run } => {
            let seq = Sequence::AddNode { node_id: node_id.clone(), node_address: node_address.clone(), rebalance };
            let p = if rebalance { Some(cluster_policies(&config, &policies)?) } else { None };
            sequence(&config, seq, &run, |c| match &p {
                Some(p) => {
                    plan::add_node_and_rebalance(c, &node_id, &node_address, metadata, max_handoffs_per_round, |r| p.rebalance(r))
                }
                None => plan::add_node(c, &node_id, &node_address, metadata),
            })
        }
        RolloutCommand::MoveShard { config, shard_id, from_node, to_node, run } => {
            let seq = Sequence::MoveShard { shard_id: shard_id.clone(), from_node: from_node.clone(), to_node: to_node.clone() };
            sequence(&config, seq, &run, |c| plan::move_shard(c, &shard_id, &from_node, &to_node))
        }
        RolloutCommand::SplitShard { config, shard_id, split_at, children, policies, run } => {
            let at = split_at.as_deref().map(plan::parse_split_at).transpose()?;
            let children = children.unwrap_or(2);
            let seq = Sequence::SplitShard { shard_id: shard_id.clone(), split_at: at.map(|a| format!("{a:08x}")), children };
            sequence(&config, seq, &run, |c| {
                // The state and flag checks come before loading the policies.
                plan::split_request(c, &shard_id, at, children)?;
                let p = cluster_policies(&config, &policies).map_err(policy_error("split"))?;
                let load = split_load(&config, &shard_id).map_err(policy_error("split"))?;
                let points = plan::choose_split_points(c, &shard_id, at, children, |mut r| {
                    if let Some(load) = load {
                        r.load = Some(chitin_policy_sdk::ShardLoad {
                            shard: load.shard,
                            keys: 0,
                            bytes: load.bytes_per_sec.round() as u64,
                            ops_per_sec: load.ops_per_sec,
                        });
                        r.samples = load.ranges;
                    }
                    p.split_points(r)
                })?;
                plan::split_shard(c, &shard_id, &points)
            })
        }
        RolloutCommand::Rebalance { config, max_handoffs_per_round, policies, run } => {
            let p = cluster_policies(&config, &policies)?;
            sequence(&config, Sequence::Rebalance, &run, |c| {
                let moves = p
                    .rebalance(plan::rebalance_request(c))
                    .map_err(|e| PlanError::Policy { slot: "placement", message: e.to_string() })?;
                plan::rebalance(c, &moves, max_handoffs_per_round)
            })
        }
        RolloutCommand::GetConfig { node_address, file, output } => get_config(&node_address, file.as_deref(), output),
    }
}

/// The step number a progress line of [`exec::execute`] reports finished
/// ("step 3/7: version …: … converged …").
fn finished_step(line: &str) -> Option<u64> {
    let rest = line.strip_prefix("step ")?;
    let (done, _) = rest.split_once('/')?;
    line.contains(" converged on ").then(|| done.parse().ok()).flatten()
}

/// Plans (or resumes) and runs one control sequence.
fn sequence(
    config: &Path,
    seq: Sequence,
    run: &RunArgs,
    plan: impl FnOnce(&ClusterConfig) -> Result<Plan, PlanError>,
) -> anyhow::Result<ExitCode> {
    let command = seq.to_string();
    match exec::prepare(config, seq, plan)? {
        Prepared::AlreadyDone { version } => {
            println!("`{command}` already finished: {} is at version {version}; nothing to do", config.display());
        }
        Prepared::NothingToDo { version } => {
            println!("nothing to do: `{command}` plans no change to version {version} of {}", config.display());
        }
        Prepared::Run { checkpoint, from, resumed } => {
            let opts = run.options();
            let total = checkpoint.plan().map_or(0, |p| p.steps.len());
            let progress = Progress::new(total as u64, &format!("`{command}` steps"));
            progress.set(from as u64, "");
            let mut print = |line: &str| {
                progress.println(line);
                if let Some(done) = finished_step(line) {
                    progress.set(done, "");
                }
            };
            let outcome = runtime()?.block_on(exec::execute(config, *checkpoint, from, resumed, &opts, &mut print));
            progress.finish(if outcome.is_ok() { "done" } else { "stopped" });
            let outcome = outcome?;
            println!(
                "done: `{command}`: version {} on all {} node(s) ({} of {} step(s) run now); {} updated",
                outcome.version,
                outcome.nodes,
                outcome.steps_run,
                outcome.total,
                config.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn bootstrap(config_path: &Path, only: Option<&str>, wait: &WaitArgs) -> anyhow::Result<ExitCode> {
    let config = file::load(config_path)?;
    let violations = chitin::topology::validate(&config);
    if !violations.is_empty() {
        anyhow::bail!(
            "{} breaks {} rule(s), refusing to bootstrap with it: {}; run `chitin config validate {}`",
            config_path.display(),
            violations.len(),
            violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "),
            config_path.display()
        );
    }
    let ids: Vec<String> = match only {
        Some(id) => {
            if config.node(id).is_none() {
                return Err(exec::ExecError::UnknownNode {
                    node: id.to_owned(),
                    config: config_path.to_owned(),
                    known: config.nodes.iter().map(|n| n.id.as_str()).collect::<Vec<_>>().join(", "),
                }
                .into());
            }
            vec![id.to_owned()]
        }
        None => config.nodes.iter().map(|n| n.id.clone()).collect(),
    };
    let opts = Options { timeout: Duration::from_secs(wait.timeout_secs.max(1)), ..defaults() };
    let mut failed = 0;
    runtime()?.block_on(async {
        for id in &ids {
            let address = &config.node(id).expect("checked").grpc_address;
            match exec::bootstrap_node(&config, id, &opts).await {
                Ok(Bootstrapped::Now { state, version }) => {
                    println!("{id} ({address}): bootstrapped, {state} at version {version}");
                }
                Ok(Bootstrapped::Already { version }) => {
                    println!("{id} ({address}): already provisioned at version {version}, left alone");
                }
                Err(e) => {
                    failed += 1;
                    eprintln!("error: {id} ({address}): {e}");
                }
            }
        }
    });
    if failed > 0 {
        eprintln!("{failed} of {} node(s) not bootstrapped", ids.len());
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn get_config(address: &str, file: Option<&Path>, output: super::output::OutputArg) -> anyhow::Result<ExitCode> {
    let opts = Options { timeout: Duration::from_secs(10), ..defaults() };
    let r = runtime()?.block_on(exec::get_config(address, &opts))?;
    if r.config_json.is_empty() {
        eprintln!(
            "the node at {address} is {} and has no config yet; give it one with `chitin cluster bootstrap-node --config FILE --node-id ID`",
            if r.state.is_empty() { "UNPROVISIONED" } else { r.state.as_str() }
        );
        return Ok(ExitCode::FAILURE);
    }
    eprintln!("the node at {address} is {} at config version {}", r.state, r.config_version);
    match file {
        Some(path) => {
            let config = ClusterConfig::from_json(&r.config_json)
                .with_context(|| format!("the node at {address} sent a config that does not parse"))?;
            file::save(path, &config)?;
            eprintln!("wrote {}", path.display());
        }
        None if !output.is_table() => output.print_data(&serde_json::from_str::<serde_json::Value>(&r.config_json)?),
        None => {
            print!("{}", r.config_json);
            if !r.config_json.ends_with('\n') {
                println!();
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::finished_step;

    #[test]
    fn progress_follows_the_converged_step_lines() {
        assert_eq!(
            finished_step("step 3/7: version 12: add node-04: pushed to 4 node(s), converged on 4 node(s) in 1.2 s"),
            Some(3)
        );
        assert_eq!(finished_step("step 2/7: baking 5s before: remove node-01"), None);
        assert_eq!(finished_step("`add-node`: 7 step(s), version 1 → 8 (checkpoint x)"), None);
    }
}
