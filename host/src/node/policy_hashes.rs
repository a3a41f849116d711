//! The same policies everywhere: each registration records the SHA-256 of
//! the component in each slot (`chitin_node_policies`, migration 0006); the
//! cluster's are the first node's, or the last `chitin policy reload
//! --adopt`'s (`chitin_cluster_policies`). Nodes whose preferred holders come
//! from different placement components disagree on every shard and hand
//! leases back and forth, so a node whose components differ from the
//! cluster's takes no lease (unless `policies.allow_mismatch`), and says
//! which slot and both hashes in its log, Status, /health and metrics.

use std::collections::{BTreeMap, HashMap, HashSet};

use sqlx::Row;
use uuid::Uuid;

use crate::lease::{LeaseError, Store};

/// Slot interface name → SHA-256 (hex) of its component.
pub type Hashes = BTreeMap<String, String>;

/// A slot whose component differs from the cluster's.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Mismatch {
    pub slot: String,
    pub cluster: String,
    pub ours: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "slot {}: the cluster runs {}, this node {}", self.slot, self.cluster, self.ours)
    }
}

/// The slots of `ours` whose hash differs from `cluster`'s (a slot the
/// cluster has not recorded matches anything).
pub fn mismatches(ours: &Hashes, cluster: &Hashes) -> Vec<Mismatch> {
    ours.iter()
        .filter_map(|(slot, sha)| {
            let theirs = cluster.get(slot)?;
            (theirs != sha).then(|| Mismatch { slot: slot.clone(), cluster: theirs.clone(), ours: sha.clone() })
        })
        .collect()
}

/// The refusal a control sequence gives when the components it loaded
/// differ from the cluster's, or `None`.
pub fn refuse_mismatch(loaded: &Hashes, cluster: &Hashes, source: &str) -> Option<String> {
    let found = mismatches(loaded, cluster);
    (!found.is_empty()).then(|| {
        format!(
            "the policies loaded from {source} differ from the cluster's: {}; pass --settings with the chitin.toml the \
             nodes run (or CHITIN_SETTINGS), or roll the new components out first (`chitin policy reload --adopt`)",
            found.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
        )
    })
}

struct Sql {
    /// (node, slot, sha256, allow_mismatch)
    record_node: &'static str,
    /// (slot, sha256, recorded_by): only where the slot has none.
    init_cluster: &'static str,
    /// (slot, sha256, recorded_by)
    adopt_cluster: &'static str,
    /// () → slot, sha256
    cluster: &'static str,
    /// () → node_id (text), slot, sha256, allow_mismatch of every registration not down
    nodes: &'static str,
}

const PG: Sql = Sql {
    record_node: "INSERT INTO chitin_node_policies (node_id, slot, sha256, allow_mismatch) VALUES ($1::uuid, $2, $3, $4) \
                  ON CONFLICT (node_id, slot) DO UPDATE SET sha256 = EXCLUDED.sha256, \
                  allow_mismatch = EXCLUDED.allow_mismatch, recorded_at = clock_timestamp()",
    init_cluster: "INSERT INTO chitin_cluster_policies (slot, sha256, recorded_by) VALUES ($1, $2, $3) \
                   ON CONFLICT (slot) DO NOTHING",
    adopt_cluster: "INSERT INTO chitin_cluster_policies (slot, sha256, recorded_by) VALUES ($1, $2, $3) \
                    ON CONFLICT (slot) DO UPDATE SET sha256 = EXCLUDED.sha256, recorded_by = EXCLUDED.recorded_by, \
                    recorded_at = clock_timestamp()",
    cluster: "SELECT slot, sha256 FROM chitin_cluster_policies",
    nodes: "SELECT p.node_id::text AS node_id, p.slot, p.sha256, p.allow_mismatch FROM chitin_node_policies p \
            JOIN chitin_nodes n ON n.id = p.node_id WHERE n.state <> 'down'",
};

