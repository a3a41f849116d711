//! Journal clients that behave like real ones: each appends continuously
//! with a fresh request id per append; when its node fails it moves on to
//! the next node and retries the same request id until one acknowledges.
//! Every acknowledgement is logged with what the node said it committed.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tonic::transport::{Channel, Endpoint};

use crate::proto::{self, journal_client::JournalClient};

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
}

pub struct ClientPlan {
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

fn channel(address: &str, timeout: Duration) -> Option<Channel> {
    Endpoint::from_shared(format!("http://{address}"))
        .ok()
        .map(|e| e.connect_timeout(Duration::from_secs(1)).timeout(timeout).connect_lazy())
}

/// Runs until `stop` turns true, then finishes (or gives up on) the append
/// in flight within the grace period.
pub async fn run(plan: ClientPlan, mut stop: watch::Receiver<bool>) -> ClientLog {
    let channels: Vec<Option<Channel>> = plan.nodes.iter().map(|a| channel(a, plan.attempt_timeout)).collect();
    let ms = |plan: &ClientPlan| plan.start.elapsed().as_millis() as u64;
    let mut log = ClientLog::default();
    let mut node = plan.id % plan.nodes.len();
    let mut n = 0u64;
    while !*stop.borrow() {
        let stream = plan.streams[(n as usize) % plan.streams.len()].clone();
        let request_id = format!("c{}-{n}", plan.id);
        n += 1;
        let first_try_ms = ms(&plan);
        let mut attempts = 0u32;
        let mut stop_seen: Option<std::time::Instant> = None;
        loop {
            if *stop.borrow() && stop_seen.is_none() {
                stop_seen = Some(std::time::Instant::now());
            }
            if stop_seen.is_some_and(|t| t.elapsed() > plan.grace) {
                log.unacknowledged.push(request_id);
                break;
            }
            attempts += 1;
            let request = proto::AppendRequest {
                stream: stream.clone(),
                request_id: request_id.clone(),
                payload: request_id.as_bytes().to_vec(),
                forwarded: false,
            };
            let answer = match &channels[node] {
                Some(ch) => JournalClient::new(ch.clone()).append(request).await,
                None => Err(tonic::Status::unavailable("bad address")),
            };
            match answer {
                Ok(r) => {
                    let r = r.into_inner();
                    log.acks.push(Ack {
                        stream: stream.clone(),
                        request_id: request_id.clone(),
                        sequence: r.sequence as i64,
                        epoch: r.epoch as i64,
                        shard: r.shard,
                        first_try_ms,
                        acked_ms: ms(&plan),
                        attempts,
                    });
                    break;
                }
                Err(s) if s.code() == tonic::Code::InvalidArgument => {
                    log.rejected.push(format!("{request_id}: {}", s.message()));
                    break;
                }
                // Not applied, outcome unknown, unreachable, timed out: the
                // same request id at the next node applies at most once.
                Err(_) => {
                    node = (node + 1) % plan.nodes.len();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
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

/// Every client's log, merged.
pub fn merge(logs: Vec<ClientLog>) -> ClientLog {
    let mut all = ClientLog::default();
    for l in logs {
        all.acks.extend(l.acks);
        all.unacknowledged.extend(l.unacknowledged);
        all.rejected.extend(l.rejected);
    }
    all
}

/// Each client's streams (the checker reads them all).
pub fn streams(clients: usize, per_client: usize) -> Vec<Vec<String>> {
    (0..clients).map(|c| (0..per_client).map(|k| format!("chaos-{c}-{k}")).collect()).collect()
}
