//! The run's report: a table for people, JSON for tools, both from one struct.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::checker::{percentile, unavailability};
use super::claims::DispatchSummary;
use super::clients::ClientLog;
use super::clock::Step;
use super::dispatch::{DispatchLog, Granted};
use super::evidence::Basis;
use super::fault::FaultRecord;
use super::verdict::{self, Failure, Outcome};
use super::violation::{Verdict, Violation};

/// What was run: the same in the facts and in the report.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunInfo {
    pub seed: u64,
    pub nodes: usize,
    pub shards: u32,
    pub clients: usize,
    pub database: String,
    pub network: String,
    pub duration_ms: u64,
    /// The planted bug every node ran with, if any (`--plant`).
    #[serde(default)]
    pub plant: Option<String>,
    /// The failpoints every node armed, if any (`--failpoints`).
    #[serde(default)]
    pub failpoints: Option<String>,
}

/// A judged run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    #[serde(flatten)]
    pub run: RunInfo,
    /// What the rows' and grants' times are, and the limit of that.
    pub evidence: Basis,
    pub evidence_note: String,
    pub faults: Vec<FaultRecord>,
    pub faults_by_kind: BTreeMap<String, usize>,
    /// Kinds asked for that this run could not inject, with the reason.
    pub skipped: BTreeMap<String, String>,
    pub acknowledged: usize,
    /// The fewest acknowledged appends this run had to reach
    /// ([`verdict::ack_floor`]).
    pub ack_floor: u64,
    pub unacknowledged: usize,
    /// Acknowledged requests sent again to another node (each must get the
    /// same sequence back).
    #[serde(default)]
    pub resent: usize,
    pub rejected: usize,
    pub stored: usize,
    pub lost: usize,
    pub duplicates: usize,
    pub stale_epoch: usize,
    pub mismatched: usize,
    pub slow_takeovers: usize,
    /// Requests answered "not applied", given up, and stored after all.
    #[serde(default)]
    pub not_applied_stored: usize,
    /// Requests answered "not applied" that the clients gave up.
    #[serde(default)]
    pub abandoned: usize,
    /// Pairs of leases whose key ranges overlap, live at the same time.
    #[serde(default)]
    pub overlapping_owners: usize,
    /// Rows of split parents committed after their retirement.
    #[serde(default)]
    pub retired_writes: usize,
    /// (shard, epoch) pairs held by more than one holder.
    #[serde(default)]
    pub epoch_reused: usize,
    /// Dispatch clients (one per node of the run's start).
    #[serde(default)]
    pub dispatch_clients: usize,
    /// Dispatches granted: claimed, already ours, or failed open.
    #[serde(default)]
    pub dispatches_granted: usize,
    #[serde(default)]
    pub dispatches_failed_open: usize,
    /// Dispatches declined: the target was another instance's.
    #[serde(default)]
    pub dispatches_declined: u64,
    /// Dispatch calls that failed or went unanswered.
    #[serde(default)]
    pub dispatches_failed: u64,
    /// Grants whose certain ownership the claim rule judged.
    #[serde(default)]
    pub dispatches_judged: usize,
    /// Fail-open windows the nodes reported.
    #[serde(default)]
    pub fail_open_windows: usize,
    /// Changes of a target's owner between judged grants.
    #[serde(default)]
    pub target_handovers: usize,
    /// Pairs of owners of one target at once, outside fail-open windows.
    #[serde(default)]
    pub double_owners: usize,
    /// Fail-open answers no window of their node covered.
    #[serde(default)]
    pub unlogged_fail_opens: usize,
    /// Stalls (pause, cut) are taken over within this.
    pub takeover_bound_ms: u64,
    /// Crashes (kill) are taken over within this.
    #[serde(default)]
    pub crash_takeover_bound_ms: u64,
    /// Stalls are taken over no sooner than this.
    #[serde(default)]
    pub stall_takeover_floor_ms: u64,
    /// Stalled nodes' shards taken over before their leases could expire.
    #[serde(default)]
    pub early_takeovers: usize,
    pub takeovers: usize,
    pub takeover_p50_ms: Option<u64>,
    pub takeover_p99_ms: Option<u64>,
    pub takeover_max_ms: Option<u64>,
    /// Per fault that killed a node's leases: shards taken over and the slowest.
    pub takeovers_by_fault: Vec<FaultTakeover>,
    /// Stretches in which some client waited more than a second for an ack.
    pub unavailability_windows: usize,
    pub unavailability_longest_ms: u64,
    pub unavailability_total_ms: u64,
    /// Each window charged to the fault it overlaps (`none`: no fault was
    /// under way or recovering): `[windows, longest ms]`.
    pub unavailability_by_kind: BTreeMap<String, [u64; 2]>,
    /// Every window, `[start, end]` in milliseconds since the run's start.
    pub unavailability: Vec<(u64, u64)>,
    pub supervisor_restarts: Vec<String>,
    /// Steps of this machine's wall clock against its monotonic clock,
    /// taken out of every takeover and fail-open window measured across
    /// one ([`crate::chaos::clock`]).
    #[serde(default)]
    pub clock_steps: Vec<Step>,
    /// The application's own service, when the run drove one (`--service`).
    #[serde(default)]
    pub service: Option<ServiceSummary>,
    pub violations: Vec<Violation>,
    /// Every reason the run failed ([`verdict::judge`]); empty when it passed.
    pub failures: Vec<Failure>,
    pub passed: bool,
}

