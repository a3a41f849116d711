//! Zone-aware placement: a chitin `placement` plugin that spreads each
//! shard's replicas across the nodes' `zone` label.
//!
//! * `place-replicas`: every new shard gets `replication_factor` distinct
//!   eligible (joining or active) nodes, never two in one zone while the
//!   eligible nodes span enough zones; when they span fewer zones than the
//!   factor, zones are reused as evenly as possible. Among the candidates a
//!   node with fewer replicas wins, then a zone with fewer replicas, then the
//!   lower node id, so answers are deterministic and easy to predict. An
//!   `activating` child gets exactly its splitting parent's nodes (as the
//!   default does: a split must not move data).
//! * `rebalance`: replicas on leaving or down nodes move first; then a shard
//!   with two replicas in one zone while the eligible nodes span a zone it
//!   lacks moves one of them there (the replica on the fuller node, to the
//!   emptiest node of the missing zone), so a cluster placed without zones
//!   (by the defaults, say) ends spread; then replicas move from the fullest
//!   to the emptiest node until every eligible node is within one replica of
//!   the others. A move never puts two replicas of a shard in one zone unless
//!   they already shared it, and no replica moves twice (a plan moves each
//!   replica once).
//! * `preferred-holders`: the default rendezvous ranking (zones do not matter
//!   for who holds the lease among a shard's replica nodes).
//!
//! A node without a zone counts as a zone of its own.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chitin_default_policies::placement as defaults;
use chitin_policy_sdk::{
    HolderRanking, Node, NodeShortage, PlacementPolicy, PlacementRequest, PolicyError, RankingRequest, RebalanceRequest,
    ReplicaMove, ShardPlacement, ShardState,
};

/// The plugin: implements [`PlacementPolicy`].
pub struct ZonePlacement;

chitin_policy_sdk::export_policies!(ZonePlacement: placement);

/// The zone a node counts in: its `zone` (field or label), else its own id.
pub fn zone_of(node: &Node) -> String {
    match node.zone.as_deref().or_else(|| node.label("zone")) {
        Some(z) if !z.is_empty() => format!("zone:{z}"),
        _ => format!("node:{}", node.id),
    }
}

/// Eligible nodes by id, with their zone.
fn eligible(nodes: &[Node]) -> BTreeMap<&str, String> {
    nodes.iter().filter(|n| n.state.is_eligible()).map(|n| (n.id.as_str(), zone_of(n))).collect()
}

/// Picks `count` more nodes for one shard, avoiding the zones in `used_zones`
/// and the nodes in `used_nodes` (see the crate documentation for the order).
fn pick(
    count: usize,
    nodes: &BTreeMap<&str, String>,
    load: &HashMap<String, usize>,
    zone_load: &HashMap<String, usize>,
    used_nodes: &mut BTreeSet<String>,
    used_zones: &mut BTreeMap<String, usize>,
) -> Vec<String> {
    let mut picked = Vec::with_capacity(count);
    for _ in 0..count {
        let best = nodes.iter().filter(|(id, _)| !used_nodes.contains(**id)).min_by_key(|(id, zone)| {
            (
                used_zones.get(*zone).copied().unwrap_or(0),
                load.get(**id).copied().unwrap_or(0),
                zone_load.get(*zone).copied().unwrap_or(0),
                **id,
            )
        });
        let Some((id, zone)) = best else { break };
        used_nodes.insert(id.to_string());
        *used_zones.entry(zone.clone()).or_default() += 1;
        picked.push(id.to_string());
    }
    picked
}

