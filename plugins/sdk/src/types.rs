//! The records of `chitin:policy/types` and of the request records of each
//! policy interface, as ordinary Rust types. Field names follow the WIT names
//! in snake case; with the `serde` feature they (de)serialize in that form and
//! enum values in kebab case, as fixture files write them.

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

macro_rules! record {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $field:ident : $ty:ty,)* }) => {
        $(#[$m])*
        #[derive(Clone, Debug, PartialEq, Default)]
        #[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
        #[cfg_attr(feature = "serde", serde(deny_unknown_fields, default))]
        pub struct $name { $($(#[$fm])* pub $field: $ty,)* }
    };
}

/// Where a node stands in its lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum NodeState {
    /// Registered and taking over the shards it is preferred for.
    Joining,
    /// Serving; may receive new replicas and leases.
    #[default]
    Active,
    /// Draining; receives nothing new.
    Leaving,
    /// Crashed or expired; receives nothing new.
    Down,
}

impl NodeState {
    /// Whether the node may receive new replicas and leases.
    pub fn is_eligible(self) -> bool {
        matches!(self, NodeState::Joining | NodeState::Active)
    }
}

/// Lifecycle state of a shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum ShardState {
    /// Routes its range; has no children.
    #[default]
    Active,
    /// Routes its range while its children take over.
    Splitting,
    /// A child of a splitting shard, not routing yet.
    Activating,
    /// A former parent.
    Inactive,
}

record! {
    /// One `{key, value}` metadata entry of a node.
    pub struct Label {
        /// The entry's name (for example `zone`).
        pub key: String,
        /// Its value.
        pub value: String,
    }
}

record! {
    /// A node of the cluster.
    pub struct Node {
        /// The node id of the cluster config (also the name it registers with).
        pub id: String,
        /// The node's gRPC address, `host:port`.
        pub address: String,
        /// The node's `zone` label, copied out of `labels`.
        pub zone: Option<String>,
        /// Every metadata entry of the node, `zone` included.
        pub labels: Vec<Label>,
        /// Where the node stands in its lifecycle.
        pub state: NodeState,
    }
}

impl Node {
    /// The value of the label `key`, if the node has it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.iter().find(|l| l.key == key).map(|l| l.value.as_str())
    }
}

record! {
    /// A shard: the inclusive key range `[lower, upper]` of one application.
    pub struct Shard {
        /// The shard id of the cluster config.
        pub id: String,
        /// The application the shard belongs to.
        pub application: String,
        /// First key of the range (inclusive).
        pub lower: u32,
        /// Last key of the range (inclusive).
        pub upper: u32,
        /// Where the shard stands in its lifecycle.
        pub state: ShardState,
        /// The splitting or inactive shard this one was split from.
        pub parent: Option<String>,
    }
}

record! {
    /// A replica of `shard` on `node`.
    pub struct Replica {
        /// The replica id of the cluster config.
        pub id: String,
        /// Id of the shard the replica belongs to.
        pub shard: String,
        /// Id of the node the replica sits on.
        pub node: String,
    }
}

record! {
    /// Observed load of one shard.
    pub struct ShardLoad {
        /// Id of the shard.
        pub shard: String,
        /// Number of keys stored.
        pub keys: u64,
        /// Bytes stored.
        pub bytes: u64,
        /// Operations per second, averaged over the host's window.
        pub ops_per_sec: f64,
    }
}

record! {
    /// Load observed on the sub-range `[lower, upper]` of a shard.
    pub struct RangeLoad {
        /// First key of the sub-range (inclusive).
        pub lower: u32,
        /// Last key of the sub-range (inclusive).
        pub upper: u32,
        /// Number of keys stored in it.
        pub keys: u64,
        /// Bytes stored in it.
        pub bytes: u64,
        /// Operations per second on it, averaged over the host's window.
        pub ops_per_sec: f64,
    }
}

record! {
    /// Who holds (or should hold) a shard's lease.
    pub struct Holder {
        /// Id of the shard.
        pub shard: String,
        /// Id of the node holding (or to hold) its lease.
        pub node: String,
    }
}

record! {
    /// The nodes allowed to hold a shard's lease, best first.
    pub struct HolderRanking {
        /// Id of the shard.
        pub shard: String,
        /// Eligible replica nodes by preference: the first is the preferred
        /// holder, the next takes over when it fails; empty when no eligible
        /// node hosts a replica.
        pub nodes: Vec<String>,
    }
}

record! {
    /// The replica nodes chosen for one new shard.
    pub struct ShardPlacement {
        /// Id of the new shard.
        pub shard: String,
        /// Distinct node ids, as many as the replication factor.
        pub nodes: Vec<String>,
    }
}

