//! The shards a node serves, derived from the cluster config, and the
//! stream-name hash that maps a journal stream to a key.
//!
//! Pure: no I/O.

use std::collections::BTreeMap;

use crate::topology::{ClusterConfig, ShardState};

/// The application the reference journal routes through when the cluster
/// config has more than one.
pub const JOURNAL_APPLICATION: &str = "journal";

/// Shards in the built-in standalone map unless set otherwise.
pub const STANDALONE_SHARDS: u32 = 16;

/// The 32-bit key of a journal stream: FNV-1a 32 over the stream name's
/// UTF-8 bytes (offset basis 0x811c9dc5, prime 0x01000193). Any language can
/// compute it to find a stream's shard.
pub fn stream_key(stream: &str) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in stream.as_bytes() {
        hash ^= u32::from(*b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

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
    /// Per application, routable shards sorted by lower bound: (lower, index).
    routes: BTreeMap<String, Vec<(u32, usize)>>,
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
    /// shards route nothing and need no lease).
    pub fn from_config(config: &ClusterConfig) -> Self {
        let shards = config
            .applications
            .iter()
            .flat_map(|app| {
                app.shards.iter().filter(|s| s.state != ShardState::Inactive).map(|s| LeasedShard {
                    id: s.id.clone(),
                    application: app.name.clone(),
                    lower: s.lower,
                    upper: s.upper,
                    state: s.state,
                    parent: s.parent_id.clone(),
                    replica_nodes: s.replicas.iter().map(|r| r.node_id.clone()).collect(),
                })
            })
            .collect();
        Self::new(shards)
    }

    /// The single-node map of standalone mode: `count` equal shards of the
    /// `journal` application, all on `node`. `count` must be a power of two.
    pub fn standalone(node: &str, count: u32) -> Self {
        let step = (1u64 << 32) / u64::from(count);
        let shards = (0..u64::from(count))
            .map(|i| {
                let (lower, upper) = ((i * step) as u32, ((i + 1) * step - 1) as u32);
                LeasedShard {
                    id: format!("{JOURNAL_APPLICATION}_{lower:08x}_{upper:08x}"),
                    application: JOURNAL_APPLICATION.into(),
                    lower,
                    upper,
                    state: ShardState::Active,
                    parent: None,
                    replica_nodes: vec![node.to_string()],
                }
            })
            .collect();
        Self::new(shards)
    }

    fn new(shards: Vec<LeasedShard>) -> Self {
        let mut routes: BTreeMap<String, Vec<(u32, usize)>> = BTreeMap::new();
        for (i, s) in shards.iter().enumerate() {
            if s.state.is_routable() {
                routes.entry(s.application.clone()).or_default().push((s.lower, i));
            }
        }
        for r in routes.values_mut() {
            r.sort_unstable();
        }
        ShardMap { shards, routes }
    }

    /// The shards with leases.
    pub fn shards(&self) -> &[LeasedShard] {
        &self.shards
    }

    /// The shard `id`.
    pub fn shard(&self, id: &str) -> Option<&LeasedShard> {
        self.shards.iter().find(|s| s.id == id)
    }

    /// The routable shard of `application` covering `key` (O(log n)).
    pub fn route(&self, application: &str, key: u32) -> Result<&LeasedShard, RouteError> {
        let routes = self
            .routes
            .get(application)
            .ok_or_else(|| RouteError::UnknownApplication(application.to_string()))?;
        let at = routes.partition_point(|(lower, _)| *lower <= key);
        at.checked_sub(1)
            .map(|i| &self.shards[routes[i].1])
            .filter(|s| s.lower <= key && key <= s.upper)
            .ok_or_else(|| RouteError::Uncovered {
                application: application.to_string(),
                key,
            })
    }

    /// The application journal streams route through.
    pub fn journal_application(&self) -> Result<&str, RouteError> {
        if self.routes.contains_key(JOURNAL_APPLICATION) {
            return Ok(JOURNAL_APPLICATION);
        }
        let mut apps = self.routes.keys();
        match (apps.next(), apps.next()) {
            (Some(only), None) => Ok(only),
            _ => Err(RouteError::NoJournalApplication),
        }
    }

    /// The shard a journal stream's appends go to.
    pub fn route_stream(&self, stream: &str) -> Result<&LeasedShard, RouteError> {
        self.route(self.journal_application()?, stream_key(stream))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_key_is_fnv1a_32() {
        assert_eq!(stream_key(""), 0x811c_9dc5);
        assert_eq!(stream_key("a"), 0xe40c_292c);
        assert_eq!(stream_key("foobar"), 0xbf9c_f968);
    }

    #[test]
    fn the_standalone_map_partitions_the_keyspace() {
        let map = ShardMap::standalone("n", 16);
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
        let mut map = ShardMap::standalone("n", 2);
        map.shards.remove(1);
        let map = ShardMap::new(map.shards);
        assert!(matches!(map.route("journal", 0x9000_0000), Err(RouteError::Uncovered { .. })));
    }
}
