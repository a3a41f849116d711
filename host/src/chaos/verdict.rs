//! Whether a run passed: the checker's violations are necessary but not
//! enough. A run also fails when it proved too little (too few
//! acknowledged appends to have exercised anything), when a node exited on
//! its own (a crash the supervisor hid), when a fault did not take
//! effect (a drain that drained nothing, a SIGTERM that hung, a kill with no
//! takeover to measure, a Redis restart no dispatch failed open in), or
//! when its dispatch clients were granted nothing. Pure, so every rule has
//! a row in the table below.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::fault::{FaultKind, FaultRecord};
use super::violation::Takeover;

/// A client's append rate the floor assumes, as the latency of one append
/// added to the client's pause: 40 ms. Measured on 2 cores (dev profile,
/// private PostgreSQL, 3 nodes) the recorded runs acknowledged 30 (120
/// faults; 20 faults beside other builds) to 100 (20 faults, quiet machine)
/// appends per client-second including every fault and recovery; 40 ms
/// gives 20 per client-second at the default 10 ms pause, below every
/// measured run.
const ASSUMED_APPEND_LATENCY: Duration = Duration::from_millis(40);

/// The share of the assumed rate a run must reach, in percent: a fifth, so
/// that a run slowed down by a noisy machine still passes while one whose
/// clients stalled for most of it (or never started) does not.
const FLOOR_PERCENT: u128 = 20;

/// The fewest acknowledged appends a run of `clients` clients pausing
/// `interval` between appends for `duration` must have: at least one, so a
/// run that acknowledged nothing never passes.
///
/// `armed_pause` is the pause per append that failpoints armed on purpose
/// add on average ([`crate::failpoint::expected_append_pause`]). It counts
/// three times: a shard's appends commit in batches one after another, so
/// an append also waits out the pause of the batch ahead of it, and a
/// client whose attempt outlasts its timeout sends it again to another node,
/// which forwards it into the same queue. Measured with 30 % of appends
/// parked for 2.5 s and 2 % for 8 s (910 ms armed per append), runs
/// acknowledged one append per 4.4 to 5.4 client-seconds; a CI run came
/// below the floor the single count gave (52 of 57).
pub(crate) fn ack_floor(clients: usize, duration: Duration, interval: Duration, armed_pause: Duration) -> u64 {
    // Integer milliseconds: a floor must not move with float rounding.
    let cycle_ms = (interval + 3 * armed_pause + ASSUMED_APPEND_LATENCY).as_millis();
    let floor = clients as u128 * duration.as_millis() * FLOOR_PERCENT / (100 * cycle_ms);
    u64::try_from(floor).unwrap_or(u64::MAX).max(1)
}

