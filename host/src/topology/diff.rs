//! What changed between two versions, for people (`chitin config diff`).
//!
//! Entities are matched like the transition rules match them: nodes by id,
//! applications by name, shards by (application, id), replicas by
//! (application, shard, id). The diff describes; it does not judge — see
//! [`super::transition`] for that.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::Serialize;

use super::model::{Application, ClusterConfig, Metadata, Shard, ShardState};

/// A change of one field, `from` → `to`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Change {
    pub field: String,
    pub from: String,
    pub to: String,
}

/// Something added to or removed from the config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Item {
    /// `node`, `application`, `shard` or `replica`.
    pub kind: &'static str,
    /// The id, qualified by its owners (`App/shard/replica`).
    pub id: String,
    /// A short description (address, bounds and state, node).
    pub detail: String,
}

/// A changed entity and its changed fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Changed {
    pub kind: &'static str,
    pub id: String,
    pub changes: Vec<Change>,
}

/// The difference between two configs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ConfigDiff {
    pub old_version: u64,
    pub new_version: u64,
    pub added: Vec<Item>,
    pub removed: Vec<Item>,
    pub changed: Vec<Changed>,
}

impl ConfigDiff {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

fn meta(m: &[Metadata]) -> String {
    if m.is_empty() {
        return "(none)".into();
    }
    m.iter().map(|m| format!("{}={}", m.key, m.value)).collect::<Vec<_>>().join(", ")
}

fn shard_detail(s: &Shard) -> String {
    let parent = s.parent_id.as_deref().map(|p| format!(", parent {p}")).unwrap_or_default();
    format!("{} {}{}, {} replica(s)", s.range_string(), s.state, parent, s.replicas.len())
}

fn change(out: &mut Vec<Change>, field: &str, from: String, to: String) {
    if from != to {
        out.push(Change { field: field.into(), from, to });
    }
}

/// The difference from `old` to `new`.
pub fn diff(old: &ClusterConfig, new: &ClusterConfig) -> ConfigDiff {
    let mut d = ConfigDiff { old_version: old.version, new_version: new.version, ..Default::default() };
    let mut top = Vec::new();
    change(&mut top, "metadata", meta(&old.metadata), meta(&new.metadata));
    if !top.is_empty() {
        d.changed.push(Changed { kind: "config", id: String::new(), changes: top });
    }

    // nodes
    let old_nodes: HashMap<&str, _> = old.nodes.iter().map(|n| (n.id.as_str(), n)).collect();
    let new_nodes: HashMap<&str, _> = new.nodes.iter().map(|n| (n.id.as_str(), n)).collect();
    for n in &old.nodes {
        match new_nodes.get(n.id.as_str()) {
            None => d.removed.push(Item { kind: "node", id: n.id.clone(), detail: n.grpc_address.clone() }),
            Some(m) => {
                let mut c = Vec::new();
                change(&mut c, "grpc_address", n.grpc_address.clone(), m.grpc_address.clone());
                change(&mut c, "metadata", meta(&n.metadata), meta(&m.metadata));
                if !c.is_empty() {
                    d.changed.push(Changed { kind: "node", id: n.id.clone(), changes: c });
                }
            }
        }
    }
    for n in &new.nodes {
        if !old_nodes.contains_key(n.id.as_str()) {
            let detail = if n.metadata.is_empty() {
                n.grpc_address.clone()
            } else {
                format!("{} ({})", n.grpc_address, meta(&n.metadata))
            };
            d.added.push(Item { kind: "node", id: n.id.clone(), detail });
        }
    }

    // applications
    let old_apps: HashMap<&str, &Application> = old.applications.iter().map(|a| (a.name.as_str(), a)).collect();
    let new_apps: HashMap<&str, &Application> = new.applications.iter().map(|a| (a.name.as_str(), a)).collect();
    for a in &old.applications {
        match new_apps.get(a.name.as_str()) {
            None => {
                d.removed.push(Item { kind: "application", id: a.name.clone(), detail: format!("{} shard(s)", a.shards.len()) })
            }
            Some(b) => application(&mut d, a, b),
        }
    }
    for a in &new.applications {
        if !old_apps.contains_key(a.name.as_str()) {
            let states = count_states(&a.shards);
            d.added.push(Item {
                kind: "application",
                id: a.name.clone(),
                detail: format!(
                    "implementation {}, replication factor {}, {} shard(s) ({}), {} replica(s)",
                    a.implementation,
                    a.replication_factor,
                    a.shards.len(),
                    states,
                    a.shards.iter().map(|s| s.replicas.len()).sum::<usize>()
                ),
            });
        }
    }
    d
}

fn count_states(shards: &[Shard]) -> String {
    let mut parts = Vec::new();
    for st in ShardState::ALL {
        let n = shards.iter().filter(|s| s.state == st).count();
        if n > 0 {
            parts.push(format!("{n} {st}"));
        }
    }
    parts.join(", ")
}

fn application(d: &mut ConfigDiff, a: &Application, b: &Application) {
    let mut c = Vec::new();
    change(&mut c, "implementation", a.implementation.clone(), b.implementation.clone());
    change(&mut c, "replication_factor", a.replication_factor.to_string(), b.replication_factor.to_string());
    change(&mut c, "metadata", meta(&a.metadata), meta(&b.metadata));
    if !c.is_empty() {
        d.changed.push(Changed { kind: "application", id: a.name.clone(), changes: c });
    }
    let old_shards: HashMap<&str, &Shard> = a.shards.iter().map(|s| (s.id.as_str(), s)).collect();
    let new_shards: HashMap<&str, &Shard> = b.shards.iter().map(|s| (s.id.as_str(), s)).collect();
    for s in &a.shards {
        let qid = format!("{}/{}", a.name, s.id);
        let Some(n) = new_shards.get(s.id.as_str()) else {
            d.removed.push(Item { kind: "shard", id: qid, detail: shard_detail(s) });
            continue;
        };
        let mut c = Vec::new();
        change(&mut c, "bounds", s.range_string(), n.range_string());
        change(&mut c, "state", s.state.to_string(), n.state.to_string());
        let p = |s: &Shard| s.parent_id.clone().unwrap_or_else(|| "(none)".into());
        change(&mut c, "parent_id", p(s), p(n));
        change(&mut c, "metadata", meta(&s.metadata), meta(&n.metadata));
        let old_r: HashMap<&str, _> = s.replicas.iter().map(|r| (r.id.as_str(), r)).collect();
        let new_r: HashSet<&str> = n.replicas.iter().map(|r| r.id.as_str()).collect();
        for r in &s.replicas {
            if !new_r.contains(r.id.as_str()) {
                d.removed.push(Item { kind: "replica", id: format!("{qid}/{}", r.id), detail: format!("on {}", r.node_id) });
            }
        }
        for r in &n.replicas {
            match old_r.get(r.id.as_str()) {
                None => {
                    d.added.push(Item { kind: "replica", id: format!("{qid}/{}", r.id), detail: format!("on {}", r.node_id) })
                }
                Some(o) => {
                    let mut rc = Vec::new();
                    change(&mut rc, "node_id", o.node_id.clone(), r.node_id.clone());
                    change(&mut rc, "metadata", meta(&o.metadata), meta(&r.metadata));
                    if !rc.is_empty() {
                        d.changed.push(Changed { kind: "replica", id: format!("{qid}/{}", r.id), changes: rc });
                    }
                }
            }
        }
        if !c.is_empty() {
            d.changed.push(Changed { kind: "shard", id: qid, changes: c });
        }
    }
    for s in &b.shards {
        if !old_shards.contains_key(s.id.as_str()) {
            let nodes: Vec<&str> = s.replicas.iter().map(|r| r.node_id.as_str()).collect();
            d.added.push(Item {
                kind: "shard",
                id: format!("{}/{}", a.name, s.id),
                detail: format!("{} on [{}]", shard_detail(s), nodes.join(", ")),
            });
        }
    }
}

impl fmt::Display for ConfigDiff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "version {} → {}", self.old_version, self.new_version)?;
        if self.is_empty() {
            return writeln!(f, "no other changes");
        }
        for i in &self.added {
            writeln!(f, "+ {:<11} {}  {}", i.kind, i.id, i.detail)?;
        }
        for i in &self.removed {
            writeln!(f, "- {:<11} {}  {}", i.kind, i.id, i.detail)?;
        }
        for c in &self.changed {
            let id = if c.id.is_empty() { String::new() } else { format!("{} ", c.id) };
            for ch in &c.changes {
                writeln!(f, "~ {:<11} {id}{}: {} → {}", c.kind, ch.field, ch.from, ch.to)?;
            }
        }
        writeln!(f, "{} added, {} removed, {} changed", self.added.len(), self.removed.len(), self.changed.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::testutil::*;

    #[test]
    fn describes_a_split_start_and_a_new_node() {
        let old = base();
        let mut new = base();
        new.version = 2;
        new.nodes.push(node("n5"));
        start_split(&mut new, "A_00_3f", 2);
        let d = diff(&old, &new);
        let text = d.to_string();
        assert!(text.starts_with("version 1 → 2\n"), "{text}");
        assert!(text.contains("+ node        n5  n5.internal:7000"), "{text}");
        assert!(text.contains("+ shard       A/A_00_3f_c0  [00000000, 1fffffff] activating, parent A_00_3f"), "{text}");
        assert!(text.contains("~ shard       A/A_00_3f state: active → splitting"), "{text}");
        assert_eq!((d.added.len(), d.removed.len(), d.changed.len()), (3, 0, 1));
        assert!(diff(&old, &old).is_empty());
    }

    #[test]
    fn describes_replica_changes() {
        let old = base();
        let mut new = base();
        let s = shard_mut(&mut new, "A_00_3f");
        s.replicas[0].node_id = "n4".into();
        s.replicas.pop();
        let d = diff(&old, &new);
        assert_eq!(d.removed[0].id, "A/A_00_3f/A_00_3f_n3");
        assert_eq!(d.changed[0].changes[0], Change { field: "node_id".into(), from: "n1".into(), to: "n4".into() });
    }
}
