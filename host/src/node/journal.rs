//! The reference journal: a real workload that proves the lease guarantees.
//!
//! `append(stream, request_id, payload)` is accepted by any node. The
//! stream's key ([`super::shard_map::stream_key`]) picks a shard; the holder
//! commits under the fence (concurrent appends to one shard in one
//! transaction: [`super::group_commit`]), any other node forwards to the holder (see
//! [`super::plan::append_step`] for the choice). A forwarded request is never
//! forwarded again and never waits at the node it reached: a node that no
//! longer holds the shard answers at once with a typed not-applied that
//! names the holder, and the forwarding node follows it. While a shard has
//! no holder (a takeover in progress) the request waits at the node the
//! client reached, for a change of ownership this node learns of (its own
//! lease table, a peer's notice, a round's fresh read), bounded by the lease
//! TTL plus a renew interval and a second. Nothing on this path sleeps and
//! polls.
//!
//! Outcomes are explicit: `NotApplied` means certainly not committed (safe
//! to retry anywhere); `OutcomeUnknown` means a forwarded request may or may
//! not have committed: the node never resends it, the client may retry with
//! the same `request_id`, which applies at most once.

use std::time::{Duration, Instant};

use tracing::Instrument as _;

use crate::lease::{JournalEntry, LeaseError, NewEntry};
use crate::proto::{self, outcome};
use crate::telemetry::trace_span;

use super::Node;
use super::peers::never_sent;
use super::plan::{AppendFacts, AppendStep, append_step, forward_timeout};
use super::shard_map::stream_key;

/// A committed (or earlier committed, for a repeated request id) append.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acknowledged {
    pub sequence: i64,
    pub epoch: i64,
    pub shard: String,
    pub holder: String,
}

/// What a read answers.
#[derive(Clone, Debug)]
pub struct ReadAnswer {
    pub entries: Vec<JournalEntry>,
    /// The byte budget stopped it before `limit` entries.
    pub truncated: bool,
}

/// A shard's holder as a not-applied answer names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderHint {
    pub name: String,
    pub address: String,
}

/// Why an append was not acknowledged.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error("invalid append: {0}")]
    Invalid(String),
    #[error("not applied: {reason}{}; retry (with the same request_id)", holder_text(.holder))]
    NotApplied { reason: String, holder: Option<HolderHint> },
    #[error("outcome unknown: {0}; retry with the same request_id, which applies at most once")]
    OutcomeUnknown(String),
    /// The request id was applied before with another payload: refused, so
    /// that a reused id never acknowledges a payload it did not store.
    #[error("{0}")]
    Reused(String),
}

fn holder_text(holder: &Option<HolderHint>) -> String {
    holder.as_ref().map(|h| format!("; the holder is {} at {}", h.name, h.address)).unwrap_or_default()
}

impl AppendError {
    /// The outcome label of this error in the append and forward histograms.
    pub fn outcome(&self) -> &'static str {
        match self {
            AppendError::Invalid(_) => "invalid",
            AppendError::NotApplied { .. } => "not_applied",
            AppendError::OutcomeUnknown(_) => "unknown",
            AppendError::Reused(_) => "reused",
        }
    }

    /// Certainly not applied, with no holder to name.
    pub fn not_applied(reason: impl Into<String>) -> AppendError {
        AppendError::NotApplied { reason: reason.into(), holder: None }
    }
}

/// Longest a stream name, request id and payload may be. 255 bytes is the
/// strictest dialect's key column (MySQL `VARCHAR(255)`).
pub const MAX_STREAM: usize = 255;
pub const MAX_REQUEST_ID: usize = 128;
pub const MAX_PAYLOAD: usize = 1 << 20;
/// The payload bytes one read answers at most (the first entry always
/// comes, so an answer stays under the clients' 4 MiB decoding limit).
pub const MAX_READ_BYTES: usize = 2 << 20;

/// A stream name or request id as every dialect stores and compares it:
/// 1..=`max` bytes, no NUL (PostgreSQL text refuses it), and no trailing
/// space (MySQL's and MariaDB's `utf8mb4_bin` compare with PAD SPACE, so
/// `r` and `r ` would be one key there while they are two everywhere else:
/// a second payload acknowledged and never stored). Checked before the
/// database, so a bad name is refused as invalid, never answered "outcome
/// unknown".
pub fn check_name(what: &str, value: &str, max: usize) -> Result<(), String> {
    if value.is_empty() || value.len() > max {
        return Err(format!("{what} must be 1..={max} bytes, got {}", value.len()));
    }
    if let Some(at) = value.bytes().position(|b| b == 0) {
        return Err(format!("{what} must not contain a NUL byte (found at byte {at})"));
    }
    if value.ends_with(' ') {
        return Err(format!(
            "{what} must not end with a space ({value:?}): MySQL and MariaDB compare keys without trailing spaces; \
             trim it, or end the name with another character"
        ));
    }
    Ok(())
}

