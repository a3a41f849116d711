//! The planned handoffs both handoff benches measure, one after another
//! under the bench's load: a drain of the busiest node (then its restart,
//! outside the phases), a SIGTERM of one node and its restart, a rolling
//! restart of every node. Each phase is named with its start and end.

use std::time::{Duration, Instant};

use chitin::proto;

use crate::support::cluster::{Cluster, NodeClients as _};

/// A phase: its name, when it began and ended.
pub type Phase = (&'static str, Instant, Instant);

/// Runs the phases on `c`, settled with `status`; returns them and what the
/// drain said.
pub async fn planned_handoffs(c: &mut Cluster, status: &proto::StatusResponse) -> (Vec<Phase>, proto::DrainResponse) {
    let mut phases = Vec::new();
    let t = Instant::now();
    let busiest = c.busiest(status);
    let drained = c.nodes[busiest].admin().await.unwrap().drain(proto::DrainRequest {}).await.unwrap().into_inner();
    tokio::time::sleep(Duration::from_secs(1)).await;
    phases.push(("drain", t, Instant::now()));
    // The drained node serves again once restarted; do it outside the phases.
    c.nodes[busiest].terminate(Duration::from_secs(30)).unwrap();
    c.nodes[busiest].start().unwrap();
    c.nodes[busiest].wait_ready(Duration::from_secs(60)).await.unwrap();
    c.wait_settled(Duration::from_secs(60)).await.unwrap();

    let t = Instant::now();
    let victim = (busiest + 1) % c.nodes.len();
    c.nodes[victim].terminate(Duration::from_secs(30)).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    c.nodes[victim].start().unwrap();
    c.nodes[victim].wait_ready(Duration::from_secs(60)).await.unwrap();
    c.wait_settled(Duration::from_secs(60)).await.unwrap();
    phases.push(("SIGTERM of one node, and its restart", t, Instant::now()));

    let t = Instant::now();
    for i in 0..c.nodes.len() {
        c.nodes[i].terminate(Duration::from_secs(30)).unwrap();
        c.nodes[i].start().unwrap();
        c.nodes[i].wait_ready(Duration::from_secs(60)).await.unwrap();
        c.wait_all_owned(Duration::from_secs(60)).await.unwrap();
    }
    c.wait_settled(Duration::from_secs(60)).await.unwrap();
    phases.push(("rolling restart of every node", t, Instant::now()));
    (phases, drained)
}
