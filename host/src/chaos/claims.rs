//! The rule the dispatch clients' grants ([`super::dispatch`]) are judged
//! by: **at most one owner per target at any time, outside a logged
//! fail-open window of the granting node**. Pure, so every case is a row
//! of the tables below.
//!
//! What a grant proves. A dispatch answered `claimed` or `already_ours`
//! ran the claim script at some moment `e` between the call's sending `s`
//! and its answer `r`; the script left the target's key holding the
//! owner's instance id with the claim TTL `T` (the liveness timeout) from
//! `e`. In a correct cluster that key can go before `e + T` only when
//! - its owner releases it (a graceful stop: the `restart` and `drain`
//!   faults),
//! - a monitor sweeps it because the owner's instance key lapsed (its
//!   heartbeat stopped: `kill`, `pause`, `partition`, and for a moment
//!   after a paused or cut-off node comes back, before its heartbeat has
//!   re-registered it), or
//! - Redis restarts empty (the `redis` fault).
//!
//! So, unless one of those **disturbances** touches the owner, the owner
//! certainly held the target over `[r, s + T − margin)`, whichever `e` was.
//! A disturbance of the owner's node (or of Redis, which touches every
//! node) that starts at `d` cuts the interval at `d`; a grant sent while a
//! disturbance was under way, or while it settles (a node fault's end plus
//! `T` plus a heartbeat interval: the sweep that may still follow a
//! comeback), proves nothing. A Redis restart needs no settling: a claim
//! sent after Redis came back was made in the new, empty server.
//!
//! Two grants of one target to different instances whose certain intervals
//! overlap are two owners at once: each interval is a stretch in which the
//! key held that owner's id, and a key holds one value. Such an overlap is
//! a [`Violation::DoubleOwner`], naming the target, both owners with their
//! spans (the union of each owner's overlapping intervals) and the overlap.
//! Legitimate handovers never overlap: a key that lapsed, was released,
//! swept or wiped ends its owner's interval no later than the handover,
//! because the interval never outlives the TTL and is cut at every
//! disturbance that can remove a key early.
//!
//! A dispatch that failed open owned nothing in Redis; it acted on its
//! target without a claim, which is allowed inside the node's own
//! fail-open window (the node's account, carried on its answer: from its
//! first fail-open of an outage to the last plus `T`). A fail-open answer
//! with no window covering it is a [`Violation::UnloggedFailOpen`], and is
//! then judged like a claim, as an owner during `[r, s + T − margin)`.
//!
//! What the rule cannot see: two owners inside a disturbance (or its
//! settling) are not proven, because the evidence there cannot tell them
//! from a legitimate handover; a node whose heartbeat stalls for a whole
//! liveness timeout with no fault (a machine starved for seconds) has its
//! claims swept as the design intends, which the rule would report; and a
//! node that exits on its own (the verdict fails the run for it) may
//! release claims the rule still counts.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::dispatch::{Grant, Granted};
use super::fault::{FaultKind, FaultRecord};
use super::violation::{TargetOwner, Verdict, Violation};

/// Taken off the end of every certain interval: Redis counts the TTL on
/// its own clock, the clients on theirs.
const MARGIN_MS: u64 = 100;

/// How far a node's clock (its fail-open windows) may stray from the
/// run's before a window is taken not to cover a grant.
const WINDOW_TOLERANCE_MS: u64 = 250;

/// A stretch in which claims may vanish before their TTL: of one node, or
/// of every node (`node` is `None`: Redis restarted).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Disturbance {
    pub node: Option<String>,
    /// Milliseconds since the run's start.
    pub from_ms: u64,
    /// Until then a grant sent proves nothing.
    pub until_ms: u64,
}

