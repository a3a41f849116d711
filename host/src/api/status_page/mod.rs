//! The status page at `/` on the HTTP listener: the nodes with their state
//! and version, the upgrade, policy mismatches, shards in transition, this
//! node's busiest shards, a key-space strip per application, unowned and
//! draining shards, and the shard table, paginated and filtered by the
//! query (`?app=&holder=&state=&q=&page=`).
//!
//! One self-contained HTML document (inline CSS and script, no external
//! assets). It refreshes itself: every two seconds the script fetches the
//! page again (with its query) and swaps its `<main>`; without scripts a
//! `<noscript>` meta refresh reloads it.
//!
//! It is built to stay cheap at 100,000 shards: the database is read
//! through the node's shared cache ([`Node::observed`]), shards are matched
//! to lease rows through one map (O(shards + rows)), the strip merges
//! neighbours with one holder and buckets the key space past
//! [`strip::MAX_SEGMENTS`], and the table shows one page of [`PAGE_SIZE`].
//! [`view`] reads what the page shows; [`cluster_part`] and [`render`] are
//! pure.

mod html;
mod strip;

use std::collections::HashMap;

use serde::Deserialize;

use crate::node::shard_map::ShardMap;
use crate::node::{Node, Observed};
use crate::policy::Slot;
use crate::topology::ShardState;

pub use html::{REFRESH_MS, render, render_unprovisioned};

/// Rows of the shard table per page.
pub const PAGE_SIZE: usize = 100;
/// The busiest shards of this node the page lists.
pub const BUSIEST: usize = 10;

/// One registration as the page shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct PageNode {
    /// The node's id in the config.
    pub name: String,
    /// Its registration id.
    pub uuid: String,
    /// `joining`, `active`, `leaving` or `down`.
    pub state: String,
    /// Heartbeating within the liveness timeout.
    pub live: bool,
    /// Its gRPC address.
    pub address: String,
    /// Since its last heartbeat, by the database clock.
    pub last_seen_ms_ago: i64,
    /// Live leases it holds.
    pub shards_held: usize,
    /// The binary version it recorded, if it recorded one.
    pub version: Option<String>,
    /// The wire protocol it speaks.
    pub protocol: Option<u32>,
}

/// One leased shard of the served config as the page shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct PageShard {
    /// The shard id.
    pub id: String,
    /// Its application.
    pub application: String,
    /// The first key of its range.
    pub lower: u32,
    /// The last key of its range.
    pub upper: u32,
    /// Its state in the config.
    pub state: ShardState,
    /// The live holder's name, if any.
    pub holder: Option<String>,
    /// The lease's epoch (0 for a shard never leased).
    pub epoch: i64,
    /// Until the lease expires, by the database clock.
    pub expires_in_ms: Option<i64>,
    /// Its live holder is leaving.
    pub draining: bool,
}

/// The upgrade as the page shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct PageUpgrade {
    /// The version the cluster is finalized at.
    pub cluster_version: String,
    /// The version this node's binary could finalize to, when it is newer.
    pub finalize_to: Option<String>,
}

/// One of this node's busiest shards.
#[derive(Clone, Debug, PartialEq)]
pub struct PageLoad {
    /// The shard id.
    pub shard: String,
    /// Appends per second (decayed).
    pub ops_per_sec: f64,
    /// Payload bytes per second (decayed).
    pub bytes_per_sec: f64,
}

/// Everything the page shows.
#[derive(Clone, Debug, PartialEq)]
pub struct PageView {
    /// This node's name.
    pub node: String,
    /// Its lifecycle state.
    pub state: String,
    /// `standalone` or `cluster`.
    pub mode: &'static str,
    /// This binary's version.
    pub version: &'static str,
    /// The version of the config this node serves.
    pub config_version: u64,
    /// The registrations that are live or not yet marked down, by name.
    pub nodes: Vec<PageNode>,
    /// Every leased shard of the served config, in config order.
    pub shards: Vec<PageShard>,
    /// (slot, component, SHA-256) of this node.
    pub policies: Vec<(String, String, String)>,
    /// The slots whose component differs from the cluster's, as sentences.
    pub mismatches: Vec<String>,
    /// The upgrade, when the database could be read.
    pub upgrade: Option<PageUpgrade>,
    /// This node's busiest shards, busiest first (at most [`BUSIEST`]).
    pub busiest: Vec<PageLoad>,
    /// Why the cluster could not be read, when it could not.
    pub error: Option<String>,
    /// When the database was read, by its clock.
    pub generated_at: String,
}

/// What the query of the page selects of the shard table. Every filter is
/// optional; an empty one (as a form sends it) selects everything.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PageQuery {
    /// Only shards of this application.
    pub app: Option<String>,
    /// Only shards held by this node (by name).
    pub holder: Option<String>,
    /// Only shards in this state (`active`, `splitting`, `activating`,
    /// `inactive`), or the `unowned` or `draining` ones.
    pub state: Option<String>,
    /// Only shards whose id contains this text.
    pub q: Option<String>,
    /// The page of the table, from 1.
    pub page: Option<usize>,
}

