//! Slot `placement`: replicas for new shards, rebalancing plans and lease
//! holder rankings.
//!
//! Only `joining` and `active` nodes are *eligible*: they alone receive new
//! replicas, moved replicas and leases. Every tie is broken deterministically
//! (rendezvous rank, a hash of the shard id or node id), so the same request
//! always gets the same answer, natively and in the component.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use chitin_policy_sdk::rank::{Weigher, fnv1a64, mix64};
use chitin_policy_sdk::{
    HolderRanking, Node, NodeShortage, PlacementRequest, PolicyError, RankingRequest, RebalanceRequest, ReplicaMove, Shard,
    ShardPlacement, ShardState,
};

/// Ids of the eligible (joining or active) nodes, sorted, without duplicates.
pub fn eligible_nodes(nodes: &[Node]) -> Vec<&str> {
    let mut ids: Vec<&str> = nodes.iter().filter(|n| n.state.is_eligible()).map(|n| n.id.as_str()).collect();
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
    let parents: HashSet<&str> =
        req.shards.iter().filter(|s| s.state == ShardState::Activating).filter_map(|s| s.parent.as_deref()).collect();
    let mut nodes_of: HashMap<&str, Vec<&str>> = HashMap::new();
    for r in &req.replicas {
        if let Some(&i) = index.get(r.node.as_str()) {
            load[i] += 1;
        }
        if parents.contains(r.shard.as_str()) {
            nodes_of.entry(r.shard.as_str()).or_default().push(r.node.as_str());
        }
    }

    // (replicas, reversed rendezvous weight, node id, eligible index): the
    // first `rf` in this order are the least loaded nodes, ties broken by rank.
    let mut candidates: Vec<(usize, Reverse<u64>, &str, usize)> = Vec::with_capacity(eligible.len());
    let mut out = Vec::with_capacity(req.new_shards.len());
    for id in &req.new_shards {
        let shard = shards.get(id.as_str()).ok_or_else(|| PolicyError::UnknownShard(id.clone()))?;
        if rf == 0 {
            return Err(PolicyError::InvalidInput(format!("replication factor is 0; shard {id} needs at least one replica")));
        }
        let parent = shard.parent.as_deref().filter(|p| shard.state == ShardState::Activating && shards.contains_key(p));
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
            candidates.extend(eligible.iter().enumerate().map(|(i, n)| (load[i], Reverse(weigher.weight(n)), *n, i)));
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
            nodes_of.entry(shard.id.as_str()).or_default().extend(chosen.iter().copied());
        }
        out.push(ShardPlacement { shard: id.clone(), nodes: chosen.into_iter().map(str::to_owned).collect() });
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
        let shard = shards.get(r.shard.as_str()).ok_or_else(|| PolicyError::UnknownShard(r.shard.clone()))?;
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
        return if must_move.is_empty() { Ok(Vec::new()) } else { Err(shortage(1, 0)) };
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
        let mut over: Vec<(Reverse<usize>, usize)> =
            (0..eligible.len()).filter(|&i| count[i] > target[i]).map(|i| (Reverse(count[i] - target[i]), i)).collect();
        let mut under: Vec<(Reverse<usize>, usize)> =
            (0..eligible.len()).filter(|&i| count[i] < target[i]).map(|i| (Reverse(target[i] - count[i]), i)).collect();
        if over.is_empty() || under.is_empty() {
            break;
        }
        over.sort_unstable();
        under.sort_unstable();
        let found = over.iter().find_map(|&(_, s)| {
            under
                .iter()
                .find_map(|&(_, d)| movable[s].iter().find(|(shard, _)| !held.contains_key(&(d, *shard))).map(|&r| (s, d, r)))
        });
        let Some((source, dest, (shard, replica))) = found else {
            break;
        };
        movable[source].remove(&(shard, replica));
        count[source] -= 1;
        count[dest] += 1;
        let left = held.get_mut(&(source, shard)).expect("source holds the shard");
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
/// eligible nodes hosting one of its replicas, the preferred lease holder
/// first; empty when there are none.
///
/// The holder is the one [`seated_holders`] picks, so that every eligible
/// node leads its share of the shards rather than whichever shards the
/// rendezvous hash happens to give it (16 shards on 3 nodes lead 6/5/5, where
/// the hash alone can give 9/5/2). The other nodes follow in the rendezvous
/// order of (shard id, node id): the failover order when the holder fails. An
/// `inactive` shard carries no lease, so it takes no share: its ranking is the
/// rendezvous order alone.
///
/// A ranking depends on the whole request (its shards, their replicas and the
/// eligible nodes), not on one shard alone, but never on the order of the
/// request's lists: the same request in any order gets the same ranking per
/// shard. A node of the request that leaves or goes down moves exactly the
/// first places it held, and takes them back when it returns (a rolling
/// restart moves each shard twice at most); a node joining the request, or
/// leaving it, moves close to the fewest first places that restore the
/// balance; an eligible node without replicas changes nothing.
pub fn preferred_holders(req: &RankingRequest) -> Vec<HolderRanking> {
    let view = RankingView::of(req);
    let holders = seated_holders(&view);
    req.shards
        .iter()
        .map(|s| {
            let i = view.shard_at[s.id.as_str()];
            let ranking = view.eligible_ranking(i);
            let holder = holders[i];
            let nodes = holder.into_iter().chain(ranking.filter(|n| Some(*n) != holder));
            HolderRanking { shard: s.id.clone(), nodes: nodes.map(|n| view.nodes[n].id.to_owned()).collect() }
        })
        .collect()
}

/// A hash map keyed by ids hashed with FNV-1a and `mix64`: SipHash's
/// resistance to chosen keys buys nothing inside a component that answers
/// one request, and costs a tenth of a large ranking.
type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;

/// The SDK's `fnv1a64` of each piece written, folded in with `mix64`
/// (hashbrown reads the top bits, which plain FNV-1a mixes poorly for
/// short keys).
#[derive(Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0 = mix64(self.0 ^ fnv1a64(bytes));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A node of a ranking request, once per id.
struct NodeView<'a> {
    /// The node's id.
    id: &'a str,
    /// Joining or active (in any of the request's entries for the id).
    eligible: bool,
}

