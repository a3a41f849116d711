//! The `Coordination` service: target affinity, the instance registry and
//! deployment state, over the node's Redis coordinator.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::coord::{
    self, Coordinator, Declined, DeploymentState, DeploymentUpdate, Dispatch, ListFilter, NewDeployment, Progress,
};
use crate::node::control::Control;
use crate::proto::{self, coordination_server};

#[derive(Clone)]
pub struct Coordination(pub Arc<Control>);

impl Coordination {
    fn coord(&self) -> Result<Coordinator, Status> {
        let node = self.0.node().ok_or_else(|| Status::unavailable("this node is UNPROVISIONED"))?;
        node.coord.clone().ok_or_else(|| {
            Status::failed_precondition(
                "a standalone node has no Redis coordination; run in cluster mode ([cluster] enabled = true, redis_url)",
            )
        })
    }
}

/// Response metadata of `DeploymentList`: the ids (comma-separated) of
/// records the listing skipped because they are no deployment document.
pub const UNREADABLE_DEPLOYMENTS: &str = "chitin-unreadable-deployments";

fn json(value: &impl serde::Serialize) -> Result<Response<proto::JsonResponse>, Status> {
    serde_json::to_string_pretty(value)
        .map(|json| Response::new(proto::JsonResponse { json }))
        .map_err(|e| Status::internal(e.to_string()))
}

fn redis(e: impl std::fmt::Display) -> Status {
    Status::unavailable(format!("Redis: {e}"))
}

/// A bad target or instance id is the caller's; only Redis failures are UNAVAILABLE.
fn affinity_error(e: coord::AffinityError) -> Status {
    match e {
        coord::AffinityError::InvalidTarget { .. } | coord::AffinityError::InstanceId(_) => {
            Status::invalid_argument(e.to_string())
        }
        coord::AffinityError::TargetOwnedByOther { .. } => Status::failed_precondition(e.to_string()),
        coord::AffinityError::TooManyClaims { .. } => Status::resource_exhausted(e.to_string()),
        coord::AffinityError::Redis(_) => redis(e),
    }
}

fn deployment_error(e: coord::DeploymentError) -> Status {
    let text = e.to_string();
    match e {
        coord::DeploymentError::NotFound { .. } => Status::not_found(text),
        coord::DeploymentError::Redis(_) | coord::DeploymentError::Conflict { .. } => Status::unavailable(text),
        coord::DeploymentError::InvalidId { .. }
        | coord::DeploymentError::NotTerminal { .. }
        | coord::DeploymentError::InvalidStartState { .. }
        | coord::DeploymentError::InstanceId(_) => Status::invalid_argument(text),
        _ => Status::failed_precondition(text),
    }
}

fn state(s: &str) -> Result<Option<DeploymentState>, Status> {
    if s.is_empty() {
        return Ok(None);
    }
    s.parse().map(Some).map_err(Status::invalid_argument)
}

fn target(r: Request<proto::TargetRequest>) -> Result<String, Status> {
    let t = r.into_inner().target_id;
    if t.is_empty() {
        return Err(Status::invalid_argument("target_id must not be empty"));
    }
    Ok(t)
}

#[tonic::async_trait]
impl coordination_server::Coordination for Coordination {
    async fn dispatch(&self, req: Request<proto::DispatchRequest>) -> Result<Response<proto::DispatchResponse>, Status> {
        let r = req.into_inner();
        if r.target_id.is_empty() {
            return Err(Status::invalid_argument("target_id must not be empty"));
        }
        let node = self.0.node().ok_or_else(|| Status::unavailable("this node is UNPROVISIONED"))?;
        if !node.is_ready() {
            // Its claims were released when it started leaving: a claim now
            // would outlive the node.
            return Err(Status::unavailable(format!(
                "this node is {}; dispatch target {} to another node",
                node.lifecycle().as_str(),
                r.target_id
            )));
        }
        let Some(coord) = node.coord.clone() else {
            // One node owns every target.
            return Ok(Response::new(proto::DispatchResponse {
                outcome: Dispatch::Claimed.wire_name().into(),
                instance_id: node.uuid.to_string(),
                fail_open_window: None,
            }));
        };
        let (outcome, window) = coord.dispatcher.dispatch_with_window(&r.target_id).await.map_err(|d| match d {
            Declined::TargetOwnedByOther { owner, .. } => Status::failed_precondition(format!(
                "TargetOwnedByOther{{owner={owner}}}: target {} is owned by another live instance",
                r.target_id
            )),
            Declined::InvalidTarget { .. } => Status::invalid_argument(d.to_string()),
            Declined::TooManyClaims { .. } => Status::resource_exhausted(d.to_string()),
        })?;
        Ok(Response::new(proto::DispatchResponse {
            outcome: outcome.wire_name().into(),
            instance_id: node.uuid.to_string(),
            fail_open_window: window
                .map(|w| proto::FailOpenWindow { start_unix_ms: w.start_unix_ms, end_unix_ms: w.end_unix_ms }),
        }))
    }