/// The filter values `state` takes beside the shard states.
const STATE_FILTERS: [&str; 2] = ["unowned", "draining"];

impl PageQuery {
    fn given(value: &Option<String>) -> Option<&str> {
        value.as_deref().filter(|v| !v.is_empty())
    }

    /// Why the query cannot select anything as asked, if it cannot.
    pub fn problem(&self) -> Option<String> {
        let state = Self::given(&self.state)?;
        let known = ShardState::ALL.iter().any(|s| s.as_str() == state) || STATE_FILTERS.contains(&state);
        (!known).then(|| {
            let all: Vec<&str> = ShardState::ALL.iter().map(|s| s.as_str()).chain(STATE_FILTERS).collect();
            format!("state={state} is no shard state: use one of {}", all.join(", "))
        })
    }

    /// Whether `shard` passes every filter.
    pub fn selects(&self, shard: &PageShard) -> bool {
        Self::given(&self.app).is_none_or(|a| shard.application == a)
            && Self::given(&self.holder).is_none_or(|h| shard.holder.as_deref() == Some(h))
            && Self::given(&self.q).is_none_or(|q| shard.id.contains(q))
            && Self::given(&self.state).is_none_or(|s| match s {
                "unowned" => shard.holder.is_none(),
                "draining" => shard.draining,
                state => shard.state.as_str() == state,
            })
    }

    /// Whether any filter is set.
    pub fn filters(&self) -> bool {
        [&self.app, &self.holder, &self.state, &self.q].into_iter().any(|f| Self::given(f).is_some())
    }
}

/// The [`BUSIEST`] of `loads`, busiest first (ties in shard order, as the
/// snapshot comes).
fn busiest(loads: Vec<crate::node::load::ShardLoad>) -> Vec<PageLoad> {
    let mut busiest: Vec<PageLoad> = loads
        .into_iter()
        .map(|l| PageLoad { shard: l.shard, ops_per_sec: l.ops_per_sec, bytes_per_sec: l.bytes_per_sec })
        .collect();
    busiest.sort_by(|a, b| b.ops_per_sec.total_cmp(&a.ops_per_sec));
    busiest.truncate(BUSIEST);
    busiest
}

/// What the page shows of `node` now. A database that cannot be read
/// leaves the nodes and holders empty and says why.
pub async fn view(node: &Node) -> PageView {
    let topology = node.topology();
    let loaded = node.policies();
    let policies = Slot::ALL
        .iter()
        .map(|slot| {
            let p = loaded.slot(*slot).plugin();
            (slot.interface().to_string(), p.name().to_string(), p.sha256().to_string())
        })
        .collect();
    let observed = node.observed().await;
    let (nodes, shards) = match &observed {
        Ok(o) => cluster_part(&topology.map, o),
        Err(_) => (Vec::new(), shards(&topology.map, None)),
    };
    let binary = crate::upgrade::Release::binary();
    PageView {
        node: node.name.clone(),
        state: node.lifecycle().as_str().to_string(),
        mode: if node.standalone { "standalone" } else { "cluster" },
        version: env!("CARGO_PKG_VERSION"),
        config_version: topology.config.version,
        nodes,
        shards,
        policies,
        mismatches: node.policy_mismatch().iter().map(ToString::to_string).collect(),
        upgrade: observed.as_ref().ok().map(|o| PageUpgrade {
            cluster_version: o.cluster_version.to_string(),
            finalize_to: crate::upgrade::finalize_target(o.cluster_version, binary).map(|r| r.to_string()),
        }),
        busiest: busiest(node.load.snapshot(None)),
        error: observed.as_ref().err().map(|e| format!("cannot read the cluster from the database: {e}")),
        generated_at: match &observed {
            Ok(o) => o.cluster.now,
            Err(_) => chrono::Utc::now(),
        }
        .format("%Y-%m-%d %H:%M:%S UTC")
        .to_string(),
    }
}

/// The nodes and shards of the page from one read of the cluster: each
/// shard matched to its live lease row through one map, each node's held
/// count from one pass, so the work is O(shards + rows + nodes).
pub fn cluster_part(map: &ShardMap, observed: &Observed) -> (Vec<PageNode>, Vec<PageShard>) {
    let cv = &observed.cluster;
    let held = cv.held_by();
    let mut nodes: Vec<PageNode> = cv
        .registry
        .iter()
        .filter(|r| r.live || r.state != crate::lease::NodeState::Down)
        .map(|r| {
            let version = observed.versions.get(&r.id);
            PageNode {
                name: r.name.clone(),
                uuid: r.id.to_string(),
                state: r.state.to_string(),
                live: r.live,
                address: r.address.clone(),
                last_seen_ms_ago: (cv.now - r.last_seen).num_milliseconds().max(0),
                shards_held: held.get(&r.id).copied().unwrap_or(0),
                version: version.map(|v| v.version.clone()),
                protocol: version.map(|v| v.protocol),
            }
        })
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    (nodes, shards(map, Some(cv)))
}

