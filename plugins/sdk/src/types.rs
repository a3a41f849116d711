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
    pub struct Label { pub key: String, pub value: String, }
}

record! {
    /// A node of the cluster.
    pub struct Node {
        pub id: String,
        pub address: String,
        /// The node's `zone` label, copied out of `labels`.
        pub zone: Option<String>,
        pub labels: Vec<Label>,
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
        pub id: String,
        pub application: String,
        pub lower: u32,
        pub upper: u32,
        pub state: ShardState,
        pub parent: Option<String>,
    }
}

record! {
    /// A replica of `shard` on `node`.
    pub struct Replica { pub id: String, pub shard: String, pub node: String, }
}

record! {
    /// Observed load of one shard.
    pub struct ShardLoad { pub shard: String, pub keys: u64, pub bytes: u64, pub ops_per_sec: f64, }
}

record! {
    /// Load observed on the sub-range `[lower, upper]` of a shard.
    pub struct RangeLoad { pub lower: u32, pub upper: u32, pub keys: u64, pub bytes: u64, pub ops_per_sec: f64, }
}

record! {
    /// Who holds (or should hold) a shard's lease.
    pub struct Holder { pub shard: String, pub node: String, }
}

record! {
    /// The nodes allowed to hold a shard's lease, best first.
    pub struct HolderRanking { pub shard: String, pub nodes: Vec<String>, }
}

record! {
    /// The replica nodes chosen for one new shard.
    pub struct ShardPlacement { pub shard: String, pub nodes: Vec<String>, }
}

record! {
    /// Move replica `replica` of `shard` from `source` to `target`.
    pub struct ReplicaMove { pub shard: String, pub replica: String, pub source: String, pub target: String, }
}

record! {
    /// Hand `shard`'s lease from `source` to `target`.
    pub struct Handoff { pub shard: String, pub source: String, pub target: String, }
}

record! {
    /// Why there were too few nodes.
    pub struct NodeShortage { pub needed: u32, pub eligible: u32, }
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
        pub nodes: Vec<Node>,
        pub shards: Vec<Shard>,
        pub replicas: Vec<Replica>,
        pub new_shards: Vec<String>,
        pub replication_factor: u32,
    }
}

record! {
    /// Input of `placement.rebalance`.
    pub struct RebalanceRequest {
        pub nodes: Vec<Node>,
        pub shards: Vec<Shard>,
        pub replicas: Vec<Replica>,
        pub holders: Vec<Holder>,
        pub load: Vec<ShardLoad>,
    }
}

record! {
    /// Input of `placement.preferred-holders`.
    pub struct RankingRequest {
        pub nodes: Vec<Node>,
        pub shards: Vec<Shard>,
        pub replicas: Vec<Replica>,
    }
}

record! {
    /// Input of `split.split-points`.
    pub struct SplitRequest {
        pub shard: Shard,
        pub children: u32,
        pub at: Option<u32>,
        pub load: Option<ShardLoad>,
        pub samples: Vec<RangeLoad>,
    }
}

record! {
    /// Input of `drain.plan-drain`.
    pub struct DrainRequest {
        pub leaving: String,
        pub nodes: Vec<Node>,
        pub shards: Vec<Shard>,
        pub replicas: Vec<Replica>,
        pub holders: Vec<Holder>,
        pub load: Vec<ShardLoad>,
        pub max_per_round: u32,
    }
}
