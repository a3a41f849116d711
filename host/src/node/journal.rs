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

use chitin_client::outcome::{Attempt, classify, never_sent};

use crate::lease::{Appended, JournalEntry, LeaseError, NewEntry};
use crate::proto;
use crate::telemetry::trace_span;

use super::Node;
use super::leases::Permit;
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

/// A shard's holder as a not-applied answer names it: the client crate's
/// type, so that the node reads a forward's answer as clients do.
pub use chitin_client::outcome::Holder as HolderHint;

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

/// An append as the node decides it: built once, at the edge, from the
/// request, and checked there, so that nothing after it meets a bad name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Append {
    /// The stream appended to; its key picks the shard.
    pub stream: String,
    /// The client's id for this entry: a repeat applies at most once.
    pub request_id: String,
    /// The entry's bytes.
    pub payload: Vec<u8>,
    /// Sent by another node: never forwarded again, never waits here.
    pub forwarded: bool,
}

impl Append {
    /// `request`'s append, refused ([`AppendError::Invalid`]) when a name
    /// does not fit every dialect ([`check_name`]) or the payload is too large.
    pub fn parse(request: proto::AppendRequest) -> Result<Append, AppendError> {
        check_name("stream", &request.stream, MAX_STREAM).map_err(AppendError::Invalid)?;
        check_name("request_id", &request.request_id, MAX_REQUEST_ID).map_err(AppendError::Invalid)?;
        if request.payload.len() > MAX_PAYLOAD {
            return Err(AppendError::Invalid(format!(
                "payload must be at most {MAX_PAYLOAD} bytes, got {}",
                request.payload.len()
            )));
        }
        let proto::AppendRequest { stream, request_id, payload, forwarded } = request;
        Ok(Append { stream, request_id, payload, forwarded })
    }

    /// The request that forwards it to the shard's holder.
    fn forward_request(&self) -> proto::AppendRequest {
        proto::AppendRequest {
            stream: self.stream.clone(),
            request_id: self.request_id.clone(),
            payload: self.payload.clone(),
            forwarded: true,
        }
    }
}

/// What one forward to the holder came to.
#[derive(Debug)]
enum Forwarded {
    /// The holder committed it (or had, for a repeated request id).
    Applied(Acknowledged),
    /// Certainly not applied there; the holder that node named, if any.
    Bounced(Option<HolderHint>),
    /// The append ends with this answer.
    Ends(AppendError),
}

/// A failed forward, judged: what it means for the append, and whether the
/// channel to the holder is suspect (it failed to send or lost the answer;
/// one whose holder answered is not), so the next forward dials again.
#[derive(Debug)]
struct ForwardJudgement {
    forwarded: Forwarded,
    forget_channel: bool,
}

/// Judges a failed forward's `status`, read as clients read it
/// ([`chitin_client::outcome::classify`]). `planted`: the forward-once
/// plant, which takes an unknown outcome for a bounce.
fn judge_forward(status: &tonic::Status, address: &str, planted: bool) -> ForwardJudgement {
    let attempt = classify(status);
    let forget_channel = never_sent(status) || matches!(attempt, Attempt::Unknown(_));
    let forwarded = match attempt {
        Attempt::NotApplied { holder, .. } => Forwarded::Bounced(holder),
        Attempt::Unknown(_) if planted => Forwarded::Bounced(None),
        Attempt::Unknown(why) => Forwarded::Ends(AppendError::OutcomeUnknown(format!("forwarded to {address}: {why}"))),
        Attempt::Refused { code: tonic::Code::InvalidArgument, message } => Forwarded::Ends(AppendError::Invalid(message)),
        Attempt::Refused { code: tonic::Code::AlreadyExists, message } => Forwarded::Ends(AppendError::Reused(message)),
        // Refused before anything ran (the guard, the protocol check):
        // certainly not applied, and not for this append to mend.
        Attempt::Refused { code, message } => Forwarded::Ends(AppendError::not_applied(format!(
            "the holder at {address} refused this node's forward ({code:?}: {message}){}",
            refusal_fix(code)
        ))),
    };
    ForwardJudgement { forwarded, forget_channel }
}

/// What to mend for a forward refused with `code`, by the cause that code
/// stands for.
fn refusal_fix(code: tonic::Code) -> &'static str {
    match code {
        tonic::Code::Unauthenticated | tonic::Code::PermissionDenied => {
            "; every node of the cluster needs the same [cluster] peer_token"
        }
        tonic::Code::FailedPrecondition => "; the two nodes have no protocol version in common: finish or roll back the upgrade",
        _ => "",
    }
}

