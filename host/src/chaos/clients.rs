//! Journal clients that behave like real ones: each appends continuously
//! with a fresh request id per append through the chitin-client crate, one
//! node per call, moving on to the next node when one fails: after an
//! unknown outcome it retries the same request id until one acknowledges
//! (or the run's grace ends); after a "not applied" it gives the id up,
//! unless an earlier outcome of it was unknown.
//! Every acknowledgement is logged with what the node said it committed.

use std::time::Duration;

use chitin_client::{AppendOutcome, Client, Error, Nodes, Options};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// One acknowledged append, as the client saw it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Ack {
    pub stream: String,
    pub request_id: String,
    pub sequence: i64,
    pub epoch: i64,
    pub shard: String,
    /// Milliseconds since the run's start: the first attempt and the ack.
    pub first_try_ms: u64,
    pub acked_ms: u64,
    /// Nodes asked before one acknowledged.
    pub attempts: u32,
    /// The holder that committed it, by name (for a repeated request: the
    /// holder that found it stored).
    #[serde(default)]
    pub holder: String,
    /// An acknowledged request sent again (see [`RESEND_EVERY`]).
    #[serde(default)]
    pub resent: bool,
}

/// What a client did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ClientLog {
    pub acks: Vec<Ack>,
    /// Appends still unacknowledged when the run stopped (they may or may
    /// not have committed; neither is a violation).
    pub unacknowledged: Vec<String>,
    /// Appends a node refused as invalid: a bug in the client or the node.
    pub rejected: Vec<String>,
    /// Acknowledged requests sent again to another node, with the answer
    /// (see [`RESEND_EVERY`]); judged like first acknowledgements.
    #[serde(default)]
    pub resends: Vec<Ack>,
    /// Requests answered "not applied" and given up: none may be stored.
    #[serde(default)]
    pub abandoned: Vec<Abandoned>,
}

/// A request a node answered "not applied", which the client then gave up.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Abandoned {
    pub stream: String,
    pub request_id: String,
}

pub(crate) struct ClientPlan {
    pub id: usize,
    pub streams: Vec<String>,
    /// gRPC addresses of every node, in the client's preference order.
    pub nodes: Vec<String>,
    /// Pause between appends.
    pub interval: Duration,
    /// Longest one attempt may take (a paused node never answers).
    pub attempt_timeout: Duration,
    /// How long an append may keep retrying after the run says stop.
    pub grace: Duration,
    pub start: std::time::Instant,
}

/// Every this many appends, a client sends an acknowledged request again
/// to another node, as a client that lost the answer would: it must get
/// the same sequence back (dedup under failover).
pub(crate) const RESEND_EVERY: u64 = 16;

/// Whether a client sends its `n`-th append (counted from 1), just
/// acknowledged, again: its first acknowledged one always, so that a slow
/// run (failpoints, few appends) still checks dedup under failover, then
/// one in [`RESEND_EVERY`].
fn resend(n: u64, resent_before: bool) -> bool {
    !resent_before || n % RESEND_EVERY == 5
}

/// Runs until `stop` turns true, then finishes (or gives up on) the append
/// in flight within the grace period.
pub(crate) async fn run(plan: ClientPlan, mut stop: watch::Receiver<bool>) -> ClientLog {
    let client = match journal_client(&plan) {
        Ok(c) => c,
        Err(e) => {
            return ClientLog { rejected: vec![format!("client {}: {e}", plan.id)], ..ClientLog::default() };
        }
    };
    let client = Runner { client, plan: &plan };
    let mut log = ClientLog::default();
    let mut n = 0u64;
    let mut resent = false;
    while !*stop.borrow() {
        let stream = plan.streams[(n as usize) % plan.streams.len()].clone();
        let request_id = format!("c{}-{n}", plan.id);
        n += 1;
        match client.until_acked(&stream, &request_id, &stop).await {
            Answer::Acked(ack) => log.acks.push(ack),
            Answer::Rejected(why) => log.rejected.push(format!("{request_id}: {why}")),
            Answer::GaveUp => log.unacknowledged.push(request_id.clone()),
            Answer::Abandoned => log.abandoned.push(Abandoned { stream: stream.clone(), request_id: request_id.clone() }),
        }
        if resend(n, resent) && log.acks.last().is_some_and(|a| a.request_id == request_id) {
            resent = true;
            client.client.move_on();
            if let Answer::Acked(again) = client.until_acked(&stream, &request_id, &stop).await {
                log.resends.push(Ack { resent: true, ..again });
            }
        }
        let pause = tokio::time::sleep(plan.interval);
        tokio::select! {
            _ = pause => {}
            _ = stop.changed() => {}
        }
    }
    log
}

