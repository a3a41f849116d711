//! `chitin cluster upgrade-status` and `chitin cluster finalize-upgrade`
//! (docs/upgrades.md).

use std::process::ExitCode;

use chitin::proto;

use super::client::{Nodes, admin};

/// `chitin cluster upgrade-status`.
pub async fn status(nodes: &Nodes, output: super::output::OutputArg) -> anyhow::Result<ExitCode> {
    let s = admin(nodes)
        .await?
        .upgrade_status(proto::UpgradeStatusRequest {})
        .await
        .map_err(|s| anyhow::anyhow!("upgrade-status failed: {}{}", s.message(), hint(&s)))?
        .into_inner();
    if !output.is_table() {
        let value = serde_json::json!({
            "cluster_version": s.cluster_version,
            "node_version": s.node_version,
            "nodes": s.nodes.iter().map(|n| serde_json::json!({
                "name": n.name, "uuid": n.uuid, "version": n.version, "protocol": n.protocol,
            })).collect::<Vec<_>>(),
            "gates": s.gates.iter().map(|g| serde_json::json!({
                "name": g.name, "since": g.since, "what": g.what, "active": g.active,
            })).collect::<Vec<_>>(),
            "finalize_to": s.finalize_to,
            "blockers": s.blockers,
        });
        output.print_data(&value);
        return Ok(ExitCode::SUCCESS);
    }
    println!("cluster version {} (finalized); asked node runs chitin {}", s.cluster_version, s.node_version);
    println!();
    println!("{:<16} {:<36} {:<12} PROTOCOL", "NODE", "UUID", "VERSION");
    for n in &s.nodes {
        println!("{:<16} {:<36} {:<12} {}", n.name, n.uuid, n.version, n.protocol);
    }
    println!();
    println!("{:<20} {:<6} {:<8} WHAT", "GATE", "SINCE", "STATE");
    for g in &s.gates {
        println!("{:<20} {:<6} {:<8} {}", g.name, g.since, if g.active { "on" } else { "off" }, g.what);
    }
    println!();
    if s.finalize_to.is_empty() {
        println!("nothing to finalize: the cluster is at the asked node's release");
    } else if s.blockers.is_empty() {
        println!("ready: `chitin cluster finalize-upgrade` finalizes at {} (cannot be undone)", s.finalize_to);
    } else {
        println!("not ready to finalize at {}:", s.finalize_to);
        for b in &s.blockers {
            println!("  {b}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `chitin cluster finalize-upgrade`.
pub async fn finalize(nodes: &Nodes, version: Option<String>) -> anyhow::Result<ExitCode> {
    let r = admin(nodes)
        .await?
        .finalize_upgrade(proto::FinalizeUpgradeRequest { version: version.unwrap_or_default() })
        .await
        .map_err(|s| anyhow::anyhow!("finalize-upgrade failed: {}{}", s.message(), hint(&s)))?
        .into_inner();
    if r.previous == r.cluster_version {
        println!("the cluster is finalized at {} already; nothing changed", r.cluster_version);
    } else {
        println!("finalized: cluster version {} → {}", r.previous, r.cluster_version);
        for gate in &r.activated {
            println!("  gate on: {gate}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn hint(s: &tonic::Status) -> &'static str {
    match s.code() {
        tonic::Code::Unimplemented => "; that node runs a chitin without version gates (0.1.0): ask a node of the new release",
        _ => "",
    }
}