const MY: Sql = Sql {
    record_node: "INSERT INTO chitin_node_policies (node_id, slot, sha256, allow_mismatch, recorded_at) \
                  VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE sha256 = VALUES(sha256), \
                  allow_mismatch = VALUES(allow_mismatch), recorded_at = VALUES(recorded_at)",
    init_cluster: "INSERT IGNORE INTO chitin_cluster_policies (slot, sha256, recorded_by, recorded_at) \
                   VALUES (?, ?, ?, UTC_TIMESTAMP(6))",
    adopt_cluster: "INSERT INTO chitin_cluster_policies (slot, sha256, recorded_by, recorded_at) \
                    VALUES (?, ?, ?, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE sha256 = VALUES(sha256), \
                    recorded_by = VALUES(recorded_by), recorded_at = VALUES(recorded_at)",
    cluster: "SELECT slot, sha256 FROM chitin_cluster_policies",
    nodes: "SELECT p.node_id, p.slot, p.sha256, p.allow_mismatch FROM chitin_node_policies p \
            JOIN chitin_nodes n ON n.id = p.node_id WHERE n.state <> 'down'",
};

const LITE: Sql = Sql {
    record_node: "INSERT INTO chitin_node_policies (node_id, slot, sha256, allow_mismatch, recorded_at) \
                  VALUES (?1, ?2, ?3, ?4, 0) ON CONFLICT (node_id, slot) DO UPDATE SET sha256 = excluded.sha256, \
                  allow_mismatch = excluded.allow_mismatch",
    init_cluster: "INSERT INTO chitin_cluster_policies (slot, sha256, recorded_by, recorded_at) VALUES (?1, ?2, ?3, 0) \
                   ON CONFLICT (slot) DO NOTHING",
    adopt_cluster: "INSERT INTO chitin_cluster_policies (slot, sha256, recorded_by, recorded_at) VALUES (?1, ?2, ?3, 0) \
                    ON CONFLICT (slot) DO UPDATE SET sha256 = excluded.sha256, recorded_by = excluded.recorded_by",
    cluster: "SELECT slot, sha256 FROM chitin_cluster_policies",
    nodes: "SELECT p.node_id, p.slot, p.sha256, p.allow_mismatch FROM chitin_node_policies p \
            JOIN chitin_nodes n ON n.id = p.node_id WHERE n.state <> 'down'",
};

macro_rules! execute {
    ($store:expr, $field:ident $(, $arg:expr)*) => {
        match $store {
            Store::Postgres(s) => { sqlx::query(PG.$field)$(.bind($arg))*.execute(&s.pool).await?; }
            Store::MySql(s) => { sqlx::query(MY.$field)$(.bind($arg))*.execute(&s.pool).await?; }
            Store::Sqlite(s) => { sqlx::query(LITE.$field)$(.bind($arg))*.execute(&s.pool).await?; }
        }
    };
}

macro_rules! fetch {
    ($store:expr, $field:ident, |$row:ident| $map:expr) => {
        match $store {
            Store::Postgres(s) => sqlx::query(PG.$field).fetch_all(&s.pool).await?.iter().map(|$row| $map).collect(),
            Store::MySql(s) => sqlx::query(MY.$field).fetch_all(&s.pool).await?.iter().map(|$row| $map).collect(),
            Store::Sqlite(s) => sqlx::query(LITE.$field).fetch_all(&s.pool).await?.iter().map(|$row| $map).collect(),
        }
    };
}

/// Records what registration `node` (named `name`) runs and whether it
/// runs regardless of the cluster's; the cluster's record of each slot is
/// set where it has none, or replaced when `adopt`. Returns the cluster's
/// hashes after that.
pub async fn record(
    store: &Store,
    node: Uuid,
    name: &str,
    ours: &Hashes,
    allow: bool,
    adopt: bool,
) -> Result<Hashes, LeaseError> {
    for (slot, sha) in ours {
        execute!(store, record_node, node.to_string(), slot.clone(), sha.clone(), allow);
        if adopt {
            execute!(store, adopt_cluster, slot.clone(), sha.clone(), name.to_string());
        } else {
            execute!(store, init_cluster, slot.clone(), sha.clone(), name.to_string());
        }
    }
    cluster(store).await
}