/// What the service's writers were told and its table holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ServiceSummary {
    pub acknowledged: usize,
    pub unacknowledged: usize,
    /// Attempts an instance sent to another with a `421`.
    pub redirected: u64,
    /// Attempts answered otherwise (not now, or no answer), and the last
    /// such answer.
    #[serde(default)]
    pub refused: u64,
    #[serde(default)]
    pub last_refusal: Option<String>,
    /// Rows of the service's table.
    pub stored: usize,
    pub lost: usize,
    pub duplicates: usize,
    /// Writes under an older token after a newer token's, per key.
    pub interleaved: usize,
}

impl ServiceSummary {
    fn of(facts: ServiceFacts, verdict: &Verdict) -> ServiceSummary {
        ServiceSummary {
            acknowledged: facts.log.acked.len(),
            unacknowledged: facts.log.unacknowledged,
            redirected: facts.log.redirected,
            refused: facts.log.refused,
            last_refusal: facts.log.last_refusal.map(|r| r.said),
            stored: facts.stored,
            lost: verdict.service_lost,
            duplicates: verdict.service_duplicates,
            interleaved: verdict.service_interleaved,
        }
    }

    /// Its rows of the checks' table.
    fn write_rows(&self, t: &mut String) {
        let acknowledged = format!("{} ({})", self.acknowledged, self.unacknowledged);
        let refused = match &self.last_refusal {
            Some(said) => format!("{} (last: {said})", self.refused),
            None => self.refused.to_string(),
        };
        let rows = [
            ("service: acknowledged writes (unacknowledged at the stop)", acknowledged),
            ("service: attempts sent to the holder's instance (421)", self.redirected.to_string()),
            ("service: attempts answered not now, or not at all", refused),
            ("service: rows in its table", self.stored.to_string()),
            ("service: acknowledged writes lost", self.lost.to_string()),
            ("service: writes stored twice", self.duplicates.to_string()),
            ("service: writes under an older token after a newer one", self.interleaved.to_string()),
        ];
        for (name, value) in rows {
            let _ = writeln!(t, "| {name} | {value} |");
        }
    }
}