/// A shard of a ranking request, once per id.
struct ShardView<'a> {
    /// The shard's id.
    id: &'a str,
    /// Not `inactive` (in any of the request's entries for the id): it
    /// carries a lease, and so shares out first places.
    leased: bool,
    /// The nodes of the request hosting one of its replicas (indices into
    /// [`RankingView::nodes`]), in the rendezvous order of (shard id, node id).
    ranked: Vec<usize>,
}

/// A ranking request read once into indices: every later step compares
/// numbers, not ids (100,000 shards at factor 3 are 300,000 replicas).
struct RankingView<'a> {
    /// The request's nodes, in the order of their first entry.
    nodes: Vec<NodeView<'a>>,
    /// The request's shards, in the order of their first entry.
    shards: Vec<ShardView<'a>>,
    /// Each shard id's index into `shards`.
    shard_at: FastMap<&'a str, usize>,
}

impl<'a> RankingView<'a> {
    fn of(req: &'a RankingRequest) -> Self {
        let mut nodes: Vec<NodeView<'a>> = Vec::new();
        let mut node_at: FastMap<&str, usize> = FastMap::default();
        for n in &req.nodes {
            let i = *node_at.entry(n.id.as_str()).or_insert_with(|| {
                nodes.push(NodeView { id: n.id.as_str(), eligible: false });
                nodes.len() - 1
            });
            nodes[i].eligible |= n.state.is_eligible();
        }
        let mut shards: Vec<ShardView<'a>> = Vec::new();
        let mut shard_at: FastMap<&str, usize> = FastMap::default();
        for s in &req.shards {
            let i = *shard_at.entry(s.id.as_str()).or_insert_with(|| {
                shards.push(ShardView { id: s.id.as_str(), leased: false, ranked: Vec::new() });
                shards.len() - 1
            });
            shards[i].leased |= s.state != ShardState::Inactive;
        }
        // Replicas on nodes the request does not list are never counted.
        for r in &req.replicas {
            if let (Some(&s), Some(&n)) = (shard_at.get(r.shard.as_str()), node_at.get(r.node.as_str()))
                && !shards[s].ranked.contains(&n)
            {
                shards[s].ranked.push(n);
            }
        }
        for shard in &mut shards {
            let weigher = Weigher::new(shard.id);
            let mut weighted: Vec<(Reverse<u64>, &str, usize)> =
                shard.ranked.iter().map(|&n| (Reverse(weigher.weight(nodes[n].id)), nodes[n].id, n)).collect();
            weighted.sort_unstable();
            shard.ranked = weighted.into_iter().map(|(_, _, n)| n).collect();
        }
        RankingView { nodes, shards, shard_at }
    }

    /// Shard `i`'s eligible nodes in rendezvous order.
    fn eligible_ranking(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        self.shards[i].ranked.iter().copied().filter(|&n| self.nodes[n].eligible)
    }
}

/// The order in which shards pick their holder: ascending
/// `mix64(fnv1a64(shard id))`, ties by id. A hash, not the id, so that the
/// shards that find their first choices full are spread over the key space and
/// the applications rather than being the last ones by name; it depends on the
/// shard alone, so the answer does not depend on the request's order.
fn pick_order(shard: &str) -> (u64, &str) {
    (mix64(fnv1a64(shard.as_bytes())), shard)
}