/// What a fenced commit came to.
#[derive(Debug)]
enum Committed {
    Applied(Appended),
    /// The lease was gone (at this epoch): nothing was written; look again.
    LeaseLost(i64),
    /// The append ends with this answer.
    Ends(AppendError),
}

fn judge_commit(result: Result<Appended, LeaseError>) -> Committed {
    match result {
        Ok(a) => Committed::Applied(a),
        Err(LeaseError::LeaseLost { epoch, .. }) => Committed::LeaseLost(epoch),
        // Any other database failure: the transaction may or may not have
        // committed (the driver cannot tell).
        Err(LeaseError::Db(e)) => Committed::Ends(AppendError::OutcomeUnknown(format!("database: {e}"))),
        Err(e @ LeaseError::BatchOutcomeUnknown(_)) => Committed::Ends(AppendError::OutcomeUnknown(e.to_string())),
        Err(e) => Committed::Ends(AppendError::not_applied(e.to_string())),
    }
}

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

    /// Appends `append`; see the module docs for the outcomes. Timed into
    /// `chitin_append_duration_seconds` by outcome.
    pub async fn append(&self, append: &Append) -> Result<Acknowledged, AppendError> {
        let started = Instant::now();
        let span = trace_span!("append", stream = append.stream.as_str(), forwarded = append.forwarded);
        let result = self.append_untimed(append).instrument(span).await;
        self.metrics.append_seconds.observe(result.as_ref().map_or_else(AppendError::outcome, |_| "applied"), started);
        result
    }

    async fn append_untimed(&self, append: &Append) -> Result<Acknowledged, AppendError> {
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
                None => {
                    self.topology().map.route_stream(&append.stream).map_err(|e| AppendError::Invalid(e.to_string()))?.id.clone()
                }
            };
            if let Some(permit) = self.leases.permit(&shard).await {
                match self.commit(permit, &shard, append).await? {
                    Some(ack) => return Ok(ack),
                    None => continue,
                }
            }
            if !append.forwarded
                && let Some(ack) = self.forward_by_route(&shard, append).await?
            {
                return Ok(ack);
            }
            let (facts, expires_at) = self.append_facts(&shard, append, moved_to_child.is_none()).await?;
            match append_step(&facts) {
                AppendStep::FollowChild { child } => {
                    tracing::debug!(parent = %shard, %child, "the parent is retired; following its child");
                    moved_to_child = Some(child);
                    continue;
                }
                AppendStep::Adopt { epoch } => {
                    if let Err(e) = self.leases.adopt(self.own_lease(&shard, epoch)).await {
                        tracing::debug!(%shard, error = %e, "cannot adopt lease");
                        self.wait_for_change(&mut changes, deadline, &shard).await?;
                    }
                }
                AppendStep::Forward { holder, address } => match self.forward(&address, expires_at, append).await {
                    Forwarded::Applied(ack) => return Ok(ack),
                    Forwarded::Ends(e) => return Err(e),
                    // The holder moved on and named its successor: look again at once.
                    Forwarded::Bounced(Some(next)) if next.name != holder => {
                        tracing::debug!(%shard, from = %holder, to = %next.name, "following the holder")
                    }
                    Forwarded::Bounced(_) => {
                        self.routes.forget(&shard);
                        self.wait_for_change(&mut changes, deadline, &shard).await?
                    }
                },
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

    /// Commits `append` under the lease `permit` stands for. `None`: the
    /// lease was gone (nothing was written), and the caller looks again.
    async fn commit(&self, permit: Permit, shard: &str, append: &Append) -> Result<Option<Acknowledged>, AppendError> {
        let entry =
            NewEntry { stream: append.stream.clone(), request_id: append.request_id.clone(), payload: append.payload.clone() };
        let result = self.group_commit.append(&self.store, &permit.token, entry).await;
        // Ended either way: a handoff waiting for this write goes on.
        drop(permit);
        match judge_commit(result) {
            Committed::Applied(a) => {
                crate::failpoint::hit("append.after_commit").await;
                self.metrics.fenced_commits.inc();
                if let Some(s) = self.topology().map.shard(shard) {
                    self.load.record(shard, s.lower, s.upper, stream_key(&append.stream), append.payload.len());
                }
                if !a.fresh {
                    self.same_payload(append, a.seq).await?;
                }
                Ok(Some(Acknowledged { sequence: a.seq, epoch: a.epoch, shard: shard.to_owned(), holder: self.name.clone() }))
            }
            Committed::LeaseLost(epoch) => {
                self.metrics.fenced_aborts.inc();
                self.leases.forget(shard, Some(epoch));
                Ok(None)
            }
            Committed::Ends(e) => Err(e),
        }
    }

    /// What [`append_step`] decides on for `shard`, read from the database
    /// (the lease row, the registrations; the retirement of a parent only
    /// when `may_follow` and nobody holds it), and the lease's expiry.
    async fn append_facts(
        &self,
        shard: &str,
        append: &Append,
        may_follow: bool,
    ) -> Result<(AppendFacts, Option<chrono::DateTime<chrono::Utc>>), AppendError> {
        let row = self.lease_row(shard).await.map_err(|e| AppendError::not_applied(e.to_string()))?;
        if let Some(row) = &row {
            self.routes.learn(row, self.uuid);
        }
        let live_holder = row.as_ref().and_then(|r| r.holder.filter(|_| r.live));
        let retired_child = match live_holder {
            None if may_follow => self.child_if_retired(shard, &append.stream).await,
            _ => None,
        };
        let holder_address = match live_holder {
            Some(h) if h != self.uuid => self.peer_address(h).await,
            _ => None,
        };
        let facts = AppendFacts {
            me: self.uuid,
            ready: self.is_ready() && self.takes_new_leases(),
            forwarded: append.forwarded,
            live_holder,
            epoch: row.as_ref().map_or(0, |r| r.epoch),
            holder_address,
            retired_child,
        };
        Ok((facts, row.and_then(|r| r.expires_at)))
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
    async fn same_payload(&self, append: &Append, seq: i64) -> Result<(), AppendError> {
        let Append { stream, request_id, payload, .. } = append;
        let stored = self.store.read(stream, seq, 1).await.map_err(|e| {
            AppendError::OutcomeUnknown(format!("request_id {request_id} was applied before, and reading it back failed: {e}"))
        })?;
        match stored.first() {
            Some(entry) if entry.payload != *payload => Err(AppendError::Reused(format!(
                "request_id {request_id:?} was applied to stream {stream:?} at sequence {seq} with another payload \
                 ({} bytes, this one {}); a new entry needs a new request_id",
                entry.payload.len(),
                payload.len()
            ))),
            _ => Ok(()),
        }
    }

    /// Forwards by the shard's route, when it has one: no database read.
    /// `None`: no route, or the holder bounced it (certainly not applied),
    /// and the route is dropped; the caller reads the lease row.
    async fn forward_by_route(&self, shard: &str, append: &Append) -> Result<Option<Acknowledged>, AppendError> {
        let Some(route) = self.routes.get(shard, chrono::Utc::now()) else { return Ok(None) };
        let Some((_, address)) = self.peer_address(route.holder).await else { return Ok(None) };
        match self.forward(&address, Some(route.expires_at), append).await {
            Forwarded::Applied(ack) => Ok(Some(ack)),
            Forwarded::Ends(e) => Err(e),
            Forwarded::Bounced(_) => {
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

    /// Sends the append to the holder at `address`, once. Timed into
    /// `chitin_forward_duration_seconds` by outcome.
    async fn forward(&self, address: &str, expires_at: Option<chrono::DateTime<chrono::Utc>>, append: &Append) -> Forwarded {
        let started = Instant::now();
        let span = trace_span!("forward", to = address, otel.kind = "client");
        let forwarded = self.forward_untimed(address, expires_at, append).instrument(span).await;
        let outcome = match &forwarded {
            Forwarded::Applied(_) => "applied",
            Forwarded::Bounced(_) => "not_applied",
            Forwarded::Ends(e) => e.outcome(),
        };
        self.metrics.forward_seconds.observe(outcome, started);
        forwarded
    }

    async fn forward_untimed(
        &self,
        address: &str,
        expires_at: Option<chrono::DateTime<chrono::Utc>>,
        append: &Append,
    ) -> Forwarded {
        let channel = match self.peers.channel(address).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "forward not sent");
                return Forwarded::Bounced(None);
            }
        };
        self.metrics.forwards.inc();
        let mut client = proto::journal_client::JournalClient::new(channel);
        let mut request = tonic::Request::new(append.forward_request());
        request.set_timeout(self.forward_timeout(expires_at));
        crate::telemetry::inject(request.metadata_mut());
        let status = match client.append(request).await {
            Ok(r) => {
                let r = r.into_inner();
                let (sequence, epoch) = (r.sequence as i64, r.epoch as i64);
                return Forwarded::Applied(Acknowledged { sequence, epoch, shard: r.shard, holder: r.holder });
            }
            Err(status) => status,
        };
        let judged = judge_forward(&status, address, crate::plant::active(crate::plant::Plant::ForwardOnce));
        if judged.forget_channel {
            self.peers.forget(address);
        }
        let forwarded = judged.forwarded;
        if matches!(forwarded, Forwarded::Ends(AppendError::OutcomeUnknown(_))) {
            self.metrics.outcome_unknown.inc();
        }
        forwarded
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

    /// A forward's answer, read as clients read it, decides the append:
    /// (status, planted) → what the append does.
    #[test]
    fn a_forwards_answer_decides_the_append() {
        use crate::proto::outcome as keys;
        use tonic::Status;
        let with = |mut status: Status, pairs: &[(&'static str, &str)]| {
            for (k, v) in pairs {
                status.metadata_mut().insert(*k, v.parse().unwrap());
            }
            status
        };
        let next = HolderHint { name: "n3".into(), address: "10.0.0.3:50051".into() };
        let bounced = with(
            Status::unavailable("moved"),
            &[(keys::KEY, keys::NOT_APPLIED), (keys::HOLDER, "n3"), (keys::HOLDER_ADDRESS, "10.0.0.3:50051")],
        );
        // A holder named without an address is no holder to go to.
        let nameless = with(Status::unavailable("moved"), &[(keys::KEY, keys::NOT_APPLIED), (keys::HOLDER, "n3")]);
        let empty = with(
            Status::unavailable("moved"),
            &[(keys::KEY, keys::NOT_APPLIED), (keys::HOLDER, "n3"), (keys::HOLDER_ADDRESS, "")],
        );
        let said_unknown = with(Status::unknown("db"), &[(keys::KEY, keys::UNKNOWN)]);
        let refused = || Status::from_error(Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)));
        // (status, planted) → (what the append does, whether the channel is dropped)
        let cases: Vec<(Status, bool, &str, bool)> = vec![
            (bounced.clone(), false, "bounced to n3", false),
            (bounced, true, "bounced to n3", false),
            (nameless, false, "bounced", false),
            (empty, false, "bounced", false),
            (refused(), false, "bounced", true),
            (said_unknown, false, "unknown", true),
            (Status::deadline_exceeded("slow"), false, "unknown", true),
            (Status::deadline_exceeded("slow"), true, "bounced", true),
            (Status::invalid_argument("bad"), false, "invalid", false),
            (Status::already_exists("again"), false, "reused", false),
            (Status::unauthenticated("token"), false, "refused: the token", false),
            (Status::permission_denied("peer"), false, "refused: the token", false),
            (Status::failed_precondition("protocol"), false, "refused: the protocol", false),
        ];
        for (status, planted, want, forget) in cases {
            let judged = judge_forward(&status, "10.0.0.2:50051", planted);
            assert_eq!(judged.forget_channel, forget, "{status:?}, planted {planted}: the channel");
            let got = match judged.forwarded {
                Forwarded::Bounced(Some(h)) if h == next => "bounced to n3",
                Forwarded::Bounced(None) => "bounced",
                Forwarded::Ends(AppendError::OutcomeUnknown(m)) if m.contains("10.0.0.2:50051") => "unknown",
                Forwarded::Ends(AppendError::Invalid(m)) if m == "bad" => "invalid",
                Forwarded::Ends(AppendError::Reused(m)) if m == "again" => "reused",
                Forwarded::Ends(AppendError::NotApplied { reason, holder: None }) if reason.contains("peer_token") => {
                    "refused: the token"
                }
                Forwarded::Ends(AppendError::NotApplied { reason, holder: None }) if reason.contains("protocol version") => {
                    "refused: the protocol"
                }
                other => panic!("{status:?}, planted {planted}: {other:?}"),
            };
            assert_eq!(got, want, "{status:?}, planted {planted}");
        }
    }

    /// A commit's result decides the append: only a lost lease looks
    /// again; a database failure may have committed.
    #[test]
    fn a_commits_result_decides_the_append() {
        let lost = LeaseError::LeaseLost {
            shard: "s".into(),
            holder: uuid::Uuid::nil(),
            epoch: 4,
            reason: crate::lease::LostReason::Released,
        };
        let cases: Vec<(Result<Appended, LeaseError>, &str)> = vec![
            (Ok(Appended { seq: 9, epoch: 4, fresh: true }), "applied"),
            (Err(lost), "lost at 4"),
            (Err(LeaseError::Db(sqlx::Error::PoolTimedOut)), "unknown"),
            (Err(LeaseError::BatchOutcomeUnknown("cut".into())), "unknown"),
            (Err(LeaseError::InvalidArgument("x".into())), "not applied"),
        ];
        for (result, want) in cases {
            let got = match judge_commit(result) {
                Committed::Applied(a) if a.seq == 9 => "applied",
                Committed::LeaseLost(4) => "lost at 4",
                Committed::Ends(AppendError::OutcomeUnknown(_)) => "unknown",
                Committed::Ends(AppendError::NotApplied { holder: None, .. }) => "not applied",
                other => panic!("{other:?}"),
            };
            assert_eq!(got, want);
        }
    }
}