/// The service's side of a run, before judgement.
pub struct ServiceFacts {
    pub log: crate::chaos::service::ServiceLog,
    pub stored: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FaultTakeover {
    pub fault: usize,
    pub node: String,
    pub shards: usize,
    pub max_ms: u64,
}

fn by_fault(takeovers: &[super::violation::Takeover]) -> Vec<FaultTakeover> {
    let mut out: BTreeMap<usize, FaultTakeover> = BTreeMap::new();
    for t in takeovers {
        let e =
            out.entry(t.fault).or_insert_with(|| FaultTakeover { fault: t.fault, node: t.node.clone(), shards: 0, max_ms: 0 });
        e.shards += 1;
        e.max_ms = e.max_ms.max(t.ms);
    }
    out.into_values().collect()
}

/// Charges each window to the first fault whose span (start to recovered)
/// overlaps it.
fn windows_by_kind(windows: &[(u64, u64)], faults: &[FaultRecord]) -> BTreeMap<String, [u64; 2]> {
    let mut out: BTreeMap<String, [u64; 2]> = BTreeMap::new();
    for &(s, e) in windows {
        let kind =
            faults.iter().find(|f| s <= f.ended_ms + f.recovered_ms && e >= f.started_ms).map_or("none", |f| f.kind.name());
        let entry = out.entry(kind.to_string()).or_insert([0, 0]);
        entry[0] += 1;
        entry[1] = entry[1].max(e - s);
    }
    out
}

/// The run's facts, before judgement.
pub struct RunFacts {
    pub run: RunInfo,
    pub faults: Vec<FaultRecord>,
    pub skipped: BTreeMap<String, String>,
    pub log: ClientLog,
    pub stored: usize,
    pub evidence: Basis,
    pub ack_floor: u64,
    pub takeover_bounds: crate::chaos::checker::Bounds,
    pub supervisor_restarts: Vec<String>,
    pub dispatches: DispatchLog,
    pub dispatch_summary: DispatchSummary,
    pub clock_steps: Vec<Step>,
    pub service: Option<ServiceFacts>,
}

impl Report {
    /// Judges the facts and the checker's verdict into a report.
    pub fn new(f: RunFacts, verdict: Verdict) -> Report {
        let mut faults_by_kind = BTreeMap::new();
        for r in &f.faults {
            *faults_by_kind.entry(r.kind.name().to_string()).or_insert(0) += 1;
        }
        let takeover_ms: Vec<u64> = verdict.takeovers.iter().map(|t| t.ms).collect();
        let windows = unavailability(&f.log.acks, 1000);
        let fail_opens_ms: Vec<u64> =
            f.dispatches.granted.iter().filter(|g| g.outcome == Granted::FailedOpen).map(|g| g.sent_ms).collect();
        let failures = verdict::judge(&Outcome {
            violations: verdict.violations.len(),
            rejected: f.log.rejected.len(),
            acknowledged: f.log.acks.len() as u64,
            resent: f.log.resends.len() as u64,
            floor: f.ack_floor,
            exited: &f.supervisor_restarts,
            faults: &f.faults,
            takeovers: &verdict.takeovers,
            dispatch_clients: f.dispatches.clients,
            dispatches_granted: f.dispatches.granted.len() as u64,
            fail_opens_ms: &fail_opens_ms,
            service_acknowledged: f.service.as_ref().map(|s| s.log.acked.len() as u64),
            service_last_refusal: f.service.as_ref().and_then(|s| s.log.last_refusal.as_ref()).map(|r| r.said.as_str()),
        });
        Report {
            service: f.service.map(|s| ServiceSummary::of(s, &verdict)),
            run: f.run,
            evidence_note: f.evidence.describe(),
            evidence: f.evidence,
            ack_floor: f.ack_floor,
            faults_by_kind,
            skipped: f.skipped,
            acknowledged: f.log.acks.len(),
            unacknowledged: f.log.unacknowledged.len(),
            resent: f.log.resends.len(),
            rejected: f.log.rejected.len(),
            stored: f.stored,
            lost: verdict.lost,
            duplicates: verdict.duplicates,
            stale_epoch: verdict.stale_epoch,
            mismatched: verdict.mismatched,
            slow_takeovers: verdict.slow_takeovers,
            not_applied_stored: verdict.not_applied_stored,
            abandoned: f.log.abandoned.len(),
            overlapping_owners: verdict.overlapping_owners,
            retired_writes: verdict.retired_writes,
            epoch_reused: verdict.epoch_reused,
            dispatch_clients: f.dispatches.clients,
            dispatches_granted: f.dispatches.granted.len(),
            dispatches_failed_open: fail_opens_ms.len(),
            dispatches_declined: f.dispatches.declined,
            dispatches_failed: f.dispatches.failed,
            dispatches_judged: f.dispatch_summary.judged,
            fail_open_windows: f.dispatch_summary.windows,
            target_handovers: f.dispatch_summary.handovers,
            double_owners: verdict.double_owners,
            unlogged_fail_opens: verdict.unlogged_fail_opens,
            takeover_bound_ms: f.takeover_bounds.stall_ms,
            crash_takeover_bound_ms: f.takeover_bounds.crash_ms,
            stall_takeover_floor_ms: f.takeover_bounds.stall_floor_ms,
            early_takeovers: verdict.early_takeovers,
            takeovers: takeover_ms.len(),
            takeover_p50_ms: percentile(&takeover_ms, 50.0),
            takeover_p99_ms: percentile(&takeover_ms, 99.0),
            takeover_max_ms: takeover_ms.iter().copied().max(),
            takeovers_by_fault: by_fault(&verdict.takeovers),
            unavailability_windows: windows.len(),
            unavailability_longest_ms: windows.iter().map(|(s, e)| e - s).max().unwrap_or(0),
            unavailability_total_ms: windows.iter().map(|(s, e)| e - s).sum(),
            unavailability_by_kind: windows_by_kind(&windows, &f.faults),
            unavailability: windows,
            supervisor_restarts: f.supervisor_restarts,
            clock_steps: f.clock_steps,
            faults: f.faults,
            violations: verdict.violations,
            passed: failures.is_empty(),
            failures,
        }
    }