/// One reason a run failed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "failure", rename_all = "snake_case")]
pub enum Failure {
    /// The checker found this many violations (listed in the report).
    Violations {
        count: usize,
    },
    /// Nodes refused this many appends as invalid.
    Rejected {
        count: usize,
    },
    TooFewAcknowledged {
        acknowledged: u64,
        floor: u64,
    },
    /// Node processes that exited without a fault telling them to.
    NodesExited {
        nodes: Vec<String>,
    },
    FaultWithoutEffect {
        fault: usize,
        kind: String,
        node: Option<String>,
        why: String,
    },
    /// No acknowledged request was sent again, so dedup under failover went unchecked.
    DedupUnchecked {
        acknowledged: u64,
    },
    /// Dispatch clients ran and no dispatch was granted: target ownership
    /// went unjudged.
    NoDispatchGranted {
        clients: usize,
    },
    /// The run drove a service and it acknowledged no write: its table went
    /// unjudged. With what the service last answered, if anything.
    ServiceIdle {
        last_refusal: Option<String>,
    },
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Violations { count } => write!(f, "{count} violations of the checker's rules"),
            Failure::Rejected { count } => write!(f, "{count} appends rejected as invalid"),
            Failure::TooFewAcknowledged { acknowledged, floor } => {
                write!(
                    f,
                    "{acknowledged} acknowledged appends, fewer than the floor of {floor}: too little load to prove anything"
                )
            }
            Failure::NodesExited { nodes } => write!(f, "nodes exited on their own: {}", nodes.join("; ")),
            Failure::NoDispatchGranted { clients } => {
                write!(f, "{clients} dispatch clients ran and no dispatch was granted: target ownership went unjudged")
            }
            Failure::ServiceIdle { last_refusal } => {
                write!(f, "the service acknowledged no write: its table went unjudged (see its logs, service-*.log)")?;
                match last_refusal {
                    Some(said) => write!(f, "; its last answer: {said}"),
                    None => Ok(()),
                }
            }
            Failure::DedupUnchecked { acknowledged } => {
                write!(f, "none of {acknowledged} acknowledged requests was sent again: dedup under failover went unchecked")
            }
            Failure::FaultWithoutEffect { fault, kind, node, why } => {
                write!(
                    f,
                    "fault {fault} ({kind}{}) did not take effect: {why}",
                    node.as_ref().map(|n| format!(" of {n}")).unwrap_or_default()
                )
            }
        }
    }
}

/// What a run is judged on beyond the checker's violations.
#[derive(Clone, Copy)]
pub(crate) struct Outcome<'a> {
    pub violations: usize,
    pub rejected: usize,
    pub acknowledged: u64,
    /// Acknowledged requests the clients sent again to another node.
    pub resent: u64,
    pub floor: u64,
    /// What each node that exited on its own had last logged.
    pub exited: &'a [String],
    pub faults: &'a [FaultRecord],
    pub takeovers: &'a [Takeover],
    /// Dispatch clients that ran, and the dispatches they were granted.
    pub dispatch_clients: usize,
    pub dispatches_granted: u64,
    /// When each dispatch that failed open was sent (milliseconds since the
    /// run's start): a Redis fault must have made some fail open.
    pub fail_opens_ms: &'a [u64],
    /// Writes the service acknowledged, when the run drove one.
    pub service_acknowledged: Option<u64>,
    /// What the service answered last to a write it did not store.
    pub service_last_refusal: Option<&'a str>,
}

