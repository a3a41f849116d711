//! The gRPC services.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio_stream::{Stream, StreamExt, wrappers::BroadcastStream, wrappers::WatchStream};
use tonic::{Request, Response, Status};

use crate::lease::LeaseRow;
use crate::node::control::{BootstrapError, Control};
use crate::node::journal::{Append, MAX_STREAM, check_name};
use crate::node::leases::OwnershipEvent;
use crate::node::{Node, assignments};
use crate::proto::{self, admin_server, journal_server, ownership_server, peer_server};
use crate::security::Caller;
use crate::security::listen::Throttle;
use crate::topology::ClusterConfig;

/// Largest request the server decodes.
pub const MAX_MESSAGE_BYTES: usize = 2 << 20;

/// The services over one node. Every call meets, in order: the
/// authentication of its plane ([`authenticate`]), the protocol check, then
/// its service. The tokens are the control block's current credentials
/// (a SIGHUP may change them between two calls of one connection).
pub fn router(control: Arc<Control>) -> tonic::service::Routes {
    let doors = Arc::new(Door {
        control: control.clone(),
        refused: control.counts.unauthenticated.clone(),
        log: Throttle::new(std::time::Duration::from_secs(10)),
    });
    let journal = journal_server::JournalServer::new(Api(control.clone())).max_decoding_message_size(MAX_MESSAGE_BYTES);
    let ownership = ownership_server::OwnershipServer::new(Api(control.clone()));
    let admin = admin_server::AdminServer::new(Api(control.clone())).max_decoding_message_size(64 << 20);
    let peer = peer_server::PeerServer::new(Api(control.clone()));
    let coordination = proto::coordination_server::CoordinationServer::new(super::coordination::Coordination(control.clone()));
    let protocol = super::versions::ProtocolCheck::new(control.clone());
    let request_timeout = control.settings.limits.request_timeout();
    let (health, follow) = super::health::service(control.clone());
    control.keep(follow);
    let router = tonic::service::Routes::new(journal)
        .add_service(health)
        .add_service(ownership)
        .add_service(peer)
        .add_service(admin)
        .add_service(coordination)
        .into_axum_router();
    let router = super::deadline::bounded(router, request_timeout, timed_out)
        .layer(axum::middleware::from_fn(crate::telemetry::traced_call))
        .layer(axum::middleware::from_fn_with_state(protocol, super::versions::check_protocol))
        .layer(axum::middleware::from_fn_with_state(doors, authenticate))
        .layer(axum::middleware::from_fn(clarify_library_errors));
    tonic::service::Routes::from(router)
}

/// The authentication at the gRPC listener's door.
struct Door {
    /// Its credentials' current gatekeeper checks each call.
    control: Arc<Control>,
    /// Calls refused, for `/metrics`.
    refused: Arc<AtomicU64>,
    /// A summary line at most every ten seconds, never one per call.
    log: Throttle,
}

