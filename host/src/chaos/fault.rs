//! The faults a run injects: their kinds and the record of each one
//! injected. Plain data, below the lab that carries them out, the nemesis
//! that draws them and the rules that judge them.

use serde::{Deserialize, Serialize};

/// What the nemesis can do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// `kill -9` a node; start it again after a delay.
    Kill,
    /// SIGSTOP a node past its lease TTL, then SIGCONT.
    Pause,
    /// SIGTERM a node (it drains and deregisters) and start it again.
    Restart,
    /// Drain a node through the admin API, then restart it.
    Drain,
    /// Kill the run's Redis and start it again (empty).
    Redis,
    /// Stop the run's own database server at once (PostgreSQL `immediate`,
    /// MariaDB SIGKILL) and start it again.
    Database,
    /// Cut one node off the network, past its lease TTL, then heal.
    Partition,
    /// Split an active shard in two at its middle (`chitin cluster
    /// split-shard`'s control sequence). Drawn only when asked for.
    SplitShard,
    /// Move one replica of an active shard to a node that has none
    /// (`chitin cluster move-shard`'s control sequence). Drawn only when
    /// asked for, and passed over while every node holds every shard.
    MoveShard,
    /// Start a new node and add it with a rebalance (`chitin cluster
    /// add-node --rebalance`'s control sequence). Drawn only when asked
    /// for, and at most `lab::MAX_ADDED_NODES` times a run.
    AddNode,
}

impl FaultKind {
    /// Every kind: the seven that leave the topology as it was, then the
    /// three topology changes.
    pub const EVERY: [FaultKind; 10] = [
        FaultKind::Kill,
        FaultKind::Pause,
        FaultKind::Restart,
        FaultKind::Drain,
        FaultKind::Redis,
        FaultKind::Database,
        FaultKind::Partition,
        FaultKind::SplitShard,
        FaultKind::MoveShard,
        FaultKind::AddNode,
    ];

    /// The kinds a run draws from by default: every kind but the
    /// topology changes (`split-shard`, `move-shard`, `add-node`), which
    /// change the cluster for good (ask for them with `--kinds`).
    pub const ALL: &[FaultKind] = FaultKind::EVERY.split_at(7).0;

    /// The kind's name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Pause => "pause",
            FaultKind::Restart => "restart",
            FaultKind::Drain => "drain",
            FaultKind::Redis => "redis",
            FaultKind::Database => "database",
            FaultKind::Partition => "partition",
            FaultKind::SplitShard => "split-shard",
            FaultKind::MoveShard => "move-shard",
            FaultKind::AddNode => "add-node",
        }
    }

    /// Whether the fault takes a node's leases away without a handoff (the
    /// takeover bound applies, and a takeover must be measured).
    pub fn is_death(self) -> bool {
        matches!(self, FaultKind::Kill | FaultKind::Pause | FaultKind::Partition)
    }

    pub(super) fn needs_node(self) -> bool {
        !matches!(self, FaultKind::Redis | FaultKind::Database) && !self.is_topology_change()
    }

    /// A control sequence that changes the cluster's config for good.
    pub fn is_topology_change(self) -> bool {
        matches!(self, FaultKind::SplitShard | FaultKind::MoveShard | FaultKind::AddNode)
    }

    /// Whether the fault proves something only against a node that holds
    /// shards: a drain of an empty node hands nothing over, a kill of one
    /// has no takeover to measure.
    pub(super) fn wants_holder(self) -> bool {
        self.is_death() || self == FaultKind::Drain
    }
}

/// One injected fault.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FaultRecord {
    pub index: usize,
    pub kind: FaultKind,
    pub node: Option<String>,
    /// Milliseconds since the run's start.
    pub started_ms: u64,
    /// When the fault was undone.
    pub ended_ms: u64,
    /// How long the cluster took to recover after it was undone.
    pub recovered_ms: u64,
    /// Shards the node held by the cluster's status just before the fault.
    #[serde(default)]
    pub held: usize,
    /// Why the fault did not do what it is for (a drain that handed nothing
    /// over, a SIGTERM that hung), when it did not: the run then fails.
    #[serde(default)]
    pub ineffective: Option<String>,
    pub detail: String,
}
