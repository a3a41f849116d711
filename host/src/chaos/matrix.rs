//! The planted-bug matrix (`chitin chaos --plant-matrix`): one run without
//! a plant (the control) and one with each plant, on one seed and one
//! configuration, so that whoever changes the fence, the dedup or the
//! liveness path sees on their own build that the suite still catches every
//! bug it claims to. The control must pass; each plant must fail with a
//! violation of its own ([`own_violations`]), not only through an unrelated
//! failure (a fault that did not take effect, too few appends), which
//! would prove nothing about the mechanism it turns off.
//!
//! [`PROOF`] is the general configuration the matrix runs unless told
//! otherwise: every fault kind, the three append failpoints at moderate
//! rates, eight clients.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;

use super::{ChaosError, ChaosOptions, FaultKind, Report};
use crate::plant::Plant;

/// The general configuration of the proof.
pub struct Proof {
    /// Fault kinds: every one, so each plant meets the faults that expose
    /// it; a run injects one of each ([`Proof::faults`]).
    pub kinds: &'static [FaultKind],
    pub clients: usize,
    pub failpoints: &'static str,
}

/// Every fault kind, once each; eight clients, so every pause and cut catches
/// appends parked at each failpoint; the three append failpoints at rates
/// that park a tenth of the appends before the fence and after the commit
/// for 2.5 s (past a forward's wait of one TTL) and one in twenty before the
/// commit for 8 s (a holder stopped with a transaction open).
pub const PROOF: Proof = Proof {
    kinds: &FaultKind::EVERY,
    clients: 8,
    failpoints: "append.before_fence=0.1:2500,append.before_commit=0.05:8000,append.after_commit=0.1:2500",
};

impl Proof {
    /// Faults per run: one of each kind (the kinds come from shuffled
    /// bags, so one bag holds each once).
    pub fn faults(&self) -> usize {
        self.kinds.len()
    }
}

/// The violations (the checker's `kind` names) a plant must be caught by:
/// what the mechanism it turns off prevents.
pub fn own_violations(plant: Plant) -> &'static [&'static str] {
    match plant {
        Plant::Fence => &["stale_epoch"],
        Plant::Dedup => &["ack_mismatch"],
        Plant::IdleBound => &["slow_takeover"],
        Plant::EpochBump => &["epoch_reused"],
        Plant::SplitRetirement => &["overlapping_owners", "retired_shard_write"],
        Plant::ForwardOnce => &["not_applied_stored"],
        Plant::Liveness => &["slow_takeover"],
        Plant::AffinityClaim => &["double_owner"],
    }
}

/// How one run of the matrix came out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// The control passed.
    Passed,
    /// The control failed: a plant's failure beside it would prove nothing.
    ControlFailed { why: Vec<String> },
    /// The plant failed with violations of its own (and these counts).
    Caught { by: BTreeMap<String, usize> },
    /// The plant's run passed: the suite did not see the bug.
    NotCaught,
    /// The plant's run failed, but without a violation of its own.
    FailedOtherwise { why: Vec<String> },
}

impl Outcome {
    /// Whether the row is what the matrix wants.
    pub fn as_expected(&self) -> bool {
        matches!(self, Outcome::Passed | Outcome::Caught { .. })
    }
}

/// What the matrix reads of a run's report.
#[derive(Clone, Debug, Default)]
pub struct Judged {
    pub passed: bool,
    /// Violations by kind.
    pub violations: BTreeMap<String, usize>,
    /// Every other reason the run failed, in words (the violations are
    /// above).
    pub failures: Vec<String>,
}

impl Judged {
    pub fn of(report: &Report) -> Judged {
        let mut violations = BTreeMap::new();
        for v in &report.violations {
            *violations.entry(v.kind()).or_insert(0) += 1;
        }
        let failures = report
            .failures
            .iter()
            .filter(|f| !matches!(f, super::verdict::Failure::Violations { .. }))
            .map(ToString::to_string)
            .collect();
        Judged { passed: report.passed, violations, failures }
    }

    /// What else the run broke besides the violations in `by`: its other
    /// violations, then its other failures.
    pub fn besides(&self, by: &BTreeMap<String, usize>) -> Vec<String> {
        let others = self.violations.iter().filter(|(kind, _)| !by.contains_key(*kind));
        counts(others).chain(self.failures.iter().cloned()).collect()
    }
}

/// `n × kind` for each (kind, n).
fn counts<'a>(by: impl IntoIterator<Item = (&'a String, &'a usize)>) -> impl Iterator<Item = String> {
    by.into_iter().map(|(kind, n)| format!("{n} × {kind}"))
}