    /// The summary table (markdown, so it pastes into docs/reliability.md).
    pub fn table(&self) -> String {
        let mut t = String::new();
        self.write_heading(&mut t);
        self.write_faults(&mut t);
        self.write_checks(&mut t);
        self.write_verdict(&mut t);
        t
    }

    /// The run's options, its plant and failpoints, and the evidence read.
    fn write_heading(&self, t: &mut String) {
        let r = &self.run;
        let _ = writeln!(
            t,
            "chaos run: seed {}, {} nodes, {} shards, {} clients, {:.0} s",
            r.seed,
            r.nodes,
            r.shards,
            r.clients,
            r.duration_ms as f64 / 1000.0
        );
        let _ = writeln!(t, "database: {}; network cuts: {}", r.database, r.network);
        if let Some(plant) = &r.plant {
            let _ = writeln!(t, "PLANTED BUG: {plant} (the run must fail)");
        }
        if let Some(spec) = &r.failpoints {
            let _ = writeln!(t, "failpoints: {spec}");
        }
        let _ = writeln!(t, "evidence: {}\n", self.evidence_note);
    }

    /// The faults injected and skipped, by kind.
    fn write_faults(&self, t: &mut String) {
        let _ = writeln!(t, "| fault | injected |\n|---|---:|");
        for (kind, n) in &self.faults_by_kind {
            let _ = writeln!(t, "| {kind} | {n} |");
        }
        for (kind, why) in &self.skipped {
            let _ = writeln!(t, "| {kind} | skipped: {why} |");
        }
        let _ = writeln!(t, "| **total** | **{}** |\n", self.faults.len());
    }

