//! A config at a glance (`chitin config show`): applications, shards by
//! state, replicas per node; serializable for `--json`, or a text table.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::model::{ClusterConfig, Metadata, Shard, ShardState};

/// Shards (or replicas) per shard state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StateCounts {
    pub active: usize,
    pub splitting: usize,
    pub activating: usize,
    pub inactive: usize,
}

impl StateCounts {
    fn add(&mut self, s: ShardState) {
        match s {
            ShardState::Active => self.active += 1,
            ShardState::Splitting => self.splitting += 1,
            ShardState::Activating => self.activating += 1,
            ShardState::Inactive => self.inactive += 1,
        }
    }
    pub fn total(&self) -> usize {
        self.active + self.splitting + self.activating + self.inactive
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeSummary {
    pub id: String,
    pub grpc_address: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub metadata: Vec<Metadata>,
    /// Replicas on this node, by the state of their shard.
    pub replicas: StateCounts,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShardSummary {
    pub id: String,
    pub lower: String,
    pub upper: String,
    pub state: ShardState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    pub nodes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ApplicationSummary {
    pub name: String,
    pub implementation: String,
    pub replication_factor: u32,
    pub shards: StateCounts,
    pub replicas: usize,
    /// Shards listed one by one: those taking part in a split in progress
    /// (splitting and activating), or every shard when asked.
    pub listed_shards: Vec<ShardSummary>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub version: u64,
    pub nodes: Vec<NodeSummary>,
    pub applications: Vec<ApplicationSummary>,
    pub shard_count: usize,
    pub replica_count: usize,
}

fn shard_summary(s: &Shard) -> ShardSummary {
    ShardSummary {
        id: s.id.clone(),
        lower: format!("{:08x}", s.lower),
        upper: format!("{:08x}", s.upper),
        state: s.state,
        parent_id: s.parent_id.clone(),
        nodes: s.replicas.iter().map(|r| r.node_id.clone()).collect(),
    }
}

/// Summarizes `config`; `all_shards` lists every shard instead of only those
/// in a split.
pub fn summarize(config: &ClusterConfig, all_shards: bool) -> Summary {
    let mut per_node: HashMap<&str, StateCounts> = HashMap::new();
    let mut applications = Vec::with_capacity(config.applications.len());
    for a in &config.applications {
        let mut shards = StateCounts::default();
        let mut listed = Vec::new();
        for s in &a.shards {
            shards.add(s.state);
            for r in &s.replicas {
                per_node.entry(r.node_id.as_str()).or_default().add(s.state);
            }
            if all_shards || matches!(s.state, ShardState::Splitting | ShardState::Activating) {
                listed.push(shard_summary(s));
            }
        }
        applications.push(ApplicationSummary {
            name: a.name.clone(),
            implementation: a.implementation.clone(),
            replication_factor: a.replication_factor,
            shards,
            replicas: a.shards.iter().map(|s| s.replicas.len()).sum(),
            listed_shards: listed,
        });
    }
    Summary {
        version: config.version,
        nodes: config
            .nodes
            .iter()
            .map(|n| NodeSummary {
                id: n.id.clone(),
                grpc_address: n.grpc_address.clone(),
                metadata: n.metadata.clone(),
                replicas: per_node.get(n.id.as_str()).copied().unwrap_or_default(),
            })
            .collect(),
        applications,
        shard_count: config.shard_count(),
        replica_count: config.replica_count(),
    }
}

/// Left-aligned columns separated by two spaces.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}  ", w = width[i]);
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec(), &mut out);
    for r in rows {
        line(r.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

impl Summary {
    /// The human-readable form of `chitin config show`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "cluster config version {}: {} node(s), {} application(s), {} shard(s), {} replica(s)\n",
            self.version,
            self.nodes.len(),
            self.applications.len(),
            self.shard_count,
            self.replica_count
        );
        out.push_str(&self.node_table());
        out.push('\n');
        if self.applications.is_empty() {
            out.push_str("no applications\n");
            return out;
        }
        out.push_str(&self.application_table());
        for a in &self.applications {
            if a.listed_shards.is_empty() {
                continue;
            }
            let _ = writeln!(out, "\nshards of {}:", a.name);
            out.push_str(&shard_table(a));
        }
        out
    }

    fn node_table(&self) -> String {
        let rows: Vec<Vec<String>> = self
            .nodes
            .iter()
            .map(|n| {
                let m = n.metadata.iter().map(|m| format!("{}={}", m.key, m.value)).collect::<Vec<_>>().join(",");
                vec![
                    n.id.clone(),
                    n.grpc_address.clone(),
                    n.replicas.total().to_string(),
                    n.replicas.active.to_string(),
                    n.replicas.splitting.to_string(),
                    n.replicas.activating.to_string(),
                    n.replicas.inactive.to_string(),
                    if m.is_empty() { "-".into() } else { m },
                ]
            })
            .collect();
        table(&["NODE", "ADDRESS", "REPLICAS", "ACTIVE", "SPLITTING", "ACTIVATING", "INACTIVE", "METADATA"], &rows)
    }

    fn application_table(&self) -> String {
        let rows: Vec<Vec<String>> = self
            .applications
            .iter()
            .map(|a| {
                vec![
                    a.name.clone(),
                    a.implementation.clone(),
                    a.replication_factor.to_string(),
                    a.shards.total().to_string(),
                    a.shards.active.to_string(),
                    a.shards.splitting.to_string(),
                    a.shards.activating.to_string(),
                    a.shards.inactive.to_string(),
                    a.replicas.to_string(),
                ]
            })
            .collect();
        table(
            &["APPLICATION", "IMPLEMENTATION", "RF", "SHARDS", "ACTIVE", "SPLITTING", "ACTIVATING", "INACTIVE", "REPLICAS"],
            &rows,
        )
    }
}

/// The listed shards of application `a`.
fn shard_table(a: &ApplicationSummary) -> String {
    let rows: Vec<Vec<String>> = a
        .listed_shards
        .iter()
        .map(|s| {
            vec![
                s.id.clone(),
                s.lower.clone(),
                s.upper.clone(),
                s.state.to_string(),
                s.parent_id.clone().unwrap_or_else(|| "-".into()),
                s.nodes.join(","),
            ]
        })
        .collect();
    table(&["SHARD", "LOWER", "UPPER", "STATE", "PARENT", "NODES"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::testutil::*;

    #[test]
    fn counts_and_renders() {
        let mut c = base();
        start_split(&mut c, "A_00_3f", 2);
        let s = summarize(&c, false);
        assert_eq!((s.shard_count, s.replica_count), (6, 18));
        let a = &s.applications[0];
        assert_eq!(a.shards, StateCounts { active: 3, splitting: 1, activating: 2, inactive: 0 });
        assert_eq!(a.listed_shards.len(), 3);
        assert_eq!(s.nodes[0].replicas.total(), 6);
        assert_eq!(s.nodes[3].replicas.total(), 0);
        let text = s.render();
        assert!(text.contains("cluster config version 1: 4 node(s), 1 application(s), 6 shard(s), 18 replica(s)"), "{text}");
        assert!(text.contains("A_00_3f_c0  00000000  1fffffff  activating  A_00_3f  n1,n2,n3"), "{text}");
        assert_eq!(summarize(&c, true).applications[0].listed_shards.len(), 6);
    }
}