/// `place-replicas` (see the crate documentation).
pub fn place_replicas(req: &PlacementRequest) -> Result<Vec<ShardPlacement>, PolicyError> {
    let nodes = eligible(&req.nodes);
    let rf = req.replication_factor as usize;
    let zone_by_node: HashMap<&str, &String> = nodes.iter().map(|(id, z)| (*id, z)).collect();
    let mut load: HashMap<String, usize> = HashMap::new();
    let mut zone_load: HashMap<String, usize> = HashMap::new();
    let add = |node: &str, load: &mut HashMap<String, usize>, zone_load: &mut HashMap<String, usize>| {
        if let Some(zone) = zone_by_node.get(node) {
            *load.entry(node.to_owned()).or_default() += 1;
            *zone_load.entry((*zone).clone()).or_default() += 1;
        }
    };
    for r in &req.replicas {
        add(&r.node, &mut load, &mut zone_load);
    }
    let mut out = Vec::with_capacity(req.new_shards.len());
    for id in &req.new_shards {
        let shard = req.shards.iter().find(|s| &s.id == id).ok_or_else(|| PolicyError::UnknownShard(id.clone()))?;
        let chosen = if shard.state == ShardState::Activating {
            let parent = shard
                .parent
                .as_deref()
                .ok_or_else(|| PolicyError::InvalidInput(format!("activating shard {id} names no parent")))?;
            let parent_nodes: BTreeSet<String> =
                req.replicas.iter().filter(|r| r.shard == parent).map(|r| r.node.clone()).collect();
            if parent_nodes.is_empty() {
                return Err(PolicyError::InvalidInput(format!("activating shard {id}: its parent {parent} has no replicas")));
            }
            parent_nodes.into_iter().collect()
        } else {
            if nodes.len() < rf {
                return Err(PolicyError::InsufficientNodes(NodeShortage {
                    needed: req.replication_factor,
                    eligible: nodes.len() as u32,
                }));
            }
            let (mut used_nodes, mut used_zones) = (BTreeSet::new(), BTreeMap::new());
            pick(rf, &nodes, &load, &zone_load, &mut used_nodes, &mut used_zones)
        };
        for node in &chosen {
            add(node, &mut load, &mut zone_load);
        }
        out.push(ShardPlacement { shard: id.clone(), nodes: chosen });
    }
    Ok(out)
}

/// `rebalance` (see the crate documentation).
pub fn rebalance(req: &RebalanceRequest) -> Result<Vec<ReplicaMove>, PolicyError> {
    let nodes = eligible(&req.nodes);
    if nodes.is_empty() {
        return Err(PolicyError::InsufficientNodes(NodeShortage { needed: 1, eligible: 0 }));
    }
    let known: BTreeMap<&str, &Node> = req.nodes.iter().map(|n| (n.id.as_str(), n)).collect();
    let zone = |node: &str| known.get(node).map(|n| zone_of(n)).unwrap_or_default();
    // Where every replica is now; updated as moves are planned.
    let mut at: Vec<(String, String, String)> = Vec::new(); // (shard, replica, node)
    for r in &req.replicas {
        if !known.contains_key(r.node.as_str()) {
            return Err(PolicyError::UnknownNode(r.node.clone()));
        }
        if !req.shards.iter().any(|s| s.id == r.shard) {
            return Err(PolicyError::UnknownShard(r.shard.clone()));
        }
        at.push((r.shard.clone(), r.id.clone(), r.node.clone()));
    }
    at.sort();
    let mut moves: Vec<ReplicaMove> = Vec::new();
    let count = |at: &[(String, String, String)], node: &str| at.iter().filter(|r| r.2 == node).count();
    // Could replica `i` go to `target` without doubling a zone or a node?
    let fits = |at: &[(String, String, String)], i: usize, target: &str| {
        let (shard, _, source) = &at[i];
        let others = at.iter().enumerate().filter(|(j, r)| *j != i && &r.0 == shard);
        let mut others = others.map(|(_, r)| r.2.as_str()).collect::<Vec<_>>();
        if others.contains(&target) {
            return false;
        }
        let target_zone = zone(target);
        target_zone == zone(source) || !others.drain(..).any(|n| zone(n) == target_zone)
    };
    let record = |moves: &mut Vec<ReplicaMove>, at: &mut Vec<(String, String, String)>, i: usize, target: &str| {
        moves.push(ReplicaMove {
            shard: at[i].0.clone(),
            replica: at[i].1.clone(),
            source: at[i].2.clone(),
            target: target.to_owned(),
        });
        at[i].2 = target.to_owned();
    };
    let moved = |moves: &[ReplicaMove], replica: &str| moves.iter().any(|m| m.replica == replica);
    // 1. Evacuate leaving and down nodes, each replica to the emptiest node that fits.
    for i in 0..at.len() {
        if nodes.contains_key(at[i].2.as_str()) {
            continue;
        }
        let target = nodes.keys().filter(|n| fits(&at, i, n)).min_by_key(|n| (count(&at, n), **n)).map(|n| n.to_string());
        match target {
            Some(t) => record(&mut moves, &mut at, i, &t),
            None => {
                return Err(PolicyError::InvalidInput(format!(
                    "replica {} of shard {} on {} has nowhere to go: every eligible node \
                     hosts the shard or its zone",
                    at[i].1, at[i].0, at[i].2
                )));
            }
        }
    }
    let active: BTreeSet<&str> =
        req.shards.iter().filter(|s| matches!(s.state, ShardState::Active)).map(|s| s.id.as_str()).collect();
    // 2. Spread: while a shard's replicas share a zone and an eligible node
    //    sits in a zone the shard lacks, move the replica on the fuller node
    //    of a shared zone to the emptiest node of a missing zone.
    let all_zones: BTreeSet<&String> = nodes.values().collect();
    for shard in &active {
        loop {
            let mine: Vec<usize> = (0..at.len()).filter(|&i| at[i].0 == *shard).collect();
            let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
            for &i in &mine {
                *per_zone.entry(zone(&at[i].2)).or_default() += 1;
            }
            if per_zone.len() >= mine.len().min(all_zones.len()) {
                break;
            }
            let source = mine
                .iter()
                .copied()
                .filter(|&i| per_zone[&zone(&at[i].2)] > 1 && !moved(&moves, &at[i].1))
                .max_by_key(|&i| (count(&at, &at[i].2), std::cmp::Reverse(at[i].2.clone())));
            let target = nodes
                .iter()
                .filter(|(_, z)| !per_zone.contains_key(*z))
                .min_by_key(|(n, _)| (count(&at, n), **n))
                .map(|(n, _)| n.to_string());
            match (source, target) {
                (Some(i), Some(t)) => record(&mut moves, &mut at, i, &t),
                _ => break,
            }
        }
    }
    // 3. Even out: fullest to emptiest while they differ by more than one.
    loop {
        let mut by_count: Vec<(usize, &str)> = nodes.keys().map(|n| (count(&at, n), *n)).collect();
        by_count.sort();
        let (min, max) = (by_count[0].0, by_count[by_count.len() - 1].0);
        if max <= min + 1 {
            break;
        }
        let mut planned = None;
        'search: for (src_count, src) in by_count.iter().rev() {
            for (dst_count, dst) in &by_count {
                if *src_count <= dst_count + 1 {
                    break;
                }
                if let Some(i) = (0..at.len()).find(|&i| {
                    at[i].2 == *src && active.contains(at[i].0.as_str()) && !moved(&moves, &at[i].1) && fits(&at, i, dst)
                }) {
                    planned = Some((i, dst.to_string()));
                    break 'search;
                }
            }
        }
        match planned {
            Some((i, dst)) => record(&mut moves, &mut at, i, &dst),
            None => break,
        }
    }
    Ok(moves)
}