/// The preferred lease holder of every shard of `view` that carries a lease
/// and has an eligible node (by index; `None` for the others), every node
/// of the request keeping its seat: first the balance over every node
/// hosting replicas, whatever its state, then the shards whose seat is a
/// node that is not eligible (leaving, down) seated again among the
/// eligible ones around the others, which stay. A node that leaves or fails
/// so moves exactly the shards it led, and coming back takes exactly those
/// again: a rolling restart moves each shard away from its node and back,
/// and no other shard. Only a node that leaves the request (the cluster
/// config) gives up its seat.
fn seated_holders(view: &RankingView) -> Vec<Option<usize>> {
    let seat_ranking = |i: usize| view.shards[i].ranked.clone();
    let seated: Vec<usize> =
        (0..view.shards.len()).filter(|&i| view.shards[i].leased && !view.shards[i].ranked.is_empty()).collect();
    let seats = balanced_holders(view, &seated, seat_ranking, &vec![None; view.shards.len()]);
    let eligible: Vec<usize> = seated.iter().copied().filter(|&i| view.eligible_ranking(i).next().is_some()).collect();
    let kept: Vec<Option<usize>> = seats.into_iter().map(|seat| seat.filter(|&n| view.nodes[n].eligible)).collect();
    if kept.iter().flatten().count() == eligible.len() {
        // Every seat is eligible (no node leaving or down): nothing to re-seat.
        return kept;
    }
    balanced_holders(view, &eligible, |i| view.eligible_ranking(i).collect(), &kept)
}

/// The preferred lease holder of each of `shards` (indices into `view`,
/// each with a non-empty `ranking`: its nodes in rendezvous order), with
/// the shards `kept` names a holder for seated first where they stay (no
/// chain moves them): consistent hashing with bounded loads over the
/// rendezvous rank. By shard index; `None` for shards not in `shards`.
///
/// With `n` shards and `k` nodes hosting their replicas (a node without any
/// leads nothing, so it does not dilute the mean), every node may lead
/// `floor(n / k)` shards and the first `n % k` nodes to go beyond lead one
/// more. The shards, in [`pick_order`], each take the best-ranked of their
/// nodes that is under its cap. When all of a shard's nodes are at their cap
/// (possible only when its replicas sit on fewer than all `k` nodes), the
/// shortest chain of shards that can each move to another of their nodes,
/// ending at a node under its cap, makes room; and when no chain exists (the
/// replicas leave the caps infeasible) the shard goes to the least loaded of
/// its nodes, ties by rank. So when every node hosts every shard the counts
/// are exactly `floor(n / k)` or `ceil(n / k)`, and a node joining or leaving
/// moves first places mostly from the nodes over the new caps, a few more
/// where a shard's first choice filled up earlier than before.
fn balanced_holders(
    view: &RankingView,
    shards: &[usize],
    ranking: impl Fn(usize) -> Vec<usize>,
    kept: &[Option<usize>],
) -> Vec<Option<usize>> {
    let mut order = shards.to_vec();
    order.sort_by_cached_key(|&i| pick_order(view.shards[i].id));
    let by_position: Vec<Vec<usize>> = order.iter().map(|&i| ranking(i)).collect();
    let mut hosting = vec![false; view.nodes.len()];
    for &n in by_position.iter().flatten() {
        hosting[n] = true;
    }
    let k = hosting.iter().filter(|&&h| h).count();
    let mut board = Board::new(&by_position, view.nodes.len(), k);
    let (stay, seat): (Vec<usize>, Vec<usize>) = (0..order.len()).partition(|&p| kept[order[p]].is_some());
    for p in stay {
        board.lead(p, kept[order[p]].expect("a kept shard has its holder"));
        board.pinned[p] = true;
    }
    for p in seat {
        board.seat(p);
    }
    let mut holders = vec![None; view.shards.len()];
    for (p, &i) in order.iter().enumerate() {
        holders[i] = Some(board.holder[p].expect("every shard is seated"));
    }
    holders
}

/// The holders chosen so far: shards and nodes are indices (shards in pick
/// order, so iterating a node's shards is deterministic).
struct Board<'r> {
    /// Each shard's nodes in rendezvous order.
    rankings: &'r [Vec<usize>],
    /// Each shard's holder, once seated.
    holder: Vec<Option<usize>>,
    /// The shards each node leads.
    led: Vec<BTreeSet<usize>>,
    /// `floor(n / k)`: every node may lead this many.
    base: usize,
    /// `n % k`: how many nodes may lead one more.
    extra: usize,
    /// Nodes leading more than `base`.
    above_base: usize,
    /// Shards that stay with their holder: no chain moves them.
    pinned: Vec<bool>,
}

impl<'r> Board<'r> {
    /// A board over `rankings` (node indices below `nodes`), shared out
    /// among the `hosting` nodes that appear in them.
    fn new(rankings: &'r [Vec<usize>], nodes: usize, hosting: usize) -> Self {
        let n = rankings.len();
        Board {
            rankings,
            holder: vec![None; n],
            pinned: vec![false; n],
            led: vec![BTreeSet::new(); nodes],
            base: n / hosting.max(1),
            extra: n % hosting.max(1),
            above_base: 0,
        }
    }