/// Every reason the run failed; empty when it passed.
pub(crate) fn judge(o: &Outcome<'_>) -> Vec<Failure> {
    let mut failures = Vec::new();
    if o.violations > 0 {
        failures.push(Failure::Violations { count: o.violations });
    }
    if o.rejected > 0 {
        failures.push(Failure::Rejected { count: o.rejected });
    }
    if o.acknowledged < o.floor {
        failures.push(Failure::TooFewAcknowledged { acknowledged: o.acknowledged, floor: o.floor });
    }
    if !o.exited.is_empty() {
        failures.push(Failure::NodesExited { nodes: o.exited.to_vec() });
    }
    if o.resent == 0 && o.acknowledged > 0 {
        failures.push(Failure::DedupUnchecked { acknowledged: o.acknowledged });
    }
    if o.service_acknowledged == Some(0) {
        failures.push(Failure::ServiceIdle { last_refusal: o.service_last_refusal.map(str::to_owned) });
    }
    if o.dispatch_clients > 0 && o.dispatches_granted == 0 {
        failures.push(Failure::NoDispatchGranted { clients: o.dispatch_clients });
    }
    for f in o.faults {
        let why = match &f.ineffective {
            Some(why) => Some(why.clone()),
            // A takeover over the bound still shows the fault took the
            // node's leases; the checker reports its slowness.
            None if f.kind.is_death() && f.held > 0 && !o.takeovers.iter().any(|t| t.fault == f.index) => {
                Some(format!("the node held {} shards and no takeover was measured", f.held))
            }
            // The dispatch clients call every few tens of milliseconds: a
            // Redis down for a second makes some fail open, or the Redis
            // fault went unjudged.
            None if f.kind == FaultKind::Redis
                && o.dispatch_clients > 0
                && !o.fail_opens_ms.iter().any(|&t| (f.started_ms..=f.ended_ms).contains(&t)) =>
            {
                Some("no dispatch failed open while Redis was down".to_string())
            }
            None => None,
        };
        if let Some(why) = why {
            failures.push(Failure::FaultWithoutEffect {
                fault: f.index,
                kind: f.kind.name().to_string(),
                node: f.node.clone(),
                why,
            });
        }
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::FaultKind;

    #[test]
    fn the_floor_follows_clients_length_and_pause() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        let cases = [
            // 3 clients × 100 s × 20/s × 0.2
            (3, s(100), ms(10), 1_200),
            (1, s(100), ms(10), 400),
            (3, s(200), ms(10), 2_400),
            // A slow client: 1 / (1 s + 40 ms) per second.
            (3, s(100), ms(1_000), 57),
            // Never zero, so a run that acknowledged nothing fails.
            (1, ms(1), ms(10), 1),
            (0, s(100), ms(10), 1),
        ];
        for (clients, duration, interval, want) in cases {
            assert_eq!(ack_floor(clients, duration, interval, Duration::ZERO), want, "{clients} × {duration:?} at {interval:?}");
        }
        // The control run of the planted-bug tests: 8 clients × 35 s, 910 ms
        // armed per append, counted three times: 8 × 35 / 2.78 s × 0.2.
        assert_eq!(ack_floor(8, s(35), ms(10), ms(910)), 20);
    }

    fn fault(index: usize, kind: FaultKind, held: usize, ineffective: Option<&str>) -> FaultRecord {
        FaultRecord {
            index,
            kind,
            node: Some("node-01".into()),
            started_ms: 0,
            ended_ms: 0,
            recovered_ms: 0,
            held,
            ineffective: ineffective.map(str::to_string),
            detail: String::new(),
        }
    }

    fn takeover(fault: usize) -> Takeover {
        Takeover { fault, node: "node-01".into(), shard: "s".into(), ms: 2_000 }
    }

    #[test]
    fn each_rule_fails_the_run_and_says_which() {
        let clean =
            [fault(0, FaultKind::Kill, 3, None), fault(1, FaultKind::Drain, 2, None), fault(2, FaultKind::Redis, 0, None)];
        let measured = [takeover(0)];
        let base = Outcome {
            violations: 0,
            rejected: 0,
            acknowledged: 5_000,
            resent: 300,
            floor: 1_200,
            exited: &[],
            faults: &clean,
            takeovers: &measured,
            dispatch_clients: 3,
            dispatches_granted: 2_000,
            fail_opens_ms: &[0],
            service_acknowledged: None,
            service_last_refusal: None,
        };
        let redis_later = [fault(2, FaultKind::Redis, 0, None)].map(|f| FaultRecord { started_ms: 10, ended_ms: 20, ..f });
        let exited = ["node-02: panicked".to_string()];
        let hung = [fault(0, FaultKind::Restart, 4, Some("SIGTERM hung; the node was killed after 60s"))];
        let undrained = [fault(0, FaultKind::Drain, 0, Some("Admin.Drain handed nothing over (the node held 0)"))];
        let kill = [fault(0, FaultKind::Kill, 3, None)];
        let idle_kill = [fault(0, FaultKind::Pause, 0, None)];
        let slow_only = [Takeover { ms: 9_000, ..takeover(0) }];

        let cases: Vec<(&str, Outcome<'_>, Vec<&str>)> = vec![
            ("clean", Outcome { ..base }, vec![]),
            ("violations", Outcome { violations: 2, ..base }, vec!["violations"]),
            ("a service that stored nothing", Outcome { service_acknowledged: Some(0), ..base }, vec!["service_idle"]),
            (
                "a service that refused everything",
                Outcome { service_acknowledged: Some(0), service_last_refusal: Some("503 lease lost"), ..base },
                vec!["service_idle"],
            ),
            ("a service that stored", Outcome { service_acknowledged: Some(1), ..base }, vec![]),
            ("rejected", Outcome { rejected: 1, ..base }, vec!["rejected"]),
            ("below the floor", Outcome { acknowledged: 1_199, ..base }, vec!["too_few_acknowledged"]),
            ("at the floor", Outcome { acknowledged: 1_200, ..base }, vec![]),
            ("nothing acknowledged", Outcome { acknowledged: 0, floor: 1, ..base }, vec!["too_few_acknowledged"]),
            ("a node exited on its own", Outcome { exited: &exited, ..base }, vec!["nodes_exited"]),
            ("a SIGTERM hung", Outcome { faults: &hung, ..base }, vec!["fault_without_effect"]),
            ("a drain drained nothing", Outcome { faults: &undrained, ..base }, vec!["fault_without_effect"]),
            (
                "a kill of a holder with no takeover",
                Outcome { faults: &kill, takeovers: &[], ..base },
                vec!["fault_without_effect"],
            ),
            ("a slow takeover is still an effect", Outcome { faults: &kill, takeovers: &slow_only, ..base }, vec![]),
            ("a pause of a node holding nothing", Outcome { faults: &idle_kill, takeovers: &[], ..base }, vec![]),
            ("nothing sent again", Outcome { resent: 0, ..base }, vec!["dedup_unchecked"]),
            ("no dispatch granted", Outcome { dispatches_granted: 0, ..base }, vec!["no_dispatch_granted"]),
            (
                "no dispatch clients (and none granted)",
                Outcome { dispatch_clients: 0, dispatches_granted: 0, fail_opens_ms: &[], ..base },
                vec![],
            ),
            ("a Redis fault no dispatch failed open in", Outcome { faults: &redis_later, ..base }, vec!["fault_without_effect"]),
            (
                "a Redis fault some dispatch failed open in",
                Outcome { faults: &redis_later, fail_opens_ms: &[5, 15], ..base },
                vec![],
            ),
            (
                "all at once",
                Outcome { violations: 1, acknowledged: 0, exited: &exited, faults: &hung, ..base },
                vec!["violations", "too_few_acknowledged", "nodes_exited", "fault_without_effect"],
            ),
        ];
        for (name, outcome, want) in cases {
            let got: Vec<String> = judge(&outcome)
                .iter()
                .map(|f| serde_json::to_value(f).unwrap()["failure"].as_str().unwrap().to_string())
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn a_failure_says_which_fault_and_why() {
        let faults = [fault(4, FaultKind::Kill, 3, None)];
        let o = Outcome {
            violations: 0,
            rejected: 0,
            acknowledged: 10,
            resent: 1,
            floor: 1,
            exited: &[],
            faults: &faults,
            takeovers: &[],
            dispatch_clients: 3,
            dispatches_granted: 10,
            fail_opens_ms: &[],
            service_acknowledged: None,
            service_last_refusal: None,
        };
        let text = judge(&o)[0].to_string();
        assert_eq!(text, "fault 4 (kill of node-01) did not take effect: the node held 3 shards and no takeover was measured");
    }

    #[test]
    fn an_idle_service_is_reported_with_its_last_answer() {
        let idle =
            |last_refusal: Option<&str>| Failure::ServiceIdle { last_refusal: last_refusal.map(str::to_owned) }.to_string();
        assert_eq!(
            idle(Some("503 shard journal_00_0f has no holder now")),
            "the service acknowledged no write: its table went unjudged (see its logs, service-*.log); its last answer: \
             503 shard journal_00_0f has no holder now"
        );
        assert_eq!(idle(None), "the service acknowledged no write: its table went unjudged (see its logs, service-*.log)");
    }
}