impl PlacementPolicy for ZonePlacement {
    fn place_replicas(request: PlacementRequest) -> Result<Vec<ShardPlacement>, PolicyError> {
        place_replicas(&request)
    }

    fn rebalance(request: RebalanceRequest) -> Result<Vec<ReplicaMove>, PolicyError> {
        rebalance(&request)
    }

    fn preferred_holders(request: RankingRequest) -> Result<Vec<HolderRanking>, PolicyError> {
        Ok(defaults::preferred_holders(&request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chitin_policy_sdk::{NodeState, Replica, Shard};

    fn node(id: &str, zone: Option<&str>) -> Node {
        Node { id: id.into(), zone: zone.map(Into::into), state: NodeState::Active, ..Node::default() }
    }

    fn shard(id: &str) -> Shard {
        Shard { id: id.into(), upper: u32::MAX, ..Shard::default() }
    }

    fn zones_of(req: &PlacementRequest, p: &ShardPlacement) -> BTreeSet<String> {
        p.nodes.iter().map(|n| zone_of(req.nodes.iter().find(|x| &x.id == n).unwrap())).collect()
    }

    fn six_nodes_three_zones() -> Vec<Node> {
        vec![
            node("a1", Some("a")),
            node("a2", Some("a")),
            node("b1", Some("b")),
            node("b2", Some("b")),
            node("c1", Some("c")),
            node("c2", Some("c")),
        ]
    }

    #[test]
    fn never_two_replicas_in_one_zone_when_zones_allow() {
        let shards: Vec<Shard> = (0..30).map(|i| shard(&format!("s{i:02}"))).collect();
        let req = PlacementRequest {
            nodes: six_nodes_three_zones(),
            new_shards: shards.iter().map(|s| s.id.clone()).collect(),
            shards,
            replication_factor: 3,
            ..PlacementRequest::default()
        };
        let placed = place_replicas(&req).unwrap();
        let mut load: BTreeMap<String, usize> = BTreeMap::new();
        for p in &placed {
            assert_eq!(zones_of(&req, p).len(), 3, "{p:?}");
            for n in &p.nodes {
                *load.entry(n.clone()).or_default() += 1;
            }
        }
        // 90 replicas on 6 nodes: 15 each.
        assert!(load.values().all(|&c| c == 15), "{load:?}");
    }

    #[test]
    fn zones_are_reused_evenly_when_too_few() {
        let req = PlacementRequest {
            nodes: vec![node("a1", Some("a")), node("a2", Some("a")), node("b1", Some("b"))],
            shards: vec![shard("s")],
            new_shards: vec!["s".into()],
            replication_factor: 3,
            ..PlacementRequest::default()
        };
        let placed = place_replicas(&req).unwrap();
        assert_eq!(placed[0].nodes, ["a1", "b1", "a2"]);
    }

    #[test]
    fn too_few_nodes_is_an_error() {
        let req = PlacementRequest {
            nodes: vec![node("a1", Some("a"))],
            shards: vec![shard("s")],
            new_shards: vec!["s".into()],
            replication_factor: 2,
            ..PlacementRequest::default()
        };
        assert_eq!(place_replicas(&req), Err(PolicyError::InsufficientNodes(NodeShortage { needed: 2, eligible: 1 })));
    }

    #[test]
    fn rebalance_onto_a_new_node_keeps_zones_apart() {
        // Four shards on a1, b1, c1; a new node a2 joins zone a.
        let mut nodes = six_nodes_three_zones();
        nodes.retain(|n| n.id != "b2" && n.id != "c2");
        let shards: Vec<Shard> = (0..4).map(|i| shard(&format!("s{i}"))).collect();
        let replicas: Vec<Replica> = shards
            .iter()
            .flat_map(|s| {
                ["a1", "b1", "c1"].map(|n| Replica { id: format!("{}@{n}", s.id), shard: s.id.clone(), node: n.into() })
            })
            .collect();
        let req = RebalanceRequest { nodes, shards, replicas, ..RebalanceRequest::default() };
        let moves = rebalance(&req).unwrap();
        // Only a1's replicas may go to a2 (same zone); a1 and a2 end 2 and 2.
        assert_eq!(moves.len(), 2, "{moves:?}");
        assert!(moves.iter().all(|m| m.source == "a1" && m.target == "a2"), "{moves:?}");
    }
    #[test]
    fn rebalance_spreads_shards_placed_without_zones_and_keeps_the_balance() {
        // As the defaults place them: the least-loaded nodes by id, so
        // s0 and s2 sit twice in zone a, s1 and s3 twice in zone c.
        let nodes = six_nodes_three_zones();
        let shards: Vec<Shard> = (0..4).map(|i| shard(&format!("s{i}"))).collect();
        let placed = [["a1", "a2", "b1"], ["b2", "c1", "c2"], ["a1", "a2", "b1"], ["b2", "c1", "c2"]];
        let replicas: Vec<Replica> = shards
            .iter()
            .zip(placed)
            .flat_map(|(s, on)| on.map(|n| Replica { id: format!("{}@{n}", s.id), shard: s.id.clone(), node: n.into() }))
            .collect();
        let req = RebalanceRequest { nodes: nodes.clone(), shards, replicas: replicas.clone(), ..RebalanceRequest::default() };
        let moves = rebalance(&req).unwrap();
        let mut at: BTreeMap<String, (String, String)> = replicas.into_iter().map(|r| (r.id, (r.shard, r.node))).collect();
        let mut seen = BTreeSet::new();
        for m in &moves {
            assert!(seen.insert(m.replica.clone()), "{} moved twice: {moves:?}", m.replica);
            at.get_mut(&m.replica).unwrap().1 = m.target.clone();
        }
        let zone = |id: &str| zone_of(nodes.iter().find(|n| n.id == id).unwrap());
        for s in 0..4 {
            let zones: BTreeSet<String> = at.values().filter(|(sh, _)| *sh == format!("s{s}")).map(|(_, n)| zone(n)).collect();
            assert_eq!(zones.len(), 3, "s{s} in {zones:?} after {moves:?}");
        }
        let mut load: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, n) in at.values() {
            *load.entry(n.as_str()).or_default() += 1;
        }
        assert!(load.values().all(|&c| c == 2), "{load:?} after {moves:?}");
        // Spread and balanced already: nothing more to do.
        let again = RebalanceRequest {
            replicas: at
                .iter()
                .map(|(id, (shard, node))| Replica { id: id.clone(), shard: shard.clone(), node: node.clone() })
                .collect(),
            ..req
        };
        assert_eq!(rebalance(&again).unwrap(), vec![]);
    }
}