    /// Whether `node` may lead one more shard: under `base`, or at `base`
    /// while fewer than `extra` nodes went beyond it.
    fn has_room(&self, node: usize) -> bool {
        let led = self.led[node].len();
        led < self.base || (led == self.base && self.above_base < self.extra)
    }

    /// Gives shard `s` its holder, moving others along a chain if need be.
    fn seat(&mut self, s: usize) {
        let chain = self.chain_to_room(s).unwrap_or_else(|| {
            let least = self.rankings[s].iter().copied().min_by_key(|&n| self.led[n].len()).expect("every shard has a node");
            vec![(s, least)]
        });
        for (shard, node) in chain {
            self.lead(shard, node);
        }
    }

    /// Makes `node` lead `shard`, taking it from its current holder.
    fn lead(&mut self, shard: usize, node: usize) {
        if let Some(old) = self.holder[shard] {
            if self.led[old].len() == self.base + 1 {
                self.above_base -= 1;
            }
            self.led[old].remove(&shard);
        }
        if self.led[node].len() == self.base {
            self.above_base += 1;
        }
        self.led[node].insert(shard);
        self.holder[shard] = Some(node);
    }

    /// The fewest (shard, new holder) moves that seat `s` without taking any
    /// node over its cap: breadth first from `s`'s nodes in rank order, each
    /// full node offering its shards (in pick order) to their other nodes (in
    /// rank order). `None` when every node reachable so is full.
    fn chain_to_room(&self, s: usize) -> Option<Vec<(usize, usize)>> {
        // For each node reached: the shard that would move onto it and the
        // node it would leave (`None` for `s`, which is not seated yet).
        let mut reached: Vec<Option<(usize, Option<usize>)>> = vec![None; self.led.len()];
        let mut queue = VecDeque::new();
        let mut offers = vec![(s, None)];
        loop {
            for (shard, from) in offers {
                for &node in &self.rankings[shard] {
                    if reached[node].is_some() {
                        continue;
                    }
                    reached[node] = Some((shard, from));
                    if self.has_room(node) {
                        return Some(Self::unwind(&reached, node));
                    }
                    queue.push_back(node);
                }
            }
            let full = queue.pop_front()?;
            offers = self.led[full].iter().filter(|&&t| !self.pinned[t]).map(|&t| (t, Some(full))).collect();
        }
    }