/// The disturbances of a run's faults, for claims of TTL `ttl` on nodes
/// that beat every `heartbeat`: node faults that stop a node's heartbeat or
/// release its claims, settling for `ttl` and a heartbeat after their end
/// (a comeback's claims are swept, if at all, within a heartbeat of its
/// instance key's lapse), and Redis restarts. Database faults and topology
/// changes touch no claim.
pub(crate) fn disturbances(faults: &[FaultRecord], ttl: Duration, heartbeat: Duration) -> Vec<Disturbance> {
    let settle = (ttl + heartbeat).as_millis() as u64;
    faults
        .iter()
        .filter_map(|f| match f.kind {
            FaultKind::Redis => Some(Disturbance { node: None, from_ms: f.started_ms, until_ms: f.ended_ms }),
            FaultKind::Kill | FaultKind::Pause | FaultKind::Restart | FaultKind::Drain | FaultKind::Partition => {
                Some(Disturbance { node: f.node.clone(), from_ms: f.started_ms, until_ms: f.ended_ms + settle })
            }
            FaultKind::Database | FaultKind::SplitShard | FaultKind::MoveShard | FaultKind::AddNode => None,
        })
        .collect()
}

/// What the dispatch evidence held, for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchSummary {
    /// Grants whose certain interval was judged (not empty).
    pub judged: usize,
    /// Fail-open windows the nodes reported (by instance and start).
    pub windows: usize,
    /// Times a target's owner changed from one judged grant to the next.
    pub handovers: usize,
}

/// Whether the node's window covers the grant (see [`WINDOW_TOLERANCE_MS`]).
fn covered(g: &Grant) -> bool {
    g.window.is_some_and(|w| w.start_ms <= g.answered_ms + WINDOW_TOLERANCE_MS && w.end_ms + WINDOW_TOLERANCE_MS >= g.sent_ms)
}

/// The interval over which `g`'s owner certainly held its target, if any.
fn certain(g: &Grant, ttl_ms: u64, disturbances: &[Disturbance]) -> Option<(u64, u64)> {
    let mut until = (g.sent_ms + ttl_ms).saturating_sub(MARGIN_MS);
    for d in disturbances.iter().filter(|d| d.node.as_deref().is_none_or(|n| n == g.node)) {
        if g.sent_ms < d.until_ms {
            until = until.min(d.from_ms);
        }
    }
    (until > g.answered_ms).then_some((g.answered_ms, until))
}

/// Judges the grants (see the module docs); adds violations to `v`.
pub(crate) fn check_dispatches(
    grants: &[Grant],
    disturbances: &[Disturbance],
    ttl: Duration,
    v: &mut Verdict,
) -> DispatchSummary {
    let ttl_ms = ttl.as_millis() as u64;
    let mut summary = DispatchSummary::default();
    let windows: BTreeSet<(&str, u64)> =
        grants.iter().filter_map(|g| g.window.map(|w| (g.instance.as_str(), w.start_ms))).collect();
    summary.windows = windows.len();
    // Target → certain intervals, with their owner.
    let mut by_target: BTreeMap<&str, Vec<(u64, u64, &Grant)>> = BTreeMap::new();
    for g in grants {
        if g.outcome == Granted::FailedOpen {
            if covered(g) {
                continue;
            }
            v.unlogged_fail_opens += 1;
            v.violations.push(Violation::UnloggedFailOpen {
                target: g.target.clone(),
                node: g.node.clone(),
                instance: g.instance.clone(),
                sent_ms: g.sent_ms,
                answered_ms: g.answered_ms,
            });
        }
        if let Some((from, until)) = certain(g, ttl_ms, disturbances) {
            summary.judged += 1;
            by_target.entry(&g.target).or_default().push((from, until, g));
        }
    }
    for (target, mut intervals) in by_target {
        intervals.sort_by_key(|&(from, _, _)| from);
        summary.handovers += intervals.windows(2).filter(|w| w[0].2.instance != w[1].2.instance).count();
        let spans = spans(&intervals);
        for (i, a) in spans.iter().enumerate() {
            for b in spans[i + 1..].iter().take_while(|b| b.from_ms < a.until_ms) {
                if b.instance != a.instance {
                    v.double_owners += 1;
                    v.violations.push(Violation::DoubleOwner {
                        target: target.to_string(),
                        from_ms: b.from_ms,
                        until_ms: a.until_ms.min(b.until_ms),
                        first: a.clone(),
                        second: b.clone(),
                    });
                }
            }
        }
    }
    summary
}

