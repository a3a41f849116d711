//! The standard gRPC health service (`grpc.health.v1.Health`), which
//! Kubernetes gRPC probes, Envoy and other load balancers call: the whole
//! server (`""`) and each chitin service are SERVING while the node takes
//! work (joining or active), NOT_SERVING while it is unprovisioned, leaving
//! or stopped. It needs no token: it tells only that.

use std::sync::Arc;
use std::time::Duration;

use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::node::control::Control;

/// The services whose health is reported, besides the server's own (`""`).
const SERVICES: [&str; 6] =
    ["", "chitin.v1.Journal", "chitin.v1.Ownership", "chitin.v1.Admin", "chitin.v1.Coordination", "chitin.v1.Peer"];

/// How often the reported status follows the node's lifecycle.
const FOLLOW_EVERY: Duration = Duration::from_millis(250);

/// The health service, and the task that keeps its answers current until
/// the stop (after which everything is NOT_SERVING).
pub(crate) fn service(
    control: Arc<Control>,
) -> (tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>, tokio::task::JoinHandle<()>) {
    let (reporter, server) = tonic_health::server::health_reporter();
    let mut stop = control.shutdown_signal();
    let task = tokio::spawn(async move {
        let mut reported = None;
        loop {
            let serving = control.node().is_some_and(|n| n.is_ready());
            if reported != Some(serving) {
                report(&reporter, serving).await;
                reported = Some(serving);
            }
            tokio::select! {
                _ = stop.changed() => break,
                _ = tokio::time::sleep(FOLLOW_EVERY) => {}
            }
        }
        report(&reporter, false).await;
    });
    (server, task)
}

async fn report(reporter: &HealthReporter, serving: bool) {
    let status = if serving { ServingStatus::Serving } else { ServingStatus::NotServing };
    for service in SERVICES {
        reporter.set_service_status(service, status).await;
    }
}