/// The config's shards with their live lease rows in `cluster` (none when
/// it could not be read), matched through one map.
fn shards(map: &ShardMap, cluster: Option<&crate::node::ClusterView>) -> Vec<PageShard> {
    let (by_shard, leaving) = cluster.map(|cv| (cv.live_rows(), cv.leaving())).unwrap_or_default();
    map.shards()
        .iter()
        .map(|s| {
            let row = by_shard.get(s.id.as_str()).copied();
            PageShard {
                id: s.id.clone(),
                application: s.application.clone(),
                lower: s.lower,
                upper: s.upper,
                state: s.state,
                holder: row.and_then(|r| r.holder_name.clone()),
                epoch: row.map_or(0, |r| r.epoch),
                expires_in_ms: row.and_then(|r| r.expires_at).zip(cluster).map(|(at, cv)| (at - cv.now).num_milliseconds()),
                draining: row.and_then(|r| r.holder).is_some_and(|h| leaving.contains(&h)),
            }
        })
        .collect()
}

/// Counts per distinct value, in first-seen order.
fn tally<'a>(values: impl Iterator<Item = &'a str>) -> Vec<(&'a str, usize)> {
    let mut order: Vec<(&str, usize)> = Vec::new();
    let mut at: HashMap<&str, usize> = HashMap::new();
    for v in values {
        match at.get(v) {
            Some(&i) => order[i].1 += 1,
            None => {
                at.insert(v, order.len());
                order.push((v, 1));
            }
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busiest_are_the_most_appended_to_at_most_ten() {
        let load = |shard: &str, ops: f64| crate::node::load::ShardLoad {
            shard: shard.into(),
            ops_per_sec: ops,
            bytes_per_sec: ops * 10.0,
            ranges: Vec::new(),
        };
        let cases: &[(Vec<crate::node::load::ShardLoad>, &[&str])] = &[
            (Vec::new(), &[]),
            (vec![load("a", 1.0), load("b", 3.0), load("c", 2.0)], &["b", "c", "a"]),
            // Ties keep the snapshot's shard order.
            (vec![load("a", 1.0), load("b", 1.0)], &["a", "b"]),
            (
                (0..12).map(|i| load(&format!("s{i:02}"), f64::from(i))).collect(),
                &["s11", "s10", "s09", "s08", "s07", "s06", "s05", "s04", "s03", "s02"],
            ),
        ];
        for (loads, want) in cases {
            let got: Vec<String> = busiest(loads.clone()).into_iter().map(|l| l.shard).collect();
            assert_eq!(got, *want);
        }
    }

    pub(super) fn shard(id: &str, lower: u32, upper: u32, holder: Option<&str>, draining: bool) -> PageShard {
        PageShard {
            id: id.into(),
            application: "journal".into(),
            lower,
            upper,
            state: ShardState::Active,
            holder: holder.map(Into::into),
            epoch: 3,
            expires_in_ms: holder.map(|_| 1500),
            draining,
        }
    }

    #[test]
    fn the_query_filters_by_application_holder_state_and_text() {
        let mut split = shard("j_80_bf", 0x8000_0000, 0xbfff_ffff, Some("n2"), true);
        split.state = ShardState::Splitting;
        let shards =
            [shard("j_00_7f", 0, 0x7fff_ffff, Some("n1"), false), split, shard("j_c0_ff", 0xc000_0000, u32::MAX, None, false)];
        let q = |app: &str, holder: &str, state: &str, text: &str| PageQuery {
            app: Some(app.into()),
            holder: Some(holder.into()),
            state: Some(state.into()),
            q: Some(text.into()),
            page: None,
        };
        let cases: [(PageQuery, &[&str]); 9] = [
            (PageQuery::default(), &["j_00_7f", "j_80_bf", "j_c0_ff"]),
            (q("", "", "", ""), &["j_00_7f", "j_80_bf", "j_c0_ff"]),
            (q("journal", "", "", ""), &["j_00_7f", "j_80_bf", "j_c0_ff"]),
            (q("other", "", "", ""), &[]),
            (q("", "n1", "", ""), &["j_00_7f"]),
            (q("", "", "unowned", ""), &["j_c0_ff"]),
            (q("", "", "draining", ""), &["j_80_bf"]),
            (q("", "", "splitting", ""), &["j_80_bf"]),
            (q("", "", "", "_ff"), &["j_c0_ff"]),
        ];
        for (query, want) in cases {
            let got: Vec<&str> = shards.iter().filter(|s| query.selects(s)).map(|s| s.id.as_str()).collect();
            assert_eq!(got, want, "{query:?}");
            assert_eq!(query.problem(), None);
        }
        assert!(!PageQuery::default().filters() && !q("", "", "", "").filters());
        assert!(q("", "", "active", "").filters());
        let bad = q("", "", "owned", "").problem().unwrap();
        assert!(
            bad.contains("state=owned") && bad.contains("active, splitting, activating, inactive, unowned, draining"),
            "{bad}"
        );
    }

    #[test]
    fn tally_counts_in_first_seen_order() {
        assert_eq!(tally(["b", "a", "b", "c", "b"].into_iter()), [("b", 3), ("a", 1), ("c", 1)]);
        assert_eq!(tally(std::iter::empty()), []);
    }
}
