//! Priority drain: a chitin `drain` plugin that hands over the least-loaded
//! shards first.
//!
//! Each shard the leaving node holds goes to the same node as with the
//! default policy (the next joining or active node of the shard's rendezvous
//! ranking), but the handoffs are ordered by the shard's observed load,
//! lightest first: by `ops_per_sec`, then `bytes`, then shard id. Shards the
//! request has no load figure for come last (their cost is unknown). Cheap
//! handoffs finish early, so most shards have moved before the expensive
//! ones start. Rounds hold at most `max_per_round` handoffs.

use std::cmp::Ordering;
use std::collections::HashMap;

use chitin_default_policies::drain as defaults;
use chitin_policy_sdk::{DrainPolicy, DrainRequest, Handoff, PolicyError, ShardLoad};

/// The plugin: implements [`DrainPolicy`].
pub struct PriorityDrain;

chitin_policy_sdk::export_policies!(PriorityDrain: drain);

/// Lightest first; shards without a figure last, then by shard id.
fn order(a: (&str, Option<&ShardLoad>), b: (&str, Option<&ShardLoad>)) -> Ordering {
    match (a.1, b.1) {
        (Some(x), Some(y)) => x.ops_per_sec.total_cmp(&y.ops_per_sec).then(x.bytes.cmp(&y.bytes)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
    .then(a.0.cmp(b.0))
}

/// `plan-drain` (see the crate documentation).
pub fn plan_drain(req: &DrainRequest) -> Result<Vec<Vec<Handoff>>, PolicyError> {
    // Recipients and every refusal are the default's: plan in one round…
    let max = req.max_per_round;
    let one_round = DrainRequest { max_per_round: u32::MAX, ..req.clone() };
    if max == 0 {
        return defaults::plan_drain(req);
    }
    let mut handoffs: Vec<Handoff> = defaults::plan_drain(&one_round)?.into_iter().flatten().collect();
    // …then reorder by load and cut into rounds.
    let load: HashMap<&str, &ShardLoad> = req.load.iter().map(|l| (l.shard.as_str(), l)).collect();
    handoffs
        .sort_by(|a, b| order((&a.shard, load.get(a.shard.as_str()).copied()), (&b.shard, load.get(b.shard.as_str()).copied())));
    Ok(handoffs.chunks(max as usize).map(<[Handoff]>::to_vec).collect())
}

impl DrainPolicy for PriorityDrain {
    fn plan_drain(request: DrainRequest) -> Result<Vec<Vec<Handoff>>, PolicyError> {
        plan_drain(&request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chitin_policy_sdk::{Holder, Node, NodeState, Replica};

    fn request(loads: &[(&str, f64)], max: u32) -> DrainRequest {
        let mut req = DrainRequest {
            leaving: "x".into(),
            nodes: ["a", "b", "x"]
                .map(|id| Node {
                    id: id.into(),
                    state: if id == "x" { NodeState::Leaving } else { NodeState::Active },
                    ..Node::default()
                })
                .to_vec(),
            max_per_round: max,
            ..DrainRequest::default()
        };
        for s in ["s1", "s2", "s3", "s4", "s5"] {
            for n in ["a", "b", "x"] {
                req.replicas.push(Replica { id: format!("{s}@{n}"), shard: s.into(), node: n.into() });
            }
            req.holders.push(Holder { shard: s.into(), node: "x".into() });
        }
        for (s, ops) in loads {
            req.load.push(ShardLoad { shard: (*s).into(), ops_per_sec: *ops, ..ShardLoad::default() });
        }
        req
    }

    fn order_of(rounds: &[Vec<Handoff>]) -> Vec<&str> {
        rounds.iter().flatten().map(|h| h.shard.as_str()).collect()
    }

    #[test]
    fn lightest_first_unknown_last() {
        let req = request(&[("s1", 50.0), ("s2", 5.0), ("s4", 0.5), ("s5", 5.0)], 2);
        let rounds = plan_drain(&req).unwrap();
        assert_eq!(order_of(&rounds), ["s4", "s2", "s5", "s1", "s3"]);
        assert_eq!(rounds.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 1]);
    }

    #[test]
    fn recipients_are_the_defaults() {
        let req = request(&[("s3", 1.0)], 4);
        let mine = plan_drain(&req).unwrap();
        let theirs = defaults::plan_drain(&req).unwrap();
        let target = |rounds: &[Vec<Handoff>], s: &str| rounds.iter().flatten().find(|h| h.shard == s).unwrap().target.clone();
        for s in ["s1", "s2", "s3", "s4", "s5"] {
            assert_eq!(target(&mine, s), target(&theirs, s));
        }
    }

    #[test]
    fn refusals_are_the_defaults() {
        let req = request(&[], 0);
        assert!(matches!(plan_drain(&req), Err(PolicyError::InvalidInput(_))));
        let mut req = request(&[], 1);
        req.leaving = "nobody".into();
        assert_eq!(plan_drain(&req), Err(PolicyError::UnknownNode("nobody".into())));
    }
}