/// Refuses an unauthenticated call before anything else looks at it
/// (UNAUTHENTICATED or PERMISSION_DENIED saying which token is needed);
/// records the [`Caller`] for the handlers.
async fn authenticate(
    axum::extract::State(door): axum::extract::State<Arc<Door>>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let accepted = door.control.credentials.current();
    let certificate = || {
        let chain = req.extensions().get::<TlsConnectInfo<TcpConnectInfo>>().and_then(|i| i.peer_certs());
        accepted.gatekeeper.verifies(chain.as_deref().map(Vec::as_slice))
    };
    match accepted.gatekeeper.check(req.uri().path(), req.headers(), certificate) {
        Ok(caller) => {
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Err(status) => {
            door.refused.fetch_add(1, Ordering::Relaxed);
            if let Some(n) = door.log.due() {
                tracing::warn!(refused = n, "gRPC calls refused for a missing or wrong credential (the last: {})", status.code());
            }
            status.into_http()
        }
    }
}

/// `forwarded = true` skips the holder's forwarding and leaving checks, so
/// once the cluster can tell its nodes (a peer token, or TLS with the
/// cluster CA) only a peer may set it.
fn may_forward(caller: Caller, settings: &crate::settings::Settings) -> Result<(), Status> {
    let peers_known = settings.cluster.peer_token.is_some() || settings.tls.knows_peers();
    if !peers_known || caller == Caller::Peer {
        return Ok(());
    }
    let why = "`forwarded = true` is for node-to-node calls and needs `authorization: Bearer <[cluster] peer_token>` \
               or a node certificate of the cluster CA ([tls] peer_ca_file); clients leave it false";
    Err(match caller {
        Caller::Anonymous => Status::unauthenticated(why),
        _ => Status::permission_denied(why),
    })
}

/// The gRPC services this node serves, for the answer to an unknown method.
const SERVICES: &str = "chitin.v1.Journal, chitin.v1.Ownership, chitin.v1.Admin, chitin.v1.Coordination, chitin.v1.Peer";

/// A call whose answer took longer than `[limits] request_timeout_secs`
/// ends with DEADLINE_EXCEEDED naming the setting (the library's own timeout
/// says CANCELLED, "Timeout expired", which a client takes for its own
/// cancellation). The call's work is dropped where it was, so an append may
/// have been applied all the same: the message says to send it again with
/// the same request id, whose answer is then the stored one. A stream's
/// answer is its first headers: its messages are not bounded.
fn timed_out(limit: std::time::Duration) -> axum::response::Response {
    Status::deadline_exceeded(format!(
        "the call ran longer than {:.1} s, the node's [limits] request_timeout_secs; an append may have been \
         applied all the same: send it again with the same request id",
        limit.as_secs_f64()
    ))
    .into_http()
}

/// Rewrites the answers tonic itself gives to a bad request, before any
/// handler runs, into ones that say what was wrong:
/// - an undecodable request (wrong wire types, invalid UTF-8, truncated):
///   INTERNAL becomes INVALID_ARGUMENT `malformed request: …`;
/// - a request over the size limit: OUT_OF_RANGE becomes INVALID_ARGUMENT
///   `request too large: …` (never RESOURCE_EXHAUSTED, which clients retry);
/// - an unknown service or method: UNIMPLEMENTED gets a message naming it.
///
/// Only trailers-only answers (the status in the headers) are looked at;
/// a handler's own errors never carry these messages.
async fn clarify_library_errors(req: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    let path = req.uri().path().to_owned();
    let mut response = next.run(req).await;
    let Some(status) = Status::from_header_map(response.headers()) else {
        return response;
    };
    let message = status.message();
    let clearer = match status.code() {
        tonic::Code::Internal if message.starts_with("failed to decode Protobuf message") => {
            Status::invalid_argument(format!("malformed request: {message}"))
        }
        tonic::Code::OutOfRange if message.contains("decoded message length too large") => {
            let detail = message.trim_start_matches("Error, decoded message length too large: ");
            Status::invalid_argument(format!("request too large: {detail}"))
        }
        tonic::Code::Unimplemented if message.is_empty() => {
            Status::unimplemented(format!("no gRPC method `{path}` on this node; it serves {SERVICES}"))
        }
        _ => return response,
    };
    if clearer.add_header(response.headers_mut()).is_err() {
        tracing::debug!(%path, "cannot rewrite a gRPC status");
    }
    response
}

#[derive(Clone)]
pub struct Api(pub Arc<Control>);

impl Api {
    /// The node, or UNAVAILABLE while it is unprovisioned.
    fn node(&self) -> Result<Arc<Node>, Status> {
        self.0.node().ok_or_else(|| {
            Status::unavailable(
                "not applied: this node is UNPROVISIONED; give it its id and config with `chitin cluster bootstrap-node`",
            )
        })
    }
}

fn parse_config(json: &str) -> Result<ClusterConfig, Status> {
    ClusterConfig::from_json(json).map_err(|e| Status::invalid_argument(format!("config_json: {e}")))
}

fn internal(e: impl std::fmt::Display) -> Status {
    Status::unavailable(format!("not applied: {e}"))
}

#[tonic::async_trait]
impl journal_server::Journal for Api {
    async fn append(&self, req: Request<proto::AppendRequest>) -> Result<Response<proto::AppendResponse>, Status> {
        let caller = Caller::of(&req);
        let request = req.into_inner();
        if request.forwarded {
            may_forward(caller, &self.0.settings)?;
        }
        let append = Append::parse(request)?;
        let node = &self.node()?;
        // A leaving node still takes appends: it forwards them to the shards'
        // new holders, so a client beside it sees no failure while it drains.
        let ack = node.append(&append).await?;
        Ok(Response::new(proto::AppendResponse {
            sequence: ack.sequence as u64,
            epoch: ack.epoch as u64,
            shard: ack.shard,
            holder: ack.holder,
        }))
    }

    async fn read(&self, req: Request<proto::ReadRequest>) -> Result<Response<proto::ReadResponse>, Status> {
        let r = req.into_inner();
        check_name("stream", &r.stream, MAX_STREAM).map_err(Status::invalid_argument)?;
        let from = i64::try_from(r.from)
            .map_err(|_| Status::invalid_argument(format!("from must be at most {}, got {}", i64::MAX, r.from)))?;
        let limit = if r.limit == 0 { 1000 } else { r.limit };
        let read = self.node()?.read(&r.stream, from, limit).await.map_err(internal)?;
        let next_from = read.entries.last().map_or(r.from, |e| e.seq as u64 + 1);
        Ok(Response::new(proto::ReadResponse {
            entries: read
                .entries
                .into_iter()
                .map(|e| proto::Entry {
                    sequence: e.seq as u64,
                    request_id: e.request_id,
                    payload: e.payload,
                    epoch: e.epoch as u64,
                })
                .collect(),
            truncated: read.truncated,
            next_from,
        }))
    }
}

/// `row` as the API shows it; `now` is the database's clock, which judges
/// expiry.
fn lease_message(node: &Node, row: &LeaseRow, now: chrono::DateTime<chrono::Utc>) -> proto::ShardLease {
    let (application, parent) = shard_of(node, &row.shard);
    let holder = assignments::holder(row, &node.registry());
    let expires_in_ms = match (row.expires_at, row.live) {
        (Some(at), true) => (at - now).num_milliseconds().max(0),
        _ => 0,
    };
    proto::ShardLease {
        shard: row.shard.clone(),
        application,
        holder_uuid: holder.as_ref().map(|h| h.uuid.to_string()).unwrap_or_default(),
        holder_address: holder.as_ref().map(|h| h.address.clone()).unwrap_or_default(),
        holder: holder.map(|h| h.name).unwrap_or_default(),
        epoch: row.epoch as u64,
        expires_in_ms,
        parent,
    }
}

/// The application and parent (empty when none) of `shard` in the node's
/// config.
fn shard_of(node: &Node, shard: &str) -> (String, String) {
    let topology = node.topology();
    let s = topology.map.shard(shard);
    (s.map(|s| s.application.clone()).unwrap_or_default(), s.and_then(|s| s.parent.clone()).unwrap_or_default())
}

type EventStream = Pin<Box<dyn Stream<Item = Result<proto::OwnershipEvent, Status>> + Send>>;

type UpdateStream = Pin<Box<dyn Stream<Item = Result<proto::AssignmentUpdate, Status>> + Send>>;

fn assignment_message(a: &assignments::Assignment) -> proto::Assignment {
    let holder = a.holder.as_ref();
    proto::Assignment {
        shard: a.shard.clone(),
        application: a.application.clone(),
        lower: a.lower,
        upper: a.upper,
        state: a.state.as_str().to_string(),
        routable: a.state.is_routable(),
        parent: a.parent.clone().unwrap_or_default(),
        holder: holder.map(|h| h.name.clone()).unwrap_or_default(),
        holder_uuid: holder.map(|h| h.uuid.to_string()).unwrap_or_default(),
        holder_address: holder.map(|h| h.address.clone()).unwrap_or_default(),
        epoch: a.epoch as u64,
    }
}

/// A watch's events with what lives exactly as long as the watch: its part
/// in handoffs when it acknowledges (a handoff waits for RELEASED only while
/// some watch that acknowledges is open).
struct Watch {
    events: EventStream,
    _participant: Option<crate::node::acks::Participant>,
}

impl Stream for Watch {
    type Item = Result<proto::OwnershipEvent, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Self::Item>> {
        self.events.as_mut().poll_next(cx)
    }
}

#[tonic::async_trait]
impl ownership_server::Ownership for Api {
    async fn route(&self, req: Request<proto::RouteRequest>) -> Result<Response<proto::ShardLease>, Status> {
        let r = req.into_inner();
        if r.application.is_empty() {
            return Err(Status::invalid_argument("application must not be empty"));
        }
        let node = &self.node()?;
        let topology = node.topology();
        let shard = topology.map.route(&r.application, r.key).map_err(|e| Status::not_found(e.to_string()))?;
        // One shard's row and the database clock: a request path never reads
        // the whole lease table.
        let (row, now) = node.lease_now(&shard.id).await.map_err(internal)?;
        if row.as_ref().and_then(|r| r.holder).is_some_and(|h| node.registration(h).is_none()) {
            node.refresh_registry().await.map_err(internal)?;
        }
        let row = row.unwrap_or(LeaseRow {
            shard: shard.id.clone(),
            holder: None,
            holder_name: None,
            epoch: 0,
            liveness_epoch: None,
            expires_at: None,
            live: false,
        });
        Ok(Response::new(lease_message(node, &row, now)))
    }

    async fn held(&self, _req: Request<proto::HeldRequest>) -> Result<Response<proto::HeldResponse>, Status> {
        let node = &self.node()?;
        let leases = node
            .leases
            .held()
            .into_iter()
            .map(|(l, servable)| {
                let (application, parent) = shard_of(node, &l.shard);
                proto::ShardLease {
                    application,
                    shard: l.shard,
                    holder: node.name.clone(),
                    holder_uuid: node.uuid.to_string(),
                    holder_address: node.address.clone(),
                    epoch: l.epoch as u64,
                    expires_in_ms: i64::try_from(servable.as_millis()).unwrap_or(i64::MAX),
                    parent,
                }
            })
            .collect();
        Ok(Response::new(proto::HeldResponse { leases }))
    }

    type WatchOwnershipStream = EventStream;

    async fn watch_ownership(&self, req: Request<proto::WatchRequest>) -> Result<Response<EventStream>, Status> {
        use proto::ownership_event::Kind;
        let node = self.node()?;
        // Counts while the stream lives: dropped with it.
        let participant = req.into_inner().acknowledges.then(|| node.leases.acks.participate());
        let events = BroadcastStream::new(node.leases.subscribe()).map(move |e| match e {
            Ok(event) => {
                let (kind, shard, epoch) = match event {
                    OwnershipEvent::Acquired { shard, epoch } => (Kind::Acquired, shard, epoch),
                    OwnershipEvent::Draining { shard, epoch } => (Kind::Draining, shard, epoch),
                    OwnershipEvent::Lost { shard, epoch } => (Kind::Lost, shard, epoch),
                };
                Ok(proto::OwnershipEvent { kind: kind as i32, shard, epoch: epoch as u64 })
            }
            Err(_) => Err(Status::data_loss("the watcher fell behind; events were dropped: call Held and watch again")),
        });
        // The stream ends when the node stops (after its lost events): an
        // open watch must not hold the server's graceful shutdown forever.
        let stopping = WatchStream::new(self.0.shutdown_signal()).filter(|stopped| *stopped).map(|_| None);
        let events = events.map(Some).merge(stopping).map_while(|e| e);
        Ok(Response::new(Box::pin(Watch { events: Box::pin(events), _participant: participant })))
    }

    type WatchAssignmentsStream = UpdateStream;

    async fn watch_assignments(&self, req: Request<proto::WatchAssignmentsRequest>) -> Result<Response<UpdateStream>, Status> {
        let application = req.into_inner().application;
        let node = self.node()?;
        if !application.is_empty() && !node.topology().config.applications.iter().any(|a| a.name == application) {
            return Err(Status::not_found(format!("unknown application `{application}`: leave it empty for every application")));
        }
        let name = node.name.clone();
        let mut sent = assignments::Sent::of(application);
        let updates = WatchStream::new(node.assignments.subscribe()).filter(|s| s.version > 0).filter_map(move |latest| {
            let (snapshot, d) = sent.next(&latest.shards)?;
            Some(Ok(proto::AssignmentUpdate {
                node: name.clone(),
                version: latest.version,
                snapshot,
                changed: d.changed.iter().map(assignment_message).collect(),
                removed: d.removed,
            }))
        });
        // Ends when the node stops, like an ownership watch.
        let stopping = WatchStream::new(self.0.shutdown_signal()).filter(|stopped| *stopped).map(|_| None);
        Ok(Response::new(Box::pin(updates.map(Some).merge(stopping).map_while(|u| u))))
    }

    async fn report_load(&self, req: Request<proto::ReportLoadRequest>) -> Result<Response<proto::ReportLoadResponse>, Status> {
        let node = self.node()?;
        let samples = crate::node::load::check_samples(&node.topology().map, &req.into_inner().samples)
            .map_err(|why| Status::invalid_argument(format!("the load report counts nothing: {why}")))?;
        for sample in &samples {
            node.load.record_sample(sample);
        }
        Ok(Response::new(proto::ReportLoadResponse { counted: samples.len() as u32 }))
    }

    async fn acknowledge(&self, req: Request<proto::AcknowledgeRequest>) -> Result<Response<proto::AcknowledgeResponse>, Status> {
        use proto::acknowledge_request::Ack;
        let r = req.into_inner();
        let node = self.node()?;
        let epoch = i64::try_from(r.epoch).map_err(|_| Status::invalid_argument(format!("epoch {} is out of range", r.epoch)))?;
        match Ack::try_from(r.ack) {
            Ok(Ack::Released) if node.leases.is_handing_over(&r.shard, epoch) => node.leases.acks.release(&r.shard, epoch),
            Ok(Ack::Released) => {
                return Err(Status::failed_precondition(format!(
                    "this node is not handing shard `{}` over at epoch {epoch}: nothing waits for this answer",
                    r.shard
                )));
            }
            Ok(Ack::Ready) if node.leases.ready(&r.shard, epoch) => {}
            Ok(Ack::Ready) => {
                return Err(Status::failed_precondition(format!(
                    "this node is not readying shard `{}` at epoch {epoch} (it serves it already, after the ready \
                     timeout, or does not hold it): nothing waits for this answer",
                    r.shard
                )));
            }
            _ => {
                return Err(Status::invalid_argument(format!("ack {} is not one this node takes: use RELEASED or READY", r.ack)));
            }
        }
        Ok(Response::new(proto::AcknowledgeResponse {}))
    }
}

#[tonic::async_trait]
impl admin_server::Admin for Api {
    async fn status(&self, _req: Request<proto::StatusRequest>) -> Result<Response<proto::StatusResponse>, Status> {
        let Some(node) = self.0.node() else {
            return Ok(Response::new(proto::StatusResponse {
                state: UNPROVISIONED.into(),
                insecure_listen: crate::security::exposure::insecure(&self.0.settings),
                ..Default::default()
            }));
        };
        let node = &node;
        let crate::node::ClusterView { registry, rows, now } = node.cluster_view().await.map_err(internal)?;
        let members = node.members(&registry).await.map_err(internal)?;
        let policies = node.policy_records().await.map_err(internal)?;
        let leases: Vec<proto::ShardLease> = rows.iter().filter(|r| r.live).map(|r| lease_message(node, r, now)).collect();
        let topology = node.topology();
        let unowned = topology
            .map
            .shards()
            .iter()
            .filter(|s| !rows.iter().any(|r| r.shard == s.id && r.live))
            .map(|s| s.id.clone())
            .collect();
        let nodes = registry
            .iter()
            .filter(|r| r.live)
            .map(|r| proto::NodeStatus {
                name: r.name.clone(),
                uuid: r.id.to_string(),
                state: r.state.to_string(),
                address: r.address.clone(),
                last_seen_ms_ago: (now - r.last_seen).num_milliseconds().max(0),
                shards_held: rows.iter().filter(|l| l.live && l.holder == Some(r.id)).count() as u32,
                version: members.iter().find(|m| m.id == r.id).map(|m| m.version.clone()).unwrap_or_default(),
                protocol: members.iter().find(|m| m.id == r.id).map_or(0, |m| m.protocol),
                policies: policies.by_node.get(&r.id).map(|p| p.hashes.clone()).unwrap_or_default().into_iter().collect(),
            })
            .collect();
        Ok(Response::new(proto::StatusResponse {
            node: node.name.clone(),
            state: node.lifecycle().as_str().to_string(),
            config_version: topology.config.version,
            nodes,
            leases,
            unowned,
            insecure_listen: crate::security::exposure::insecure(&self.0.settings),
            cluster_policies: policies.cluster.into_iter().collect(),
            policy_mismatch: node.policy_mismatch().iter().map(ToString::to_string).collect(),
            policy_fallbacks: node.policy_fallbacks(),
        }))
    }

    async fn load(&self, req: Request<proto::LoadRequest>) -> Result<Response<proto::LoadResponse>, Status> {
        let shard = req.into_inner().shard;
        let loads = self.node()?.load.snapshot(Some(shard.as_str()).filter(|s| !s.is_empty()));
        Ok(Response::new(proto::LoadResponse { shards: loads.into_iter().map(Into::into).collect() }))
    }

    async fn drain(&self, _req: Request<proto::DrainRequest>) -> Result<Response<proto::DrainResponse>, Status> {
        let report = self.node()?.drain(false).await.map_err(internal)?;
        Ok(Response::new(proto::DrainResponse {
            handed_over: report.handed_over,
            rounds: report.rounds,
            kept: report.kept.into_iter().map(|k| proto::KeptShard { shard: k.shard, why: k.why }).collect(),
        }))
    }

    async fn upgrade_status(
        &self,
        _req: Request<proto::UpgradeStatusRequest>,
    ) -> Result<Response<proto::UpgradeStatusResponse>, Status> {
        let node = self.node()?;
        Ok(Response::new(super::versions::upgrade_status(&node).await?))
    }

    async fn finalize_upgrade(
        &self,
        req: Request<proto::FinalizeUpgradeRequest>,
    ) -> Result<Response<proto::FinalizeUpgradeResponse>, Status> {
        let node = self.node()?;
        Ok(Response::new(super::versions::finalize_upgrade(&node, &req.into_inner().version).await?))
    }

    async fn bootstrap(&self, req: Request<proto::BootstrapRequest>) -> Result<Response<proto::BootstrapResponse>, Status> {
        let r = req.into_inner();
        if r.node_id.is_empty() {
            return Err(Status::invalid_argument("node_id must not be empty"));
        }
        let config = parse_config(&r.config_json)?;
        let node = self.0.bootstrap(&r.node_id, config).await.map_err(|e| match e {
            BootstrapError::AlreadyProvisioned(_) => Status::already_exists(e.to_string()),
            BootstrapError::Start(_) => Status::unavailable(e.to_string()),
            // The request contradicts itself: no node state can make it right.
            BootstrapError::Invalid(_) | BootstrapError::NotInConfig(_) => Status::invalid_argument(e.to_string()),
            _ => Status::failed_precondition(e.to_string()),
        })?;
        Ok(Response::new(proto::BootstrapResponse { state: READY.into(), config_version: node.topology().config.version }))
    }

    async fn update_config(
        &self,
        req: Request<proto::UpdateConfigRequest>,
    ) -> Result<Response<proto::UpdateConfigResponse>, Status> {
        let config = parse_config(&req.into_inner().config_json)?;
        let node = self.node()?;
        // Validation and fsync block: off the async threads.
        let version = tokio::task::spawn_blocking(move || node.update_config(config))
            .await
            .map_err(|e| Status::internal(format!("the config update stopped: {e}")))?
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        Ok(Response::new(proto::UpdateConfigResponse { config_version: version }))
    }

    async fn reload_policies(
        &self,
        req: Request<proto::ReloadPoliciesRequest>,
    ) -> Result<Response<proto::ReloadPoliciesResponse>, Status> {
        let adopt = req.into_inner().adopt;
        let node = self.node()?;
        let slots = node
            .reload(adopt)
            .await
            .map_err(|e| Status::failed_precondition(format!("reload failed, the previous policies stay in use: {e}")))?;
        let mismatch = node.policy_mismatch().iter().map(ToString::to_string).collect();
        Ok(Response::new(proto::ReloadPoliciesResponse { slots, mismatch }))
    }

    async fn get_config(&self, _req: Request<proto::GetConfigRequest>) -> Result<Response<proto::GetConfigResponse>, Status> {
        Ok(Response::new(match self.0.node() {
            Some(node) => {
                let topology = node.topology();
                proto::GetConfigResponse {
                    config_json: topology.config.to_json(),
                    config_version: topology.config.version,
                    state: node.lifecycle().as_str().into(),
                }
            }
            None => proto::GetConfigResponse { state: UNPROVISIONED.into(), ..Default::default() },
        }))
    }
}

#[tonic::async_trait]
impl peer_server::Peer for Api {
    async fn notice(&self, req: Request<proto::OwnershipNotice>) -> Result<Response<proto::NoticeAck>, Status> {
        let n = req.into_inner();
        let holder = uuid::Uuid::parse_str(&n.holder_uuid)
            .map_err(|e| Status::invalid_argument(format!("holder_uuid `{}` is not a UUID: {e}", n.holder_uuid)))?;
        let epoch = i64::try_from(n.epoch).map_err(|_| Status::invalid_argument(format!("epoch {} is out of range", n.epoch)))?;
        self.node()?.on_notice(&n.shard, epoch, holder).await;
        Ok(Response::new(proto::NoticeAck {}))
    }

    async fn node_down(&self, req: Request<proto::NodeDownNotice>) -> Result<Response<proto::NoticeAck>, Status> {
        self.node()?.on_node_down(&req.into_inner().node);
        Ok(Response::new(proto::NoticeAck {}))
    }
}

/// The state names of the admin plane besides the lifecycle states.
pub const UNPROVISIONED: &str = "UNPROVISIONED";
pub const READY: &str = "READY";
