//! Slot `placement`: replicas for new shards, rebalancing plans and lease
//! holder rankings.
//!
//! Only `joining` and `active` nodes are *eligible*: they alone receive new
//! replicas, moved replicas and leases. Every tie is broken deterministically
//! (rendezvous rank or node id), so the same request always gets the same
//! answer, natively and in the component.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap, HashSet};

use chitin_policy_sdk::rank::{Weigher, rank};
use chitin_policy_sdk::{
    HolderRanking, Node, NodeShortage, PlacementRequest, PolicyError, RankingRequest,
    RebalanceRequest, ReplicaMove, Shard, ShardPlacement, ShardState,
};

/// Ids of the eligible (joining or active) nodes, sorted, without duplicates.
pub fn eligible_nodes(nodes: &[Node]) -> Vec<&str> {
    let mut ids: Vec<&str> = nodes
        .iter()
        .filter(|n| n.state.is_eligible())
        .map(|n| n.id.as_str())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

fn shard_index(shards: &[Shard]) -> HashMap<&str, &Shard> {
    shards.iter().map(|s| (s.id.as_str(), s)).collect()
}

fn shortage(needed: usize, eligible: usize) -> PolicyError {
    PolicyError::InsufficientNodes(NodeShortage {
        needed: u32::try_from(needed).unwrap_or(u32::MAX),
        eligible: u32::try_from(eligible).unwrap_or(u32::MAX),
    })
}

/// `place-replicas`: nodes for the replicas of each new shard, in request order.
///
/// * an `activating` shard whose parent is in the request gets exactly its
///   parent's replica nodes (sorted by node id), wherever they are;
/// * any other shard gets the `replication_factor` eligible nodes holding the
///   fewest replicas (the existing ones plus those placed earlier in this
///   call), ties broken by the rendezvous rank of (shard id, node id); the
///   nodes are listed in that order. Starting from a balanced cluster, the
///   replica counts of eligible nodes stay within one of each other.
pub fn place_replicas(req: &PlacementRequest) -> Result<Vec<ShardPlacement>, PolicyError> {
    let shards = shard_index(&req.shards);
    let eligible = eligible_nodes(&req.nodes);
    let index: HashMap<&str, usize> = eligible.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let rf = req.replication_factor as usize;

    // Replicas per eligible node, updated as this call places them.
    let mut load = vec![0usize; eligible.len()];
    // The nodes of every shard that is the parent of an activating shard.
    let parents: HashSet<&str> = req
        .shards
        .iter()
        .filter(|s| s.state == ShardState::Activating)
        .filter_map(|s| s.parent.as_deref())
        .collect();
    let mut nodes_of: HashMap<&str, Vec<&str>> = HashMap::new();
    for r in &req.replicas {
        if let Some(&i) = index.get(r.node.as_str()) {
            load[i] += 1;
        }
        if parents.contains(r.shard.as_str()) {
            nodes_of
                .entry(r.shard.as_str())
                .or_default()
                .push(r.node.as_str());
        }
    }

    // (replicas, reversed rendezvous weight, node id, eligible index): the
    // first `rf` in this order are the least loaded nodes, ties broken by rank.
    let mut candidates: Vec<(usize, Reverse<u64>, &str, usize)> =
        Vec::with_capacity(eligible.len());
    let mut out = Vec::with_capacity(req.new_shards.len());
    for id in &req.new_shards {
        let shard = shards
            .get(id.as_str())
            .ok_or_else(|| PolicyError::UnknownShard(id.clone()))?;
        if rf == 0 {
            return Err(PolicyError::InvalidInput(format!(
                "replication factor is 0; shard {id} needs at least one replica"
            )));
        }
        let parent = shard
            .parent
            .as_deref()
            .filter(|p| shard.state == ShardState::Activating && shards.contains_key(p));
        let chosen: Vec<&str> = if let Some(parent) = parent {
            let mut nodes = nodes_of.get(parent).cloned().unwrap_or_default();
            nodes.sort_unstable();
            nodes.dedup();
            if nodes.is_empty() {
                return Err(PolicyError::InvalidInput(format!(
                    "shard {id} is activating but its parent {parent} has no replicas; \
                     an activating shard takes its parent's replica nodes"
                )));
            }
            for n in &nodes {
                if let Some(&i) = index.get(n) {
                    load[i] += 1;
                }
            }
            nodes
        } else {
            if eligible.len() < rf {
                return Err(shortage(rf, eligible.len()));
            }
            let weigher = Weigher::new(id);
            candidates.clear();
            candidates.extend(
                eligible
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (load[i], Reverse(weigher.weight(n)), *n, i)),
            );
            if rf < candidates.len() {
                candidates.select_nth_unstable(rf - 1);
                candidates.truncate(rf);
            }
            candidates.sort_unstable();
            for c in &candidates {
                load[c.3] += 1;
            }
            candidates.iter().map(|c| c.2).collect()
        };
        if parents.contains(shard.id.as_str()) {
            nodes_of
                .entry(shard.id.as_str())
                .or_default()
                .extend(chosen.iter().copied());
        }
        out.push(ShardPlacement {
            shard: id.clone(),
            nodes: chosen.into_iter().map(str::to_owned).collect(),
        });
    }
    Ok(out)
}