    /// The moves of the chain that ends at `node`, walking `reached` back.
    fn unwind(reached: &[Option<(usize, Option<usize>)>], mut node: usize) -> Vec<(usize, usize)> {
        let mut chain = Vec::new();
        loop {
            let (shard, from) = reached[node].expect("every node on the chain was reached");
            chain.push((shard, node));
            match from {
                Some(previous) => node = previous,
                None => return chain,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use chitin_policy_sdk::rank::{rank, weight};
    use chitin_policy_sdk::{NodeState, Replica};

    fn node(id: &str, state: NodeState) -> Node {
        Node { id: id.into(), address: format!("{id}:7000"), state, ..Node::default() }
    }

    fn nodes(n: usize) -> Vec<Node> {
        (1..=n).map(|i| node(&format!("n{i}"), NodeState::Active)).collect()
    }

    fn shard(id: &str, state: ShardState, parent: Option<&str>) -> Shard {
        Shard { id: id.into(), application: "app".into(), lower: 0, upper: u32::MAX, state, parent: parent.map(str::to_owned) }
    }

    fn active(n: usize) -> Vec<Shard> {
        (0..n).map(|i| shard(&format!("s{i:02}"), ShardState::Active, None)).collect()
    }

    fn replica(shard: &str, node: &str) -> Replica {
        Replica { id: format!("{shard}@{node}"), shard: shard.into(), node: node.into() }
    }

    fn per_node(replicas: &[Replica], nodes: &[&str]) -> Vec<usize> {
        nodes.iter().map(|n| replicas.iter().filter(|r| r.node == *n).count()).collect()
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
            let r = replicas.iter_mut().find(|r| r.id == m.replica).expect("moved replica exists");
            assert_eq!((r.shard.as_str(), r.node.as_str()), (m.shard.as_str(), m.source.as_str()));
            r.node = m.target.clone();
        }
    }

    fn assert_no_duplicates(replicas: &[Replica]) {
        let mut seen = HashSet::new();
        for r in replicas {
            assert!(seen.insert((&r.shard, &r.node)), "two replicas of {} on {}", r.shard, r.node);
        }
    }

    #[test]
    fn place_errors() {
        let shards = active(2);
        let cases: &[(Vec<Node>, Vec<&str>, u32, PolicyError)] = &[
            (nodes(2), vec!["s00"], 3, PolicyError::InsufficientNodes(NodeShortage { needed: 3, eligible: 2 })),
            (
                vec![
                    node("a", NodeState::Active),
                    node("b", NodeState::Leaving),
                    node("c", NodeState::Down),
                    node("d", NodeState::Joining),
                ],
                vec!["s00"],
                3,
                PolicyError::InsufficientNodes(NodeShortage { needed: 3, eligible: 2 }),
            ),
            (nodes(3), vec!["s00", "nope"], 1, PolicyError::UnknownShard("nope".into())),
            (
                nodes(3),
                vec!["s00"],
                0,
                PolicyError::InvalidInput("replication factor is 0; shard s00 needs at least one replica".into()),
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
        assert_eq!(per_node(&replicas, &["n1", "n2", "n3", "n4", "n5"]), vec![30, 0, 30, 0, 30]);
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
            let batch: Vec<Replica> = batch.iter().flat_map(|p| p.nodes.iter().map(|n| replica(&p.shard, n))).collect();
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

    fn rebalance_req(ns: Vec<Node>, shards: Vec<Shard>, replicas: Vec<Replica>) -> RebalanceRequest {
        RebalanceRequest { nodes: ns, shards, replicas, ..RebalanceRequest::default() }
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
            assert_eq!(rebalance(&rebalance_req(more, active(shards), replicas)).unwrap(), vec![]);
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
        let ns = vec![node("a", NodeState::Active), node("b", NodeState::Active), node("z", NodeState::Down)];
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
        let moved: Vec<(&str, &str, &str)> =
            moves.iter().map(|m| (m.shard.as_str(), m.source.as_str(), m.target.as_str())).collect();
        assert_eq!(moved, vec![("s1", "a", "b"), ("s4", "a", "b")]);

        // Nothing movable: the plan is empty even though a is over its target.
        let pinned = vec![replica("s2", "a"), replica("s3", "a"), replica("s5", "a")];
        assert_eq!(rebalance(&rebalance_req(ns, shards, pinned)).unwrap(), vec![]);
    }

    #[test]
    fn rebalance_errors() {
        let shards = active(2);
        let down = vec![node("a", NodeState::Down), node("b", NodeState::Leaving)];
        let err = rebalance(&rebalance_req(down.clone(), shards.clone(), vec![replica("s00", "a")]));
        assert_eq!(err.unwrap_err(), PolicyError::InsufficientNodes(NodeShortage { needed: 1, eligible: 0 }));
        assert_eq!(rebalance(&rebalance_req(down, shards.clone(), vec![])).unwrap(), vec![]);

        let err = rebalance(&rebalance_req(nodes(2), shards.clone(), vec![replica("zz", "n1")]));
        assert_eq!(err.unwrap_err(), PolicyError::UnknownShard("zz".into()));

        // s00 is already on both eligible nodes: its replica on the gone node cannot move.
        let replicas = vec![replica("s00", "n1"), replica("s00", "n2"), replica("s00", "gone")];
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
        shards.extend([shard("t1", ShardState::Active, None), shard("t2", ShardState::Active, None)]);
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
        let replicas =
            vec![replica("s00", "n1"), replica("s00", "n2"), replica("s00", "n4"), replica("s01", "n4"), replica("s01", "ghost")];
        let out = preferred_holders(&RankingRequest { nodes: ns, shards, replicas });
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].shard, "s00");
        assert_eq!(out[0].nodes, rank("s00", ["n1", "n2"]));
        assert_eq!(out[1], HolderRanking { shard: "s01".into(), nodes: vec![] });
        assert_eq!(out[2], HolderRanking { shard: "s02".into(), nodes: vec![] });
    }

    fn ranking_req(nodes: &[Node], shards: &[Shard], replicas: &[Replica]) -> RankingRequest {
        RankingRequest { nodes: nodes.to_vec(), shards: shards.to_vec(), replicas: replicas.to_vec() }
    }

    /// A replica of every shard on every node.
    fn everywhere(shards: &[Shard], nodes: &[Node]) -> Vec<Replica> {
        shards.iter().flat_map(|s| nodes.iter().map(|n| replica(&s.id, &n.id))).collect()
    }

    /// Each shard's first node, by shard id.
    fn first_places(out: &[HolderRanking]) -> BTreeMap<&str, &str> {
        out.iter().filter_map(|h| Some((h.shard.as_str(), h.nodes.first()?.as_str()))).collect()
    }

    /// How many shards each of `nodes` comes first for.
    fn leads(out: &[HolderRanking], nodes: &[Node]) -> Vec<usize> {
        let firsts = first_places(out);
        nodes.iter().map(|n| firsts.values().filter(|f| **f == n.id).count()).collect()
    }

    /// Every ranking holds exactly the shard's eligible replica nodes, and
    /// after the first they keep their rendezvous order (the failover order).
    fn assert_failover_order(req: &RankingRequest, out: &[HolderRanking]) {
        let eligible = eligible_nodes(&req.nodes);
        for h in out {
            let hosts: BTreeSet<&str> = req
                .replicas
                .iter()
                .filter(|r| r.shard == h.shard && eligible.contains(&r.node.as_str()))
                .map(|r| r.node.as_str())
                .collect();
            let got: BTreeSet<&str> = h.nodes.iter().map(String::as_str).collect();
            assert_eq!((got.len(), &got), (h.nodes.len(), &hosts), "{}", h.shard);
            let rest: Vec<&str> = rank(&h.shard, hosts).into_iter().filter(|n| h.nodes.first().is_some_and(|f| f != n)).collect();
            assert_eq!(h.nodes.iter().skip(1).collect::<Vec<_>>(), rest, "{}", h.shard);
        }
    }

    #[test]
    fn holders_are_balanced_when_every_node_hosts_every_shard() {
        for shards in [1, 2, 3, 7, 16, 17, 40, 97, 100, 256] {
            for k in 1..=12 {
                let (ns, shards) = (nodes(k), active(shards));
                let req = ranking_req(&ns, &shards, &everywhere(&shards, &ns));
                let out = preferred_holders(&req);
                assert_failover_order(&req, &out);
                let counts = leads(&out, &ns);
                let (floor, ceil) = (shards.len() / k, shards.len().div_ceil(k));
                assert!(counts.iter().all(|c| (floor..=ceil).contains(c)), "{} shards on {k} nodes: {counts:?}", shards.len());
            }
        }
        // The issue's case: plain rendezvous gave 9/5/2.
        let (ns, shards) = (nodes(3), active(16));
        let out = preferred_holders(&ranking_req(&ns, &shards, &everywhere(&shards, &ns)));
        let mut counts = leads(&out, &ns);
        counts.sort_unstable();
        assert_eq!(counts, [5, 5, 6]);
    }

    #[test]
    fn holders_are_balanced_with_fewer_replicas_than_nodes() {
        // Placed by `place_replicas`, whose replicas are balanced: the caps are
        // feasible and the chains find them (without chains, 97 shards on 7
        // nodes at factor 2 led 5 apart).
        for (k, rf) in [(4, 2), (5, 3), (6, 2), (7, 2), (9, 3), (10, 3), (12, 3)] {
            for shards in [16, 40, 97, 300] {
                let (ns, shards) = (nodes(k), active(shards));
                let req = ranking_req(&ns, &shards, &place_all(&ns, &shards, rf));
                let out = preferred_holders(&req);
                assert_failover_order(&req, &out);
                let counts = leads(&out, &ns);
                let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
                assert!(max - min <= 1, "{} shards, {k} nodes, rf {rf}: {counts:?}", shards.len());
            }
        }
    }

    #[test]
    fn holders_do_not_depend_on_the_request_order() {
        let ns = nodes(5);
        let shards = active(97);
        for replicas in [place_all(&ns, &shards, 3), everywhere(&shards, &ns)] {
            let req = ranking_req(&ns, &shards, &replicas);
            let out = preferred_holders(&req);
            assert_eq!(preferred_holders(&req), out, "the same request, the same answer");
            let by_shard: BTreeMap<&str, &HolderRanking> = out.iter().map(|h| (h.shard.as_str(), h)).collect();
            // Every list reversed, then every list shuffled by a hash.
            let mut reversed = req.clone();
            reversed.nodes.reverse();
            reversed.shards.reverse();
            reversed.replicas.reverse();
            let mut shuffled = req.clone();
            shuffled.nodes.sort_by_key(|n| weight("shuffle", &n.id));
            shuffled.shards.sort_by_key(|s| weight("shuffle", &s.id));
            shuffled.replicas.sort_by_key(|r| weight("shuffle", &r.id));
            for other in [reversed, shuffled] {
                let got = preferred_holders(&other);
                let order: Vec<&str> = got.iter().map(|h| h.shard.as_str()).collect();
                let asked: Vec<&str> = other.shards.iter().map(|s| s.id.as_str()).collect();
                assert_eq!(order, asked, "answers come in request order");
                for h in &got {
                    assert_eq!(by_shard[h.shard.as_str()], h);
                }
            }
        }
    }

    /// How many shards change their first node from `before` to `after`, and
    /// the fewest that must: the change in what `node` leads (the share a
    /// joining node must take, or what a leaving one led), or the shards whose
    /// first node no longer hosts them, whichever is more (a lower bound when
    /// replicas move too).
    fn first_place_moves(before: &RankingRequest, after: &RankingRequest, node: &str) -> (usize, usize) {
        let (b, a) = (preferred_holders(before), preferred_holders(after));
        let (fb, fa) = (first_places(&b), first_places(&a));
        let moved = fb.iter().filter(|(s, n)| fa.get(*s) != Some(*n)).count();
        let led = |f: &BTreeMap<&str, &str>| f.values().filter(|n| **n == node).count();
        let lost = b.iter().zip(&a).filter(|(hb, ha)| hb.nodes.first().is_some_and(|f| !ha.nodes.contains(f))).count();
        (moved, led(&fb).abs_diff(led(&fa)).max(lost))
    }

    #[test]
    fn a_node_change_moves_close_to_the_fewest_first_places() {
        // The fewest first places a change can move is what the changed node
        // must take or gives up (see `first_place_moves`). Bounded loads move
        // a few more: the joining node takes the shards it ranks first, which
        // its peers did not lead evenly, and a shard whose first choice now
        // fills up earlier slides to its next one. A node that leaves or goes
        // down keeps its seat, so it moves exactly the fewest. Measured
        // (moved / fewest), in table order: 4/4, 4/4, 17/16, 16/16, 106/91,
        // 91/91, 19/19, 36/16 (before seats the leaving cases were 4/4,
        // 17/16, 106/91 and 22/19).
        //
        // When only the node set changes the bound is twice the fewest: these
        // cases need at most 1.17 times, and twice still fails any scheme that
        // reshuffles leaders wholesale. It is no law for every size: over
        // 1..200 shards on 1..13 nodes (every node hosting every shard) the
        // worst is 3 times with about 4 shards a node (49 shards, 11 -> 12
        // nodes) and 5 times when the fewest is 1, as a cascade of a couple
        // of shards weighs most when nodes lead few.
        //
        // When the rebalance also moves replicas to the joining node, the
        // rankings of the shards whose replicas moved change too, so the bound
        // is 2.5 times: 36 moves against at least 16 (11 shards lost the
        // replica of their holder).
        // (before, after, the node that changed)
        let join = |shards: usize, k: usize| {
            let after = everywhere_on(shards, k + 1);
            (everywhere_on(shards, k), after, format!("n{}", k + 1))
        };
        let leave = |shards: usize, k: usize| {
            let before = everywhere_on(shards, k + 1);
            let mut after = before.clone();
            after.nodes[k].state = NodeState::Leaving;
            (before, after, format!("n{}", k + 1))
        };
        // Factor 3 on 5 nodes; then n5 goes down, or n6 joins and the
        // rebalance plan moves replicas to it.
        let placed = {
            let (ns, shards) = (nodes(5), active(97));
            let replicas = place_all(&ns, &shards, 3);
            ranking_req(&ns, &shards, &replicas)
        };
        let down = {
            let mut after = placed.clone();
            after.nodes[4].state = NodeState::Down;
            (placed.clone(), after, "n5".to_string())
        };
        let rebalanced = {
            let mut after = placed.clone();
            after.nodes.push(node("n6", NodeState::Joining));
            let (ns, shards) = (after.nodes.clone(), after.shards.clone());
            let moves = rebalance(&rebalance_req(ns, shards, after.replicas.clone())).unwrap();
            apply(&mut after.replicas, &moves);
            (placed, after, "n6".to_string())
        };
        // (case, change, bound in percent of the fewest)
        let cases = [
            ("16 shards, 3 -> 4 nodes", join(16, 3), 200),
            ("16 shards, 4 -> 3 nodes", leave(16, 3), 100),
            ("100 shards, 5 -> 6 nodes", join(100, 5), 200),
            ("100 shards, 6 -> 5 nodes", leave(100, 5), 100),
            ("1000 shards, 10 -> 11 nodes", join(1000, 10), 200),
            ("1000 shards, 11 -> 10 nodes", leave(1000, 10), 100),
            ("97 shards at rf 3, n5 down", down, 100),
            ("97 shards at rf 3, n6 joins, rebalanced", rebalanced, 250),
        ];
        for (name, (before, after, node), percent) in cases {
            let (moved, fewest) = first_place_moves(&before, &after, &node);
            assert!(
                fewest <= moved && moved * 100 <= fewest * percent,
                "{name}: {moved} first places moved, the fewest is {fewest}"
            );
        }
    }

    /// Each shard's first-place changes over a rolling restart of every node
    /// of `req` in turn: leaving (its drain), down (stopped), joining (the
    /// new process), active. `seated`: the restarting node stays in the
    /// request in those states, as the host sends it; otherwise it is out of
    /// the request while not eligible, which is how a leaving or down node
    /// weighed before nodes kept their seats: the same run counts both.
    fn moves_over_a_rolling_restart(req: &RankingRequest, seated: bool) -> BTreeMap<String, usize> {
        let owned = |out: &[HolderRanking]| -> BTreeMap<String, String> {
            first_places(out).into_iter().map(|(s, n)| (s.to_owned(), n.to_owned())).collect()
        };
        let mut moves = BTreeMap::new();
        let mut last = owned(&preferred_holders(req));
        for k in 0..req.nodes.len() {
            for state in [NodeState::Leaving, NodeState::Down, NodeState::Joining, NodeState::Active] {
                let mut step = req.clone();
                if seated || state.is_eligible() {
                    step.nodes[k].state = state;
                } else {
                    step.nodes.remove(k);
                }
                let now = owned(&preferred_holders(&step));
                for (shard, node) in &now {
                    if last.get(shard) != Some(node) {
                        *moves.entry(shard.clone()).or_default() += 1;
                    }
                }
                last = now;
            }
        }
        moves
    }

    #[test]
    fn a_rolling_restart_moves_each_shard_away_from_its_node_and_back_only() {
        // Before nodes kept their seats, the shards of nodes that stayed up
        // slid between them as the caps changed, and back (this test prints
        // both counts; most moves of one shard / all moves, before -> now):
        // 16 shards on 3 nodes 2/32 -> 2/32, 100 on 5 10/232 -> 2/200, 97 at
        // factor 3 on 5 10/226 -> 2/194.
        let placed = {
            let (ns, shards) = (nodes(5), active(97));
            let replicas = place_all(&ns, &shards, 3);
            ranking_req(&ns, &shards, &replicas)
        };
        for (name, req) in [
            ("16 shards on 3 nodes", everywhere_on(16, 3)),
            ("100 shards on 5 nodes", everywhere_on(100, 5)),
            ("97 shards at factor 3 on 5 nodes", placed),
        ] {
            let seated = moves_over_a_rolling_restart(&req, true);
            let before = moves_over_a_rolling_restart(&req, false);
            let most = |m: &BTreeMap<String, usize>| m.values().copied().max().unwrap_or(0);
            let all = |m: &BTreeMap<String, usize>| m.values().sum::<usize>();
            eprintln!(
                "{name}: most moves of one shard {} (before {}), all moves {} (before {})",
                most(&seated),
                most(&before),
                all(&seated),
                all(&before)
            );
            assert!(most(&seated) <= 2, "{name}: {seated:?}");
            assert_eq!(all(&seated), 2 * req.shards.len(), "{name}: every shard away from its node and back, once");
        }
    }

    /// Every shard of `shards` hosted on each of `k` nodes.
    fn everywhere_on(shards: usize, k: usize) -> RankingRequest {
        let (ns, shards) = (nodes(k), active(shards));
        let replicas = everywhere(&shards, &ns);
        ranking_req(&ns, &shards, &replicas)
    }

    #[test]
    fn a_node_without_replicas_changes_no_ranking() {
        let ns = nodes(5);
        let shards = active(40);
        let replicas = place_all(&ns, &shards, 3);
        let before = preferred_holders(&ranking_req(&ns, &shards, &replicas));
        let mut more = ns.clone();
        more.push(node("n6", NodeState::Joining));
        assert_eq!(preferred_holders(&ranking_req(&more, &shards, &replicas)), before);
    }

    #[test]
    fn inactive_shards_take_no_share() {
        let ns = nodes(3);
        let mut shards = active(6);
        shards.extend(["old1", "old2", "old3"].map(|id| shard(id, ShardState::Inactive, None)));
        let req = ranking_req(&ns, &shards, &everywhere(&shards, &ns));
        let out = preferred_holders(&req);
        assert_eq!(leads(&out[..6], &ns), [2, 2, 2]);
        for h in &out[6..] {
            assert_eq!(h.nodes, rank(&h.shard, ["n1", "n2", "n3"]), "{}", h.shard);
        }
    }

    #[test]
    fn full_nodes_make_room_along_a_chain() {
        // The only balanced answer: p on n1, q on n2, r on n3, whichever
        // shard picks first and whatever it ranks first.
        let ns = nodes(3);
        let shards =
            [shard("p", ShardState::Active, None), shard("q", ShardState::Active, None), shard("r", ShardState::Active, None)];
        let replicas = [replica("p", "n1"), replica("q", "n1"), replica("q", "n2"), replica("r", "n2"), replica("r", "n3")];
        let out = preferred_holders(&ranking_req(&ns, &shards, &replicas));
        let firsts = first_places(&out);
        assert_eq!(firsts, BTreeMap::from([("p", "n1"), ("q", "n2"), ("r", "n3")]));
    }

    #[test]
    fn a_shard_whose_nodes_are_all_full_goes_to_the_least_loaded() {
        // Five shards only n1 and n2 host, one only n3 hosts: the caps (2 each
        // of 6 over 3 nodes) cannot hold, so one of the five goes over.
        let ns = nodes(3);
        let mut shards = active(5);
        shards.push(shard("solo", ShardState::Active, None));
        let mut replicas: Vec<Replica> = shards[..5].iter().flat_map(|s| [replica(&s.id, "n1"), replica(&s.id, "n2")]).collect();
        replicas.push(replica("solo", "n3"));
        let req = ranking_req(&ns, &shards, &replicas);
        let out = preferred_holders(&req);
        assert_failover_order(&req, &out);
        let mut counts = leads(&out, &ns);
        assert_eq!(counts[2], 1);
        counts.sort_unstable();
        assert_eq!(counts, [1, 2, 3]);
    }
}