fn validate(stream: &str, request_id: &str, payload: &[u8]) -> Result<(), AppendError> {
    let bad = |m: String| Err(AppendError::Invalid(m));
    check_name("stream", stream, MAX_STREAM).map_err(AppendError::Invalid)?;
    check_name("request_id", request_id, MAX_REQUEST_ID).map_err(AppendError::Invalid)?;
    if payload.len() > MAX_PAYLOAD {
        return bad(format!("payload must be at most {MAX_PAYLOAD} bytes, got {}", payload.len()));
    }
    Ok(())
}

/// A forward certainly not applied where it went, with the holder that
/// node named, if any.
type Bounced = Option<HolderHint>;

/// The longest an append that found no usable holder waits for news before
/// it reads the lease row again. News usually comes first (a lease of this
/// node changed, a peer's notice), but not always: a bounce that names no
/// successor during a handover between two peers is followed by a notice to
/// those two only, and a stopping node takes no more notices, so an append
/// it is still serving would otherwise wait out its whole budget for a
/// holder that was there after a few milliseconds.
const RECHECK: Duration = Duration::from_millis(100);

impl Node {
    /// How long an append waits for a shard to get a holder.
    pub fn takeover_budget(&self) -> Duration {
        self.settings.lease_ttl() + self.settings.renew_interval() + Duration::from_secs(1)
    }

    /// Appends to `stream`; see the module docs for the outcomes. Timed
    /// into `chitin_append_duration_seconds` by outcome.
    pub async fn append(
        &self,
        stream: &str,
        request_id: &str,
        payload: &[u8],
        forwarded: bool,
    ) -> Result<Acknowledged, AppendError> {
        let started = Instant::now();
        let span = trace_span!("append", stream, forwarded);
        let result = self.append_untimed(stream, request_id, payload, forwarded).instrument(span).await;
        self.metrics.append_seconds.observe(result.as_ref().map_or_else(AppendError::outcome, |_| "applied"), started);
        result
    }

