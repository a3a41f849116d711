//! A snapshot of a running cluster, the input of a shadow comparison
//! (`chitin cluster snapshot > snap.json`, then `chitin policy diff … snap.json`).
//!
//! One JSON document ([`Snapshot`]) records what the policies decide on:
//!
//! - `config`: the topology config the nodes run, in the layout of
//!   `cluster_config.json`;
//! - `nodes`: every node of the config and every live registration: name,
//!   registration UUID, address, state, whether it is live, and the `zone`
//!   and labels of its config metadata;
//! - `leases`: each shard's holder and epoch;
//! - `load`: the append load the nodes counted, per shard and per sub-range
//!   (the 64 buckets of `chitin cluster load`);
//! - `policies`: the SHA-256 of the component of each slot the cluster
//!   records as its own.
//!
//! ```json
//! { "version": 1, "taken_at": "2026-12-01T17:00:00Z", "taken_via": "127.0.0.1:50051",
//!   "config": { "applications": [...], "nodes": [...], "version": 7 },
//!   "nodes": [{ "name": "node-01", "id": "0193…", "address": "10.0.0.1:7000",
//!               "state": "active", "live": true, "zone": "a",
//!               "labels": [{ "key": "zone", "value": "a" }] }],
//!   "leases": [{ "shard": "journal_00_3f", "holder": "node-01", "holder_id": "0193…",
//!                "epoch": 4, "live": true }],
//!   "load": [{ "shard": "journal_00_3f", "ops_per_sec": 12.5, "bytes_per_sec": 800.0,
//!              "ranges": [{ "lower": 0, "upper": 67108863, "ops_per_sec": 0.5, "bytes": 32 }] }],
//!   "policies": { "placement": "5e1f…", "split": "…", "drain": "…", "instance-id": "…" } }
//! ```
//!
//! Every struct rejects unknown fields, and a malformed document is refused
//! with the line, column and field ([`SnapshotError`]); `version` is
//! [`VERSION`], raised whenever the layout changes. Pure: reading the
//! cluster is the CLI's part.

use std::collections::{BTreeMap, HashSet};

use chitin_policy_sdk as sdk;
use serde::{Deserialize, Serialize};

use super::model::{ClusterConfig, LoadError};
use super::policy_view;

/// The layout version this chitin writes and reads.
pub const VERSION: u32 = 1;

/// A recorded cluster (see the module documentation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    /// The layout version: [`VERSION`].
    pub version: u32,
    /// When it was taken (RFC 3339, UTC).
    #[serde(default)]
    pub taken_at: String,
    /// The node it was read through.
    #[serde(default)]
    pub taken_via: String,
    /// The topology config the nodes run.
    pub config: ClusterConfig,
    /// The config's nodes and the live registrations, by name.
    pub nodes: Vec<SnapshotNode>,
    /// The live leases.
    pub leases: Vec<SnapshotLease>,
    /// Append load per shard (shards with no appends counted are absent).
    #[serde(default)]
    pub load: Vec<SnapshotLoad>,
    /// The cluster's component per slot (slot interface name → SHA-256).
    #[serde(default)]
    pub policies: BTreeMap<String, String>,
}

/// One node: of the config, registered, or both.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotNode {
    /// The node's name (its id in the config).
    pub name: String,
    /// The UUID of its live registration; empty when it has none.
    #[serde(default)]
    pub id: String,
    /// Its gRPC address (the registration's, else the config's).
    pub address: String,
    /// Its registration's state; `down` without a live registration.
    pub state: sdk::NodeState,
    /// Whether its registration is live.
    pub live: bool,
    /// Its `zone` metadata in the config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Its metadata in the config.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<sdk::Label>,
}

/// One shard's lease.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotLease {
    pub shard: String,
    /// The holder's name.
    pub holder: String,
    /// The holder's registration UUID.
    #[serde(default)]
    pub holder_id: String,
    pub epoch: u64,
    /// Whether the lease had not expired when the snapshot was taken.
    pub live: bool,
}

/// One shard's append load, as `chitin cluster load` reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotLoad {
    pub shard: String,
    pub ops_per_sec: f64,
    pub bytes_per_sec: f64,
    /// The shard's sub-ranges in key order (the split policy's samples).
    #[serde(default)]
    pub ranges: Vec<sdk::RangeLoad>,
}

/// Why a snapshot file was refused.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Not JSON, an unknown or missing field, a value of the wrong type, a
    /// malformed bound in `config` (with line and column).
    #[error("not a valid snapshot: {0}")]
    Malformed(#[from] LoadError),
    #[error(
        "snapshot layout version {found} is not supported: this chitin reads version {VERSION}; take the \
         snapshot again with this chitin (`chitin cluster snapshot > snap.json`)"
    )]
    Version { found: u64 },
    /// Parsed, but contradicting itself; names the field.
    #[error("inconsistent snapshot: {0}")]
    Inconsistent(String),
}

impl Snapshot {
    /// Parses and checks snapshot text.
    pub fn from_json(text: &str) -> Result<Snapshot, SnapshotError> {
        // The version first: another layout fails on its fields otherwise.
        let value: serde_json::Value = serde_json::from_str(text).map_err(LoadError::from)?;
        match value.get("version").map(|v| v.as_u64()) {
            Some(Some(v)) if v == u64::from(VERSION) => {}
            Some(Some(found)) => return Err(SnapshotError::Version { found }),
            // Missing or not a number: the typed parse says which, with the line.
            _ => {}
        }
        let snapshot: Snapshot = serde_json::from_str(text).map_err(LoadError::from)?;
        snapshot.check()?;
        Ok(snapshot)
    }