/// Judges one run of the matrix: `plant` is `None` for the control.
pub fn judge(plant: Option<Plant>, run: &Judged) -> Outcome {
    let why = || run.besides(&BTreeMap::new());
    match plant {
        None if run.passed => Outcome::Passed,
        None => Outcome::ControlFailed { why: why() },
        Some(_) if run.passed => Outcome::NotCaught,
        Some(p) => {
            let by: BTreeMap<String, usize> =
                own_violations(p).iter().filter_map(|&kind| run.violations.get(kind).map(|&n| (kind.to_string(), n))).collect();
            if by.is_empty() { Outcome::FailedOtherwise { why: why() } } else { Outcome::Caught { by } }
        }
    }
}

/// One row of the matrix.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The plant's name, or `control`.
    pub run: String,
    pub outcome: Outcome,
    /// The run's directory, with its report (`report.json`) and logs.
    pub dir: PathBuf,
    /// The run's other violations and failures, beside the ones that caught it.
    pub also: Vec<String>,
    /// The run's own report table when the row is not what the matrix
    /// wants: which faults, takeovers and violations made it so, without
    /// opening its directory (which a test's temporary one no longer has).
    pub report: Option<String>,
}

/// The matrix of one seed.
#[derive(Clone, Debug, Serialize)]
pub struct Matrix {
    pub seed: u64,
    pub rows: Vec<Row>,
}

impl Matrix {
    /// The control passed and every plant was caught by its own violations.
    pub fn passed(&self) -> bool {
        self.rows.iter().all(|r| r.outcome.as_expected())
    }

    /// The matrix as a Markdown table, with the verdict under it.
    pub fn table(&self) -> String {
        let mut out =
            format!("planted-bug matrix, seed {}\n\n| run | outcome | caught as | also |\n|---|---|---|---|\n", self.seed);
        for r in &self.rows {
            let (outcome, caught) = match &r.outcome {
                Outcome::Passed => ("passed (control)", String::new()),
                Outcome::ControlFailed { why } => ("**CONTROL FAILED**", why.join("; ")),
                Outcome::Caught { by } => ("caught", counts(by).collect::<Vec<_>>().join(", ")),
                Outcome::NotCaught => ("**NOT CAUGHT** (the run passed)", String::new()),
                Outcome::FailedOtherwise { why } => ("**FAILED WITHOUT ITS OWN VIOLATION**", why.join("; ")),
            };
            let _ = writeln!(out, "| {} | {outcome} | {caught} | {} |", r.run, r.also.join("; "));
        }
        let caught = self.rows.iter().filter(|r| matches!(r.outcome, Outcome::Caught { .. })).count();
        let _ = writeln!(
            out,
            "\n{}: {caught} of {} plants caught by their own violations\n",
            if self.passed() { "PASSED" } else { "FAILED" },
            self.rows.len().saturating_sub(1)
        );
        for r in &self.rows {
            if let Some(report) = &r.report {
                let _ = writeln!(out, "### {}: its report\n\n{report}", r.run);
            }
        }
        out
    }
}

