//! `chitin cluster status|drain|load|snapshot|instances|cleanup-stale` (and `chitin admin
//! drain`); the rollout verbs live in `rollout.rs`, the upgrade verbs in
//! `upgrade.rs`.

use std::process::ExitCode;

use chitin::proto;
use clap::Subcommand;

use super::client::{NodeAddr, Nodes, admin, runtime};
use super::output::OutputArg;
use super::progress::Progress;

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Nodes (name, UUID, state, version, last heartbeat), shards per node and unowned shards.
    Status {
        #[command(flatten)]
        addr: NodeAddr,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Hand every shard of a node over and leave it running, drained, until it is stopped.
    Drain(DrainArgs),
    /// The load every live node counted (its appends and what applications reported with
    /// `ReportLoad`), per shard and per sub-range (what `split-shard` without `--split-at`
    /// gives the split policy).
    Load {
        #[command(flatten)]
        addr: NodeAddr,
        /// Only this shard, with its 64 sub-ranges.
        #[arg(long, value_name = "ID")]
        shard: Option<String>,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Record the cluster for a shadow comparison of policies (`chitin policy
    /// diff`, `chitin policy fixture`): the config the nodes run, the nodes,
    /// leases, load and the cluster's policy hashes, as JSON on stdout.
    Snapshot {
        #[command(flatten)]
        addr: NodeAddr,
    },
    /// Every instance in the Redis registry, alive or stale.
    Instances {
        #[command(flatten)]
        addr: NodeAddr,
        #[command(flatten)]
        output: OutputArg,
    },
    /// One health-monitor sweep by hand: removes stale instances and their claims.
    CleanupStale {
        #[command(flatten)]
        addr: NodeAddr,
    },
    /// Each live node's version, the finalized cluster version, each version gate, and whether
    /// finalize-upgrade would succeed now.
    UpgradeStatus {
        #[command(flatten)]
        addr: NodeAddr,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Finalize a rolling upgrade once every live node runs the new release: raises the cluster
    /// version and turns its gates on. Cannot be undone (docs/upgrades.md).
    FinalizeUpgrade {
        #[command(flatten)]
        addr: NodeAddr,
        /// The release line to finalize at (e.g. 0.2); default: the asked node's release.
        #[arg(long)]
        version: Option<String>,
    },
    #[command(flatten)]
    Rollout(super::rollout::RolloutCommand),
}

#[derive(clap::Args, Debug)]
pub struct DrainArgs {
    /// The node (by name) to drain; it is found through the node at `--via`.
    /// Without it, the node at the first `--via` address drains itself (what
    /// a Kubernetes preStop hook runs: no name to expand).
    #[arg(long = "node")]
    pub name: Option<String>,
    /// Nodes of the cluster (comma-separated, tried in order), to look the
    /// drained node's address up. Default: `CHITIN_NODE`, else 127.0.0.1:50051.
    #[arg(long, env = "CHITIN_NODES", value_name = "ADDR[,ADDR...]", default_value = super::client::default_nodes())]
    pub via: Nodes,
}

pub fn run(cmd: ClusterCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ClusterCommand::Rollout(cmd) => super::rollout::run(cmd),
        ClusterCommand::Instances { addr, output } => super::coord::instances(addr, output),
        ClusterCommand::CleanupStale { addr } => super::coord::cleanup_stale(addr),
        ClusterCommand::Status { addr, output } => runtime()?.block_on(status(&addr.node, output)),
        ClusterCommand::Drain(args) => runtime()?.block_on(drain(args)),
        ClusterCommand::Snapshot { addr } => runtime()?.block_on(snapshot(&addr.node)),
        ClusterCommand::Load { addr, shard, output } => runtime()?.block_on(load(&addr.node, shard.as_deref(), output)),
        ClusterCommand::UpgradeStatus { addr, output } => runtime()?.block_on(super::upgrade::status(&addr.node, output)),
        ClusterCommand::FinalizeUpgrade { addr, version } => runtime()?.block_on(super::upgrade::finalize(&addr.node, version)),
    }
}

async fn status(nodes: &Nodes, output: OutputArg) -> anyhow::Result<ExitCode> {
    let s = admin(nodes)
        .await?
        .status(proto::StatusRequest {})
        .await
        .map_err(|s| anyhow::anyhow!("status failed: {}", s.message()))?
        .into_inner();
    if !output.is_table() {
        let value = serde_json::json!({
            "node": s.node,
            "state": s.state,
            "config_version": s.config_version,
            "nodes": s.nodes.iter().map(|n| serde_json::json!({
                "name": n.name, "uuid": n.uuid, "state": n.state, "address": n.address,
                "last_heartbeat_ms_ago": n.last_seen_ms_ago, "shards_held": n.shards_held,
                "version": n.version, "protocol": n.protocol, "policies": n.policies,
            })).collect::<Vec<_>>(),
            "leases": s.leases.iter().map(|l| serde_json::json!({
                "shard": l.shard, "application": l.application, "holder": l.holder,
                "holder_uuid": l.holder_uuid, "epoch": l.epoch, "expires_in_ms": l.expires_in_ms,
            })).collect::<Vec<_>>(),
            "unowned": s.unowned,
            "insecure_listen": s.insecure_listen,
            "cluster_policies": s.cluster_policies,
            "policy_mismatch": s.policy_mismatch,
            "policy_fallbacks": s.policy_fallbacks,
        });
        output.print_data(&value);
        return Ok(ExitCode::SUCCESS);
    }
    println!("asked {} ({}), cluster config version {}", s.node, s.state, s.config_version);
    if s.insecure_listen {
        println!(
            "WARNING: {} serves unauthenticated callers from other hosts ([api] insecure_listen = true); see docs/security.md",
            s.node
        );
    }
    for f in &s.policy_fallbacks {
        println!("WARNING: {}'s policy component failed; the embedded default answers for it: {f}", s.node);
    }
    println!();
    println!("{:<16} {:<36} {:<8} {:<10} {:>14} {:>7}  ADDRESS", "NODE", "UUID", "STATE", "VERSION", "HEARTBEAT", "SHARDS");
    for n in &s.nodes {
        // A 0.1.0 node answering reports no versions at all.
        let version = if n.version.is_empty() { "?" } else { &n.version };
        println!(
            "{:<16} {:<36} {:<8} {:<10} {:>11} ms {:>7}  {}",
            n.name, n.uuid, n.state, version, n.last_seen_ms_ago, n.shards_held, n.address
        );
    }
    println!();
    println!("{} shards held, {} unowned", s.leases.len(), s.unowned.len());
    for shard in &s.unowned {
        println!("  unowned: {shard}");
    }
    print_policies(&s);
    Ok(ExitCode::SUCCESS)
}

/// Asks every live node (found through `nodes`) for its counts and sums them.
async fn load(nodes: &Nodes, shard: Option<&str>, output: OutputArg) -> anyhow::Result<ExitCode> {
    let status = admin(nodes)
        .await?
        .status(proto::StatusRequest {})
        .await
        .map_err(|s| anyhow::anyhow!("status failed: {}", s.message()))?
        .into_inner();
    let addresses: Vec<String> = status.nodes.iter().map(|n| n.address.clone()).collect();
    let opts = chitin::rollout::exec::Options { tls: super::client::tls(), ..Default::default() };
    let (loads, silent) = chitin::rollout::exec::cluster_load(&addresses, shard, &opts).await;
    for node in &silent {
        eprintln!("no answer from {node}: its counts are missing");
    }
    if !output.is_table() {
        let value: Vec<_> = loads
            .iter()
            .map(|l| {
                serde_json::json!({
                    "shard": l.shard, "ops_per_sec": l.ops_per_sec, "bytes_per_sec": l.bytes_per_sec,
                    "ranges": l.ranges.iter().map(|r| serde_json::json!({
                        "lower": format!("{:08x}", r.lower), "upper": format!("{:08x}", r.upper), "ops_per_sec": r.ops_per_sec,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        output.print_data(&value);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:<24} {:>12} {:>14}", "SHARD", "OPS/S", "BYTES/S");
    for l in &loads {
        println!("{:<24} {:>12.2} {:>14.0}", l.shard, l.ops_per_sec, l.bytes_per_sec);
        if shard.is_some() {
            for r in l.ranges.iter().filter(|r| r.ops_per_sec > 0.0) {
                println!("  {:08x}..{:08x} {:>12.2}", r.lower, r.upper, r.ops_per_sec);
            }
        }
    }
    if loads.is_empty() {
        println!("(no appends or reported load counted in the last minutes)");
    }
    Ok(ExitCode::SUCCESS)
}

/// `chitin cluster snapshot`: the status and config of the first node of
/// `nodes` that answers, and the load every live node counted.
async fn snapshot(nodes: &Nodes) -> anyhow::Result<ExitCode> {
    use chitin::topology::snapshot::{Snapshot, SnapshotLease, SnapshotLoad, VERSION};
    let mut client = admin(nodes).await?;
    let status =
        client.status(proto::StatusRequest {}).await.map_err(|s| anyhow::anyhow!("status failed: {}", s.message()))?.into_inner();
    let got = client
        .get_config(proto::GetConfigRequest {})
        .await
        .map_err(|s| anyhow::anyhow!("get-config failed: {}", s.message()))?
        .into_inner();
    anyhow::ensure!(
        !got.config_json.is_empty(),
        "the node {} is {} and has no config yet: nothing to record",
        status.node,
        if got.state.is_empty() { "UNPROVISIONED" } else { got.state.as_str() }
    );
    let config = chitin::topology::ClusterConfig::from_json(&got.config_json)
        .map_err(|e| anyhow::anyhow!("the node {} sent a config that does not parse: {e}", status.node))?;
    let addresses: Vec<String> = status.nodes.iter().map(|n| n.address.clone()).collect();
    let opts = chitin::rollout::exec::Options { tls: super::client::tls(), ..Default::default() };
    let (loads, silent) = chitin::rollout::exec::cluster_load(&addresses, None, &opts).await;
    for node in &silent {
        eprintln!("no answer from {node}: its load counts are missing from the snapshot");
    }
    let shards: std::collections::HashSet<&str> = config.shards().map(|(_, s)| s.id.as_str()).collect();
    let mut snap = Snapshot {
        version: VERSION,
        taken_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        taken_via: status.node.clone(),
        nodes: status.nodes.iter().map(snapshot_node).collect(),
        // Status lists the live leases only; a lease of a shard another
        // config version has is left out (the snapshot has one config).
        leases: status
            .leases
            .iter()
            .filter(|l| shards.contains(l.shard.as_str()))
            .map(|l| SnapshotLease {
                shard: l.shard.clone(),
                holder: l.holder.clone(),
                holder_id: l.holder_uuid.clone(),
                epoch: l.epoch,
                live: true,
            })
            .collect(),
        load: loads
            .into_iter()
            .filter(|l| shards.contains(l.shard.as_str()))
            .map(|l| SnapshotLoad {
                shard: l.shard,
                ops_per_sec: l.ops_per_sec,
                bytes_per_sec: l.bytes_per_sec,
                ranges: l.ranges,
            })
            .collect(),
        policies: status.cluster_policies.into_iter().collect(),
        config,
    };
    snap.complete_nodes();
    print!("{}", snap.to_json());
    eprintln!(
        "recorded config version {}: {} nodes ({} live), {} leases, load of {} shards, via {}",
        snap.config.version,
        snap.nodes.len(),
        snap.nodes.iter().filter(|n| n.live).count(),
        snap.leases.len(),
        snap.load.len(),
        snap.taken_via
    );
    Ok(ExitCode::SUCCESS)
}

/// A node of a status answer as a snapshot records it.
fn snapshot_node(n: &proto::NodeStatus) -> chitin::topology::snapshot::SnapshotNode {
    chitin::topology::snapshot::SnapshotNode {
        name: n.name.clone(),
        id: n.uuid.clone(),
        address: n.address.clone(),
        // A state this release does not know is no state to plan with.
        state: n.state.parse::<chitin::lease::NodeState>().map_or(chitin::policy::sdk::NodeState::Down, Into::into),
        // Status lists the live registrations only.
        live: true,
        zone: None,
        labels: Vec::new(),
    }
}

/// The cluster's component per slot, and every node whose differs.
fn print_policies(s: &proto::StatusResponse) {
    if s.cluster_policies.is_empty() {
        return;
    }
    println!();
    println!("policies (SHA-256 of each slot's component):");
    let mut slots: Vec<_> = s.cluster_policies.iter().collect();
    slots.sort();
    for (slot, sha) in slots {
        let differ: Vec<String> = s
            .nodes
            .iter()
            .filter_map(|n| n.policies.get(slot).filter(|h| *h != sha).map(|h| format!("{} runs {h}", n.name)))
            .collect();
        let note = if differ.is_empty() { "every node".to_string() } else { format!("MISMATCH: {}", differ.join(", ")) };
        println!("  {slot:<12} {sha}  {note}");
    }
}

async fn drain(args: DrainArgs) -> anyhow::Result<ExitCode> {
    // Draining "this node" asks the first address only: failing over to
    // another node would drain that one instead.
    let asked = match &args.name {
        Some(_) => args.via.clone(),
        None => Nodes::one(&args.via.addresses()[0])?,
    };
    let s = admin(&asked)
        .await?
        .status(proto::StatusRequest {})
        .await
        .map_err(|s| anyhow::anyhow!("status failed: {}", s.message()))?
        .into_inner();
    let name = args.name.clone().unwrap_or_else(|| s.node.clone());
    let target = s.nodes.iter().find(|n| n.name == name).ok_or_else(|| {
        anyhow::anyhow!(
            "no live node named `{name}` (live: {})",
            s.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", ")
        )
    })?;
    let held = |s: &proto::StatusResponse| s.leases.iter().filter(|l| l.holder == name).count() as u64;
    let before = held(&s);
    let mut drain = admin(&Nodes::one(&target.address)?).await?;
    let request = drain.drain(proto::DrainRequest {});
    let report = with_drain_progress(request, &args.via, &name, before, held).await;
    let report = report.map_err(|s| anyhow::anyhow!("drain failed: {}", s.message()))?.into_inner();
    println!(
        "drained {name}: {} shards handed over in {} rounds; the node keeps running until stopped",
        report.handed_over, report.rounds
    );
    for kept in &report.kept {
        println!("  kept {}: {}", kept.shard, kept.why);
    }
    Ok(ExitCode::SUCCESS)
}

/// Awaits the drain `request`, showing how many of the `before` shards of
/// node `name` were handed over, by the status of the node at `via`.
async fn with_drain_progress<T>(
    request: impl std::future::Future<Output = T>,
    via: &Nodes,
    name: &str,
    before: u64,
    held: impl Fn(&proto::StatusResponse) -> u64,
) -> T {
    let progress = Progress::new(before, &format!("drain {name}: shards handed over"));
    tokio::pin!(request);
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(500));
    loop {
        tokio::select! {
            done = &mut request => {
                progress.finish("done");
                return done;
            }
            _ = tick.tick() => {
                let status = match admin(via).await {
                    Ok(mut a) => a.status(proto::StatusRequest {}).await.ok().map(|r| r.into_inner()),
                    Err(_) => None,
                };
                if let Some(s) = status {
                    progress.set(before.saturating_sub(held(&s)), "");
                }
            }
        }
    }
}
