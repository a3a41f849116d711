//! The planned handoffs both handoff benches measure, one after another
//! under the bench's load: a drain of the busiest node (then its restart,
//! outside the phases), a SIGTERM of one node and its restart, a rolling
//! restart of every node. Each phase is named with its start and end.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use chitin::proto;

use crate::support::cluster::{Cluster, NodeClients as _};

/// A phase: its name, when it began and ended.
pub type Phase = (&'static str, Instant, Instant);

/// One write (or append) as a client saw it.
#[derive(Clone, Copy)]
pub struct Sample {
    pub started: Instant,
    pub took: Duration,
    pub ok: bool,
}

/// Latency figures of the writes started within a phase; the percentiles
/// and the longest are of those that succeeded.
pub struct Figures {
    pub count: usize,
    pub failed: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Figures {
    /// Of the `samples` started within `[from, to)`.
    pub fn of(samples: &[Sample], from: Instant, to: Instant) -> Figures {
        let window: Vec<&Sample> = samples.iter().filter(|s| s.started >= from && s.started < to).collect();
        let mut took: Vec<Duration> = window.iter().filter(|s| s.ok).map(|s| s.took).collect();
        took.sort();
        let at = |p: f64| if took.is_empty() { Duration::ZERO } else { crate::figures::pct(&took, p) };
        Figures {
            count: window.len(),
            failed: window.len() - took.len(),
            p50: at(50.0),
            p99: at(99.0),
            max: took.last().copied().unwrap_or_default(),
        }
    }
}

/// Milliseconds from the first call to `at`, so that the events printed
/// by [`mark`] and a bench's slowest writes read on one clock.
pub fn ms(at: Instant) -> f64 {
    static ZERO: OnceLock<Instant> = OnceLock::new();
    let zero = *ZERO.get_or_init(Instant::now);
    at.checked_duration_since(zero).unwrap_or_default().as_secs_f64() * 1000.0
}

/// Prints an event of the phases (to stderr, beside the figures).
fn mark(what: String) {
    eprintln!("[{:9.1} ms] {what}", ms(Instant::now()));
}

/// Runs the phases on `c`, settled with `status`; returns them and what the
/// drain said.
pub async fn planned_handoffs(c: &mut Cluster, status: &proto::StatusResponse) -> (Vec<Phase>, proto::DrainResponse) {
    let mut phases = Vec::new();
    let t = Instant::now();
    let busiest = c.busiest(status);
    mark(format!("drain of {}", c.nodes[busiest].name));
    let drained = c.nodes[busiest].admin().await.unwrap().drain(proto::DrainRequest {}).await.unwrap().into_inner();
    mark(format!("drained {}", c.nodes[busiest].name));
    tokio::time::sleep(Duration::from_secs(1)).await;
    phases.push(("drain", t, Instant::now()));
    // The drained node serves again once restarted; do it outside the phases.
    restart(c, busiest, Duration::ZERO).await;
    c.wait_settled(Duration::from_secs(60)).await.unwrap();

    let t = Instant::now();
    let victim = (busiest + 1) % c.nodes.len();
    restart(c, victim, Duration::from_secs(1)).await;
    c.wait_settled(Duration::from_secs(60)).await.unwrap();
    phases.push(("SIGTERM of one node, and its restart", t, Instant::now()));

    let t = Instant::now();
    for i in 0..c.nodes.len() {
        restart(c, i, Duration::ZERO).await;
        c.wait_all_owned(Duration::from_secs(60)).await.unwrap();
    }
    c.wait_settled(Duration::from_secs(60)).await.unwrap();
    phases.push(("rolling restart of every node", t, Instant::now()));
    (phases, drained)
}

/// Stops node `i` with SIGTERM (it drains first), leaves it down for
/// `down_for`, starts it again and waits until it is ready.
async fn restart(c: &mut Cluster, i: usize, down_for: Duration) {
    let node = &mut c.nodes[i];
    mark(format!("SIGTERM to {}", node.name));
    node.terminate(Duration::from_secs(30)).unwrap();
    mark(format!("{} exited", node.name));
    tokio::time::sleep(down_for).await;
    node.start().unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    mark(format!("{} ready again", node.name));
}