/// Runs the control and then each of `plants` with `opts` (whose `plant`
/// is ignored), each in a directory of its own under `opts.dir`, and judges
/// every run. A run that could not be carried out at all ends the matrix
/// with its error.
pub async fn run(opts: ChaosOptions, plants: &[Plant]) -> Result<Matrix, ChaosError> {
    if !cfg!(feature = "planted-bugs") {
        return Err(ChaosError::Options("--plant-matrix needs a build with `--features planted-bugs,failpoints`".into()));
    }
    let mut rows = Vec::new();
    for plant in std::iter::once(None).chain(plants.iter().copied().map(Some)) {
        let name = plant.map_or("control", Plant::name);
        let dir = opts.dir.join(name);
        tracing::info!(run = name, dir = %dir.display(), "plant matrix: run starts");
        let report = super::run(ChaosOptions { plant, dir: dir.clone(), ..opts.clone() }).await?;
        let text = serde_json::to_string_pretty(&report).map_err(|e| ChaosError::Options(format!("report: {e}")))?;
        std::fs::write(dir.join("report.json"), crate::security::redact(&text))
            .map_err(super::io_error(format!("write {}/report.json", dir.display())))?;
        let judged = Judged::of(&report);
        let outcome = judge(plant, &judged);
        let also = match &outcome {
            Outcome::Caught { by } => judged.besides(by),
            _ => Vec::new(),
        };
        tracing::info!(run = name, ?outcome, "plant matrix: run judged");
        let report = (!outcome.as_expected()).then(|| report.table());
        rows.push(Row { run: name.to_string(), outcome, dir, also, report });
    }
    Ok(Matrix { seed: opts.seed, rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(passed: bool, violations: &[(&str, usize)], failures: &[&str]) -> Judged {
        Judged {
            passed,
            violations: violations.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
            failures: failures.iter().map(|f| f.to_string()).collect(),
        }
    }

    #[test]
    fn each_run_is_judged_by_its_own_violations() {
        let caught = |pairs: &[(&str, usize)]| Outcome::Caught { by: pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect() };
        let cases: Vec<(Option<Plant>, Judged, Outcome)> = vec![
            (None, run(true, &[], &[]), Outcome::Passed),
            (
                None,
                run(false, &[("lost", 1)], &["fault 2 (kill of node-01) did not take effect: no takeover"]),
                Outcome::ControlFailed {
                    why: vec!["1 × lost".into(), "fault 2 (kill of node-01) did not take effect: no takeover".into()],
                },
            ),
            (Some(Plant::Fence), run(false, &[("stale_epoch", 3)], &[]), caught(&[("stale_epoch", 3)])),
            // Its own violation among others still catches it.
            (
                Some(Plant::ForwardOnce),
                run(false, &[("epoch_reused", 1), ("not_applied_stored", 2)], &[]),
                caught(&[("not_applied_stored", 2)]),
            ),
            (Some(Plant::SplitRetirement), run(false, &[("overlapping_owners", 2)], &[]), caught(&[("overlapping_owners", 2)])),
            (Some(Plant::Dedup), run(true, &[], &[]), Outcome::NotCaught),
            // Failed, but not by what the plant turns off: proves nothing.
            (
                Some(Plant::IdleBound),
                run(false, &[], &["fault 3 (split-shard) did not take effect: busy"]),
                Outcome::FailedOtherwise { why: vec!["fault 3 (split-shard) did not take effect: busy".into()] },
            ),
            (
                Some(Plant::AffinityClaim),
                run(false, &[("slow_takeover", 1)], &[]),
                Outcome::FailedOtherwise { why: vec!["1 × slow_takeover".into()] },
            ),
        ];
        for (plant, judged, want) in cases {
            assert_eq!(judge(plant, &judged), want, "{plant:?}");
        }
    }

    /// Beside the violations that caught a plant: its other violations, then
    /// its other failures.
    #[test]
    fn what_else_a_caught_run_broke_is_listed() {
        let by = BTreeMap::from([("not_applied_stored".to_string(), 2)]);
        let cases: [(Judged, Vec<&str>); 3] = [
            (run(false, &[("not_applied_stored", 2)], &[]), vec![]),
            (run(false, &[("epoch_reused", 1), ("not_applied_stored", 2)], &[]), vec!["1 × epoch_reused"]),
            (
                run(false, &[("not_applied_stored", 2), ("slow_takeover", 3)], &["fault 1 (pause) did not take effect: x"]),
                vec!["3 × slow_takeover", "fault 1 (pause) did not take effect: x"],
            ),
        ];
        for (judged, want) in cases {
            assert_eq!(judged.besides(&by), want, "{judged:?}");
        }
    }

    #[test]
    fn the_matrix_passes_only_when_every_row_is_as_expected() {
        let row = |outcome| Row { run: "x".into(), outcome, dir: PathBuf::new(), also: vec![], report: None };
        let by = BTreeMap::from([("stale_epoch".to_string(), 1)]);
        let good = Matrix { seed: 1, rows: vec![row(Outcome::Passed), row(Outcome::Caught { by: by.clone() })] };
        assert!(good.passed());
        assert!(good.table().contains("PASSED: 1 of 1 plants caught"), "{}", good.table());
        for bad in [Outcome::NotCaught, Outcome::FailedOtherwise { why: vec![] }, Outcome::ControlFailed { why: vec![] }] {
            let m = Matrix { seed: 1, rows: vec![row(Outcome::Passed), row(bad)] };
            assert!(!m.passed());
            assert!(m.table().contains("FAILED: "), "{}", m.table());
        }
        // A failed row's report is under the table, a passed row's is not.
        let failed = Row { report: Some("violation: slow".into()), ..row(Outcome::ControlFailed { why: vec![] }) };
        let m = Matrix { seed: 1, rows: vec![failed, row(Outcome::Caught { by })] };
        assert!(m.table().contains("### x: its report\n\nviolation: slow"), "{}", m.table());
        assert_eq!(m.table().matches("its report").count(), 1, "{}", m.table());
    }

    /// Every plant names violations the checker has: a kind it does not
    /// know is refused as an unknown variant, one it knows only for the
    /// fields missing.
    #[test]
    fn every_plant_is_caught_by_violations_the_checker_reports() {
        for p in Plant::ALL {
            for kind in own_violations(p) {
                let e = serde_json::from_str::<super::super::violation::Violation>(&format!(r#"{{"kind":"{kind}"}}"#))
                    .expect_err("no violation is only a kind");
                assert!(!e.to_string().contains("unknown variant"), "{}: `{kind}` is no violation kind: {e}", p.name());
            }
        }
        let e = serde_json::from_str::<super::super::violation::Violation>(r#"{"kind":"meteor"}"#).unwrap_err();
        assert!(e.to_string().contains("unknown variant"), "{e}");
    }
}