record! {
    /// Move replica `replica` of `shard` from `source` to `target`.
    pub struct ReplicaMove {
        /// Id of the shard.
        pub shard: String,
        /// Id of the replica that leaves `source`.
        pub replica: String,
        /// Id of the node the replica leaves.
        pub source: String,
        /// Id of the node it moves to.
        pub target: String,
    }
}

record! {
    /// Hand `shard`'s lease from `source` to `target`.
    pub struct Handoff {
        /// Id of the shard.
        pub shard: String,
        /// Id of the node giving the lease up.
        pub source: String,
        /// Id of the node taking it.
        pub target: String,
    }
}

record! {
    /// Why there were too few nodes.
    pub struct NodeShortage {
        /// Nodes the request needs (the replication factor).
        pub needed: u32,
        /// Nodes that could take a replica.
        pub eligible: u32,
    }
}

/// Why a policy refused a request.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum PolicyError {
    /// Fewer eligible nodes than the replication factor.
    InsufficientNodes(NodeShortage),
    /// The request names a shard that is not in it.
    UnknownShard(String),
    /// The request names a node that is not in it.
    UnknownNode(String),
    /// The shard cannot be split as asked.
    InvalidSplit(String),
    /// The request is inconsistent.
    InvalidInput(String),
    /// The policy does not support this request.
    Unsupported(String),
}

impl std::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PolicyError::InsufficientNodes(s) => {
                write!(f, "insufficient nodes: {} needed, {} eligible (joining or active)", s.needed, s.eligible)
            }
            PolicyError::UnknownShard(id) => write!(f, "unknown shard `{id}`"),
            PolicyError::UnknownNode(id) => write!(f, "unknown node `{id}`"),
            PolicyError::InvalidSplit(why) => write!(f, "invalid split: {why}"),
            PolicyError::InvalidInput(why) => write!(f, "invalid input: {why}"),
            PolicyError::Unsupported(why) => write!(f, "unsupported: {why}"),
        }
    }
}

impl std::error::Error for PolicyError {}

record! {
    /// Input of the `instance-id` slot.
    pub struct InstanceContext {
        /// The process environment as `(name, value)` pairs.
        pub env: Vec<(String, String)>,
        /// The machine's host name, when the host could read it.
        pub hostname: Option<String>,
    }
}

impl InstanceContext {
    /// The value of environment variable `name`.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

record! {
    /// Input of `placement.place-replicas`.
    pub struct PlacementRequest {
        /// Every node of the cluster; only `joining` and `active` ones are eligible.
        pub nodes: Vec<Node>,
        /// Every shard of the cluster, the new ones included (an activating
        /// child finds its parent here).
        pub shards: Vec<Shard>,
        /// The replicas that exist now.
        pub replicas: Vec<Replica>,
        /// Ids of the shards to place, in the order to place them.
        pub new_shards: Vec<String>,
        /// Replicas each new shard needs, on distinct nodes.
        pub replication_factor: u32,
    }
}

record! {
    /// Input of `placement.rebalance`.
    pub struct RebalanceRequest {
        /// Every node of the cluster.
        pub nodes: Vec<Node>,
        /// Every shard of the cluster.
        pub shards: Vec<Shard>,
        /// The replicas that exist now.
        pub replicas: Vec<Replica>,
        /// Current lease holders (shards without one are absent).
        pub holders: Vec<Holder>,
        /// Observed load, where the host has it.
        pub load: Vec<ShardLoad>,
    }
}

record! {
    /// Input of `placement.preferred-holders`.
    pub struct RankingRequest {
        /// Every node of the cluster.
        pub nodes: Vec<Node>,
        /// Every shard of the cluster.
        pub shards: Vec<Shard>,
        /// Every replica of the cluster.
        pub replicas: Vec<Replica>,
    }
}

record! {
    /// Input of `split.split-points`.
    pub struct SplitRequest {
        /// The shard to split.
        pub shard: Shard,
        /// Number of children wanted (at least 2).
        pub children: u32,
        /// An operator's split point: the first key of the second child
        /// (only meaningful with two children).
        pub at: Option<u32>,
        /// The shard's observed load, where the host has it.
        pub load: Option<ShardLoad>,
        /// Load observed on sub-ranges of the shard, where the host has it.
        pub samples: Vec<RangeLoad>,
    }
}

record! {
    /// Input of `drain.plan-drain`.
    pub struct DrainRequest {
        /// Id of the node that is leaving.
        pub leaving: String,
        /// Every node of the cluster.
        pub nodes: Vec<Node>,
        /// Every shard of the cluster.
        pub shards: Vec<Shard>,
        /// Every replica of the cluster.
        pub replicas: Vec<Replica>,
        /// Current lease holders; the leaving node's entries are the shards
        /// to hand over.
        pub holders: Vec<Holder>,
        /// Observed load, where the host has it.
        pub load: Vec<ShardLoad>,
        /// Most handoffs in one round, set by the host.
        pub max_per_round: u32,
    }
}
