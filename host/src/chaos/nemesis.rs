//! The nemesis: one bounded fault at a time, chosen from the seed. Each
//! fault ends by undoing itself (restart, resume, heal); the run then waits
//! for the cluster to recover before the next one.

use std::time::Duration;

use crate::testkit::KitError;

use super::ChaosError;
use super::checker::Death;
use super::fault::{FaultKind, FaultRecord};
use super::lab::Lab;
use super::rng::Rng;

/// The next fault's kind, from shuffled bags of `kinds` so that every kind
/// comes round once in each stretch of `kinds.len()` faults. A kind the
/// cluster cannot take now (`can_take` false: add-node once the spares ran
/// out, move-shard while every node holds every shard) is passed over;
/// `None` when no kind can be taken, which ends the run.
pub(crate) fn draw(
    bag: &mut Vec<FaultKind>,
    kinds: &[FaultKind],
    rng: &mut Rng,
    can_take: impl Fn(FaultKind) -> bool,
) -> Option<FaultKind> {
    if !kinds.iter().any(|&k| can_take(k)) {
        return None;
    }
    loop {
        if bag.is_empty() {
            bag.extend_from_slice(kinds);
            rng.shuffle(bag);
        }
        let kind = bag.pop().expect("refilled");
        if can_take(kind) {
            return Some(kind);
        }
    }
}

/// The node of a node fault: drawn from the seed, then, for faults that
/// need one, moved on to the next node holding shards (so that every draw
/// of the seed stays the same whatever the cluster looks like).
fn choose(drawn: usize, held: &[usize]) -> usize {
    (0..held.len()).map(|i| (drawn + i) % held.len()).find(|&k| held[k] > 0).unwrap_or(drawn)
}

/// Why a graceful stop was not one.
fn stop_outcome(stop: Result<std::process::ExitStatus, KitError>) -> Result<Option<String>, ChaosError> {
    match stop {
        Ok(status) if status.success() => Ok(None),
        Ok(status) => Ok(Some(format!("the node exited with {status} after SIGTERM"))),
        Err(KitError::StopTimedOut { within, .. }) => Ok(Some(format!("SIGTERM hung; the node was killed after {within:?}"))),
        Err(e) => Err(e.into()),
    }
}

/// What carrying a fault out came to: its detail for the report, and why
/// it did not disturb what it was meant to, if it did not.
struct Carried {
    detail: String,
    ineffective: Option<String>,
}

/// A fault on node `k`, which held `held` shards.
async fn node_fault(lab: &mut Lab, rng: &mut Rng, kind: FaultKind, k: usize, held: usize) -> Result<Carried, ChaosError> {
    let past_ttl = lab.ttl + lab.renew;
    let stop_within = Duration::from_secs(60);
    let mut ineffective = None;
    let detail = match kind {
        FaultKind::Kill => {
            lab.nodes[k].kill9()?;
            let down = rng.between(lab.ttl, lab.ttl * 2);
            tokio::time::sleep(down).await;
            lab.nodes[k].start()?;
            format!("killed, restarted after {down:?}")
        }
        FaultKind::Pause => {
            lab.nodes[k].pause()?;
            let down = past_ttl + rng.between(Duration::from_millis(500), Duration::from_secs(2));
            tokio::time::sleep(down).await;
            lab.nodes[k].resume()?;
            format!("paused for {down:?}")
        }
        FaultKind::Restart => {
            ineffective = stop_outcome(tokio::task::block_in_place(|| lab.nodes[k].terminate(stop_within)))?;
            let down = rng.between(Duration::from_millis(200), Duration::from_millis(1500));
            tokio::time::sleep(down).await;
            lab.nodes[k].start()?;
            format!("SIGTERM ({}), restarted after {down:?}", ineffective.as_deref().unwrap_or("exited"))
        }
        FaultKind::Drain => {
            let drained = lab.drain(k).await;
            let stopped = stop_outcome(tokio::task::block_in_place(|| lab.nodes[k].terminate(stop_within)))?;
            lab.nodes[k].start()?;
            let detail = match &drained {
                Ok(d) => format!("drained ({} shards in {} rounds)", d.handed_over, d.rounds),
                Err(e) => format!("drain failed ({e})"),
            };
            ineffective = match drained {
                Err(e) => Some(format!("Admin.Drain failed: {e}")),
                Ok(d) if d.handed_over == 0 => Some(format!("Admin.Drain handed nothing over (the node held {})", held)),
                Ok(_) => stopped.clone(),
            };
            format!("{detail}, restarted ({})", stopped.as_deref().unwrap_or("exited"))
        }
        FaultKind::Partition => {
            let net = lab.network.as_ref().ok_or(ChaosError::Unavailable("no network namespaces to cut"))?;
            net.cut(k)?;
            let down = past_ttl + rng.between(Duration::from_millis(500), Duration::from_secs(2));
            tokio::time::sleep(down).await;
            net.heal(k)?;
            format!("cut off for {down:?}")
        }
        _ => unreachable!("a node is chosen exactly for node faults"),
    };
    Ok(Carried { detail, ineffective })
}

