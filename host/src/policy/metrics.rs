//! The policy host's own metric family: how long each slot's calls take,
//! by how they ended. The slot that runs a call records it (only the slot
//! knows the outcome); the node registers the family with its others
//! (`node::metrics`). Kept here so that the policy host depends on nothing
//! above it.

use std::sync::LazyLock;
use std::time::Instant;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::Slot;

/// One histogram per (slot, outcome).
pub(crate) type BySlotOutcome = Family<[(&'static str, &'static str); 2], Histogram, fn() -> Histogram>;

/// The family's name and help text.
pub(crate) const NAME: &str = "chitin_policy_call_duration_seconds";
pub(crate) const HELP: &str =
    "Calls into policy components, by slot and outcome (ok, refused, timeout, out_of_memory, trap, invalid, load)";

/// Buckets from 0.5 ms doubling to about 16 s, as the node's latencies.
fn histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// One node runs per process, so one family serves. Every slot's `ok`
/// series exists from the start.
static CALLS: LazyLock<BySlotOutcome> = LazyLock::new(|| {
    let family = Family::new_with_constructor(histogram as fn() -> Histogram);
    for slot in Slot::ALL {
        let _ = family.get_or_create(&[("slot", slot.interface()), ("outcome", "ok")]);
    }
    family
});

/// The family, to register (a clone shares the series).
pub(crate) fn calls() -> BySlotOutcome {
    CALLS.clone()
}

/// Records one call of `slot` that started at `started`.
pub(crate) fn observe_call(slot: Slot, outcome: &'static str, started: Instant) {
    CALLS.get_or_create(&[("slot", slot.interface()), ("outcome", outcome)]).observe(started.elapsed().as_secs_f64());
}
