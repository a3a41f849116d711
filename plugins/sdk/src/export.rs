//! The component glue behind [`export_policies!`](crate::export_policies):
//! wit-bindgen bindings of the four single-slot worlds of `chitin:policy@0.1.0`
//! and their conversions to and from the SDK's plain types (the field lists
//! are in [`conv`](crate::conv), shared with the host). Private: plugin
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

// Inputs convert generated -> SDK, outputs and errors SDK -> generated.
crate::__policy_conversions!(types: wit, instance_id: i, placement: p, split: s, drain: d);

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
