//! The component glue behind [`export_policies!`](crate::export_policies):
//! wit-bindgen bindings of the four single-slot worlds of `chitin:policy@0.1.0`
//! and their conversions to and from the SDK's plain types. Private: plugin
//! authors only see the traits and the macro.
//!
//! Each slot world is generated on its own with `pub_export_macro`, so its
//! `component-type` custom section (the one that tells `wit-component` which
//! interfaces the component exports) is emitted by the export macro in the
//! plugin's crate, and only for the slots the plugin names. The shared
//! `types` interface is generated once (with the instance-id world) and
//! reused by the other three.

#![allow(missing_docs)]

use crate as sdk;

pub mod instance_id {
    wit_bindgen::generate!({
        path: "../../wit/since_v0.1.0",
        world: "instance-id-policy",
        runtime_path: "::chitin_policy_sdk::__private::wit_bindgen::rt",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "::chitin_policy_sdk::__private::instance_id",
    });
}

pub mod placement {
    wit_bindgen::generate!({
        path: "../../wit/since_v0.1.0",
        world: "placement-policy",
        runtime_path: "::chitin_policy_sdk::__private::wit_bindgen::rt",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "::chitin_policy_sdk::__private::placement",
        with: { "chitin:policy/types@0.1.0": crate::export::types },
    });
}

pub mod split {
    wit_bindgen::generate!({
        path: "../../wit/since_v0.1.0",
        world: "split-policy",
        runtime_path: "::chitin_policy_sdk::__private::wit_bindgen::rt",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "::chitin_policy_sdk::__private::split",
        with: { "chitin:policy/types@0.1.0": crate::export::types },
    });
}

pub mod drain {
    wit_bindgen::generate!({
        path: "../../wit/since_v0.1.0",
        world: "drain-policy",
        runtime_path: "::chitin_policy_sdk::__private::wit_bindgen::rt",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "::chitin_policy_sdk::__private::drain",
        with: { "chitin:policy/types@0.1.0": crate::export::types },
    });
}

pub use instance_id::chitin::policy::types;
use types as wit;

use drain::exports::chitin::policy::drain as d;
use instance_id::exports::chitin::policy::instance_id as i;
use placement::exports::chitin::policy::placement as p;
use split::exports::chitin::policy::split as s;

/// A lossless conversion between a generated type and its SDK twin.
trait Conv<T> {
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

/// Records with the same fields on both sides convert one way.
macro_rules! record {
    ($from:path => $to:path { $($f:ident),* }) => {
        impl Conv<$to> for $from {
            fn conv(self) -> $to {
                use $from as F;
                let F { $($f),* } = self;
                $to { $($f: $f.conv()),* }
            }
        }
    };
}

macro_rules! cases {
    ($from:path => $to:path { $($c:ident),* }) => {
        impl Conv<$to> for $from {
            fn conv(self) -> $to {
                use $from as F;
                use $to as T;
                match self { $(F::$c => T::$c),* }
            }
        }
    };
}

// Inputs: generated -> SDK.
cases!(wit::NodeState => sdk::NodeState { Joining, Active, Leaving, Down });
cases!(wit::ShardState => sdk::ShardState { Active, Splitting, Activating, Inactive });
record!(wit::Label => sdk::Label { key, value });
record!(wit::Node => sdk::Node { id, address, zone, labels, state });
record!(wit::Shard => sdk::Shard { id, application, lower, upper, state, parent });
record!(wit::Replica => sdk::Replica { id, shard, node });
record!(wit::ShardLoad => sdk::ShardLoad { shard, keys, bytes, ops_per_sec });
record!(wit::RangeLoad => sdk::RangeLoad { lower, upper, keys, bytes, ops_per_sec });
record!(wit::Holder => sdk::Holder { shard, node });
record!(i::InstanceContext => sdk::InstanceContext { env, hostname });
record!(p::PlacementRequest => sdk::PlacementRequest { nodes, shards, replicas, new_shards, replication_factor });
record!(p::RebalanceRequest => sdk::RebalanceRequest { nodes, shards, replicas, holders, load });
record!(p::RankingRequest => sdk::RankingRequest { nodes, shards, replicas });
record!(s::SplitRequest => sdk::SplitRequest { shard, children, at, load, samples });
record!(d::DrainRequest => sdk::DrainRequest { leaving, nodes, shards, replicas, holders, load, max_per_round });

// Outputs: SDK -> generated.
record!(sdk::HolderRanking => wit::HolderRanking { shard, nodes });
record!(sdk::ShardPlacement => wit::ShardPlacement { shard, nodes });
record!(sdk::ReplicaMove => wit::ReplicaMove { shard, replica, source, target });
record!(sdk::Handoff => wit::Handoff { shard, source, target });
record!(sdk::NodeShortage => wit::NodeShortage { needed, eligible });

impl Conv<wit::PolicyError> for sdk::PolicyError {
    fn conv(self) -> wit::PolicyError {
        use wit::PolicyError as W;
        match self {
            sdk::PolicyError::InsufficientNodes(s) => W::InsufficientNodes(s.conv()),
            sdk::PolicyError::UnknownShard(s) => W::UnknownShard(s),
            sdk::PolicyError::UnknownNode(s) => W::UnknownNode(s),
            sdk::PolicyError::InvalidSplit(s) => W::InvalidSplit(s),
            sdk::PolicyError::InvalidInput(s) => W::InvalidInput(s),
            sdk::PolicyError::Unsupported(s) => W::Unsupported(s),
        }
    }
}

fn out<T: Conv<U>, U>(r: Result<T, sdk::PolicyError>) -> Result<U, wit::PolicyError> {
    r.map(Conv::conv).map_err(Conv::conv)
}

// Every type implementing a slot trait implements the generated export
// trait of that slot; the macro only has to emit the ABI functions.

impl<T: sdk::InstanceIdPolicy> i::Guest for T {
    fn resolve(ctx: i::InstanceContext) -> Result<String, wit::PolicyError> {
        out(T::resolve(ctx.conv()))
    }
}

impl<T: sdk::PlacementPolicy> p::Guest for T {
    fn place_replicas(request: p::PlacementRequest) -> Result<Vec<wit::ShardPlacement>, wit::PolicyError> {
        out(T::place_replicas(request.conv()))
    }

    fn rebalance(request: p::RebalanceRequest) -> Result<Vec<wit::ReplicaMove>, wit::PolicyError> {
        out(T::rebalance(request.conv()))
    }

    fn preferred_holders(request: p::RankingRequest) -> Result<Vec<wit::HolderRanking>, wit::PolicyError> {
        out(T::preferred_holders(request.conv()))
    }
}

impl<T: sdk::SplitPolicy> s::Guest for T {
    fn split_points(request: s::SplitRequest) -> Result<Vec<u32>, wit::PolicyError> {
        out(T::split_points(request.conv()))
    }
}

impl<T: sdk::DrainPolicy> d::Guest for T {
    fn plan_drain(request: d::DrainRequest) -> Result<Vec<Vec<wit::Handoff>>, wit::PolicyError> {
        out(T::plan_drain(request.conv()))
    }
}
