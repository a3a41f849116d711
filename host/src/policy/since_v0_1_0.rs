//! Interface version 0.1.0 (`wit/since_v0.1.0`): the generated bindings and
//! their conversions to and from the SDK's plain types. A later interface
//! version gets a module of its own beside this one; the rest of the host
//! only sees the SDK types.

use chitin_policy_sdk as sdk;

wasmtime::component::bindgen!({
    path: "../wit/since_v0.1.0",
    world: "all-policies",
});

/// The interface version these bindings speak.
pub const VERSION: &str = "0.1.0";

pub use exports::chitin::policy::{drain, instance_id, placement, split};
use chitin::policy::types as wit;

/// A lossless conversion between an SDK type and its generated twin.
pub trait Conv<T> {
    fn conv(self) -> T;
}

macro_rules! same {
    ($($t:ty),*) => { $(impl Conv<$t> for $t { fn conv(self) -> $t { self } })* };
}
same!(String, u32, u64, f64);

impl<A: Conv<B>, B> Conv<Vec<B>> for Vec<A> {
    fn conv(self) -> Vec<B> {
        self.into_iter().map(Conv::conv).collect()
    }
}

impl<A: Conv<B>, B> Conv<Option<B>> for Option<A> {
    fn conv(self) -> Option<B> {
        self.map(Conv::conv)
    }
}

impl<A: Conv<C>, B: Conv<D>, C, D> Conv<(C, D)> for (A, B) {
    fn conv(self) -> (C, D) {
        (self.0.conv(), self.1.conv())
    }
}

/// Records with the same fields on both sides convert both ways.
macro_rules! record {
    ($sdk:path => $wit:path { $($f:ident),* }) => {
        impl Conv<$wit> for $sdk {
            fn conv(self) -> $wit {
                use $sdk as S;
                let S { $($f),* } = self;
                $wit { $($f: $f.conv()),* }
            }
        }
        impl Conv<$sdk> for $wit {
            fn conv(self) -> $sdk {
                use $wit as W;
                let W { $($f),* } = self;
                $sdk { $($f: $f.conv()),* }
            }
        }
    };
}

/// Enums with the same cases on both sides convert both ways.
macro_rules! cases {
    ($sdk:ident => $wit:ident { $($c:ident),* }) => {
        impl Conv<wit::$wit> for sdk::$sdk {
            fn conv(self) -> wit::$wit {
                match self { $(sdk::$sdk::$c => wit::$wit::$c),* }
            }
        }
        impl Conv<sdk::$sdk> for wit::$wit {
            fn conv(self) -> sdk::$sdk {
                match self { $(wit::$wit::$c => sdk::$sdk::$c),* }
            }
        }
    };
}

cases!(NodeState => NodeState { Joining, Active, Leaving, Down });
cases!(ShardState => ShardState { Active, Splitting, Activating, Inactive });
record!(sdk::Label => wit::Label { key, value });
record!(sdk::Node => wit::Node { id, address, zone, labels, state });
record!(sdk::Shard => wit::Shard { id, application, lower, upper, state, parent });
record!(sdk::Replica => wit::Replica { id, shard, node });
record!(sdk::ShardLoad => wit::ShardLoad { shard, keys, bytes, ops_per_sec });
record!(sdk::RangeLoad => wit::RangeLoad { lower, upper, keys, bytes, ops_per_sec });
record!(sdk::Holder => wit::Holder { shard, node });
record!(sdk::HolderRanking => wit::HolderRanking { shard, nodes });
record!(sdk::ShardPlacement => wit::ShardPlacement { shard, nodes });
record!(sdk::ReplicaMove => wit::ReplicaMove { shard, replica, source, target });
record!(sdk::Handoff => wit::Handoff { shard, source, target });
record!(sdk::NodeShortage => wit::NodeShortage { needed, eligible });
record!(sdk::InstanceContext => instance_id::InstanceContext { env, hostname });
record!(sdk::PlacementRequest => placement::PlacementRequest { nodes, shards, replicas, new_shards, replication_factor });
record!(sdk::RebalanceRequest => placement::RebalanceRequest { nodes, shards, replicas, holders, load });
record!(sdk::RankingRequest => placement::RankingRequest { nodes, shards, replicas });
record!(sdk::SplitRequest => split::SplitRequest { shard, children, at, load, samples });
record!(sdk::DrainRequest => drain::DrainRequest { leaving, nodes, shards, replicas, holders, load, max_per_round });

impl Conv<sdk::PolicyError> for wit::PolicyError {
    fn conv(self) -> sdk::PolicyError {
        use sdk::PolicyError as E;
        match self {
            wit::PolicyError::InsufficientNodes(s) => E::InsufficientNodes(s.conv()),
            wit::PolicyError::UnknownShard(s) => E::UnknownShard(s),
            wit::PolicyError::UnknownNode(s) => E::UnknownNode(s),
            wit::PolicyError::InvalidSplit(s) => E::InvalidSplit(s),
            wit::PolicyError::InvalidInput(s) => E::InvalidInput(s),
            wit::PolicyError::Unsupported(s) => E::Unsupported(s),
        }
    }
}

/// A guest's `result<T, policy-error>` as SDK types.
pub fn outcome<T: Conv<U>, U>(r: Result<T, wit::PolicyError>) -> Result<U, sdk::PolicyError> {
    r.map(Conv::conv).map_err(Conv::conv)
}
