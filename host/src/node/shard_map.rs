//! The shards a node serves, derived from the cluster config, and the
//! stream-name hash that maps a journal stream to a key.
//!
//! Pure: no I/O. Keys are routed by [`topology::Router`], the one router of
//! the code base; this map adds what a node needs on top of it (each leased
//! shard's application, lineage and replica nodes).

use std::collections::{BTreeSet, HashMap};

use crate::topology::{self, Application, ClusterConfig, Replica, Router, Shard, ShardState};

/// The application the reference journal routes through when the cluster
/// config has more than one.
pub const JOURNAL_APPLICATION: &str = "journal";

/// Shards in the built-in standalone map unless set otherwise.
pub const STANDALONE_SHARDS: u32 = 16;

/// The 32-bit key of a journal stream: FNV-1a 32 over the stream name's
/// UTF-8 bytes (offset basis 0x811c9dc5, prime 0x01000193). Any language can
/// compute it to find a stream's shard; the client crate defines it, so a
/// client and the node cannot disagree.
pub use chitin_client::stream_key;

/// One shard with a lease: its range and the nodes eligible to hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeasedShard {
    pub id: String,
    pub application: String,
    pub lower: u32,
    pub upper: u32,
    pub state: ShardState,
    pub parent: Option<String>,
    /// Node ids hosting a replica, in config order.
    pub replica_nodes: Vec<String>,
}

/// The shards of a config that carry leases, and the routing of keys.
#[derive(Clone, Debug, Default)]
pub struct ShardMap {
    shards: Vec<LeasedShard>,
    by_id: HashMap<String, usize>,
    /// (application index, shard index) in the config → index in `shards`.
    by_position: HashMap<(usize, usize), usize>,
    router: Router,
    /// Applications with at least one routable shard.
    routable_apps: BTreeSet<String>,
}

/// Why a key could not be routed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("unknown application `{0}`")]
    UnknownApplication(String),
    #[error("no routable shard of `{application}` covers key {key:08x}")]
    Uncovered { application: String, key: u32 },
    #[error(
        "the cluster config has several applications and none is named `journal`; \
         name the journal's application `journal`"
    )]
    NoJournalApplication,
}

impl ShardMap {
    /// Every active, splitting and activating shard of `config` (inactive
    /// shards route nothing and carry no lease).
    pub fn from_config(config: &ClusterConfig) -> Self {
        let mut map = ShardMap { router: Router::new(config), ..ShardMap::default() };
        for (ai, app) in config.applications.iter().enumerate() {
            for (si, s) in app.shards.iter().enumerate().filter(|(_, s)| s.state != ShardState::Inactive) {
                let at = map.shards.len();
                map.by_id.insert(s.id.clone(), at);
                map.by_position.insert((ai, si), at);
                if s.state.is_routable() {
                    map.routable_apps.insert(app.name.clone());
                }
                map.shards.push(LeasedShard {
                    id: s.id.clone(),
                    application: app.name.clone(),
                    lower: s.lower,
                    upper: s.upper,
                    state: s.state,
                    parent: s.parent_id.clone(),
                    replica_nodes: s.replicas.iter().map(|r| r.node_id.clone()).collect(),
                });
            }
        }
        map
    }

    /// The shards with leases.
    pub fn shards(&self) -> &[LeasedShard] {
        &self.shards
    }

    /// The shard `id`.
    pub fn shard(&self, id: &str) -> Option<&LeasedShard> {
        self.by_id.get(id).map(|&i| &self.shards[i])
    }

    /// The routable shard of `application` covering `key` (O(log n)).
    pub fn route(&self, application: &str, key: u32) -> Result<&LeasedShard, RouteError> {
        match self.router.route(application, key) {
            Some(r) => Ok(&self.shards[self.by_position[&(r.application, r.shard)]]),
            None if self.routable_apps.contains(application) => {
                Err(RouteError::Uncovered { application: application.to_string(), key })
            }
            None => Err(RouteError::UnknownApplication(application.to_string())),
        }
    }

    /// The application journal streams route through.
    pub fn journal_application(&self) -> Result<&str, RouteError> {
        if self.routable_apps.contains(JOURNAL_APPLICATION) {
            return Ok(JOURNAL_APPLICATION);
        }
        let mut apps = self.routable_apps.iter();
        match (apps.next(), apps.next()) {
            (Some(only), None) => Ok(only),
            _ => Err(RouteError::NoJournalApplication),
        }
    }

    /// The shard a journal stream's appends go to.
    pub fn route_stream(&self, stream: &str) -> Result<&LeasedShard, RouteError> {
        self.route(self.journal_application()?, stream_key(stream))
    }

    /// The child of splitting shard `parent` whose range covers `key`: where
    /// the key belongs once the parent is retired, even on a config that
    /// still routes it to the parent.
    pub fn child_covering(&self, parent: &str, key: u32) -> Option<&LeasedShard> {
        self.shards.iter().find(|s| s.parent.as_deref() == Some(parent) && s.lower <= key && key <= s.upper)
    }
}

/// The one-node config of standalone mode: `count` equal shards of the
/// `journal` application (`count` a power of two), every one on `node`.
/// Shard ids spell both bounds in full (`journal_00000000_0fffffff`), as
/// the standalone database has always recorded them.
pub fn standalone_config(node: &str, address: &str, count: u32) -> ClusterConfig {
    let shards = (0..count)
        .map(|i| {
            let (lower, upper) = topology::ops::shard_range(i, count);
            let id = format!("{JOURNAL_APPLICATION}_{lower:08x}_{upper:08x}");
            let replica = Replica {
                id: topology::ops::replica_id(&id, node, &Default::default()),
                node_id: node.to_string(),
                metadata: Vec::new(),
            };
            Shard { id, lower, upper, state: ShardState::Active, parent_id: None, replicas: vec![replica], metadata: Vec::new() }
        })
        .collect();
    ClusterConfig {
        applications: vec![Application {
            name: JOURNAL_APPLICATION.into(),
            implementation: "chitin-journal".into(),
            shards,
            replication_factor: 1,
            metadata: Vec::new(),
        }],
        nodes: vec![topology::Node { id: node.to_string(), grpc_address: address.to_string(), metadata: Vec::new() }],
        version: 1,
        metadata: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standalone_map_partitions_the_keyspace() {
        let map = ShardMap::from_config(&standalone_config("n", "127.0.0.1:1", 16));
        assert_eq!(map.shards().len(), 16);
        assert_eq!(map.route("journal", 0).unwrap().id, "journal_00000000_0fffffff");
        assert_eq!(map.route("journal", 0x1000_0000).unwrap().lower, 0x1000_0000);
        assert_eq!(map.route("journal", u32::MAX).unwrap().upper, u32::MAX);
        assert!(matches!(map.route("other", 1), Err(RouteError::UnknownApplication(_))));
        for key in [0u32, 7, 0x7fff_ffff, 0x8000_0000, u32::MAX] {
            let s = map.route("journal", key).unwrap();
            assert!(s.lower <= key && key <= s.upper);
        }
    }

    #[test]
    fn a_gap_is_reported() {
        let mut config = standalone_config("n", "127.0.0.1:1", 2);
        config.applications[0].shards.remove(1);
        let map = ShardMap::from_config(&config);
        assert!(matches!(map.route("journal", 0x9000_0000), Err(RouteError::Uncovered { .. })));
    }
}
