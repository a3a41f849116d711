//! Slot `drain`: who takes a leaving node's leases, and in what order.
//!
//! The shards to hand over are the ones the leaving node holds (its entries
//! in `holders`), in shard id order. Each goes to the node that
//! `preferred-holders` ranks first once the leaving node no longer counts
//! (the balanced ranking, [`crate::placement::preferred_holders`]), so a
//! drain, a crash and the rounds after either hand the shard to the same
//! node and nothing moves twice. The handoffs are cut into rounds of
//! `max_per_round`.

use std::collections::{BTreeSet, HashMap, HashSet};

use chitin_policy_sdk::{DrainRequest, Handoff, NodeState, PolicyError, RankingRequest, Shard};

use crate::placement::preferred_holders;

/// `plan-drain`: the handoffs in rounds of at most `max_per_round`.
pub fn plan_drain(req: &DrainRequest) -> Result<Vec<Vec<Handoff>>, PolicyError> {
    let leaving = req.leaving.as_str();
    if !req.nodes.iter().any(|n| n.id == leaving) {
        return Err(PolicyError::UnknownNode(req.leaving.clone()));
    }
    if req.max_per_round == 0 {
        return Err(PolicyError::InvalidInput(format!(
            "max_per_round is 0; draining node {leaving} needs at least one handoff per round"
        )));
    }
    let takers: HashSet<&str> =
        req.nodes.iter().filter(|n| n.state.is_eligible() && n.id != leaving).map(|n| n.id.as_str()).collect();
    let rankings = rankings_without(req);
    let to_hand: BTreeSet<&str> = req.holders.iter().filter(|h| h.node == leaving).map(|h| h.shard.as_str()).collect();

    let mut handoffs = Vec::with_capacity(to_hand.len());
    for shard in to_hand {
        let ranked = rankings.get(shard).into_iter().flatten();
        let target = ranked.map(String::as_str).find(|n| takers.contains(n));
        let Some(target) = target else {
            return Err(PolicyError::InvalidInput(format!(
                "shard {shard} has no other joining or active replica node; \
                 move a replica to an active node first"
            )));
        };
        handoffs.push(Handoff { shard: shard.to_owned(), source: leaving.to_owned(), target: target.to_owned() });
    }
    Ok(handoffs.chunks(req.max_per_round as usize).map(<[Handoff]>::to_vec).collect())
}

/// Every shard's preferred holders with the leaving node counted as leaving
/// (whatever state the request gives it), as the rounds after the drain
/// will rank them. A held shard the request does not list counts as active.
fn rankings_without(req: &DrainRequest) -> HashMap<String, Vec<String>> {
    let mut nodes = req.nodes.clone();
    for n in nodes.iter_mut().filter(|n| n.id == req.leaving) {
        n.state = NodeState::Leaving;
    }
    let mut shards = req.shards.clone();
    for h in &req.holders {
        if !shards.iter().any(|s| s.id == h.shard) {
            shards.push(Shard { id: h.shard.clone(), ..Shard::default() });
        }
    }
    let ranking = RankingRequest { nodes, shards, replicas: req.replicas.clone() };
    preferred_holders(&ranking).into_iter().map(|h| (h.shard, h.nodes)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chitin_policy_sdk::{Holder, Node, NodeState, Replica};

    fn node(id: &str, state: NodeState) -> Node {
        Node { id: id.into(), state, ..Node::default() }
    }

    fn replica(shard: &str, node: &str) -> Replica {
        Replica { id: format!("{shard}@{node}"), shard: shard.into(), node: node.into() }
    }

    fn holder(shard: &str, node: &str) -> Holder {
        Holder { shard: shard.into(), node: node.into() }
    }

    /// Node `x` leaves holding `shards` shards, each with replicas on x, a, b.
    fn request(shards: usize, max: u32) -> DrainRequest {
        let mut req = DrainRequest {
            leaving: "x".into(),
            nodes: vec![
                node("a", NodeState::Active),
                node("b", NodeState::Joining),
                node("x", NodeState::Leaving),
                node("d", NodeState::Down),
            ],
            max_per_round: max,
            ..DrainRequest::default()
        };
        for i in (0..shards).rev() {
            let s = format!("s{i:02}");
            req.replicas.extend([replica(&s, "x"), replica(&s, "a"), replica(&s, "b")]);
            req.holders.push(holder(&s, "x"));
        }
        req.holders.push(holder("other", "a"));
        req
    }

    #[test]
    fn rounds_hold_at_most_max() {
        for (shards, max, sizes) in
            [(10, 4, vec![4, 4, 2]), (3, 1, vec![1, 1, 1]), (8, 4, vec![4, 4]), (0, 4, vec![]), (2, 100, vec![2])]
        {
            let plan = plan_drain(&request(shards, max)).unwrap();
            assert_eq!(plan.iter().map(Vec::len).collect::<Vec<_>>(), sizes);
            let flat: Vec<&Handoff> = plan.iter().flatten().collect();
            let ids: Vec<String> = (0..shards).map(|i| format!("s{i:02}")).collect();
            assert_eq!(flat.iter().map(|h| h.shard.clone()).collect::<Vec<_>>(), ids);
            // Each goes where the rounds after the drain rank it first, so
            // nothing moves twice.
            let mut after = request(shards, max);
            after.nodes.retain(|n| n.id != "x");
            let ranked = rankings_without(&after);
            for h in flat {
                assert_eq!(h.source, "x");
                assert_eq!(Some(&h.target), ranked[&h.shard].first(), "{}", h.shard);
            }
        }
    }

    #[test]
    fn errors() {
        let mut req = request(2, 4);
        req.leaving = "nobody".into();
        assert_eq!(plan_drain(&req), Err(PolicyError::UnknownNode("nobody".into())));

        let req = request(2, 0);
        assert_eq!(
            plan_drain(&req),
            Err(PolicyError::InvalidInput("max_per_round is 0; draining node x needs at least one handoff per round".into()))
        );

        // s01's other replicas are on the down node only.
        let mut req = request(2, 4);
        req.replicas.retain(|r| !(r.shard == "s01" && r.node != "x"));
        req.replicas.push(replica("s01", "d"));
        assert_eq!(
            plan_drain(&req),
            Err(PolicyError::InvalidInput(
                "shard s01 has no other joining or active replica node; \
                 move a replica to an active node first"
                    .into()
            ))
        );
    }

    #[test]
    fn a_leaving_node_still_marked_active_is_never_a_target() {
        let mut req = request(20, 4);
        req.nodes[2].state = NodeState::Active;
        for h in plan_drain(&req).unwrap().iter().flatten() {
            assert_ne!(h.target, "x");
        }
    }
}
