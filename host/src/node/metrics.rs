//! The node's metrics, kept and encoded by `prometheus-client`: counters,
//! latency histograms by outcome, and the gauges read at each scrape.
//!
//! The counters and histograms live as long as the node; a scrape
//! ([`exposition`]) registers them, with that moment's gauges, in a fresh
//! registry and encodes it in the Prometheus text format (0.0.4).

use std::sync::LazyLock;
use std::time::Instant;

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::Node;
use crate::policy::Slot;
use crate::security::listen::Counts;

/// The `Content-Type` of [`exposition`]'s text.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// One histogram per outcome label value.
type ByOutcome = Family<[(&'static str, &'static str); 1], Histogram, fn() -> Histogram>;

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
                registry.register(crate::policy::metrics::NAME, crate::policy::metrics::HELP, crate::policy::metrics::calls());
                registry.register(crate::lease::metrics::NAME, crate::lease::metrics::HELP, crate::lease::metrics::retries());
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
        policy_fallbacks => "chitin_policy_fallbacks",
            "Placement rankings and drain plans the embedded default answered because the slot's component failed";
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
        ready_seconds => "chitin_ready_wait_duration_seconds",
            "Shards this node took while an acknowledging watch was open: from taking to serving writes, by outcome (ready, timed-out)",
            ["ready", "timed-out"];
        takeover_seconds => "chitin_takeover_duration_seconds",
            "Attempts to take a free or expired lease, by outcome (granted, refused, failed)",
            ["granted", "refused", "failed"];
    }
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: i64) {
    registry.register(name, help, ConstGauge::new(value));
}

/// The text `/metrics` answers: the node's counters and histograms, and
/// the gauges read now. A process with no node yet (UNPROVISIONED) has
/// only `chitin_node_ready 0`. Gauges whose source cannot be read now
/// (the database, Redis) are left out rather than guessed.
pub async fn exposition(node: Option<&Node>, counts: &Counts) -> String {
    let mut registry = Registry::default();
    register_process(&mut registry);
    register_listeners(&mut registry, counts);
    match node {
        None => gauge(&mut registry, "chitin_node_ready", "1 while the node takes work (joining or active)", 0),
        Some(node) => register_node(&mut registry, node).await,
    }
    encode(&registry)
}

/// `chitin_build_info` and the standard process metrics (`process_*`, read
/// from `/proc/self` where there is one).
fn register_process(registry: &mut Registry) {
    let info = Family::<[(&'static str, &'static str); 2], Gauge>::default();
    info.get_or_create(&[("version", crate::upgrade::BINARY_VERSION), ("protocol", PROTOCOL_LABEL.as_str())]).set(1);
    registry.register("chitin_build_info", "The binary's version and newest protocol (1)", info);
    let Some(p) = ProcessStats::read() else { return };
    registry.register("process_cpu_seconds", "User and system CPU time spent, in seconds", ConstCounter::new(p.cpu_seconds));
    registry.register("process_resident_memory_bytes", "Resident memory size in bytes", ConstGauge::new(p.resident_bytes));
    registry.register("process_virtual_memory_bytes", "Virtual memory size in bytes", ConstGauge::new(p.virtual_bytes));
    registry.register("process_open_fds", "Open file descriptors", ConstGauge::new(p.open_fds));
    registry.register("process_max_fds", "The soft limit of open file descriptors", ConstGauge::new(p.max_fds));
    registry.register(
        "process_start_time_seconds",
        "Start time of the process since the Unix epoch, in seconds",
        ConstGauge::new(p.start_time_seconds),
    );
}

/// The newest protocol as a label value.
static PROTOCOL_LABEL: LazyLock<String> = LazyLock::new(|| crate::upgrade::PROTOCOL.to_string());

/// What `/proc/self` says of this process.
#[derive(Debug, PartialEq)]
struct ProcessStats {
    cpu_seconds: f64,
    resident_bytes: i64,
    virtual_bytes: i64,
    open_fds: i64,
    max_fds: i64,
    start_time_seconds: f64,
}

/// Clock ticks per second of `/proc`'s times, the kernel's `USER_HZ`, 100
/// on every Linux architecture chitin builds for.
const USER_HZ: f64 = 100.0;
/// The page size of `/proc/self/stat`'s resident set count.
const PAGE_BYTES: i64 = 4096;

impl ProcessStats {
    fn read() -> Option<ProcessStats> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let boot = std::fs::read_to_string("/proc/stat").ok()?;
        let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as i64;
        ProcessStats::parse(&stat, &boot, &limits, open_fds)
    }

    /// From the texts of `/proc/self/stat`, `/proc/stat` and
    /// `/proc/self/limits`.
    fn parse(stat: &str, boot: &str, limits: &str, open_fds: i64) -> Option<ProcessStats> {
        // The command name, in parentheses, may hold spaces: count fields
        // after its closing parenthesis (field 3, the state, comes first).
        let fields: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<f64>().ok());
        let boot_time = boot.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse::<f64>().ok()?;
        let max_fds = limits.lines().find(|l| l.starts_with("Max open files"))?.split_whitespace().nth(3)?.parse().ok()?;
        Some(ProcessStats {
            cpu_seconds: (field(14)? + field(15)?) / USER_HZ,
            start_time_seconds: boot_time + field(22)? / USER_HZ,
            virtual_bytes: field(23)? as i64,
            resident_bytes: field(24)? as i64 * PAGE_BYTES,
            open_fds,
            max_fds,
        })
    }
}

