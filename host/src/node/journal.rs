//! The reference journal: a real workload that proves the lease guarantees.
//!
//! `append(stream, request_id, payload)` is accepted by any node. The
//! stream's key ([`super::shard_map::stream_key`]) picks a shard; the holder
//! commits under the fence, any other node forwards to the holder once.
//! While a shard has no holder (a takeover or handoff in progress) the
//! request waits, up to the lease TTL plus a renew interval and a second.
//!
//! Outcomes are explicit: `NotApplied` means certainly not committed (safe
//! to retry anywhere); `OutcomeUnknown` means a forwarded request may or may
//! not have committed: the node never resends it, the client may retry with
//! the same `request_id`, which applies at most once.

use std::time::{Duration, Instant};

use crate::api::proto;
use crate::lease::{JournalEntry, LeaseError};

use super::Node;

/// A committed (or earlier committed, for a repeated request id) append.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acknowledged {
    pub sequence: i64,
    pub epoch: i64,
    pub shard: String,
    pub holder: String,
}

/// Why an append was not acknowledged.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error("invalid append: {0}")]
    Invalid(String),
    #[error("not applied: {0}; retry (with the same request_id)")]
    NotApplied(String),
    #[error("outcome unknown: {0}; retry with the same request_id, which applies at most once")]
    OutcomeUnknown(String),
}

/// Longest a stream name, request id and payload may be.
pub const MAX_STREAM: usize = 256;
pub const MAX_REQUEST_ID: usize = 128;
pub const MAX_PAYLOAD: usize = 1 << 20;

fn validate(stream: &str, request_id: &str, payload: &[u8]) -> Result<(), AppendError> {
    let bad = |m: String| Err(AppendError::Invalid(m));
    if stream.is_empty() || stream.len() > MAX_STREAM {
        return bad(format!("stream must be 1..={MAX_STREAM} bytes, got {}", stream.len()));
    }
    if request_id.is_empty() || request_id.len() > MAX_REQUEST_ID {
        return bad(format!("request_id must be 1..={MAX_REQUEST_ID} bytes, got {}", request_id.len()));
    }
    if payload.len() > MAX_PAYLOAD {
        return bad(format!("payload must be at most {MAX_PAYLOAD} bytes, got {}", payload.len()));
    }
    Ok(())
}

impl Node {
    /// How long an append waits for a shard to get a holder.
    fn takeover_budget(&self) -> Duration {
        self.settings.lease_ttl() + self.settings.renew_interval() + Duration::from_secs(1)
    }

    /// Appends to `stream`; see the module docs for the outcomes.
    pub async fn append(
        &self,
        stream: &str,
        request_id: &str,
        payload: &[u8],
        forwarded: bool,
    ) -> Result<Acknowledged, AppendError> {
        validate(stream, request_id, payload)?;
        let shard = self.topology().map.route_stream(stream).map_err(|e| AppendError::Invalid(e.to_string()))?.id.clone();
        let deadline = Instant::now() + self.takeover_budget();
        loop {
            if let Some(permit) = self.leases.permit(&shard).await {
                match self.store.append_fenced(&permit.token, stream, request_id, payload).await {
                    Ok(a) => {
                        self.metrics.fenced_commits.inc();
                        return Ok(Acknowledged {
                            sequence: a.seq,
                            epoch: a.epoch,
                            shard,
                            holder: self.name.clone(),
                        });
                    }
                    Err(LeaseError::LeaseLost { epoch, .. }) => {
                        self.metrics.fenced_aborts.inc();
                        drop(permit);
                        self.leases.forget(&shard, Some(epoch));
                    }
                    // Any other database failure: the transaction did not
                    // commit (or the driver cannot tell): report it as such.
                    Err(LeaseError::Db(e)) => return Err(AppendError::OutcomeUnknown(format!("database: {e}"))),
                    Err(e) => return Err(AppendError::NotApplied(e.to_string())),
                }
            } else if let Some(done) = self.route_elsewhere(&shard, stream, request_id, payload, forwarded).await? {
                return Ok(done);
            }
            if Instant::now() >= deadline {
                return Err(AppendError::NotApplied(format!(
                    "shard {shard} had no reachable holder for {:?}",
                    self.takeover_budget()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Finds the shard's holder in the database: adopts the lease if it is
    /// this node's, forwards once if it is another's. `None`: try again.
    async fn route_elsewhere(
        &self,
        shard: &str,
        stream: &str,
        request_id: &str,
        payload: &[u8],
        forwarded: bool,
    ) -> Result<Option<Acknowledged>, AppendError> {
        let rows = self.store.holders().await.map_err(|e| AppendError::NotApplied(e.to_string()))?;
        let Some(row) = rows.into_iter().find(|r| r.shard == shard && r.live) else {
            return Ok(None);
        };
        let holder = row.holder.expect("a live lease has a holder");
        if holder == self.uuid {
            if self.is_ready() {
                if let Err(e) = self.leases.adopt(self.lease_of(&row)).await {
                    tracing::debug!(%shard, error = %e, "cannot adopt lease");
                }
            }
            return Ok(None);
        }
        if forwarded {
            // One hop only: the forwarder thought this node held the shard.
            return Ok(None);
        }
        let address = match self.registration(holder) {
            Some(r) => r.address,
            None => match self.refresh_registry().await.ok().and_then(|_| self.registration(holder)) {
                Some(r) => r.address,
                None => return Ok(None),
            },
        };
        self.forward(&address, stream, request_id, payload).await
    }

    async fn forward(
        &self,
        address: &str,
        stream: &str,
        request_id: &str,
        payload: &[u8],
    ) -> Result<Option<Acknowledged>, AppendError> {
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
            .map_err(|e| AppendError::NotApplied(format!("bad holder address {address}: {e}")))?
            .connect_timeout(Duration::from_secs(1))
            .timeout(self.takeover_budget() + Duration::from_secs(2));
        // A failed connect sent nothing: look for the holder again.
        let Ok(channel) = endpoint.connect().await else {
            return Ok(None);
        };
        self.metrics.forwards.inc();
        let mut client = proto::journal_client::JournalClient::new(channel);
        let request = proto::AppendRequest {
            stream: stream.to_string(),
            request_id: request_id.to_string(),
            payload: payload.to_vec(),
            forwarded: true,
        };
        match client.append(request).await {
            Ok(r) => {
                let r = r.into_inner();
                Ok(Some(Acknowledged {
                    sequence: r.sequence as i64,
                    epoch: r.epoch as i64,
                    shard: r.shard,
                    holder: r.holder,
                }))
            }
            Err(status) if status.code() == tonic::Code::Unavailable && status.message().starts_with("not applied") => {
                Ok(None)
            }
            Err(status) if status.code() == tonic::Code::InvalidArgument => {
                Err(AppendError::Invalid(status.message().to_string()))
            }
            Err(status) => {
                self.metrics.outcome_unknown.inc();
                Err(AppendError::OutcomeUnknown(format!(
                    "forwarded to {address}: {}",
                    status.message()
                )))
            }
        }
    }

    /// Entries of `stream` from sequence `from`, in order.
    pub async fn read(&self, stream: &str, from: i64, limit: u32) -> Result<Vec<JournalEntry>, LeaseError> {
        self.store.read(stream, from, limit.clamp(1, 10_000)).await
    }
}
