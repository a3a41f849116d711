//! The nemesis: one bounded fault at a time, chosen from the seed. Each
//! fault ends by undoing itself (restart, resume, heal); the run then waits
//! for the cluster to recover before the next one.

use std::time::Duration;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::checker::Death;
use super::lab::Lab;
use super::rng::Rng;

/// What the nemesis can do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// `kill -9` a node; start it again after a delay.
    Kill,
    /// SIGSTOP a node past its lease TTL, then SIGCONT.
    Pause,
    /// SIGTERM a node (it drains and deregisters) and start it again.
    Restart,
    /// Drain a node through the admin API, then restart it.
    Drain,
    /// Kill the run's Redis and start it again (empty).
    Redis,
    /// Stop the run's PostgreSQL at once and start it again.
    Database,
    /// Cut one node off the network, past its lease TTL, then heal.
    Partition,
}

impl FaultKind {
    pub const ALL: [FaultKind; 7] = [
        FaultKind::Kill,
        FaultKind::Pause,
        FaultKind::Restart,
        FaultKind::Drain,
        FaultKind::Redis,
        FaultKind::Database,
        FaultKind::Partition,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Pause => "pause",
            FaultKind::Restart => "restart",
            FaultKind::Drain => "drain",
            FaultKind::Redis => "redis",
            FaultKind::Database => "database",
            FaultKind::Partition => "partition",
        }
    }

    /// Whether the fault takes a node's leases away without a handoff (the
    /// takeover bound applies).
    fn is_death(self) -> bool {
        matches!(self, FaultKind::Kill | FaultKind::Pause | FaultKind::Partition)
    }

    fn needs_node(self) -> bool {
        !matches!(self, FaultKind::Redis | FaultKind::Database)
    }
}

/// One injected fault.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FaultRecord {
    pub index: usize,
    pub kind: FaultKind,
    pub node: Option<String>,
    /// Milliseconds since the run's start.
    pub started_ms: u64,
    /// When the fault was undone.
    pub ended_ms: u64,
    /// How long the cluster took to recover after it was undone.
    pub recovered_ms: u64,
    pub detail: String,
}

/// Injects fault `index` of `kind`; returns its record and, for a fault that
/// kills a node's leases, the death the checker judges takeovers by.
pub async fn inject(
    lab: &mut Lab,
    rng: &mut Rng,
    index: usize,
    kind: FaultKind,
    since: std::time::Instant,
) -> Result<(FaultRecord, Option<Death>)> {
    let ms = || since.elapsed().as_millis() as u64;
    let k = if kind.needs_node() { Some(rng.below(lab.nodes.len())) } else { None };
    let node = k.map(|k| lab.nodes[k].name.clone());
    let held = match &node {
        Some(n) if kind.is_death() => lab.held_by(n).await,
        _ => Vec::new(),
    };
    let past_ttl = lab.ttl + lab.renew;
    let started_ms = ms();
    let died_at = lab.db_now_us();
    let detail = match (kind, k) {
        (FaultKind::Kill, Some(k)) => {
            lab.nodes[k].kill9()?;
            let down = rng.between(lab.ttl, lab.ttl * 2);
            tokio::time::sleep(down).await;
            lab.start_node(k)?;
            format!("killed, restarted after {down:?}")
        }
        (FaultKind::Pause, Some(k)) => {
            lab.nodes[k].pause()?;
            let down = past_ttl + rng.between(Duration::from_millis(500), Duration::from_secs(2));
            tokio::time::sleep(down).await;
            lab.nodes[k].resume()?;
            format!("paused for {down:?}")
        }
        (FaultKind::Restart, Some(k)) => {
            let graceful = tokio::task::block_in_place(|| lab.nodes[k].terminate(Duration::from_secs(60)))?;
            let down = rng.between(Duration::from_millis(200), Duration::from_millis(1500));
            tokio::time::sleep(down).await;
            lab.start_node(k)?;
            format!("SIGTERM ({}), restarted after {down:?}", if graceful { "exited" } else { "killed after 60 s" })
        }
        (FaultKind::Drain, Some(k)) => {
            let drained = lab.drain(k).await.with_context(|| format!("drain {}", lab.nodes[k].name));
            let graceful = tokio::task::block_in_place(|| lab.nodes[k].terminate(Duration::from_secs(60)))?;
            lab.start_node(k)?;
            match drained {
                Ok(d) => format!("drained ({} shards in {} rounds), restarted (exit {graceful})", d.handed_over, d.rounds),
                Err(e) => format!("drain failed ({e:#}), restarted (exit {graceful})"),
            }
        }
        (FaultKind::Redis, None) => {
            lab.redis.down();
            let down = rng.between(Duration::from_secs(1), Duration::from_secs(4));
            tokio::time::sleep(down).await;
            lab.redis.up()?;
            format!("Redis down for {down:?}")
        }
        (FaultKind::Database, None) => {
            let pg = lab.postgres.as_mut().context("no private PostgreSQL to restart")?;
            tokio::task::block_in_place(|| pg.down())?;
            let down = rng.between(Duration::from_secs(1), Duration::from_secs(3));
            tokio::time::sleep(down).await;
            tokio::task::block_in_place(|| pg.up())?;
            format!("PostgreSQL stopped (immediate) for {down:?}")
        }
        (FaultKind::Partition, Some(k)) => {
            let net = lab.network.as_ref().context("no network namespaces to cut")?;
            net.cut(k)?;
            let down = past_ttl + rng.between(Duration::from_millis(500), Duration::from_secs(2));
            tokio::time::sleep(down).await;
            lab.network.as_ref().expect("checked").heal(k)?;
            format!("cut off for {down:?}")
        }
        _ => unreachable!("node chosen exactly for node faults"),
    };
    let ended_ms = ms();
    let recovered = lab.wait_recovered(Duration::from_secs(90)).await?;
    let death = node.clone().filter(|_| kind.is_death()).map(|node| Death { fault: index, node, at_us: died_at, shards: held });
    let record = FaultRecord {
        index,
        kind,
        node,
        started_ms,
        ended_ms,
        recovered_ms: recovered.as_millis() as u64,
        detail,
    };
    Ok((record, death))
}