/// The cluster's hashes.
pub async fn cluster(store: &Store) -> Result<Hashes, LeaseError> {
    let rows: Result<Vec<(String, String)>, sqlx::Error> =
        fetch!(store, cluster, |row| Ok((row.try_get("slot")?, row.try_get("sha256")?)));
    Ok(rows?.into_iter().collect())
}

/// What one registration recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodePolicies {
    pub hashes: Hashes,
    /// It takes leases whatever the cluster runs (`policies.allow_mismatch`).
    pub allow_mismatch: bool,
}

/// What every registration that is not down recorded.
pub async fn by_node(store: &Store) -> Result<HashMap<Uuid, NodePolicies>, LeaseError> {
    let rows: Result<Vec<(String, String, String, bool)>, sqlx::Error> = fetch!(store, nodes, |row| Ok((
        row.try_get("node_id")?,
        row.try_get("slot")?,
        row.try_get("sha256")?,
        row.try_get("allow_mismatch")?
    )));
    let mut out: HashMap<Uuid, NodePolicies> = HashMap::new();
    for (node, slot, sha, allow) in rows? {
        let entry = out.entry(crate::lease::parse_uuid(&node)?).or_default();
        entry.hashes.insert(slot, sha);
        entry.allow_mismatch |= allow;
    }
    Ok(out)
}

/// The registrations that take no leases: their components differ from
/// the cluster's and they are not allowed to run with others. Peers hand
/// them nothing.
pub fn refusing(nodes: &HashMap<Uuid, NodePolicies>, cluster: &Hashes) -> HashSet<Uuid> {
    nodes.iter().filter(|(_, p)| !p.allow_mismatch && !mismatches(&p.hashes, cluster).is_empty()).map(|(id, _)| *id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(pairs: &[(&str, &str)]) -> Hashes {
        pairs.iter().map(|(s, h)| (s.to_string(), h.to_string())).collect()
    }

    #[test]
    fn only_slots_the_cluster_recorded_differently_mismatch() {
        let cluster = hashes(&[("placement", "aa"), ("split", "bb")]);
        assert!(mismatches(&hashes(&[("placement", "aa"), ("split", "bb")]), &cluster).is_empty());
        assert!(mismatches(&hashes(&[("drain", "cc")]), &cluster).is_empty(), "a slot the cluster has not recorded");
        assert_eq!(
            mismatches(&hashes(&[("placement", "zz"), ("split", "bb")]), &cluster),
            vec![Mismatch { slot: "placement".into(), cluster: "aa".into(), ours: "zz".into() }]
        );
    }

    #[test]
    fn peers_hand_nothing_to_a_mismatched_node_unless_it_is_allowed() {
        let cluster = hashes(&[("placement", "aa")]);
        let (same, other, allowed) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let nodes: HashMap<Uuid, NodePolicies> = [
            (same, NodePolicies { hashes: hashes(&[("placement", "aa")]), allow_mismatch: false }),
            (other, NodePolicies { hashes: hashes(&[("placement", "zz")]), allow_mismatch: false }),
            (allowed, NodePolicies { hashes: hashes(&[("placement", "zz")]), allow_mismatch: true }),
        ]
        .into();
        assert_eq!(refusing(&nodes, &cluster), HashSet::from([other]));
    }

    #[test]
    fn a_control_sequence_refusal_names_the_slot_both_hashes_and_the_fix() {
        let cluster = hashes(&[("placement", "aa")]);
        assert_eq!(refuse_mismatch(&hashes(&[("placement", "aa")]), &cluster, "x"), None);
        let why = refuse_mismatch(&hashes(&[("placement", "zz")]), &cluster, "the embedded defaults").unwrap();
        for part in ["slot placement", "aa", "zz", "--settings", "the embedded defaults"] {
            assert!(why.contains(part), "{why}");
        }
    }
}