    /// Every check's figure, and the windows by fault kind.
    fn write_checks(&self, t: &mut String) {
        let ms = |v: Option<u64>| v.map_or("-".to_string(), |v| format!("{v} ms"));
        let _ = writeln!(t, "| check | result |\n|---|---:|");
        let rows = [
            ("acknowledged appends", self.acknowledged.to_string()),
            ("floor of acknowledged appends", self.ack_floor.to_string()),
            ("unacknowledged when the run stopped", self.unacknowledged.to_string()),
            ("acknowledged requests sent again to another node", self.resent.to_string()),
            ("requests answered \"not applied\" and given up", self.abandoned.to_string()),
            ("of those, stored after all", self.not_applied_stored.to_string()),
            ("entries stored", self.stored.to_string()),
            ("lost", self.lost.to_string()),
            ("duplicates", self.duplicates.to_string()),
            ("stale-epoch commits", self.stale_epoch.to_string()),
            ("leases of overlapping key ranges live at once", self.overlapping_owners.to_string()),
            ("rows of split parents committed after their retirement", self.retired_writes.to_string()),
            ("epochs held by two holders", self.epoch_reused.to_string()),
            ("acks that disagree with the store", self.mismatched.to_string()),
            (
                &format!("dispatches granted ({} clients; declined, failed)", self.dispatch_clients),
                format!("{} ({}, {})", self.dispatches_granted, self.dispatches_declined, self.dispatches_failed),
            ),
            (
                "of those, failed open (in windows the nodes reported)",
                format!("{} ({})", self.dispatches_failed_open, self.fail_open_windows),
            ),
            ("grants judged for ownership (target handovers)", format!("{} ({})", self.dispatches_judged, self.target_handovers)),
            ("targets with two owners at once", self.double_owners.to_string()),
            ("fail-opens outside their node's window", self.unlogged_fail_opens.to_string()),
            ("rejected as invalid", self.rejected.to_string()),
            (
                &format!(
                    "takeovers over {} ms after a kill, over {} ms after a pause or cut",
                    self.crash_takeover_bound_ms, self.takeover_bound_ms
                ),
                self.slow_takeovers.to_string(),
            ),
            (
                &format!("takeovers of a paused or cut node sooner than {} ms", self.stall_takeover_floor_ms),
                self.early_takeovers.to_string(),
            ),
            ("takeovers measured", self.takeovers.to_string()),
            ("takeover p50", ms(self.takeover_p50_ms)),
            ("takeover p99", ms(self.takeover_p99_ms)),
            ("takeover max", ms(self.takeover_max_ms)),
            ("unavailability windows (> 1 s)", self.unavailability_windows.to_string()),
            ("longest window", format!("{} ms", self.unavailability_longest_ms)),
            ("total unavailability", format!("{} ms", self.unavailability_total_ms)),
            ("nodes restarted by the supervisor", self.supervisor_restarts.len().to_string()),
            (
                "steps of the wall clock (taken out of takeovers and windows)",
                format!(
                    "{} ({} ms in all)",
                    self.clock_steps.len(),
                    self.clock_steps.iter().map(|s| s.step_us).sum::<i64>() / 1000
                ),
            ),
        ];
        for (name, value) in rows {
            let _ = writeln!(t, "| {name} | {value} |");
        }
        if let Some(s) = &self.service {
            s.write_rows(t);
        }
        for (kind, [n, longest]) in &self.unavailability_by_kind {
            let _ = writeln!(t, "| windows during {kind} | {n} (longest {longest} ms) |");
        }
    }

    /// Passed or failed, with why, and the first violations.
    fn write_verdict(&self, t: &mut String) {
        let _ = writeln!(t, "\n{}", if self.passed { "PASSED" } else { "FAILED" });
        for f in &self.failures {
            let _ = writeln!(t, "failed: {f}");
        }
        for v in self.violations.iter().take(20) {
            let _ = writeln!(t, "violation: {}", serde_json::to_string(v).unwrap_or_default());
        }
        if self.violations.len() > 20 {
            let _ = writeln!(t, "… and {} more in the JSON report", self.violations.len() - 20);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::FaultKind;

    fn fault(kind: FaultKind, started_ms: u64, ended_ms: u64, recovered_ms: u64) -> FaultRecord {
        FaultRecord {
            index: 0,
            kind,
            node: None,
            started_ms,
            ended_ms,
            recovered_ms,
            held: 0,
            ineffective: None,
            detail: String::new(),
        }
    }

    #[test]
    fn windows_are_charged_to_the_fault_they_overlap() {
        let faults = [fault(FaultKind::Kill, 1_000, 3_000, 500), fault(FaultKind::Redis, 10_000, 12_000, 2_000)];
        let windows = [(2_000, 4_000), (3_400, 3_600), (13_500, 15_000), (20_000, 21_500)];
        let by = windows_by_kind(&windows, &faults);
        assert_eq!(by["kill"], [2, 2_000]);
        assert_eq!(by["redis"], [1, 1_500]);
        assert_eq!(by["none"], [1, 1_500]);
    }
}