/// A fault of the cluster's servers or topology.
async fn cluster_fault(lab: &mut Lab, rng: &mut Rng, kind: FaultKind) -> Result<Carried, ChaosError> {
    let mut ineffective = None;
    let detail = match kind {
        FaultKind::Redis => {
            lab.redis.down();
            let down = rng.between(Duration::from_secs(1), Duration::from_secs(4));
            tokio::time::sleep(down).await;
            lab.redis.up()?;
            format!("Redis down for {down:?}")
        }
        FaultKind::Database => {
            let server = lab.server.as_mut().ok_or(ChaosError::Unavailable("no private database server to restart"))?;
            tokio::task::block_in_place(|| server.down())?;
            let down = rng.between(Duration::from_secs(1), Duration::from_secs(3));
            tokio::time::sleep(down).await;
            tokio::task::block_in_place(|| server.up())?;
            format!("{} for {down:?}", server.stop_name())
        }
        FaultKind::SplitShard | FaultKind::MoveShard | FaultKind::AddNode => {
            let outcome = match kind {
                FaultKind::SplitShard => lab.split(rng).await,
                FaultKind::MoveShard => lab.move_shard(rng).await,
                _ => lab.add_node().await,
            };
            match outcome {
                Ok(detail) => detail,
                Err(why) => {
                    ineffective = Some(format!("{} failed: {why}", kind.name()));
                    format!("{} failed ({why})", kind.name())
                }
            }
        }
        _ => unreachable!("no node is chosen exactly for cluster faults"),
    };
    Ok(Carried { detail, ineffective })
}