    async fn append_untimed(
        &self,
        stream: &str,
        request_id: &str,
        payload: &[u8],
        forwarded: bool,
    ) -> Result<Acknowledged, AppendError> {
        validate(stream, request_id, payload)?;
        let deadline = Instant::now() + self.takeover_budget();
        let mut changes = self.leases.changes();
        // Set once the routed shard turns out retired by a split this
        // node's config has not finished yet: its child takes the key.
        let mut moved_to_child: Option<String> = None;
        loop {
            changes.borrow_and_update();
            if self.is_fatal() {
                return Err(AppendError::not_applied(
                    "this node's registration was marked down and it is stopping; send the request to another node",
                ));
            }
            let shard = match &moved_to_child {
                Some(child) => child.clone(),
                None => self.topology().map.route_stream(stream).map_err(|e| AppendError::Invalid(e.to_string()))?.id.clone(),
            };
            if let Some(permit) = self.leases.permit(&shard).await {
                let entry = NewEntry { stream: stream.to_owned(), request_id: request_id.to_owned(), payload: payload.to_vec() };
                match self.group_commit.append(&self.store, &permit.token, entry).await {
                    Ok(a) => {
                        // Committed: a handoff waiting for this write goes on.
                        drop(permit);
                        crate::failpoint::hit("append.after_commit").await;
                        self.metrics.fenced_commits.inc();
                        if let Some(s) = self.topology().map.shard(&shard) {
                            self.load.record(&shard, s.lower, s.upper, super::shard_map::stream_key(stream), payload.len());
                        }
                        if !a.fresh {
                            self.same_payload(stream, request_id, payload, a.seq).await?;
                        }
                        return Ok(Acknowledged { sequence: a.seq, epoch: a.epoch, shard, holder: self.name.clone() });
                    }
                    Err(LeaseError::LeaseLost { epoch, .. }) => {
                        self.metrics.fenced_aborts.inc();
                        drop(permit);
                        self.leases.forget(&shard, Some(epoch));
                        continue;
                    }
                    // Any other database failure: the transaction may or may
                    // not have committed (the driver cannot tell).
                    Err(LeaseError::Db(e)) => return Err(AppendError::OutcomeUnknown(format!("database: {e}"))),
                    Err(e @ LeaseError::BatchOutcomeUnknown(_)) => return Err(AppendError::OutcomeUnknown(e.to_string())),
                    Err(e) => return Err(AppendError::not_applied(e.to_string())),
                }
            }
            if !forwarded && let Some(ack) = self.forward_by_route(&shard, stream, request_id, payload).await? {
                return Ok(ack);
            }
            let row = self.lease_row(&shard).await.map_err(|e| AppendError::not_applied(e.to_string()))?;
            if let Some(row) = &row {
                self.routes.learn(row, self.uuid);
            }
            let live_holder = row.as_ref().and_then(|r| r.holder.filter(|_| r.live));
            if live_holder.is_none()
                && moved_to_child.is_none()
                && let Some(child) = self.child_if_retired(&shard, stream).await
            {
                tracing::debug!(parent = %shard, %child, "the parent is retired; following its child");
                moved_to_child = Some(child);
                continue;
            }
            let holder_address = match live_holder {
                Some(h) if h != self.uuid => self.peer_address(h).await,
                _ => None,
            };
            let facts = AppendFacts {
                me: self.uuid,
                ready: self.is_ready() && self.session_up() && self.takes_leases(),
                forwarded,
                live_holder,
                holder_address,
            };
            match append_step(&facts) {
                AppendStep::Adopt => {
                    let row = row.expect("a live holder has a row");
                    if let Err(e) = self.leases.adopt(self.own_lease(&row.shard, row.epoch)).await {
                        tracing::debug!(%shard, error = %e, "cannot adopt lease");
                        self.wait_for_change(&mut changes, deadline, &shard).await?;
                    }
                }
                AppendStep::Forward { holder, address } => {
                    let expires_at = row.as_ref().and_then(|r| r.expires_at);
                    match self.forward(&address, expires_at, stream, request_id, payload).await? {
                        Ok(ack) => return Ok(ack),
                        // The holder moved on and named its successor: look again at once.
                        Err(Some(next)) if next.name != holder => {
                            tracing::debug!(%shard, from = %holder, to = %next.name, "following the holder")
                        }
                        Err(_) => {
                            self.routes.forget(&shard);
                            self.wait_for_change(&mut changes, deadline, &shard).await?
                        }
                    }
                }
                AppendStep::Redirect { holder } => {
                    let holder = holder.map(|(name, address)| HolderHint { name, address });
                    return Err(AppendError::NotApplied { reason: format!("this node does not hold shard {shard}"), holder });
                }
                AppendStep::Wait => self.wait_for_change(&mut changes, deadline, &shard).await?,
            }
            if Instant::now() >= deadline {
                return Err(self.no_holder(&shard));
            }
        }
    }

    /// The child that took `stream`'s key from `shard`, when `shard` is a
    /// splitting parent of the served config and the database says the
    /// split retired it (a node one config version behind the split's holder).
    async fn child_if_retired(&self, shard: &str, stream: &str) -> Option<String> {
        let child = self.topology().map.child_covering(shard, stream_key(stream))?.id.clone();
        match self.store.is_retired(shard).await {
            Ok(true) => Some(child),
            Ok(false) => None,
            Err(e) => {
                tracing::debug!(%shard, error = %e, "cannot read the shard's retirement");
                None
            }
        }
    }

    fn no_holder(&self, shard: &str) -> AppendError {
        AppendError::not_applied(format!("shard {shard} had no reachable holder for {:?}", self.takeover_budget()))
    }

    /// Waits until this node learns of a change of ownership, or for
    /// [`RECHECK`] at most, so that the caller reads the lease row again;
    /// past the deadline (or once the node stops announcing changes) the
    /// append ends with "no reachable holder".
    async fn wait_for_change(
        &self,
        changes: &mut tokio::sync::watch::Receiver<u64>,
        deadline: Instant,
        shard: &str,
    ) -> Result<(), AppendError> {
        let now = Instant::now();
        if now >= deadline {
            return Err(self.no_holder(shard));
        }
        match tokio::time::timeout_at(deadline.min(now + RECHECK).into(), changes.changed()).await {
            Ok(Err(_)) => Err(self.no_holder(shard)),
            Ok(Ok(())) | Err(_) => Ok(()),
        }
    }