    async fn affinity_owner(&self, req: Request<proto::TargetRequest>) -> Result<Response<proto::OwnerResponse>, Status> {
        let target = target(req)?;
        let owner = self.coord()?.affinity.owner(&target).await.map_err(affinity_error)?;
        Ok(Response::new(proto::OwnerResponse { owner: owner.unwrap_or_default() }))
    }

    async fn affinity_list(&self, req: Request<proto::InstanceRequest>) -> Result<Response<proto::TargetsResponse>, Status> {
        let coord = self.coord()?;
        let id = req.into_inner().instance_id;
        let targets = if id.is_empty() { coord.affinity.my_targets().await } else { coord.affinity.list(&id).await }
            .map_err(affinity_error)?;
        Ok(Response::new(proto::TargetsResponse { targets }))
    }

    async fn affinity_release(&self, req: Request<proto::TargetRequest>) -> Result<Response<proto::ReleaseResponse>, Status> {
        let target = target(req)?;
        let released = self.coord()?.affinity.release(&target).await.map_err(affinity_error)?;
        Ok(Response::new(proto::ReleaseResponse { released }))
    }

    async fn instances(&self, _req: Request<proto::Empty>) -> Result<Response<proto::JsonResponse>, Status> {
        json(&self.coord()?.registry.list_instances().await.map_err(redis)?)
    }

    async fn cleanup_stale(&self, _req: Request<proto::Empty>) -> Result<Response<proto::JsonResponse>, Status> {
        json(&self.coord()?.monitor.sweep().await.map_err(redis)?)
    }

    async fn deployment_start(
        &self,
        req: Request<proto::DeploymentStartRequest>,
    ) -> Result<Response<proto::JsonResponse>, Status> {
        let r = req.into_inner();
        let new = NewDeployment {
            description: r.description,
            state: state(&r.state)?,
            message: Some(r.message).filter(|m| !m.is_empty()),
            metadata: r.metadata.into_iter().collect(),
            ..NewDeployment::default()
        };
        json(&self.coord()?.deployments.start(new).await.map_err(deployment_error)?)
    }

    async fn deployment_update(
        &self,
        req: Request<proto::DeploymentUpdateRequest>,
    ) -> Result<Response<proto::JsonResponse>, Status> {
        let r = req.into_inner();
        if r.total == 0 && r.completed > 0 {
            return Err(Status::invalid_argument(format!(
                "completed = {} needs total (the steps planned); total = 0 leaves the progress unchanged",
                r.completed
            )));
        }
        if r.completed > r.total {
            return Err(Status::invalid_argument(format!("completed = {} must not exceed total = {}", r.completed, r.total)));
        }
        let update = DeploymentUpdate {
            state: state(&r.state)?,
            message: Some(r.message).filter(|m| !m.is_empty()),
            progress: (r.total > 0).then_some(Progress { completed: r.completed, total: r.total }),
            metadata: r.metadata.into_iter().collect(),
        };
        json(&self.coord()?.deployments.update(&r.deployment_id, update).await.map_err(deployment_error)?)
    }

    async fn deployment_finish(
        &self,
        req: Request<proto::DeploymentFinishRequest>,
    ) -> Result<Response<proto::JsonResponse>, Status> {
        let r = req.into_inner();
        let to = state(&r.state)?.ok_or_else(|| Status::invalid_argument("state must be succeeded, failed or cancelled"))?;
        let message = Some(r.message).filter(|m| !m.is_empty());
        json(&self.coord()?.deployments.finish(&r.deployment_id, to, message).await.map_err(deployment_error)?)
    }

    async fn deployment_show(&self, req: Request<proto::DeploymentShowRequest>) -> Result<Response<proto::JsonResponse>, Status> {
        let id = req.into_inner().deployment_id;
        match self.coord()?.deployments.show(&id).await.map_err(deployment_error)? {
            Some(d) => json(&d),
            None => Err(Status::not_found(format!("no deployment {id} (expired, or never started)"))),
        }
    }

    async fn deployment_list(&self, req: Request<proto::DeploymentListRequest>) -> Result<Response<proto::JsonResponse>, Status> {
        let r = req.into_inner();
        let filter = ListFilter { active_only: r.active_only, instance: Some(r.instance_id).filter(|i| !i.is_empty()) };
        let listing = self.coord()?.deployments.list(&filter).await.map_err(deployment_error)?;
        let mut response = json(&listing.deployments)?;
        if !listing.unreadable.is_empty() {
            tracing::warn!(unreadable = ?listing.unreadable, "deployment records that are no deployment document were skipped in a listing");
            let ids: Vec<&str> = listing.unreadable.iter().map(|u| u.deployment_id.as_str()).collect();
            // Ids are UUIDs, so the value is ASCII.
            if let Ok(value) = ids.join(",").parse() {
                response.metadata_mut().insert(UNREADABLE_DEPLOYMENTS, value);
            }
        }
        Ok(response)
    }
}
