//! Dispatch clients: one per node of the run, each acting for its node
//! (the node claims for its own instance id), calling `Coordination.Dispatch`
//! round a small set of targets that every client shares, so that the
//! targets' affinity claims are contested all run long and the Redis fault
//! has something to break. Every granted dispatch is logged with who was
//! granted it, when, and how (claimed, already ours, failed open with the
//! node's fail-open window); [`super::claims`] judges them.
//!
//! They are light beside the journal clients: one call per
//! [`DISPATCH_INTERVAL`] per client, one Redis script per call.

use std::time::{Duration, Instant};

use chitin_client::{Client, Error, Nodes, Options};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::coord::Dispatch;
use crate::proto::{self, coordination_client::CoordinationClient};

/// Targets the dispatch clients contend for.
pub(crate) const TARGETS: usize = 8;

/// Pause of each dispatch client between calls.
pub(crate) const DISPATCH_INTERVAL: Duration = Duration::from_millis(40);

/// Longest one call may take (a paused node never answers): past a
/// dispatch's own worst case, three claim attempts against a hung Redis at
/// a second each before it fails open.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// How a dispatch went ahead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Granted {
    Claimed,
    AlreadyOurs,
    FailedOpen,
}

impl Granted {
    fn parse(outcome: &str) -> Option<Granted> {
        Dispatch::from_wire(outcome).map(|d| match d {
            Dispatch::Claimed => Granted::Claimed,
            Dispatch::AlreadyOurs => Granted::AlreadyOurs,
            Dispatch::FailedOpen => Granted::FailedOpen,
        })
    }
}

/// A node's fail-open window as its answer gave it, in milliseconds since
/// the run's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    pub start_ms: u64,
    pub end_ms: u64,
}

/// One granted dispatch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub target: String,
    /// The node the client acts for, by name.
    pub node: String,
    /// The instance id the node answered with: the claim's owner.
    pub instance: String,
    pub outcome: Granted,
    /// Milliseconds since the run's start: the call was sent, and answered.
    pub sent_ms: u64,
    pub answered_ms: u64,
    /// The node's fail-open window, when it failed open (`None` also for a
    /// fail-open answer that carried none).
    #[serde(default)]
    pub window: Option<Window>,
}

/// What the dispatch clients did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DispatchLog {
    /// Dispatch clients that ran.
    pub clients: usize,
    pub granted: Vec<Grant>,
    /// Calls declined because another instance owns the target.
    pub declined: u64,
    /// Calls that failed or went unanswered (a node down, paused, not ready).
    pub failed: u64,
}

impl DispatchLog {
    /// Every client's log, merged.
    pub fn merge(logs: Vec<DispatchLog>) -> DispatchLog {
        let mut all = DispatchLog::default();
        for l in logs {
            all.clients += l.clients;
            all.granted.extend(l.granted);
            all.declined += l.declined;
            all.failed += l.failed;
        }
        all.granted.sort_by_key(|g| g.sent_ms);
        all
    }
}

/// One dispatch client.
pub(crate) struct DispatchPlan {
    pub id: usize,
    /// The node it acts for: name and gRPC address.
    pub node: String,
    pub address: String,
    pub start: Instant,
    /// This process's clock at `start`, in Unix milliseconds (the nodes'
    /// windows are on the Unix clock of the same machine).
    pub start_unix_ms: u64,
}

/// The targets, the same for every client.
pub(crate) fn targets() -> Vec<String> {
    (0..TARGETS).map(|k| format!("chaos-target-{k}")).collect()
}

/// Runs until `stop` turns true.
pub(crate) async fn run(plan: DispatchPlan, mut stop: watch::Receiver<bool>) -> DispatchLog {
    let mut log = DispatchLog { clients: 1, ..DispatchLog::default() };
    let options =
        Options { attempts: 1, attempt_timeout: CALL_TIMEOUT, connect_timeout: Duration::from_secs(1), ..Options::default() };
    let client = match Nodes::one(plan.address.clone()) {
        Ok(nodes) => Client::builder(nodes).options(options).build().expect("no token"),
        Err(e) => {
            tracing::warn!(node = %plan.node, error = %e, "dispatch client cannot start");
            return log;
        }
    };
    let targets = targets();
    let ms = |at: Instant| at.duration_since(plan.start).as_millis() as u64;
    let mut n = plan.id;
    while !*stop.borrow() {
        let target = &targets[n % targets.len()];
        n += 1;
        let sent = Instant::now();
        let call = client.any_node(|conn| {
            let request = proto::DispatchRequest { target_id: target.clone(), command: Vec::new() };
            async move { CoordinationClient::new(conn).dispatch(request).await.map(tonic::Response::into_inner) }
        });
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(r)) => match Granted::parse(&r.outcome) {
                Some(outcome) => log.granted.push(Grant {
                    target: target.clone(),
                    node: plan.node.clone(),
                    instance: r.instance_id,
                    outcome,
                    sent_ms: ms(sent),
                    answered_ms: ms(Instant::now()),
                    window: r.fail_open_window.map(|w| Window {
                        start_ms: w.start_unix_ms.saturating_sub(plan.start_unix_ms),
                        end_ms: w.end_unix_ms.saturating_sub(plan.start_unix_ms),
                    }),
                }),
                None => log.failed += 1,
            },
            Ok(Err(Error::Refused { code: tonic::Code::FailedPrecondition, .. })) => log.declined += 1,
            Ok(Err(_)) | Err(_) => log.failed += 1,
        }
        tokio::select! {
            _ = tokio::time::sleep(DISPATCH_INTERVAL) => {}
            _ = stop.changed() => {}
        }
    }
    log
}