    /// A repeated request id is acknowledged only with the payload it
    /// stored; another payload is refused ([`AppendError::Reused`]). Read only
    /// on the rare repeated id, so the common append pays nothing.
    async fn same_payload(&self, stream: &str, request_id: &str, payload: &[u8], seq: i64) -> Result<(), AppendError> {
        let stored = self.store.read(stream, seq, 1).await.map_err(|e| {
            AppendError::OutcomeUnknown(format!("request_id {request_id} was applied before, and reading it back failed: {e}"))
        })?;
        match stored.first() {
            Some(entry) if entry.payload != payload => Err(AppendError::Reused(format!(
                "request_id {request_id:?} was applied to stream {stream:?} at sequence {seq} with another payload \
                 ({} bytes, this one {}); a new entry needs a new request_id",
                entry.payload.len(),
                payload.len()
            ))),
            _ => Ok(()),
        }
    }

    /// Forwards by the shard's route, when it has one: no database read.
    /// `None`: no route, or the holder refused (certainly not applied), and
    /// the route is dropped; the caller reads the lease row.
    async fn forward_by_route(
        &self,
        shard: &str,
        stream: &str,
        request_id: &str,
        payload: &[u8],
    ) -> Result<Option<Acknowledged>, AppendError> {
        let Some(route) = self.routes.get(shard, chrono::Utc::now()) else { return Ok(None) };
        let Some((_, address)) = self.peer_address(route.holder).await else { return Ok(None) };
        match self.forward(&address, Some(route.expires_at), stream, request_id, payload).await? {
            Ok(ack) => Ok(Some(ack)),
            Err(_) => {
                self.routes.forget(shard);
                Ok(None)
            }
        }
    }

    /// The registered name and address of node `uuid`.
    async fn peer_address(&self, uuid: uuid::Uuid) -> Option<(String, String)> {
        let known = match self.registration(uuid) {
            Some(r) => Some(r),
            None => self.refresh_registry().await.ok().and_then(|_| self.registration(uuid)),
        };
        known.map(|r| (r.name, r.address))
    }

    /// Sends the append to the holder at `address`, once. The outer error
    /// ends the append; the inner one says it was certainly not applied.
    /// Timed into `chitin_forward_duration_seconds` by outcome.
    async fn forward(
        &self,
        address: &str,
        expires_at: Option<chrono::DateTime<chrono::Utc>>,
        stream: &str,
        request_id: &str,
        payload: &[u8],
    ) -> Result<Result<Acknowledged, Bounced>, AppendError> {
        let started = Instant::now();
        let span = trace_span!("forward", to = address, otel.kind = "client");
        let result = self.forward_untimed(address, expires_at, stream, request_id, payload).instrument(span).await;
        let outcome = match &result {
            Ok(Ok(_)) => "applied",
            Ok(Err(_)) => "not_applied",
            Err(e) => e.outcome(),
        };
        self.metrics.forward_seconds.observe(outcome, started);
        result
    }

    async fn forward_untimed(
        &self,
        address: &str,
        expires_at: Option<chrono::DateTime<chrono::Utc>>,
        stream: &str,
        request_id: &str,
        payload: &[u8],
    ) -> Result<Result<Acknowledged, Bounced>, AppendError> {
        let channel = match self.peers.channel(address).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "forward not sent");
                return Ok(Err(None));
            }
        };
        self.metrics.forwards.inc();
        let mut client = proto::journal_client::JournalClient::new(channel);
        let mut request = tonic::Request::new(proto::AppendRequest {
            stream: stream.to_string(),
            request_id: request_id.to_string(),
            payload: payload.to_vec(),
            forwarded: true,
        });
        request.set_timeout(self.forward_timeout(expires_at));
        crate::telemetry::inject(request.metadata_mut());
        match client.append(request).await {
            Ok(r) => {
                let r = r.into_inner();
                Ok(Ok(Acknowledged { sequence: r.sequence as i64, epoch: r.epoch as i64, shard: r.shard, holder: r.holder }))
            }
            Err(status) if is_not_applied(&status) => Ok(Err(holder_hint(&status))),
            Err(status) if status.code() == tonic::Code::InvalidArgument => {
                Err(AppendError::Invalid(status.message().to_string()))
            }
            Err(status) if status.code() == tonic::Code::AlreadyExists => Err(AppendError::Reused(status.message().to_string())),
            // The guard refuses before anything runs: certainly not applied.
            Err(status) if matches!(status.code(), tonic::Code::Unauthenticated | tonic::Code::PermissionDenied) => {
                Err(AppendError::not_applied(format!(
                    "the holder at {address} refused this node's forward ({}); every node of the cluster needs the same \
                     [cluster] peer_token",
                    status.message()
                )))
            }
            Err(status) if never_sent(&status) || crate::plant::active(crate::plant::Plant::ForwardOnce) => {
                self.peers.forget(address);
                Ok(Err(None))
            }
            Err(status) => {
                self.peers.forget(address);
                self.metrics.outcome_unknown.inc();
                Err(AppendError::OutcomeUnknown(format!("forwarded to {address}: {}", status.message())))
            }
        }
    }

    /// How long a forward waits for the holder (see [`forward_timeout`]).
    fn forward_timeout(&self, expires_at: Option<chrono::DateTime<chrono::Utc>>) -> Duration {
        // A timeout, not a judgement of the lease: the node's clock serves.
        let left = expires_at.map(|at| (at - chrono::Utc::now()).to_std().unwrap_or_default());
        forward_timeout(left, self.settings.lease_ttl(), self.settings.renew_interval())
    }

    /// Entries of `stream` from sequence `from`, in order, at most
    /// [`MAX_READ_BYTES`] of payloads.
    pub async fn read(&self, stream: &str, from: i64, limit: u32) -> Result<ReadAnswer, LeaseError> {
        let (entries, truncated) = self.store.read_capped(stream, from, limit.clamp(1, 10_000), MAX_READ_BYTES).await?;
        Ok(ReadAnswer { entries, truncated })
    }
}

