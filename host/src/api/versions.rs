//! The node's side of versions on the wire and of finalize: the layer that
//! judges every call's protocol before it reaches a service, and the Admin
//! calls `UpgradeStatus` and `FinalizeUpgrade`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use tonic::Status;

use crate::node::Node;
use crate::node::control::Control;
use crate::proto;
use crate::upgrade::wire::{Caller, Window, judge};
use crate::upgrade::{self, PROTOCOL, Release, gates};

/// How long a read cluster version is trusted by the layer. A finalize on
/// another node reaches this one within it.
const CLUSTER_VERSION_TTL: Duration = Duration::from_secs(2);

/// The state of the protocol layer.
pub(crate) struct ProtocolCheck {
    control: Arc<Control>,
    cluster: Mutex<Option<(Release, Instant)>>,
}

impl ProtocolCheck {
    pub(crate) fn new(control: Arc<Control>) -> Arc<ProtocolCheck> {
        Arc::new(ProtocolCheck { control, cluster: Mutex::new(None) })
    }

    /// The cluster version, read at most every [`CLUSTER_VERSION_TTL`]. An
    /// unprovisioned node, or a database that cannot be read, counts as not
    /// finalized (the last value read, if any): the gate only ever refuses.
    async fn cluster_version(&self) -> Release {
        let cached = *self.cluster.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((release, _)) = cached.filter(|(_, at)| at.elapsed() < CLUSTER_VERSION_TTL) {
            return release;
        }
        let Some(node) = self.control.node() else { return Release::first() };
        match node.cluster_version().await {
            Ok(release) => {
                *self.cluster.lock().unwrap_or_else(|p| p.into_inner()) = Some((release, Instant::now()));
                release
            }
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the cluster version; judging with the last one read");
                cached.map_or(Release::first(), |(r, _)| r)
            }
        }
    }

    /// The window a call to `path` from `caller` is judged against: a node
    /// or chitin tool (stamped, or any Peer call) against the cluster's
    /// floor, an application's plain client against everything this binary
    /// serves.
    async fn window(&self, path: &str, caller: &Caller) -> Window {
        let peer = path.starts_with("/chitin.v1.Peer/");
        // A caller that speaks this binary's protocol passes any floor: no read.
        if !(peer || caller.stamped) || caller.max >= PROTOCOL {
            return Window::FULL;
        }
        Window { min: upgrade::peer_floor(self.cluster_version().await), max: PROTOCOL }
    }
}

/// Refuses a call whose protocol is outside this node's window
/// (FAILED_PRECONDITION naming both versions) or whose protocol metadata is
/// malformed (INVALID_ARGUMENT), before any service sees it.
pub(crate) async fn check_protocol(
    State(check): State<Arc<ProtocolCheck>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let caller = match Caller::from_headers(req.headers()) {
        Ok(c) => c,
        Err(status) => return status.into_http(),
    };
    let window = check.window(req.uri().path(), &caller).await;
    match judge(&caller, window) {
        Ok(_) => next.run(req).await,
        Err(status) => {
            tracing::info!(path = %req.uri().path(), error = %status.message(), "refused a call of another protocol");
            status.into_http()
        }
    }
}

/// The live members and the cluster version, as the database has them now.
async fn read(node: &Node) -> Result<(Vec<upgrade::Member>, Release), Status> {
    let unavailable = |e: crate::lease::LeaseError| Status::unavailable(format!("not applied: {e}"));
    let registry = node.refresh_registry().await.map_err(unavailable)?;
    let members = node.members(&registry).await.map_err(unavailable)?;
    let cluster = node.cluster_version().await.map_err(unavailable)?;
    Ok((members, cluster))
}

/// `UpgradeStatus`.
pub(crate) async fn upgrade_status(node: &Node) -> Result<proto::UpgradeStatusResponse, Status> {
    let (live, cluster) = read(node).await?;
    let binary = Release::binary();
    let target = upgrade::finalize_target(cluster, binary);
    let blockers = match upgrade::plan_finalize(cluster, binary, binary, &live) {
        Ok(_) => Vec::new(),
        Err(why) => why,
    };
    Ok(proto::UpgradeStatusResponse {
        cluster_version: cluster.to_string(),
        node_version: upgrade::BINARY_VERSION.to_string(),
        nodes: live
            .iter()
            .map(|m| proto::NodeStatus {
                name: m.name.clone(),
                uuid: m.id.to_string(),
                version: m.version.clone(),
                protocol: m.protocol,
                ..Default::default()
            })
            .collect(),
        gates: gates::GATES
            .iter()
            .map(|g| proto::GateState {
                name: g.name.into(),
                since: g.since.to_string(),
                what: g.what.into(),
                active: g.active(cluster),
            })
            .collect(),
        blockers: if target.is_some() { blockers } else { Vec::new() },
        finalize_to: target.map(|r| r.to_string()).unwrap_or_default(),
    })
}

/// `FinalizeUpgrade`.
pub(crate) async fn finalize_upgrade(node: &Node, requested: &str) -> Result<proto::FinalizeUpgradeResponse, Status> {
    let binary = Release::binary();
    let target = if requested.is_empty() {
        binary
    } else {
        requested.parse().map_err(|e: upgrade::version::BadVersion| Status::invalid_argument(format!("version: {e}")))?
    };
    let (live, cluster) = read(node).await?;
    let plan = upgrade::plan_finalize(cluster, target, binary, &live)
        .map_err(|why| Status::failed_precondition(format!("not finalized: {}", why.join("; "))))?;
    if plan.to != plan.from {
        node.set_cluster_version(plan.to).await.map_err(|e| Status::unavailable(format!("not applied: {e}")))?;
        let activated: Vec<&str> = plan.activated.iter().map(|g| g.name).collect();
        tracing::info!(from = %plan.from, to = %plan.to, ?activated, "the cluster is finalized");
    }
    Ok(proto::FinalizeUpgradeResponse {
        cluster_version: plan.to.to_string(),
        previous: plan.from.to_string(),
        activated: plan.activated.iter().map(|g| g.name.to_string()).collect(),
    })
}
