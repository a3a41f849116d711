//! The node's metrics, kept and encoded by `prometheus-client`: counters,
//! latency histograms by outcome, and the gauges read at each scrape.
//!
//! The counters and histograms live as long as the node; a scrape
//! ([`exposition`]) registers them, with that moment's gauges, in a fresh
//! registry and encodes it in the Prometheus text format (0.0.4).

use std::sync::LazyLock;
use std::time::Instant;

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::Node;
use crate::lease::NodeState;
use crate::policy::Slot;

/// The `Content-Type` of [`exposition`]'s text.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// One histogram per outcome label value.
type ByOutcome = Family<[(&'static str, &'static str); 1], Histogram, fn() -> Histogram>;
/// One histogram per (slot, outcome).
type BySlotOutcome = Family<[(&'static str, &'static str); 2], Histogram, fn() -> Histogram>;

/// Buckets from 0.5 ms doubling to about 16 s: a fenced append on a local
/// database is a millisecond or two, a takeover waits out a lease TTL.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// Latencies of one operation, labelled by how it ended.
#[derive(Clone, Debug)]
pub struct Timing(ByOutcome);

impl Timing {
    /// A timing whose series for each of `outcomes` exist from the start
    /// (at zero), so that queries and alerts see them before the first one.
    pub fn with_outcomes(outcomes: &[&'static str]) -> Timing {
        let family = Family::new_with_constructor(latency_histogram as fn() -> Histogram);
        for outcome in outcomes {
            let _ = family.get_or_create(&[("outcome", *outcome)]);
        }
        Timing(family)
    }

    /// Records the time since `started` under `outcome`.
    pub fn observe(&self, outcome: &'static str, started: Instant) {
        self.0.get_or_create(&[("outcome", outcome)]).observe(started.elapsed().as_secs_f64());
    }
}

macro_rules! metrics {
    (
        counters { $($field:ident => $name:literal, $help:literal;)* }
        timings { $($tfield:ident => $tname:literal, $thelp:literal, $outcomes:expr;)* }
    ) => {
        /// Every counter and histogram of a node.
        #[derive(Debug)]
        pub struct Metrics {
            $(pub $field: Counter,)*
            $(pub $tfield: Timing,)*
        }

        impl Default for Metrics {
            fn default() -> Self {
                Metrics {
                    $($field: Counter::default(),)*
                    $($tfield: Timing::with_outcomes(&$outcomes),)*
                }
            }
        }

        impl Metrics {
            /// Registers every counter and histogram in `registry`.
            /// Counter names get their `_total` suffix from the encoder.
            pub fn register(&self, registry: &mut Registry) {
                $(registry.register($name, $help, self.$field.clone());)*
                $(registry.register($tname, $thelp, self.$tfield.0.clone());)*
                registry.register(
                    "chitin_policy_call_duration_seconds",
                    "Calls into policy components, by slot and outcome (ok, refused, timeout, out_of_memory, trap, invalid, load)",
                    POLICY_CALLS.clone(),
                );
            }
        }
    };
}

/// The outcomes of an append or a forward.
const APPEND_OUTCOMES: [&str; 4] = ["applied", "not_applied", "unknown", "invalid"];

metrics! {
    counters {
        leases_acquired => "chitin_leases_acquired", "Leases this node acquired or adopted";
        leases_lost => "chitin_lease_losses", "Leases this node stopped holding (handed over, expired or superseded)";
        handoffs => "chitin_handoffs", "Leases this node handed to another node";
        fenced_commits => "chitin_fenced_commits", "Journal appends committed under the lease check";
        fenced_aborts => "chitin_fenced_aborts", "Journal appends aborted because the lease was lost";
        forwards => "chitin_forwards", "Appends forwarded to the shard's holder";
        outcome_unknown => "chitin_outcome_unknown", "Forwarded appends whose outcome was unknown";
        policy_calls => "chitin_policy_calls", "Calls into policy components";
        policy_errors => "chitin_policy_errors", "Policy calls that failed (refusal, trap, timeout, memory)";
        session_takeovers => "chitin_session_takeovers",
            "Peers this node found dead by their ended liveness session, marked down and freed the leases of";
    }
    timings {
        append_seconds => "chitin_append_duration_seconds",
            "Appends served by this node, from arrival to answer, by outcome (applied, not_applied, unknown, invalid)",
            APPEND_OUTCOMES;
        forward_seconds => "chitin_forward_duration_seconds",
            "Appends forwarded to the shard's holder, by outcome (applied, not_applied, unknown, invalid)",
            APPEND_OUTCOMES;
        round_seconds => "chitin_lease_round_duration_seconds",
            "Lease rounds (heartbeat, renewals, read, rank, act), by outcome (ok, failed)",
            ["ok", "failed"];
        handoff_seconds => "chitin_handoff_duration_seconds",
            "Handoffs from marking the shard draining to the new holder's lease, by outcome (ok, failed)",
            ["ok", "failed"];
        takeover_seconds => "chitin_takeover_duration_seconds",
            "Attempts to take a free or expired lease, by outcome (granted, refused, failed)",
            ["granted", "refused", "failed"];
    }
}

/// Policy calls are timed where the slot runs them, which knows the slot
/// and how the call ended; one node runs per process, so one family serves.
/// Every slot's `ok` series exists from the start.
static POLICY_CALLS: LazyLock<BySlotOutcome> = LazyLock::new(|| {
    let family = Family::new_with_constructor(latency_histogram as fn() -> Histogram);
    for slot in Slot::ALL {
        let _ = family.get_or_create(&[("slot", slot.interface()), ("outcome", "ok")]);
    }
    family
});

/// Records one policy call of `slot` that started at `started`.
pub fn observe_policy_call(slot: Slot, outcome: &'static str, started: Instant) {
    POLICY_CALLS.get_or_create(&[("slot", slot.interface()), ("outcome", outcome)]).observe(started.elapsed().as_secs_f64());
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: i64) {
    registry.register(name, help, ConstGauge::new(value));
}

/// The text `/metrics` answers: the node's counters and histograms, and
/// the gauges read now. A process with no node yet (UNPROVISIONED) has
/// only `chitin_node_ready 0`. Gauges whose source cannot be read now
/// (the database, Redis) are left out rather than guessed.
pub async fn exposition(node: Option<&Node>) -> String {
    let mut registry = Registry::default();
    match node {
        None => gauge(&mut registry, "chitin_node_ready", "1 while the node takes work (joining or active)", 0),
        Some(node) => register_node(&mut registry, node).await,
    }
    let mut out = String::new();
    prometheus_text::encode(&mut out, &registry).expect("writing to a String cannot fail");
    out
}

async fn register_node(registry: &mut Registry, node: &Node) {
    node.metrics.register(registry);
    gauge(registry, "chitin_leases_held", "Shard leases this node serves now", node.leases.held().len() as i64);
    gauge(registry, "chitin_node_ready", "1 while the node takes work (joining or active)", i64::from(node.is_ready()));
    let topology = node.topology();
    gauge(registry, "chitin_config_version", "Version of the cluster config this node serves", topology.config.version as i64);
    registry.register(
        "chitin_lease_round_budget_seconds",
        "How long a lease round may take: the renew interval, after which renewals are late",
        ConstGauge::new(node.settings.renew_interval().as_secs_f64()),
    );
    let policies = Family::<[(&'static str, String); 3], Gauge>::default();
    let loaded = node.policies();
    for slot in Slot::ALL {
        let plugin = loaded.slot(slot).plugin();
        policies
            .get_or_create(&[
                ("slot", slot.interface().to_string()),
                ("plugin", plugin.name().to_string()),
                ("sha256", plugin.sha256().to_string()),
            ])
            .set(1);
    }
    registry.register("chitin_policy_info", "The policy component in each slot (1 per slot), by file and SHA-256", policies);
    let mismatch = Family::<[(&'static str, String); 1], Gauge>::default();
    let differing = node.policy_mismatch();
    for slot in Slot::ALL {
        let differs = differing.iter().any(|m| m.slot == slot.interface());
        mismatch.get_or_create(&[("slot", slot.interface().to_string())]).set(i64::from(differs));
    }
    registry.register(
        "chitin_policy_mismatch",
        "1 for a slot whose component differs from the cluster's record; the node then takes no leases",
        mismatch,
    );
    let rates = Family::<[(&'static str, String); 1], Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    for l in node.load.snapshot(None) {
        rates.get_or_create(&[("shard", l.shard)]).set(l.ops_per_sec);
    }
    registry.register(
        "chitin_shard_append_rate",
        "Appends per second this node acknowledged per shard (decayed, 60 s half-life): the split policy's load",
        rates,
    );
    if let Ok(view) = node.cluster_view().await {
        let (unowned, draining) = shard_counts(node, &view);
        gauge(registry, "chitin_shards_unowned", "Shards of the served config with no live lease holder", unowned);
        gauge(registry, "chitin_shards_draining", "Shards whose live holder is leaving (being drained)", draining);
    }
    match &node.coord {
        Some(coord) => coord.metrics_snapshot().await.register(registry),
        None => gauge(registry, "chitin_cluster_active_instances", "Live instances (standalone: this one)", 1),
    }
}

/// (unowned, draining) shards of the served config in `view`.
fn shard_counts(node: &Node, view: &super::ClusterView) -> (i64, i64) {
    let leaving: Vec<uuid::Uuid> =
        view.registry.iter().filter(|r| r.live && r.state == NodeState::Leaving).map(|r| r.id).collect();
    let topology = node.topology();
    let (mut unowned, mut draining) = (0, 0);
    for shard in topology.map.shards() {
        match view.rows.iter().find(|r| r.shard == shard.id && r.live).and_then(|r| r.holder) {
            None => unowned += 1,
            Some(holder) if leaving.contains(&holder) => draining += 1,
            Some(_) => {}
        }
    }
    (unowned, draining)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(m: &Metrics) -> String {
        let mut registry = Registry::default();
        m.register(&mut registry);
        let mut out = String::new();
        prometheus_text::encode(&mut out, &registry).unwrap();
        out
    }

    #[test]
    fn counters_keep_their_names_and_timings_are_histograms_by_outcome() {
        let m = Metrics::default();
        m.fenced_commits.inc();
        m.fenced_commits.inc();
        m.append_seconds.observe("applied", Instant::now());
        let text = encoded(&m);
        for line in [
            "chitin_fenced_commits_total 2",
            "chitin_lease_losses_total 0",
            "# TYPE chitin_append_duration_seconds histogram",
            "chitin_append_duration_seconds_count{outcome=\"applied\"} 1",
            "# TYPE chitin_takeover_duration_seconds histogram",
            "chitin_takeover_duration_seconds_count{outcome=\"refused\"} 0",
            "chitin_append_duration_seconds_count{outcome=\"unknown\"} 0",
            "# TYPE chitin_policy_call_duration_seconds histogram",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from\n{text}");
        }
        assert!(
            text.contains("chitin_append_duration_seconds_bucket{le=\"0.0005\",outcome=\"applied\"}")
                || text.contains("chitin_append_duration_seconds_bucket{outcome=\"applied\",le=\"0.0005\"}"),
            "{text}"
        );
        // (Other tests of this process call policies: the count is not known here.)
        assert!(text.contains("chitin_policy_call_duration_seconds_count{slot=\"drain\",outcome=\"ok\"} "), "{text}");
    }
}