/// Whether an append's status is the typed not-applied outcome.
pub fn is_not_applied(status: &tonic::Status) -> bool {
    status.metadata().get(outcome::KEY).is_some_and(|v| v == outcome::NOT_APPLIED)
}

/// The holder a not-applied status names.
pub fn holder_hint(status: &tonic::Status) -> Option<HolderHint> {
    let get = |key: &str| status.metadata().get(key).and_then(|v| v.to_str().ok()).map(str::to_owned);
    Some(HolderHint { name: get(outcome::HOLDER)?, address: get(outcome::HOLDER_ADDRESS)? })
}

impl From<AppendError> for tonic::Status {
    fn from(e: AppendError) -> tonic::Status {
        let mut status = match &e {
            AppendError::Invalid(_) => return tonic::Status::invalid_argument(e.to_string()),
            AppendError::Reused(_) => return tonic::Status::already_exists(e.to_string()),
            AppendError::NotApplied { .. } => tonic::Status::unavailable(e.to_string()),
            AppendError::OutcomeUnknown(_) => tonic::Status::unknown(e.to_string()),
        };
        let meta = status.metadata_mut();
        let put = |meta: &mut tonic::metadata::MetadataMap, key: &'static str, value: &str| {
            if let Ok(v) = value.parse() {
                meta.insert(key, v);
            }
        };
        match &e {
            AppendError::NotApplied { holder, .. } => {
                put(meta, outcome::KEY, outcome::NOT_APPLIED);
                if let Some(h) = holder {
                    put(meta, outcome::HOLDER, &h.name);
                    put(meta, outcome::HOLDER_ADDRESS, &h.address);
                }
            }
            _ => put(meta, outcome::KEY, outcome::UNKNOWN),
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_every_dialect() {
        assert!(check_name("stream", &"s".repeat(MAX_STREAM), MAX_STREAM).is_ok());
        let cases = [
            ("", "stream must be 1..=255 bytes, got 0"),
            ("a\0b", "stream must not contain a NUL byte (found at byte 1)"),
            (
                "r ",
                "stream must not end with a space (\"r \"): MySQL and MariaDB compare keys without trailing spaces; trim \
                 it, or end the name with another character",
            ),
        ];
        for (value, want) in cases {
            assert_eq!(check_name("stream", value, MAX_STREAM).unwrap_err(), want, "{value:?}");
        }
        // Bytes, not characters: 128 two-byte characters are 256 bytes.
        assert_eq!(check_name("stream", &"é".repeat(128), MAX_STREAM).unwrap_err(), "stream must be 1..=255 bytes, got 256");
    }

    #[test]
    fn the_outcome_travels_as_metadata_not_wording() {
        let hint = HolderHint { name: "n2".into(), address: "127.0.0.1:7002".into() };
        let status: tonic::Status = AppendError::NotApplied { reason: "moved".into(), holder: Some(hint.clone()) }.into();
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert!(is_not_applied(&status));
        assert_eq!(holder_hint(&status), Some(hint));
        // A message that merely reads like it is not the outcome.
        let lookalike = tonic::Status::unavailable("not applied: trust me");
        assert!(!is_not_applied(&lookalike));
        let unknown: tonic::Status = AppendError::OutcomeUnknown("cut".into()).into();
        assert!(!is_not_applied(&unknown));
        assert_eq!(unknown.code(), tonic::Code::Unknown);
    }
}