    /// The JSON text: pretty-printed, a final newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a snapshot always serializes");
        s.push('\n');
        s
    }

    /// Node names are unique; every lease and load names a shard of the config.
    fn check(&self) -> Result<(), SnapshotError> {
        let mut names = HashSet::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if !names.insert(n.name.as_str()) {
                return Err(SnapshotError::Inconsistent(format!("nodes[{i}].name: node `{}` is listed twice", n.name)));
            }
        }
        let shards: HashSet<&str> = self.config.shards().map(|(_, s)| s.id.as_str()).collect();
        for (i, l) in self.leases.iter().enumerate() {
            if !shards.contains(l.shard.as_str()) {
                return Err(SnapshotError::Inconsistent(format!(
                    "leases[{i}].shard: `{}` is not a shard of the snapshot's config (version {})",
                    l.shard, self.config.version
                )));
            }
        }
        for (i, l) in self.load.iter().enumerate() {
            if !shards.contains(l.shard.as_str()) {
                return Err(SnapshotError::Inconsistent(format!(
                    "load[{i}].shard: `{}` is not a shard of the snapshot's config (version {})",
                    l.shard, self.config.version
                )));
            }
        }
        Ok(())
    }

    /// The node named `name`.
    pub fn node(&self, name: &str) -> Option<&SnapshotNode> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The state the policies see for config node `id`: its registration's
    /// when live, else `down` (as a node sees its peers).
    pub fn node_state(&self, id: &str) -> sdk::NodeState {
        match self.node(id) {
            Some(n) if n.live => n.state,
            _ => sdk::NodeState::Down,
        }
    }

    /// The config's nodes in their recorded states, as the policies get them.
    pub fn policy_nodes(&self) -> Vec<sdk::Node> {
        policy_view::nodes_with_states(&self.config, |id| self.node_state(id))
    }

    /// The live leases, as the policies get them.
    pub fn holders(&self) -> Vec<sdk::Holder> {
        self.leases.iter().filter(|l| l.live).map(|l| sdk::Holder { shard: l.shard.clone(), node: l.holder.clone() }).collect()
    }

    /// The recorded load of `shard`.
    pub fn load_of(&self, shard: &str) -> Option<&SnapshotLoad> {
        self.load.iter().find(|l| l.shard == shard)
    }

    /// Adds every config node without a registration in `nodes` (not live,
    /// `down`) and sorts the nodes by name; fills each node's zone and labels
    /// from the config.
    pub fn complete_nodes(&mut self) {
        for n in &self.config.nodes {
            if self.nodes.iter().all(|s| s.name != n.id) {
                self.nodes.push(SnapshotNode {
                    name: n.id.clone(),
                    id: String::new(),
                    address: n.grpc_address.clone(),
                    state: sdk::NodeState::Down,
                    live: false,
                    zone: None,
                    labels: Vec::new(),
                });
            }
        }
        for s in &mut self.nodes {
            if let Some(n) = self.config.node(&s.name) {
                let view = policy_view::node(n);
                s.zone = view.zone;
                s.labels = view.labels;
            }
        }
        self.nodes.sort_by(|a, b| a.name.cmp(&b.name));
    }
}

impl SnapshotLoad {
    /// The split request's `load` and `samples` of this shard.
    pub fn split_input(&self) -> (sdk::ShardLoad, Vec<sdk::RangeLoad>) {
        let load = sdk::ShardLoad {
            shard: self.shard.clone(),
            keys: 0,
            bytes: self.bytes_per_sec.round() as u64,
            ops_per_sec: self.ops_per_sec,
        };
        (load, self.ranges.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::testutil::base;

    fn snapshot() -> Snapshot {
        let config = base();
        let mut s = Snapshot {
            version: VERSION,
            taken_at: String::new(),
            taken_via: String::new(),
            leases: vec![SnapshotLease {
                shard: config.applications[0].shards[0].id.clone(),
                holder: "n1".into(),
                holder_id: String::new(),
                epoch: 3,
                live: true,
            }],
            config,
            nodes: vec![SnapshotNode {
                name: "n1".into(),
                id: "00000000-0000-0000-0000-000000000001".into(),
                address: "n1.internal:7000".into(),
                state: sdk::NodeState::Active,
                live: true,
                zone: None,
                labels: vec![],
            }],
            load: vec![],
            policies: BTreeMap::new(),
        };
        s.complete_nodes();
        s
    }

    #[test]
    fn round_trips_and_fills_the_config_nodes() {
        let s = snapshot();
        assert_eq!(s.nodes.len(), s.config.nodes.len());
        assert_eq!(s.node_state("n1"), sdk::NodeState::Active);
        assert_eq!(s.node_state("n2"), sdk::NodeState::Down);
        assert_eq!(Snapshot::from_json(&s.to_json()).unwrap(), s);
    }

    #[test]
    fn malformed_snapshots_say_where() {
        let text = snapshot().to_json();
        let cases: Vec<(String, &str)> = vec![
            (text.replacen("\"live\": true", "\"live\": true, \"colour\": 1", 1), "unknown field `colour`"),
            (text.replacen("\"version\": 1,", "\"version\": 9,", 1), "layout version 9 is not supported"),
            (text.replacen("\"epoch\": 3", "\"epoch\": \"three\"", 1), "line "),
            (text.replacen("\"state\": \"active\"", "\"state\": \"sleepy\"", 1), "unknown variant `sleepy`"),
            (text.replacen("\"shard\": \"A_00_3f\"", "\"shard\": \"nope\"", 1), "leases[0].shard: `nope`"),
            (text[..text.len() / 2].to_string(), "EOF"),
        ];
        for (bad, needle) in cases {
            let e = Snapshot::from_json(&bad).unwrap_err().to_string();
            assert!(e.contains(needle), "{e} lacks {needle}");
        }
    }
}