/// `rebalance`: the fewest replica moves that bring every eligible node within
/// one replica of the mean.
///
/// Only replicas of `active` shards move; replicas of other shards stay where
/// they are but count towards their node's total. Replicas of active shards
/// on leaving, down or unknown nodes always move. With `T` replicas on (or
/// bound for) the `E` eligible nodes, every node's target is `T / E`, and the
/// `T % E` nodes holding the most now (ties by node id) get one more, so the
/// fewest replicas move. A move never puts two replicas of a shard on one
/// node and never moves a replica twice. Sources, targets and replicas are
/// chosen in a fixed order (largest surplus or deficit first, then node id,
/// then shard and replica id).
pub fn rebalance(req: &RebalanceRequest) -> Result<Vec<ReplicaMove>, PolicyError> {
    let shards = shard_index(&req.shards);
    // Eligible nodes are sorted by id, so index order is id order.
    let eligible = eligible_nodes(&req.nodes);
    let index: HashMap<&str, usize> = eligible.iter().enumerate().map(|(i, n)| (*n, i)).collect();

    let mut count = vec![0usize; eligible.len()];
    // (eligible index, shard) -> replicas of that shard on that node.
    let mut held: HashMap<(usize, &str), usize> = HashMap::new();
    // Replicas that may move for balance, per eligible node: (shard id, replica id).
    let mut movable: Vec<BTreeSet<(&str, &str)>> = vec![BTreeSet::new(); eligible.len()];
    let mut must_move = Vec::new();
    for r in &req.replicas {
        let shard = shards
            .get(r.shard.as_str())
            .ok_or_else(|| PolicyError::UnknownShard(r.shard.clone()))?;
        let active = shard.state == ShardState::Active;
        if let Some(&i) = index.get(r.node.as_str()) {
            count[i] += 1;
            *held.entry((i, r.shard.as_str())).or_default() += 1;
            if active {
                movable[i].insert((&r.shard, &r.id));
            }
        } else if active {
            must_move.push(r);
        }
    }
    must_move.sort_by(|a, b| (&a.node, &a.shard, &a.id).cmp(&(&b.node, &b.shard, &b.id)));

    if eligible.is_empty() {
        return if must_move.is_empty() {
            Ok(Vec::new())
        } else {
            Err(shortage(1, 0))
        };
    }

    let total: usize = count.iter().sum::<usize>() + must_move.len();
    let (base, extra) = (total / eligible.len(), total % eligible.len());
    let mut by_load: Vec<usize> = (0..eligible.len()).collect();
    by_load.sort_by_key(|&i| (Reverse(count[i]), i));
    let mut target = vec![base; eligible.len()];
    for &i in &by_load[..extra] {
        target[i] += 1;
    }

    let mut moves = Vec::new();

    // 1. Evacuate leaving, down and unknown nodes: to the node with the largest
    //    deficit that lacks the shard, else to the least loaded one that does.
    for r in must_move {
        let shard = r.shard.as_str();
        let free = (0..eligible.len()).filter(|&i| !held.contains_key(&(i, shard)));
        let dest = free
            .clone()
            .filter(|&i| count[i] < target[i])
            .min_by_key(|&i| (Reverse(target[i] - count[i]), i))
            .or_else(|| free.min_by_key(|&i| (count[i], i)));
        let Some(dest) = dest else {
            return Err(PolicyError::InvalidInput(format!(
                "replica {} of shard {} sits on node {}, which is not joining or active, and every \
                 eligible node already holds a replica of {}; add a node first",
                r.id, r.shard, r.node, r.shard
            )));
        };
        count[dest] += 1;
        *held.entry((dest, shard)).or_default() += 1;
        record(&mut moves, shard, &r.id, &r.node, eligible[dest]);
    }

    // 2. Even out: move from the node furthest over its target to the node
    //    furthest under, until no move is possible.
    loop {
        let mut over: Vec<(Reverse<usize>, usize)> = (0..eligible.len())
            .filter(|&i| count[i] > target[i])
            .map(|i| (Reverse(count[i] - target[i]), i))
            .collect();
        let mut under: Vec<(Reverse<usize>, usize)> = (0..eligible.len())
            .filter(|&i| count[i] < target[i])
            .map(|i| (Reverse(target[i] - count[i]), i))
            .collect();
        if over.is_empty() || under.is_empty() {
            break;
        }
        over.sort_unstable();
        under.sort_unstable();
        let found = over.iter().find_map(|&(_, s)| {
            under.iter().find_map(|&(_, d)| {
                movable[s]
                    .iter()
                    .find(|(shard, _)| !held.contains_key(&(d, *shard)))
                    .map(|&r| (s, d, r))
            })
        });
        let Some((source, dest, (shard, replica))) = found else {
            break;
        };
        movable[source].remove(&(shard, replica));
        count[source] -= 1;
        count[dest] += 1;
        let left = held
            .get_mut(&(source, shard))
            .expect("source holds the shard");
        *left -= 1;
        if *left == 0 {
            held.remove(&(source, shard));
        }
        *held.entry((dest, shard)).or_default() += 1;
        record(&mut moves, shard, replica, eligible[source], eligible[dest]);
    }
    Ok(moves)
}