/// Each owner's intervals merged where they overlap or touch, sorted by
/// start: an owner's spans never overlap one another.
fn spans(intervals: &[(u64, u64, &Grant)]) -> Vec<TargetOwner> {
    let mut open: BTreeMap<&str, TargetOwner> = BTreeMap::new();
    let mut out = Vec::new();
    for &(from, until, g) in intervals {
        match open.get_mut(g.instance.as_str()) {
            Some(s) if from <= s.until_ms => s.until_ms = s.until_ms.max(until),
            _ => {
                let span = TargetOwner { node: g.node.clone(), instance: g.instance.clone(), from_ms: from, until_ms: until };
                out.extend(open.insert(&g.instance, span));
            }
        }
    }
    out.extend(open.into_values());
    out.sort_by_key(|s| s.from_ms);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::dispatch::Window;

    const TTL: Duration = Duration::from_secs(3);

    fn grant(instance: &str, outcome: Granted, sent_ms: u64) -> Grant {
        Grant {
            target: "t".into(),
            node: format!("node-{instance}"),
            instance: instance.into(),
            outcome,
            sent_ms,
            answered_ms: sent_ms + 5,
            window: None,
        }
    }

    fn claimed(instance: &str, sent_ms: u64) -> Grant {
        grant(instance, Granted::Claimed, sent_ms)
    }

    fn ours(instance: &str, sent_ms: u64) -> Grant {
        grant(instance, Granted::AlreadyOurs, sent_ms)
    }

    fn failed_open(instance: &str, sent_ms: u64, window: Option<(u64, u64)>) -> Grant {
        Grant {
            window: window.map(|(start_ms, end_ms)| Window { start_ms, end_ms }),
            ..grant(instance, Granted::FailedOpen, sent_ms)
        }
    }

    fn redis(from_ms: u64, until_ms: u64) -> Disturbance {
        Disturbance { node: None, from_ms, until_ms }
    }

    fn node_fault(instance: &str, from_ms: u64, until_ms: u64) -> Disturbance {
        Disturbance { node: Some(format!("node-{instance}")), from_ms, until_ms }
    }

    fn judge(grants: &[Grant], disturbances: &[Disturbance]) -> (Verdict, DispatchSummary) {
        let mut v = Verdict::default();
        let s = check_dispatches(grants, disturbances, TTL, &mut v);
        (v, s)
    }

    #[test]
    fn handovers_are_legitimate_and_double_owners_are_not() {
        let cases: Vec<(&str, Vec<Grant>, Vec<Disturbance>, usize, usize)> = vec![
            ("one owner all along", vec![claimed("a", 0), ours("a", 1_000), ours("a", 5_000)], vec![], 0, 0),
            ("a claim after the last one's TTL ran out", vec![claimed("a", 0), claimed("b", 3_000)], vec![], 0, 0),
            ("a claim within the TTL of another owner's", vec![claimed("a", 0), claimed("b", 2_000)], vec![], 1, 0),
            ("already ours within another's TTL", vec![ours("a", 0), ours("b", 1_000)], vec![], 1, 0),
            // The overlap must be certain: the first claim may have run as
            // late as its answer, and the TTL counts from the sending.
            ("just inside the margin", vec![claimed("a", 0), claimed("b", 2_890)], vec![], 1, 0),
            ("just outside it", vec![claimed("a", 0), claimed("b", 2_896)], vec![], 0, 0),
            // Redis restarted empty: a new owner right after it is legitimate.
            ("a new owner after a Redis restart", vec![claimed("a", 0), claimed("b", 2_100)], vec![redis(1_000, 2_000)], 0, 0),
            ("two owners after the restart", vec![claimed("a", 2_100), claimed("b", 2_500)], vec![redis(1_000, 2_000)], 1, 0),
            (
                "a claim sent while Redis restarted proves nothing",
                vec![claimed("a", 1_500), claimed("b", 2_100)],
                vec![redis(1_000, 2_000)],
                0,
                0,
            ),
            // The owner's node was killed, paused, cut off or stopped: its claims may go early.
            (
                "a new owner after the old one's node fault",
                vec![claimed("a", 0), claimed("b", 1_500)],
                vec![node_fault("a", 1_000, 8_000)],
                0,
                0,
            ),
            (
                "another node's fault excuses nothing",
                vec![claimed("a", 0), claimed("b", 1_500)],
                vec![node_fault("c", 1_000, 8_000)],
                1,
                0,
            ),
            (
                "a comeback's claim is not judged while it settles",
                vec![claimed("a", 7_000), claimed("b", 7_500)],
                vec![node_fault("a", 1_000, 8_000)],
                0,
                0,
            ),
            (
                "nor the other owner's after it",
                vec![claimed("b", 7_500), claimed("a", 7_900)],
                vec![node_fault("a", 1_000, 8_000)],
                0,
                0,
            ),
            ("after settling it is", vec![claimed("a", 8_000), claimed("b", 8_500)], vec![node_fault("a", 1_000, 8_000)], 1, 0),
            // Failing open inside the node's own window owns nothing.
            ("a logged fail-open beside an owner", vec![ours("a", 0), failed_open("b", 500, Some((400, 3_505)))], vec![], 0, 0),
            ("an unlogged fail-open beside an owner", vec![ours("a", 0), failed_open("b", 500, None)], vec![], 1, 1),
            ("a fail-open outside its window", vec![ours("a", 0), failed_open("b", 500, Some((5_000, 8_000)))], vec![], 1, 1),
            ("an unlogged fail-open alone", vec![failed_open("b", 500, None)], vec![], 0, 1),
            (
                "fail-opens of two nodes during an outage, claims after it",
                vec![
                    failed_open("a", 1_100, Some((1_100, 4_100))),
                    failed_open("b", 1_200, Some((1_200, 4_200))),
                    claimed("b", 2_100),
                    failed_open("a", 2_050, Some((1_100, 5_050))),
                    ours("b", 2_300),
                ],
                vec![redis(1_000, 2_000)],
                0,
                0,
            ),
        ];
        for (name, grants, disturbances, double, unlogged) in cases {
            let (v, _) = judge(&grants, &disturbances);
            assert_eq!((v.double_owners, v.unlogged_fail_opens), (double, unlogged), "{name}: {:?}", v.violations);
            assert_eq!(v.violations.len(), double + unlogged, "{name}");
        }
    }

    #[test]
    fn a_double_owner_names_the_target_both_owners_and_the_times() {
        let (v, s) = judge(&[claimed("a", 0), ours("a", 1_000), claimed("b", 2_000), ours("b", 2_500)], &[]);
        let a = TargetOwner { node: "node-a".into(), instance: "a".into(), from_ms: 5, until_ms: 3_900 };
        let b = TargetOwner { node: "node-b".into(), instance: "b".into(), from_ms: 2_005, until_ms: 5_400 };
        assert_eq!(
            v.violations,
            vec![Violation::DoubleOwner { target: "t".into(), first: a, second: b, from_ms: 2_005, until_ms: 3_900 }]
        );
        assert_eq!(s, DispatchSummary { judged: 4, windows: 0, handovers: 1 });
    }

    #[test]
    fn targets_are_judged_apart() {
        let other = Grant { target: "u".into(), ..claimed("b", 1_000) };
        let (v, s) = judge(&[claimed("a", 0), other], &[]);
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        assert_eq!(s.handovers, 0);
    }

    #[test]
    fn node_faults_settle_for_a_ttl_and_a_heartbeat_and_redis_restarts_not() {
        let f = |kind, node: Option<&str>, started_ms, ended_ms| FaultRecord {
            index: 0,
            kind,
            node: node.map(str::to_string),
            started_ms,
            ended_ms,
            recovered_ms: 0,
            held: 0,
            ineffective: None,
            detail: String::new(),
        };
        let faults = [
            f(FaultKind::Pause, Some("node-01"), 1_000, 5_000),
            f(FaultKind::Redis, None, 6_000, 8_000),
            f(FaultKind::Database, None, 9_000, 10_000),
            f(FaultKind::SplitShard, None, 11_000, 12_000),
        ];
        assert_eq!(
            disturbances(&faults, TTL, Duration::from_secs(1)),
            vec![Disturbance { node: Some("node-01".into()), from_ms: 1_000, until_ms: 9_000 }, redis(6_000, 8_000)]
        );
    }

    #[test]
    fn windows_are_counted_per_instance_and_start() {
        let grants = [
            failed_open("a", 100, Some((100, 3_100))),
            failed_open("a", 300, Some((100, 3_300))),
            failed_open("b", 200, Some((200, 3_200))),
            failed_open("a", 9_000, Some((9_000, 12_000))),
        ];
        assert_eq!(judge(&grants, &[]).1.windows, 3);
    }
}