/// How one request ended.
enum Answer {
    Acked(Ack),
    Rejected(String),
    /// Still unacknowledged when the grace after `stop` ran out.
    GaveUp,
    /// Answered "not applied": the client drops the id (its next append
    /// has a new one), which must then never be stored.
    Abandoned,
}

/// The client of a plan: no routing (each client stays on its node until
/// it fails, as the runs have always measured), one attempt per call (so
/// that every "not applied" answer is one node's, and is judged), and the
/// old fixed pause between attempts.
fn journal_client(plan: &ClientPlan) -> Result<Client, Error> {
    let nodes = Nodes::new(plan.nodes.iter().cloned())
        .map_err(|e| Error::Refused { code: tonic::Code::InvalidArgument, message: e.to_string() })?;
    let options = Options {
        attempts: 1,
        attempt_timeout: plan.attempt_timeout,
        backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(100),
        connect_timeout: Duration::from_secs(1),
        route: false,
        ..Options::default()
    };
    Client::builder(nodes).options(options).start_at(plan.id % plan.nodes.len()).build()
}

struct Runner<'a> {
    client: Client,
    plan: &'a ClientPlan,
}

impl Runner<'_> {
    fn ms(&self) -> u64 {
        self.plan.start.elapsed().as_millis() as u64
    }

    /// Sends one request until a node acknowledges it: each call is a round
    /// of the nodes with the same request id.
    async fn until_acked(&self, stream: &str, request_id: &str, stop: &watch::Receiver<bool>) -> Answer {
        let first_try_ms = self.ms();
        let mut attempts = 0u32;
        let mut maybe_applied = false;
        let mut stop_seen: Option<std::time::Instant> = None;
        loop {
            if *stop.borrow() && stop_seen.is_none() {
                stop_seen = Some(std::time::Instant::now());
            }
            if stop_seen.is_some_and(|t| t.elapsed() > self.plan.grace) {
                return Answer::GaveUp;
            }
            match self.client.append_with_id(stream, request_id, request_id.as_bytes()).await {
                Ok(AppendOutcome::Applied(a)) => {
                    return Answer::Acked(Ack {
                        stream: stream.to_owned(),
                        request_id: request_id.to_owned(),
                        sequence: a.sequence as i64,
                        epoch: a.epoch as i64,
                        shard: a.shard,
                        holder: a.holder,
                        resent: false,
                        first_try_ms,
                        acked_ms: self.ms(),
                        attempts: attempts + a.attempts,
                    });
                }
                // Certainly not committed by any attempt: a client may give
                // the id up (its next append has a new one), unless an
                // earlier round's outcome was unknown (that one may have).
                Ok(AppendOutcome::NotApplied { .. }) if !maybe_applied => {
                    self.client.move_on();
                    return Answer::Abandoned;
                }
                Ok(AppendOutcome::NotApplied { .. }) => {
                    attempts += 1;
                    self.client.move_on();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                // May have committed: the same request id again applies at most once.
                Ok(AppendOutcome::Unknown { attempts: n, .. }) => {
                    attempts += n;
                    maybe_applied = true;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Answer::Rejected(e.to_string()),
            }
        }
    }
}

/// Every client's log, merged.
pub(crate) fn merge(logs: Vec<ClientLog>) -> ClientLog {
    let mut all = ClientLog::default();
    for l in logs {
        all.acks.extend(l.acks);
        all.unacknowledged.extend(l.unacknowledged);
        all.rejected.extend(l.rejected);
        all.resends.extend(l.resends);
        all.abandoned.extend(l.abandoned);
    }
    all
}

/// Each client's streams (the checker reads them all).
pub(crate) fn streams(clients: usize, per_client: usize) -> Vec<Vec<String>> {
    (0..clients).map(|c| (0..per_client).map(|k| format!("chaos-{c}-{k}")).collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_acknowledged_append_is_sent_again_then_one_in_sixteen() {
        for (n, resent_before, expected) in [
            // Nothing sent again yet: whichever append is the first
            // acknowledged one goes again, however few the run makes.
            (1, false, true),
            (2, false, true),
            (40, false, true),
            // Then the steady rate.
            (2, true, false),
            (5, true, true),
            (21, true, true),
            (16, true, false),
            (37, true, true),
        ] {
            assert_eq!(resend(n, resent_before), expected, "append {n}, resent before: {resent_before}");
        }
    }
}