fn record(moves: &mut Vec<ReplicaMove>, shard: &str, replica: &str, source: &str, target: &str) {
    moves.push(ReplicaMove {
        shard: shard.to_owned(),
        replica: replica.to_owned(),
        source: source.to_owned(),
        target: target.to_owned(),
    });
}

/// `preferred-holders`: for every shard of the request, in request order, the
/// eligible nodes hosting one of its replicas, best first by the rendezvous
/// rank of (shard id, node id); empty when there are none. A shard's ranking
/// depends only on its id and that node set, so it changes only when they do.
pub fn preferred_holders(req: &RankingRequest) -> Vec<HolderRanking> {
    let is_eligible: HashSet<&str> = eligible_nodes(&req.nodes).into_iter().collect();
    let mut nodes_of: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    for r in &req.replicas {
        if is_eligible.contains(r.node.as_str()) {
            nodes_of
                .entry(r.shard.as_str())
                .or_default()
                .insert(r.node.as_str());
        }
    }
    req.shards
        .iter()
        .map(|s| HolderRanking {
            shard: s.id.clone(),
            nodes: nodes_of
                .get(s.id.as_str())
                .map(|set| {
                    rank(&s.id, set.iter().copied())
                        .into_iter()
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chitin_policy_sdk::{NodeState, Replica};

    fn node(id: &str, state: NodeState) -> Node {
        Node {
            id: id.into(),
            address: format!("{id}:7000"),
            state,
            ..Node::default()
        }
    }

    fn nodes(n: usize) -> Vec<Node> {
        (1..=n)
            .map(|i| node(&format!("n{i}"), NodeState::Active))
            .collect()
    }

    fn shard(id: &str, state: ShardState, parent: Option<&str>) -> Shard {
        Shard {
            id: id.into(),
            application: "app".into(),
            lower: 0,
            upper: u32::MAX,
            state,
            parent: parent.map(str::to_owned),
        }
    }

    fn active(n: usize) -> Vec<Shard> {
        (0..n)
            .map(|i| shard(&format!("s{i:02}"), ShardState::Active, None))
            .collect()
    }

    fn replica(shard: &str, node: &str) -> Replica {
        Replica {
            id: format!("{shard}@{node}"),
            shard: shard.into(),
            node: node.into(),
        }
    }

    fn per_node(replicas: &[Replica], nodes: &[&str]) -> Vec<usize> {
        nodes
            .iter()
            .map(|n| replicas.iter().filter(|r| r.node == *n).count())
            .collect()
    }

    /// Places `shards` one request at a time, as the control plane would.
    fn place_all(nodes: &[Node], shards: &[Shard], rf: u32) -> Vec<Replica> {
        let mut replicas = Vec::new();
        for s in shards {
            let req = PlacementRequest {
                nodes: nodes.to_vec(),
                shards: shards.to_vec(),
                replicas: replicas.clone(),
                new_shards: vec![s.id.clone()],
                replication_factor: rf,
            };
            for p in place_replicas(&req).unwrap() {
                replicas.extend(p.nodes.iter().map(|n| replica(&p.shard, n)));
            }
        }
        replicas
    }

    fn apply(replicas: &mut [Replica], moves: &[ReplicaMove]) {
        for m in moves {
            let r = replicas
                .iter_mut()
                .find(|r| r.id == m.replica)
                .expect("moved replica exists");
            assert_eq!(
                (r.shard.as_str(), r.node.as_str()),
                (m.shard.as_str(), m.source.as_str())
            );
            r.node = m.target.clone();
        }
    }

    fn assert_no_duplicates(replicas: &[Replica]) {
        let mut seen = HashSet::new();
        for r in replicas {
            assert!(
                seen.insert((&r.shard, &r.node)),
                "two replicas of {} on {}",
                r.shard,
                r.node
            );
        }
    }

    #[test]
    fn place_errors() {
        let shards = active(2);
        let cases: &[(Vec<Node>, Vec<&str>, u32, PolicyError)] = &[
            (
                nodes(2),
                vec!["s00"],
                3,
                PolicyError::InsufficientNodes(NodeShortage {
                    needed: 3,
                    eligible: 2,
                }),
            ),
            (
                vec![
                    node("a", NodeState::Active),
                    node("b", NodeState::Leaving),
                    node("c", NodeState::Down),
                    node("d", NodeState::Joining),
                ],
                vec!["s00"],
                3,
                PolicyError::InsufficientNodes(NodeShortage {
                    needed: 3,
                    eligible: 2,
                }),
            ),
            (
                nodes(3),
                vec!["s00", "nope"],
                1,
                PolicyError::UnknownShard("nope".into()),
            ),
            (
                nodes(3),
                vec!["s00"],
                0,
                PolicyError::InvalidInput(
                    "replication factor is 0; shard s00 needs at least one replica".into(),
                ),
            ),
        ];
        for (nodes, new, rf, want) in cases {
            let req = PlacementRequest {
                nodes: nodes.clone(),
                shards: shards.clone(),
                replicas: vec![],
                new_shards: new.iter().map(|s| s.to_string()).collect(),
                replication_factor: *rf,
            };
            assert_eq!(place_replicas(&req).unwrap_err(), *want, "{new:?} rf {rf}");
        }
    }

    #[test]
    fn leaving_and_down_nodes_get_nothing() {
        let mut ns = nodes(4);
        ns[1].state = NodeState::Leaving;
        ns[3].state = NodeState::Down;
        ns.push(node("n5", NodeState::Joining));
        let replicas = place_all(&ns, &active(30), 3);
        assert_eq!(
            per_node(&replicas, &["n1", "n2", "n3", "n4", "n5"]),
            vec![30, 0, 30, 0, 30]
        );
        assert_no_duplicates(&replicas);
    }

    #[test]
    fn many_placements_stay_balanced() {
        for (n, rf) in [(3, 3), (5, 3), (7, 2), (10, 3), (4, 1)] {
            let ns = nodes(n);
            let ids: Vec<String> = ns.iter().map(|n| n.id.clone()).collect();
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            // One shard per request, and all shards in one request, agree on balance.
            let one_by_one = place_all(&ns, &active(97), rf);
            let req = PlacementRequest {
                nodes: ns.clone(),
                shards: active(97),
                replicas: vec![],
                new_shards: active(97).into_iter().map(|s| s.id).collect(),
                replication_factor: rf,
            };
            let batch: Vec<ShardPlacement> = place_replicas(&req).unwrap();
            assert_eq!(batch.len(), 97);
            let batch: Vec<Replica> = batch
                .iter()
                .flat_map(|p| p.nodes.iter().map(|n| replica(&p.shard, n)))
                .collect();
            for replicas in [one_by_one, batch] {
                assert_no_duplicates(&replicas);
                let counts = per_node(&replicas, &ids);
                let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
                assert!(max - min <= 1, "{n} nodes rf {rf}: {counts:?}");
                assert_eq!(replicas.len(), 97 * rf as usize);
            }
        }
    }

    #[test]
    fn activating_children_take_the_parent_nodes() {
        let shards = vec![
            shard("p", ShardState::Splitting, None),
            shard("c1", ShardState::Activating, Some("p")),
            shard("c2", ShardState::Activating, Some("p")),
            shard("orphan", ShardState::Activating, Some("gone")),
            shard("lonely", ShardState::Splitting, None),
            shard("c3", ShardState::Activating, Some("lonely")),
        ];
        let mut ns = nodes(5);
        ns[2].state = NodeState::Down; // the parent's nodes are taken wherever they are
        let replicas = vec![replica("p", "n3"), replica("p", "n1"), replica("p", "n5")];
        let req = |new: &[&str]| PlacementRequest {
            nodes: ns.clone(),
            shards: shards.clone(),
            replicas: replicas.clone(),
            new_shards: new.iter().map(|s| s.to_string()).collect(),
            replication_factor: 3,
        };
        let out = place_replicas(&req(&["c1", "c2"])).unwrap();
        for (p, id) in out.iter().zip(["c1", "c2"]) {
            assert_eq!(p.shard, id);
            assert_eq!(p.nodes, ["n1", "n3", "n5"]);
        }
        // A child whose parent is not in the request is placed like any shard.
        let out = place_replicas(&req(&["orphan"])).unwrap();
        assert_eq!(out[0].nodes.len(), 3);
        assert!(!out[0].nodes.contains(&"n3".to_string()));
        assert_eq!(
            place_replicas(&req(&["c3"])).unwrap_err(),
            PolicyError::InvalidInput(
                "shard c3 is activating but its parent lonely has no replicas; \
                 an activating shard takes its parent's replica nodes"
                    .into()
            )
        );
    }

    fn rebalance_req(
        ns: Vec<Node>,
        shards: Vec<Shard>,
        replicas: Vec<Replica>,
    ) -> RebalanceRequest {
        RebalanceRequest {
            nodes: ns,
            shards,
            replicas,
            ..RebalanceRequest::default()
        }
    }

    #[test]
    fn adding_a_node_moves_its_fair_share() {
        for (n, shards, rf) in [(4, 16, 3), (3, 30, 3), (5, 40, 2), (9, 100, 3)] {
            let ns = nodes(n);
            let mut replicas = place_all(&ns, &active(shards), rf);
            let mut more = ns.clone();
            more.push(node("new", NodeState::Joining));
            let req = rebalance_req(more.clone(), active(shards), replicas.clone());
            let moves = rebalance(&req).unwrap();
            let total = shards * rf as usize;
            assert_eq!(moves.len(), total / (n + 1), "{n} nodes, {total} replicas");
            assert!(moves.iter().all(|m| m.target == "new"));
            apply(&mut replicas, &moves);
            assert_no_duplicates(&replicas);
            // Balanced now: a second plan is empty.
            assert_eq!(
                rebalance(&rebalance_req(more, active(shards), replicas)).unwrap(),
                vec![]
            );
        }
    }

    #[test]
    fn a_down_node_is_evacuated() {
        let ns = nodes(5);
        let mut replicas = place_all(&ns, &active(20), 3);
        let mut after = ns.clone();
        after[4].state = NodeState::Down;
        let on_n5 = replicas.iter().filter(|r| r.node == "n5").count();
        let moves = rebalance(&rebalance_req(after.clone(), active(20), replicas.clone())).unwrap();
        assert_eq!(moves.len(), on_n5, "only n5's replicas move");
        assert!(moves.iter().all(|m| m.source == "n5"));
        apply(&mut replicas, &moves);
        assert_no_duplicates(&replicas);
        let counts = per_node(&replicas, &["n1", "n2", "n3", "n4", "n5"]);
        assert_eq!(counts, vec![15, 15, 15, 15, 0]);
    }

    #[test]
    fn only_active_shards_move() {
        let ns = vec![
            node("a", NodeState::Active),
            node("b", NodeState::Active),
            node("z", NodeState::Down),
        ];
        let shards = vec![
            shard("s1", ShardState::Active, None),
            shard("s2", ShardState::Splitting, None),
            shard("s3", ShardState::Inactive, None),
            shard("s4", ShardState::Active, None),
            shard("s5", ShardState::Activating, Some("s2")),
        ];
        let replicas = vec![
            replica("s1", "a"),
            replica("s2", "a"),
            replica("s3", "a"),
            replica("s4", "a"),
            replica("s5", "a"),
            replica("s3", "z"), // inactive on a down node: stays, not counted
        ];
        // T = 5 on 2 nodes: a (5, holds most) targets 3, b targets 2; s1 and s4 move.
        let moves = rebalance(&rebalance_req(ns.clone(), shards.clone(), replicas)).unwrap();
        let moved: Vec<(&str, &str, &str)> = moves
            .iter()
            .map(|m| (m.shard.as_str(), m.source.as_str(), m.target.as_str()))
            .collect();
        assert_eq!(moved, vec![("s1", "a", "b"), ("s4", "a", "b")]);

        // Nothing movable: the plan is empty even though a is over its target.
        let pinned = vec![replica("s2", "a"), replica("s3", "a"), replica("s5", "a")];
        assert_eq!(
            rebalance(&rebalance_req(ns, shards, pinned)).unwrap(),
            vec![]
        );
    }

    #[test]
    fn rebalance_errors() {
        let shards = active(2);
        let down = vec![node("a", NodeState::Down), node("b", NodeState::Leaving)];
        let err = rebalance(&rebalance_req(
            down.clone(),
            shards.clone(),
            vec![replica("s00", "a")],
        ));
        assert_eq!(
            err.unwrap_err(),
            PolicyError::InsufficientNodes(NodeShortage {
                needed: 1,
                eligible: 0
            })
        );
        assert_eq!(
            rebalance(&rebalance_req(down, shards.clone(), vec![])).unwrap(),
            vec![]
        );

        let err = rebalance(&rebalance_req(
            nodes(2),
            shards.clone(),
            vec![replica("zz", "n1")],
        ));
        assert_eq!(err.unwrap_err(), PolicyError::UnknownShard("zz".into()));

        // s00 is already on both eligible nodes: its replica on the gone node cannot move.
        let replicas = vec![
            replica("s00", "n1"),
            replica("s00", "n2"),
            replica("s00", "gone"),
        ];
        let err = rebalance(&rebalance_req(nodes(2), shards, replicas)).unwrap_err();
        assert_eq!(
            err,
            PolicyError::InvalidInput(
                "replica s00@gone of shard s00 sits on node gone, which is not joining or active, \
                 and every eligible node already holds a replica of s00; add a node first"
                    .into()
            )
        );
    }

    #[test]
    fn rebalance_never_doubles_a_shard_on_a_node() {
        // n1 holds all of s0..s5; n2 and n3 already hold s0..s5 too except s5 on n3.
        let shards = active(6);
        let mut replicas = Vec::new();
        for s in &shards {
            replicas.push(replica(&s.id, "n1"));
            replicas.push(replica(&s.id, "n2"));
        }
        replicas.push(replica("s05", "n3"));
        // Add two more shards on n1 only, to make n1 the heaviest.
        let mut shards = shards;
        shards.extend([
            shard("t1", ShardState::Active, None),
            shard("t2", ShardState::Active, None),
        ]);
        replicas.push(replica("t1", "n1"));
        replicas.push(replica("t2", "n1"));
        let moves = rebalance(&rebalance_req(nodes(3), shards.clone(), replicas.clone())).unwrap();
        apply(&mut replicas, &moves);
        assert_no_duplicates(&replicas);
        // T = 15 on 3 nodes: 5 each.
        assert_eq!(per_node(&replicas, &["n1", "n2", "n3"]), vec![5, 5, 5]);
    }

    #[test]
    fn holders_rank_only_eligible_replica_nodes() {
        let mut ns = nodes(4);
        ns[3].state = NodeState::Leaving;
        let shards = active(3);
        let replicas = vec![
            replica("s00", "n1"),
            replica("s00", "n2"),
            replica("s00", "n4"),
            replica("s01", "n4"),
            replica("s01", "ghost"),
        ];
        let out = preferred_holders(&RankingRequest {
            nodes: ns,
            shards,
            replicas,
        });
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].shard, "s00");
        assert_eq!(out[0].nodes, rank("s00", ["n1", "n2"]));
        assert_eq!(
            out[1],
            HolderRanking {
                shard: "s01".into(),
                nodes: vec![]
            }
        );
        assert_eq!(
            out[2],
            HolderRanking {
                shard: "s02".into(),
                nodes: vec![]
            }
        );
    }

    #[test]
    fn holder_rankings_are_stable() {
        let ns = nodes(5);
        let shards = active(40);
        let replicas = place_all(&ns, &shards, 3);
        let before = preferred_holders(&RankingRequest {
            nodes: ns.clone(),
            shards: shards.clone(),
            replicas: replicas.clone(),
        });
        // A new node without replicas changes nothing.
        let mut more = ns.clone();
        more.push(node("n6", NodeState::Joining));
        let same = preferred_holders(&RankingRequest {
            nodes: more,
            shards: shards.clone(),
            replicas: replicas.clone(),
        });
        assert_eq!(before, same);
        // n5 going down changes only the shards with a replica on n5, and for
        // them only by dropping n5.
        let mut fewer = ns.clone();
        fewer[4].state = NodeState::Down;
        let after = preferred_holders(&RankingRequest {
            nodes: fewer,
            shards,
            replicas,
        });
        for (b, a) in before.iter().zip(&after) {
            let kept: Vec<String> = b.nodes.iter().filter(|n| *n != "n5").cloned().collect();
            assert_eq!(a.nodes, kept, "{}", b.shard);
        }
    }
}