/// The listeners' connection counts and the refused credentials.
fn register_listeners(registry: &mut Registry, counts: &Counts) {
    type ByListener<M> = Family<[(&'static str, &'static str); 1], M>;
    let (open, refused, timed_out) =
        (ByListener::<Gauge>::default(), ByListener::<Counter>::default(), ByListener::<Counter>::default());
    for (name, stats) in [("api", &counts.api), ("metrics", &counts.metrics)] {
        let label = [("listener", name)];
        open.get_or_create(&label).set(stats.open() as i64);
        refused.get_or_create(&label).inc_by(stats.refused());
        timed_out.get_or_create(&label).inc_by(stats.timed_out());
    }
    registry.register("chitin_connections_open", "Connections open now, by listener", open);
    registry.register(
        "chitin_connections_refused",
        "Connections closed at accept because the listener was at its [limits] maximum",
        refused,
    );
    registry.register(
        "chitin_connections_timed_out",
        "Connections closed by the handshake or idle deadline ([limits])",
        timed_out,
    );
    let unauthenticated = Counter::<u64>::default();
    unauthenticated.inc_by(counts.unauthenticated.load(std::sync::atomic::Ordering::Relaxed));
    registry.register("chitin_unauthenticated_calls", "gRPC calls refused for a missing or wrong credential", unauthenticated);
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
    let observed = node.observed().await;
    if let Ok(o) = &observed {
        registry.register(
            "chitin_cluster_read_age_seconds",
            "Age of the read of registrations and lease rows the shard counts come from (shared with the status page)",
            ConstGauge::new(o.read_at.elapsed().as_secs_f64()),
        );
    }
    let view = observed.as_ref().ok().map(|o| &o.cluster);
    register_shards(registry, &node.topology().map, view, node.load.snapshot(None));
    match &node.coord {
        Some(coord) => coord.metrics_snapshot().await.register(registry),
        None => gauge(registry, "chitin_cluster_active_instances", "Live instances (standalone: this one)", 1),
    }
}

/// The shard families of a scrape: the unowned and draining counts (when
/// the cluster could be read) and the append rate of each shard in `load`.
/// O(shards + rows + loaded shards).
pub fn register_shards(
    registry: &mut Registry,
    map: &super::shard_map::ShardMap,
    view: Option<&super::ClusterView>,
    load: Vec<super::load::ShardLoad>,
) {
    let rates = Family::<[(&'static str, String); 1], Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    for l in load {
        rates.get_or_create(&[("shard", l.shard)]).set(l.ops_per_sec);
    }
    registry.register(
        "chitin_shard_append_rate",
        "Appends per second this node acknowledged per shard (decayed, 60 s half-life): the split policy's load",
        rates,
    );
    if let Some(view) = view {
        let (unowned, draining) = shard_counts(map, view);
        gauge(registry, "chitin_shards_unowned", "Shards of the served config with no live lease holder", unowned);
        gauge(registry, "chitin_shards_draining", "Shards whose live holder is leaving (being drained)", draining);
    }
}

/// Encodes `registry` in the Prometheus text format.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_text::encode(&mut out, registry).expect("writing to a String cannot fail");
    out
}

/// (unowned, draining) shards of `map` in `view`: one pass over each.
pub fn shard_counts(map: &super::shard_map::ShardMap, view: &super::ClusterView) -> (i64, i64) {
    let (rows, leaving) = (view.live_rows(), view.leaving());
    let (mut unowned, mut draining) = (0, 0);
    for shard in map.shards() {
        match rows.get(shard.id.as_str()).and_then(|r| r.holder) {
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

    #[test]
    fn process_stats_are_read_from_proc_texts() {
        // A command name with spaces and parentheses, as the kernel prints it.
        let stat = "4242 (chi tin) (x)) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 12 0 1000 \
                    123456789 2048 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0";
        let boot = "cpu  1 2 3\nbtime 1700000000\nprocesses 5\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        let got = ProcessStats::parse(stat, boot, limits, 17).unwrap();
        assert_eq!(
            got,
            ProcessStats {
                cpu_seconds: 3.0,
                resident_bytes: 2048 * 4096,
                virtual_bytes: 123456789,
                open_fds: 17,
                max_fds: 1024,
                start_time_seconds: 1700000010.0,
            }
        );
        assert_eq!(ProcessStats::parse("garbage", boot, limits, 1), None);
        assert!(ProcessStats::read().is_some(), "this test runs on Linux, with /proc");
    }

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