/// Injects fault `index` of `kind`; returns its record and, for a fault that
/// kills a node's leases, the death the checker judges takeovers by.
pub(crate) async fn inject(
    lab: &mut Lab,
    rng: &mut Rng,
    index: usize,
    kind: FaultKind,
    since: std::time::Instant,
) -> Result<(FaultRecord, Option<Death>), ChaosError> {
    let ms = || since.elapsed().as_millis() as u64;
    let drawn = if kind.needs_node() { Some(rng.below(lab.nodes.len())) } else { None };
    let (k, held) = match drawn {
        Some(drawn) if kind.wants_holder() => {
            let mut by_node = lab.held_by_each().await;
            let k = choose(drawn, &by_node.iter().map(Vec::len).collect::<Vec<_>>());
            (Some(k), std::mem::take(&mut by_node[k]))
        }
        other => (other, Vec::new()),
    };
    let node = k.map(|k| lab.nodes[k].name.clone());
    let started_ms = ms();
    let died_at = lab.db_now_us();
    let Carried { detail, ineffective } = match k {
        Some(k) => node_fault(lab, rng, kind, k, held.len()).await?,
        None => cluster_fault(lab, rng, kind).await?,
    };
    let ended_ms = ms();
    let recovered = lab.wait_recovered(Duration::from_secs(90)).await?;
    let death = node.clone().filter(|_| kind.is_death()).map(|node| Death {
        fault: index,
        node,
        at_us: died_at,
        shards: held.clone(),
        crash: kind == FaultKind::Kill,
    });
    let record = FaultRecord {
        index,
        kind,
        node,
        started_ms,
        ended_ms,
        recovered_ms: recovered.as_millis() as u64,
        held: held.len(),
        ineffective,
        detail,
    };
    Ok((record, death))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `EVERY` names each variant once, and `ALL` is every one that is no
    /// topology change: a kind added to the enum and not to the lists fails.
    #[test]
    fn every_kind_is_listed_and_the_default_leaves_out_the_topology_changes() {
        use clap::ValueEnum as _;
        assert_eq!(FaultKind::EVERY.as_slice(), FaultKind::value_variants());
        let untouched: Vec<FaultKind> = FaultKind::EVERY.into_iter().filter(|k| !k.is_topology_change()).collect();
        assert_eq!(FaultKind::ALL, untouched.as_slice());
    }

    #[test]
    fn a_node_fault_moves_on_to_the_next_holder() {
        let cases: [(usize, &[usize], usize); 5] = [
            (0, &[3, 2, 1], 0),
            (1, &[3, 0, 1], 2),
            (2, &[3, 0, 0], 0),
            // Nobody holds anything: the draw stands (and the verdict says so).
            (1, &[0, 0, 0], 1),
            (2, &[0, 5, 0], 1),
        ];
        for (drawn, held, want) in cases {
            assert_eq!(choose(drawn, held), want, "{drawn} {held:?}");
        }
    }

    #[test]
    fn a_graceful_stop_that_hung_or_failed_is_ineffective() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(stop_outcome(Ok(std::process::ExitStatus::from_raw(0))).unwrap(), None);
        assert!(stop_outcome(Ok(std::process::ExitStatus::from_raw(1 << 8))).unwrap().unwrap().contains("exited with"));
        let hung = KitError::StopTimedOut { name: "n".into(), within: Duration::from_secs(60), log_tail: String::new() };
        assert!(stop_outcome(Err(hung)).unwrap().unwrap().contains("SIGTERM hung"));
        assert!(stop_outcome(Err(KitError::NotRunning { name: "n".into() })).is_err());
    }

    #[test]
    fn kinds_the_cluster_cannot_take_are_passed_over_and_the_rest_come_round_evenly() {
        use FaultKind::*;
        let kinds = [Kill, AddNode, MoveShard, Drain];
        // (what the cluster can take, faults drawn, what must be drawn).
        let cases: [(&[FaultKind], usize, &[FaultKind]); 4] = [
            (&[Kill, AddNode, MoveShard, Drain], 8, &[Kill, AddNode, MoveShard, Drain]),
            // No spare left: add-node never comes; the others still do.
            (&[Kill, MoveShard, Drain], 9, &[Kill, MoveShard, Drain]),
            // Nothing to move to, no spares: kills and drains only.
            (&[Kill, Drain], 6, &[Kill, Drain]),
            (&[Drain], 3, &[Drain]),
        ];
        for (takes, n, want) in cases {
            let mut rng = Rng::new(7);
            let mut bag = Vec::new();
            let mut drawn = std::collections::BTreeMap::<FaultKind, usize>::new();
            for _ in 0..n {
                let kind = draw(&mut bag, &kinds, &mut rng, |k| takes.contains(&k)).expect("a kind can be taken");
                *drawn.entry(kind).or_default() += 1;
            }
            let kinds_drawn: Vec<FaultKind> = drawn.keys().copied().collect();
            let mut want = want.to_vec();
            want.sort();
            assert_eq!(kinds_drawn, want, "can take {takes:?}");
            // Each bag holds every kind once, so counts differ by at most one.
            let (lo, hi) = (drawn.values().min().unwrap(), drawn.values().max().unwrap());
            assert!(hi - lo <= 1, "uneven draws {drawn:?} for {takes:?}");
        }
        // Nothing the cluster can take: the run ends instead of spinning.
        assert_eq!(draw(&mut Vec::new(), &kinds, &mut Rng::new(7), |_| false), None);
        assert_eq!(draw(&mut vec![AddNode], &[AddNode], &mut Rng::new(7), |k| k != AddNode), None);
    }
}
