#!/usr/bin/env python3
"""Writes tests/fixtures/policies/*.json, the fixtures of the default policies.

Every expectation below is written out by hand from the semantics of the
default policies (see policies/default/src/*.rs), except where it depends on
the rendezvous ranking: those use `rank`, an independent implementation of the
documented definition (plugins/sdk/src/rank.rs: FNV-1a 64 of
`key ++ 0x00 ++ node`, then the splitmix64 finaliser; descending weight, ties
by node id), and the preferred holders, which use `preferred`, an independent
model of the balanced choice documented in docs/plugins.md. `tests/fixtures.rs`
then proves every expectation against the Rust implementation, and
`chitin policy test` against the component.

Run from the repository root: python3 policies/default/tests/gen_fixtures.py
"""

import json
import os
import sys

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "fixtures", "policies")
M64 = (1 << 64) - 1


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & M64
    return h


def mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def rank(key, nodes):
    w = lambda n: mix64(fnv1a64(key.encode() + b"\0" + n.encode()))
    return sorted(nodes, key=lambda n: (-w(n), n))


assert fnv1a64(b"a") == 0xAF63DC4C8601EC8C

FIXTURES = {}


def fixture(name, description, slot, call, input, expect):
    assert name not in FIXTURES, name
    assert name.startswith(slot + "-"), name
    FIXTURES[name] = {"description": description, "slot": slot, "call": call, "input": input, "expect": expect}


def ok(v):
    return {"ok": v}


def err(kind, v):
    return {"error": {kind: v}}


def node(id, state="active", zone=None):
    n = {"id": id, "address": f"{id}.cluster.internal:7000", "state": state}
    if zone:
        n["zone"] = zone
        n["labels"] = [{"key": "zone", "value": zone}]
    return n


def nodes(*spec):
    """nodes("n1", "n2:leaving") -> node records."""
    out = []
    for s in spec:
        id, _, state = s.partition(":")
        out.append(node(id, state or "active"))
    return out


def shard(id, state="active", parent=None, lower=0, upper=0xFFFFFFFF, app="orders"):
    s = {"id": id, "application": app, "lower": lower, "upper": upper, "state": state}
    if parent:
        s["parent"] = parent
    return s


def replica(shard, node):
    return {"id": f"{shard}-{node}", "shard": shard, "node": node}


def replicas(layout):
    """{"s1": ["n1", "n2"]} -> replica records, in shard then node order of the dict."""
    return [replica(s, n) for s, ns in layout.items() for n in ns]


def move(shard, source, target):
    return {"shard": shard, "replica": f"{shard}-{source}", "source": source, "target": target}


# ---------------------------------------------------------------- instance-id

ENV = "CHITIN__CLUSTER__INSTANCE_ID"


def ctx(env, hostname):
    return {"env": [list(p) for p in env], "hostname": hostname}


fixture("instance-id-env", "the environment variable names the node, whatever the host name",
        "instance-id", "resolve", ctx([("HOME", "/root"), (ENV, "node-01")], "db-host-7"), ok("node-01"))
fixture("instance-id-env-without-hostname", "the environment variable suffices when the host name is unknown",
        "instance-id", "resolve", ctx([(ENV, "node-02")], None), ok("node-02"))
fixture("instance-id-env-verbatim", "the environment value is taken verbatim: no prefix, case kept",
        "instance-id", "resolve", ctx([(ENV, "Chitin-Node_03.eu")], "box"), ok("Chitin-Node_03.eu"))
fixture("instance-id-hostname", "without the variable the name is chitin-<hostname>",
        "instance-id", "resolve", ctx([("PATH", "/usr/bin")], "db-host-7"), ok("chitin-db-host-7"))
fixture("instance-id-env-name-is-case-sensitive", "a lower-case variable of the same name is not the variable",
        "instance-id", "resolve", ctx([(ENV.lower(), "node-09")], "db-host-7"), ok("chitin-db-host-7"))
fixture("instance-id-fallback", "no variable and no host name: the name is chitin",
        "instance-id", "resolve", ctx([], None), ok("chitin"))
fixture("instance-id-empty-hostname", "an empty host name counts as none: the name is chitin",
        "instance-id", "resolve", ctx([("LANG", "C")], ""), ok("chitin"))
fixture("instance-id-empty-env", "an empty variable is returned as is (no silent fallback to the host name) and the host refuses it",
        "instance-id", "resolve", ctx([(ENV, "")], "db-host-7"), {"refused": "is empty"})
fixture("instance-id-colon-env", "a variable containing ':' is returned as is and the host refuses it",
        "instance-id", "resolve", ctx([(ENV, "node:01")], "db-host-7"), {"refused": "contains `:`"})
fixture("instance-id-colon-hostname", "a host name containing ':' gives a name the host refuses",
        "instance-id", "resolve", ctx([], "fe80::1"), {"refused": "contains `:`"})

# ---------------------------------------------------------------- place-replicas


def place_req(ns, shards, reps, new, rf):
    return {"nodes": ns, "shards": shards, "replicas": reps, "new_shards": new, "replication_factor": rf}


def greedy(eligible, counts, new, rf):
    """Independent model of the default placement: fewest replicas, then rank."""
    counts = dict(counts)
    out = []
    for s in new:
        order = rank(s, eligible)
        chosen = sorted(order, key=lambda n: (counts.get(n, 0), order.index(n)))[:rf]
        for n in chosen:
            counts[n] = counts.get(n, 0) + 1
        out.append({"shard": s, "nodes": chosen})
    return out, counts


three = nodes("n1", "n2", "n3")
fixture("placement-place-replicas-three-nodes-factor-3", "three active nodes, factor 3: every node, in rendezvous order",
        "placement", "place-replicas", place_req(three, [shard("s1")], [], ["s1"], 3),
        ok([{"shard": "s1", "nodes": rank("s1", ["n1", "n2", "n3"])}]))
fixture("placement-place-replicas-too-few-nodes", "two nodes cannot hold three replicas",
        "placement", "place-replicas", place_req(nodes("n1", "n2"), [shard("s1")], [], ["s1"], 3),
        err("insufficient-nodes", {"needed": 3, "eligible": 2}))
fixture("placement-place-replicas-too-few-eligible", "leaving and down nodes do not count as eligible",
        "placement", "place-replicas",
        place_req(nodes("n1", "n2:leaving", "n3:down", "n4:joining"), [shard("s1")], [], ["s1"], 3),
        err("insufficient-nodes", {"needed": 3, "eligible": 2}))
ns = nodes("n1", "n2:leaving", "n3", "n4:down", "n5")
fixture("placement-place-replicas-leaving-and-down-get-nothing",
        "with n2 leaving and n4 down, both shards get exactly n1, n3 and n5",
        "placement", "place-replicas", place_req(ns, [shard("s1"), shard("s2")], [], ["s1", "s2"], 3),
        ok([{"shard": "s1", "nodes": rank("s1", ["n1", "n3", "n5"])},
            {"shard": "s2", "nodes": rank("s2", ["n1", "n3", "n5"])}]))
fixture("placement-place-replicas-joining-node-first",
        "a joining node with no replicas is the least loaded and is chosen first",
        "placement", "place-replicas",
        place_req(nodes("n1", "n2", "n3", "n4:joining"), [shard("s1"), shard("s2"), shard("s3"), shard("s4")],
                  replicas({"s1": ["n1", "n2"], "s2": ["n2", "n3"], "s3": ["n3", "n1"]}), ["s4"], 1),
        ok([{"shard": "s4", "nodes": ["n4"]}]))
fixture("placement-place-replicas-fewest-replicas-first",
        "the two nodes with the fewest replicas (n3: 0, n2: 1) win over rank",
        "placement", "place-replicas",
        place_req(nodes("n1", "n2", "n3"), [shard("a"), shard("b"), shard("c"), shard("new")],
                  replicas({"a": ["n1", "n2"], "b": ["n1"], "c": ["n1"]}), ["new"], 2),
        ok([{"shard": "new", "nodes": ["n3", "n2"]}]))
five = ["n1", "n2", "n3", "n4", "n5"]
many = [f"s{i:02}" for i in range(1, 21)]
placed, counts = greedy(five, {}, many, 3)
assert sorted(counts.values()) == [12] * 5
fixture("placement-place-replicas-balanced-after-many",
        "20 shards at factor 3 on 5 nodes in one call: every node ends with exactly 12 replicas",
        "placement", "place-replicas", place_req(nodes(*five), [shard(s) for s in many], [], many, 3), ok(placed))
existing = {"a1": ["n1", "n2"], "a2": ["n1", "n3"], "a3": ["n2", "n3"], "a4": ["n1", "n4"]}
seven = [f"b{i}" for i in range(1, 8)]
placed, counts = greedy(["n1", "n2", "n3", "n4"], {"n1": 3, "n2": 2, "n3": 2, "n4": 1}, seven, 2)
assert sorted(counts.values()) == [5, 5, 6, 6], counts
fixture("placement-place-replicas-balanced-with-existing",
        "seven shards at factor 2 on top of an uneven start end within one replica per node (6,6,5,5)",
        "placement", "place-replicas",
        place_req(nodes("n1", "n2", "n3", "n4"), [shard(s) for s in list(existing) + seven], replicas(existing), seven, 2),
        ok(placed))
split_shards = [shard("p", "splitting"), shard("p-lo", "activating", "p", upper=0x7FFFFFFF),
                shard("p-hi", "activating", "p", lower=0x80000000)]
fixture("placement-place-replicas-activating-child-on-parent-nodes",
        "both activating children get exactly the splitting parent's nodes (sorted), not the least loaded ones",
        "placement", "place-replicas",
        place_req(nodes("n1", "n2", "n3", "n4", "n5"), split_shards, replicas({"p": ["n4", "n1", "n3"]}), ["p-lo", "p-hi"], 3),
        ok([{"shard": "p-lo", "nodes": ["n1", "n3", "n4"]}, {"shard": "p-hi", "nodes": ["n1", "n3", "n4"]}]))
fixture("placement-place-replicas-activating-child-parent-node-down",
        "an activating child takes its parent's nodes even when one is down (the host moves it later)",
        "placement", "place-replicas",
        place_req(nodes("n1", "n2", "n3:down"), split_shards, replicas({"p": ["n1", "n3"]}), ["p-lo"], 2),
        ok([{"shard": "p-lo", "nodes": ["n1", "n3"]}]))
fixture("placement-place-replicas-activating-parent-without-replicas",
        "an activating child whose parent has no replicas is refused, naming both",
        "placement", "place-replicas",
        place_req(nodes("n1", "n2", "n3"), split_shards, [], ["p-lo"], 3),
        err("invalid-input", "shard p-lo is activating but its parent p has no replicas; "
                             "an activating shard takes its parent's replica nodes"))
fixture("placement-place-replicas-activating-orphan",
        "an activating shard whose parent is not in the request is placed like any new shard",
        "placement", "place-replicas",
        place_req(nodes("n1", "n2", "n3"), [shard("c", "activating", "gone")], [], ["c"], 2),
        ok([{"shard": "c", "nodes": rank("c", ["n1", "n2", "n3"])[:2]}]))
fixture("placement-place-replicas-unknown-shard", "a new shard id missing from shards is refused, naming it",
        "placement", "place-replicas", place_req(three, [shard("s1")], [], ["s1", "s9"], 1),
        err("unknown-shard", "s9"))
fixture("placement-place-replicas-factor-zero", "a replication factor of 0 is refused",
        "placement", "place-replicas", place_req(three, [shard("s1")], [], ["s1"], 0),
        err("invalid-input", "replication factor is 0; shard s1 needs at least one replica"))
fixture("placement-place-replicas-request-order",
        "placements come back in the order of new_shards, not of shards or ids",
        "placement", "place-replicas",
        place_req(nodes("n1", "n2"), [shard("a"), shard("b"), shard("c")], [], ["c", "a", "b"], 2),
        ok([{"shard": s, "nodes": rank(s, ["n1", "n2"])} for s in ["c", "a", "b"]]))
fixture("placement-place-replicas-nothing-to-place", "an empty new_shards list places nothing",
        "placement", "place-replicas", place_req(three, [shard("s1")], [], [], 3), ok([]))

# ---------------------------------------------------------------- rebalance


def reb_req(ns, shards, reps, holders=()):
    return {"nodes": ns, "shards": shards, "replicas": reps, "holders": list(holders), "load": []}


# Three nodes each holding all four shards; n4 joins. T = 12, E = 4: 3 each, so
# n1, n2, n3 (over by one, in id order) each give n4 its lowest shard id that
# n4 does not hold yet.
layout = {s: ["n1", "n2", "n3"] for s in ["s1", "s2", "s3", "s4"]}
fixture("placement-rebalance-node-added", "a fourth node joins three full ones: exactly 12/4 = 3 replicas move, all to it",
        "placement", "rebalance",
        reb_req(nodes("n1", "n2", "n3", "n4:joining"), [shard(s) for s in layout], replicas(layout),
                [{"shard": "s1", "node": "n1"}]),
        ok([move("s1", "n1", "n4"), move("s2", "n2", "n4"), move("s3", "n3", "n4")]))
# 8 shards at factor 3 on 4 nodes, 6 each; n5 joins. T = 24, E = 5: base 4 and
# 4 extras, which go to n1..n4 (they hold the most): targets 5,5,5,5,4 and
# only 4 replicas move (24/5 rounded down).
layout = {}
for i in range(8):
    layout[f"s{i + 1}"] = [f"n{(i + k) % 4 + 1}" for k in range(3)]
held = {n: sorted(s for s, ns in layout.items() if n in ns) for n in ["n1", "n2", "n3", "n4"]}
assert all(len(v) == 6 for v in held.values())
assert held["n1"][0] == "s1" and held["n2"][0] == "s1" and held["n3"][:2] == ["s1", "s2"]
fixture("placement-rebalance-fifth-node-added",
        "a fifth node joins four nodes holding 6 each: only 4 replicas move (24/5), one from each old node",
        "placement", "rebalance",
        reb_req(nodes("n1", "n2", "n3", "n4", "n5:joining"), [shard(s) for s in layout], replicas(layout)),
        ok([move("s1", "n1", "n5"), move("s2", "n2", "n5"), move("s3", "n3", "n5"), move("s4", "n4", "n5")]))
# Each shard misses one node; n4 goes down. Its replicas (s1, s2, s3) must move
# and each has exactly one eligible node without it.
layout = {"s1": ["n2", "n3", "n4"], "s2": ["n1", "n3", "n4"], "s3": ["n1", "n2", "n4"], "s4": ["n1", "n2", "n3"]}
fixture("placement-rebalance-node-down",
        "n4 is down: its three replicas move, each to the one node lacking that shard, and nothing else moves",
        "placement", "rebalance",
        reb_req(nodes("n1", "n2", "n3", "n4:down"), [shard(s) for s in layout], replicas(layout)),
        ok([move("s1", "n4", "n1"), move("s2", "n4", "n2"), move("s3", "n4", "n3")]))
# n3 leaving holds a and b; n1 holds c (1), n2 holds a and c (2). T = 5 on
# E = 2: base 2, the extra to n2 (holds most): targets n1 2, n2 3. Evacuated
# in (node, shard) order: a cannot join its replica on n2 -> n1 (deficit 1);
# b -> n2, the only node still below target.
layout = {"a": ["n3", "n2"], "b": ["n3"], "c": ["n1", "n2"]}
fixture("placement-rebalance-node-leaving",
        "a leaving node's replicas move to the nodes below their target, never next to a replica of the same shard",
        "placement", "rebalance",
        reb_req(nodes("n1", "n2", "n3:leaving"), [shard(s) for s in layout], replicas(layout)),
        ok([move("a", "n3", "n1"), move("b", "n3", "n2")]))
fixture("placement-rebalance-unknown-node",
        "a replica on a node missing from the request moves like one on a down node",
        "placement", "rebalance",
        reb_req(nodes("n1", "n2"), [shard("a"), shard("b")], replicas({"a": ["n1", "ghost"], "b": ["n1"]})),
        ok([move("a", "ghost", "n2")]))
layout = {"s1": ["n1", "n2"], "s2": ["n2", "n3"], "s3": ["n3", "n1"]}
fixture("placement-rebalance-already-balanced", "two replicas on each of three nodes: no moves",
        "placement", "rebalance", reb_req(three, [shard(s) for s in layout], replicas(layout)), ok([]))
layout = {"s1": ["n1", "n2"], "s2": ["n2", "n3"], "s3": ["n1"]}
fixture("placement-rebalance-within-one", "2, 2, 1 replicas is balanced (T mod E extras stay where they are): no moves",
        "placement", "rebalance", reb_req(three, [shard(s) for s in layout], replicas(layout)), ok([]))
# n1: a1..a5 (5), n2: a1..a4 (4), n3: a5 (1); T = 10, E = 3 -> base 3, one
# extra to n1 (holds most): targets 4, 3, 3. n1 and n2 each give one -> 2 moves
# (an extra on n3 would take 3).
layout = {"a1": ["n1", "n2"], "a2": ["n1", "n2"], "a3": ["n1", "n2"], "a4": ["n1", "n2"], "a5": ["n1", "n3"]}
fixture("placement-rebalance-extras-stay-on-fullest",
        "the T mod E extra replicas stay on the fullest nodes so the fewest move (2 moves, not 3)",
        "placement", "rebalance", reb_req(three, [shard(s) for s in layout], replicas(layout)),
        ok([move("a1", "n1", "n3"), move("a2", "n2", "n3")]))
# n1 holds s1 (active), s2 (splitting), s3 (inactive), s4 (active), s5
# (activating); s3 also sits on the down node z (not active: stays, not
# counted). T = 5 on a, b: a (5) target 3, b target 2: both active shards move.
st = [shard("s1"), shard("s2", "splitting"), shard("s3", "inactive"), shard("s4"),
      shard("s5", "activating", "s2", upper=0x7FFFFFFF)]
fixture("placement-rebalance-only-active-shards-move",
        "replicas of splitting, inactive and activating shards stay (even on a down node) but count towards their node",
        "placement", "rebalance",
        reb_req(nodes("a", "b", "z:down"), st,
                replicas({"s1": ["a"], "s2": ["a"], "s3": ["a", "z"], "s4": ["a"], "s5": ["a"]})),
        ok([move("s1", "a", "b"), move("s4", "a", "b")]))
fixture("placement-rebalance-nothing-movable",
        "a node over its target with only non-active replicas keeps them: no moves",
        "placement", "rebalance",
        reb_req(nodes("a", "b"), st, replicas({"s2": ["a"], "s3": ["a"], "s5": ["a"]})), ok([]))
fixture("placement-rebalance-no-eligible-node", "every node down and an active replica to move: one eligible node needed, none",
        "placement", "rebalance",
        reb_req(nodes("n1:down", "n2:leaving"), [shard("s1")], replicas({"s1": ["n1"]})),
        err("insufficient-nodes", {"needed": 1, "eligible": 0}))
fixture("placement-rebalance-unknown-shard", "a replica of a shard missing from shards is refused, naming the shard",
        "placement", "rebalance", reb_req(three, [shard("s1")], replicas({"s1": ["n1"], "s7": ["n2"]})),
        err("unknown-shard", "s7"))
fixture("placement-rebalance-cannot-evacuate",
        "a replica on a down node whose shard already sits on every eligible node cannot move: refused, naming all",
        "placement", "rebalance",
        reb_req(nodes("n1", "n2", "n3:down"), [shard("s1")], replicas({"s1": ["n1", "n2", "n3"]})),
        err("invalid-input", "replica s1-n3 of shard s1 sits on node n3, which is not joining or active, and every "
                             "eligible node already holds a replica of s1; add a node first"))

# ---------------------------------------------------------------- preferred-holders


def rank_req(ns, shards, reps):
    return {"nodes": ns, "shards": shards, "replicas": reps}


def pick_order(s):
    return (mix64(fnv1a64(s.encode())), s)


def balanced_holders(rankings, kept=None):
    """Independent model of the default's choice of holders: consistent hashing
    with bounded loads over the rendezvous rank. `rankings` maps each shard to
    its replica nodes in rendezvous order (none empty); returns the holder of
    each. The shards of `kept` (shard -> node) stay where they are, and no
    chain moves them. With n
    shards on the k nodes of the rankings, a node may lead n // k, and the
    first n % k nodes to go beyond lead one more. The other shards in pick
    order take their best-ranked node with room, else the shortest chain of
    moves (breadth first) that ends at a node with room, else their least
    loaded node (ties by rank)."""
    kept = kept or {}
    order = sorted(rankings, key=pick_order)
    nodes = sorted({n for r in rankings.values() for n in r})
    base, extra = divmod(len(order), len(nodes)) if nodes else (0, 0)
    led = {n: [] for n in nodes}
    holder = {}
    for s in order:
        if s in kept:
            led[kept[s]].append(s)
            holder[s] = kept[s]

    def room(n):
        above = sum(1 for m in nodes if len(led[m]) > base)
        return len(led[n]) < base or (len(led[n]) == base and above < extra)

    def chain(s):
        reached, queue, offers = {}, [], [(s, None)]
        while True:
            for t, source in offers:
                for n in rankings[t]:
                    if n in reached:
                        continue
                    reached[n] = (t, source)
                    if room(n):
                        moves = []
                        while n is not None:
                            t, prev = reached[n]
                            moves.append((t, n))
                            n = prev
                        return moves
                    queue.append(n)
            if not queue:
                return None
            full = queue.pop(0)
            offers = [(t, full) for t in sorted(led[full], key=order.index) if t not in kept]

    for s in (s for s in order if s not in kept):
        least = min(rankings[s], key=lambda n: (len(led[n]), rankings[s].index(n)))
        for t, n in chain(s) or [(s, least)]:
            if t in holder:
                led[holder[t]].remove(t)
            led[n].append(t)
            holder[t] = n
    return holder


def preferred(req):
    """The default's answer to a preferred-holders request: each shard's holder,
    then its other eligible replica nodes in rendezvous order; inactive shards
    take no share."""
    def ranked_on(counted):
        return {s["id"]: rank(s["id"], {r["node"] for r in req["replicas"] if r["shard"] == s["id"] and r["node"] in counted})
                for s in req["shards"]}

    def contested(ranked):
        return {s["id"]: ranked[s["id"]] for s in req["shards"] if s["state"] != "inactive" and ranked[s["id"]]}

    eligible = {n["id"] for n in req["nodes"] if n["state"] in ("joining", "active")}
    ranked = ranked_on(eligible)
    # Every node of the request keeps its seat: the balance over all of them
    # first, then the shards of seats that are not eligible seated again
    # among the eligible nodes around the others.
    seats = balanced_holders(contested(ranked_on({n["id"] for n in req["nodes"]})))
    kept = {s: n for s, n in seats.items() if n in ranked[s]}
    holders = balanced_holders(contested(ranked), kept)
    out = []
    for s in req["shards"]:
        h = holders.get(s["id"])
        out.append({"shard": s["id"], "nodes": [n for n in [h] if n] + [n for n in ranked[s["id"]] if n != h]})
    return out


def first_places(answer):
    return {h["shard"]: h["nodes"][0] for h in answer if h["nodes"]}


def leads(answer, ns):
    firsts = list(first_places(answer).values())
    return [firsts.count(n) for n in ns]


four = ["n1", "n2", "n3", "n4"]
layout = {"s1": ["n1", "n2", "n3"], "s2": ["n2", "n3", "n4"], "s3": ["n3", "n4", "n1"], "s4": ["n4", "n1", "n2"],
          "s5": ["n1", "n2", "n3"], "s6": ["n2", "n3", "n4"]}
basic_req = rank_req(nodes(*four), [shard(s) for s in layout], replicas(layout))
basic = preferred(basic_req)
# Plain rendezvous would give n3 three shards and n1 none; balanced, every node leads 1 or 2.
assert [rank(s, ns)[0] for s, ns in layout.items()].count("n3") == 3
assert sorted(leads(basic, four)) == [1, 1, 2, 2], leads(basic, four)
fixture("placement-preferred-holders-basic",
        "each shard's replica nodes: a balanced preferred holder first (6 shards over 4 nodes lead 2/2/1/1, where "
        "rendezvous alone gives n3 three and n1 none), then the others in rendezvous order for that shard",
        "placement", "preferred-holders", basic_req, ok(basic))
fixture("placement-preferred-holders-stable-on-node-add",
        "a new node without replicas changes no ranking (same answer as preferred-holders-basic)",
        "placement", "preferred-holders",
        rank_req(nodes(*four, "n5:joining"), [shard(s) for s in layout], replicas(layout)), ok(basic))
down_req = rank_req(nodes("n1", "n2", "n3", "n4:down"), [shard(s) for s in layout], replicas(layout))
down = preferred(down_req)
moved = {s for s, n in first_places(basic).items() if first_places(down)[s] != n}
assert moved == {s for s, n in first_places(basic).items() if n == "n4"}, moved
assert sorted(leads(down, four[:3])) == [2, 2, 2]
fixture("placement-preferred-holders-stable-on-node-down",
        "n4 down: only the shards n4 led change their first node, the three others now lead 2 each, and every "
        "ranking loses n4",
        "placement", "preferred-holders", down_req, ok(down))
fixture("placement-preferred-holders-ineligible-and-missing",
        "leaving, down and unknown nodes are never ranked; a shard without eligible replica nodes gets an empty list",
        "placement", "preferred-holders",
        rank_req(nodes("n1", "n2:leaving", "n3:down", "n4:joining"),
                 [shard("x"), shard("y"), shard("z")],
                 replicas({"x": ["n1", "n2", "n4", "ghost"], "y": ["n2", "n3"]})),
        ok([{"shard": "x", "nodes": rank("x", ["n1", "n4"])}, {"shard": "y", "nodes": []}, {"shard": "z", "nodes": []}]))
order_req = rank_req(nodes("n1", "n2"), [shard("b"), shard("a")], replicas({"a": ["n1", "n2"], "b": ["n2", "n1"]}))
assert sorted(leads(preferred(order_req), ["n1", "n2"])) == [1, 1]
fixture("placement-preferred-holders-request-order",
        "rankings come back in the order of the request's shards; two shards on two nodes lead one each",
        "placement", "preferred-holders", order_req, ok(preferred(order_req)))
sixteen = {f"s{i:02d}": ["n1", "n2", "n3"] for i in range(16)}
balanced_req = rank_req(nodes("n1", "n2", "n3"), [shard(s) for s in sixteen], replicas(sixteen))
balanced = preferred(balanced_req)
assert sorted(leads([{"shard": s, "nodes": rank(s, ns)} for s, ns in sixteen.items()], ["n1", "n2", "n3"])) == [3, 5, 8]
assert sorted(leads(balanced, ["n1", "n2", "n3"])) == [5, 5, 6], leads(balanced, ["n1", "n2", "n3"])
fixture("placement-preferred-holders-balanced",
        "16 shards on 3 nodes, every node hosting every shard: the nodes lead 6/5/5 (rendezvous alone gives 8/5/3)",
        "placement", "preferred-holders", balanced_req, ok(balanced))
joined_layout = {s: ["n1", "n2", "n3", "n4"] for s in sixteen}
joined_req = rank_req(nodes("n1", "n2", "n3", "n4:joining"), [shard(s) for s in joined_layout], replicas(joined_layout))
joined = preferred(joined_req)
moved = {s for s, n in first_places(balanced).items() if first_places(joined)[s] != n}
assert moved == {s for s, n in first_places(joined).items() if n == "n4"} and len(moved) == 4, moved
fixture("placement-preferred-holders-node-joins-takes-its-share",
        "n4 joins hosting all 16 shards of preferred-holders-balanced: it leads its share, 4, every node now leads "
        "4, and only the shards n4 takes change their first node",
        "placement", "preferred-holders", joined_req, ok(joined))
hundred = {f"s{i:02d}": ["n1", "n2", "n3", "n4", "n5"] for i in range(100)}
five = ["n1", "n2", "n3", "n4", "n5"]
all_up = preferred(rank_req(nodes(*five), [shard(s) for s in hundred], replicas(hundred)))
seat_req = rank_req(nodes("n1:down", "n2", "n3", "n4", "n5"), [shard(s) for s in hundred], replicas(hundred))
seat_kept = preferred(seat_req)
moved = {s for s, n in first_places(all_up).items() if first_places(seat_kept)[s] != n}
assert moved == {s for s, n in first_places(all_up).items() if n == "n1"} and len(moved) == 20, len(moved)
assert sorted(leads(seat_kept, five[1:])) == [25, 25, 25, 25], leads(seat_kept, five[1:])
# Without its seat (n1 out of the request) five more shards of the other nodes would slide.
gone = preferred(rank_req(nodes(*five[1:]), [shard(s) for s in hundred], replicas(hundred)))
assert len({s for s, n in first_places(all_up).items() if first_places(gone)[s] != n}) == 25
fixture("placement-preferred-holders-down-node-keeps-its-seat",
        "100 shards on 5 nodes, n1 down: exactly the 20 shards n1 led change their first node and the four others "
        "lead 25 each; the shards of the nodes that stayed up stay where they were (n1 out of the request would "
        "move 25), so n1 coming back takes exactly its 20 again",
        "placement", "preferred-holders", seat_req, ok(seat_kept))
retired = {**{f"s{i}": ["n1", "n2", "n3"] for i in range(1, 7)}, "old1": ["n1", "n2", "n3"], "old2": ["n1", "n2", "n3"]}
retired_req = rank_req(nodes("n1", "n2", "n3"),
                       [shard(s, "inactive" if s.startswith("old") else "active") for s in retired], replicas(retired))
retired_answer = preferred(retired_req)
assert leads(retired_answer[:6], ["n1", "n2", "n3"]) == [2, 2, 2]
assert all(h["nodes"] == rank(h["shard"], ["n1", "n2", "n3"]) for h in retired_answer[6:])
fixture("placement-preferred-holders-inactive-takes-no-share",
        "an inactive shard carries no lease: it is ranked in rendezvous order but takes no share, so the 6 active "
        "shards lead 2/2/2",
        "placement", "preferred-holders", retired_req, ok(retired_answer))

# ---------------------------------------------------------------- split


def split_req(sh, children=2, at=None, load=None, samples=()):
    r = {"shard": sh, "children": children, "samples": list(samples)}
    if at is not None:
        r["at"] = at
    if load is not None:
        r["load"] = load
    return r


def outside(p, id, lo, hi):
    return f"split point {p:08x} is outside shard {id}'s range [{lo:08x}, {hi:08x}]; it must satisfy lower < point <= upper"


fixture("split-halves-full-range", "the full key space splits at its midpoint 0x80000000",
        "split", "split-points", split_req(shard("s1")), ok([0x80000000]))
fixture("split-halves", "[0x1000, 0x1fff] splits at 0x1800", "split", "split-points",
        split_req(shard("s1", lower=0x1000, upper=0x1FFF)), ok([0x1800]))
fixture("split-halves-odd-size", "[0, 2] (3 keys) splits at 1: the lower child gets the smaller half",
        "split", "split-points", split_req(shard("s1", lower=0, upper=2)), ok([1]))
fixture("split-two-keys", "a two-key range [7, 8] splits at 8", "split", "split-points",
        split_req(shard("s1", lower=7, upper=8)), ok([8]))
fixture("split-four-way", "four children cut the full key space in quarters", "split", "split-points",
        split_req(shard("s1"), children=4), ok([0x40000000, 0x80000000, 0xC0000000]))
fixture("split-four-way-upper-half", "four children of [0x80000000, 0xffffffff]", "split", "split-points",
        split_req(shard("s1", lower=0x80000000), children=4), ok([0xA0000000, 0xC0000000, 0xE0000000]))
fixture("split-three-way", "three children of [0, 8] (9 keys): 3 keys each", "split", "split-points",
        split_req(shard("s1", lower=0, upper=8), children=3), ok([3, 6]))
fixture("split-load-ignored", "the default ignores load and samples: still the midpoint", "split", "split-points",
        split_req(shard("s1", lower=0x1000, upper=0x1FFF), load={"shard": "s1", "keys": 1000, "bytes": 64000, "ops_per_sec": 250.5},
                  samples=[{"lower": 0x1000, "upper": 0x10FF, "keys": 990, "bytes": 63000, "ops_per_sec": 240.0},
                           {"lower": 0x1100, "upper": 0x1FFF, "keys": 10, "bytes": 1000, "ops_per_sec": 10.5}]),
        ok([0x1800]))
fixture("split-one-key", "a one-key range cannot split", "split", "split-points",
        split_req(shard("s1", lower=0x2A, upper=0x2A)),
        err("invalid-split", "shard s1 covers the single key 0000002a; a one-key range cannot split"))
fixture("split-too-few-keys", "three keys cannot make four children", "split", "split-points",
        split_req(shard("s1", lower=7, upper=9), children=4),
        err("invalid-split", "shard s1 covers 3 keys [00000007, 00000009], fewer than the 4 children asked"))
fixture("split-one-child", "a split needs at least two children", "split", "split-points",
        split_req(shard("s1"), children=1),
        err("invalid-split", "shard s1: a split needs at least 2 children, 1 asked"))
fixture("split-at-lower-refused", "an explicit point equal to the lower bound leaves the first child empty: refused",
        "split", "split-points", split_req(shard("s1", lower=0x1000, upper=0x1FFF), at=0x1000),
        err("invalid-split", outside(0x1000, "s1", 0x1000, 0x1FFF)))
fixture("split-at-lower-plus-one", "lower + 1 is the first valid explicit point (the first child has one key)",
        "split", "split-points", split_req(shard("s1", lower=0x1000, upper=0x1FFF), at=0x1001), ok([0x1001]))
fixture("split-at-upper", "the upper bound is the last valid explicit point (the second child has one key)",
        "split", "split-points", split_req(shard("s1", lower=0x1000, upper=0x1FFF), at=0x1FFF), ok([0x1FFF]))
fixture("split-at-above-upper-refused", "an explicit point past the upper bound is refused, naming the range",
        "split", "split-points", split_req(shard("s1", lower=0x1000, upper=0x1FFF), at=0x2000),
        err("invalid-split", outside(0x2000, "s1", 0x1000, 0x1FFF)))
fixture("split-at-top-of-key-space", "0xffffffff is a valid explicit point of the upper half", "split", "split-points",
        split_req(shard("s1", lower=0x80000000), at=0xFFFFFFFF), ok([0xFFFFFFFF]))
fixture("split-at-with-three-children", "an explicit point makes two children only", "split", "split-points",
        split_req(shard("s1"), children=3, at=0x1000),
        err("invalid-split", "shard s1: an explicit split point makes 2 children, 3 asked"))
fixture("split-splitting-shard", "a shard that is already splitting does not split again", "split", "split-points",
        split_req(shard("s1", "splitting")), err("invalid-split", "shard s1 is splitting; only an active shard splits"))
fixture("split-inactive-shard", "an inactive shard does not split", "split", "split-points",
        split_req(shard("s1", "inactive")), err("invalid-split", "shard s1 is inactive; only an active shard splits"))
fixture("split-activating-shard", "an activating child does not split before it is active", "split", "split-points",
        split_req(shard("s1-lo", "activating", "s1", upper=0x7FFFFFFF)),
        err("invalid-split", "shard s1-lo is activating; only an active shard splits"))

# ---------------------------------------------------------------- drain


def drain_req(leaving, ns, shards, reps, holders, max_per_round):
    return {"leaving": leaving, "nodes": ns, "shards": shards, "replicas": reps,
            "holders": [{"shard": s, "node": n} for s, n in holders], "load": [], "max_per_round": max_per_round}


def handoff(shard, source, target):
    return {"shard": shard, "source": source, "target": target}


def drain_plan(req):
    """Each shard the leaving node holds, in id order, to the node the balanced
    preferred holders (`preferred`) rank first once it leaves; a held shard the
    request does not list counts as active."""
    leaving = req["leaving"]
    ns = [dict(n, state="leaving") if n["id"] == leaving else n for n in req["nodes"]]
    listed = {s["id"] for s in req["shards"]}
    shards = req["shards"] + [shard(h["shard"]) for h in req["holders"] if h["shard"] not in listed]
    ranked = {r["shard"]: r["nodes"] for r in preferred({"nodes": ns, "shards": shards, "replicas": req["replicas"]})}
    held = sorted({h["shard"] for h in req["holders"] if h["node"] == leaving})
    return [handoff(s, leaving, ranked[s][0]) for s in held]


# x leaves holding 10 shards (listed out of order), each with replicas on x, a, b.
ten = [f"s{i:02}" for i in range(1, 11)]
layout = {s: ["x", "a", "b"] for s in ten}
hold = [(s, "x") for s in reversed(ten)] + [("t1", "a")]
dn = nodes("a", "b:joining", "x:leaving")
req = drain_req("x", dn, [shard(s) for s in ten + ["t1"]], replicas({**layout, "t1": ["a", "b"]}), hold, 4)
targets = drain_plan(req)
assert [h["shard"] for h in targets] == ten
# The balanced ranking evens the leaders out: with t1 on a, b takes one more.
assert sorted(h["target"] for h in targets).count("b") == 6, targets
fixture("drain-rounds-of-4", "ten shards in rounds of at most 4 (4, 4, 2), in shard id order, each to the node the "
        "balanced preferred holders rank first once x leaves (b takes six, a four beside its t1)",
        "drain", "plan-drain", req, ok([targets[0:4], targets[4:8], targets[8:10]]))
req = drain_req("x", dn, [shard(s) for s in ten[:3]], replicas({s: layout[s] for s in ten[:3]}), [(s, "x") for s in ten[:3]], 1)
fixture("drain-rounds-of-1", "max 1 per round: one handoff per round", "drain", "plan-drain", req,
        ok([[t] for t in drain_plan(req)]))
req = drain_req("x", dn, [shard(s) for s in ten[:8]], replicas({s: layout[s] for s in ten[:8]}), [(s, "x") for s in ten[:8]], 4)
targets = drain_plan(req)
assert sorted(h["target"] for h in targets).count("a") == 4, targets
fixture("drain-exact-rounds", "eight shards, max 4: two full rounds and no empty third, four to each taker", "drain",
        "plan-drain", req, ok([targets[0:4], targets[4:8]]))
# Each shard's other replica nodes: one down (d), one leaving too (y), one active (a).
layout = {"k1": ["x", "d", "y", "a"], "k2": ["x", "a", "d"]}
fixture("drain-skips-down-and-leaving-nodes", "a handoff goes only to a joining or active replica node, skipping down and leaving ones",
        "drain", "plan-drain",
        drain_req("x", nodes("x:leaving", "d:down", "y:leaving", "a"), [shard("k1"), shard("k2")], replicas(layout),
                  [("k1", "x"), ("k2", "x")], 4),
        ok([[handoff("k1", "x", "a"), handoff("k2", "x", "a")]]))
fixture("drain-nothing-held", "a leaving node holding no lease has nothing to hand over: no rounds", "drain", "plan-drain",
        drain_req("x", dn, [shard("s1")], replicas({"s1": ["x", "a"]}), [("s1", "a")], 4), ok([]))
fixture("drain-unknown-node", "draining a node that is not in the request is refused, naming it", "drain", "plan-drain",
        drain_req("nobody", dn, [shard("s1")], replicas({"s1": ["x", "a"]}), [("s1", "x")], 4),
        err("unknown-node", "nobody"))
fixture("drain-max-zero", "max_per_round 0 is refused", "drain", "plan-drain",
        drain_req("x", dn, [shard("s1")], replicas({"s1": ["x", "a"]}), [("s1", "x")], 0),
        err("invalid-input", "max_per_round is 0; draining node x needs at least one handoff per round"))
fixture("drain-no-other-replica", "a shard with no other joining or active replica node is refused, naming it",
        "drain", "plan-drain",
        drain_req("x", nodes("x:leaving", "a", "d:down"), [shard("s1"), shard("s2")],
                  replicas({"s1": ["x", "a"], "s2": ["x", "d"]}), [("s1", "x"), ("s2", "x")], 4),
        err("invalid-input", "shard s2 has no other joining or active replica node; move a replica to an active node first"))


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, f in sorted(FIXTURES.items()):
        with open(os.path.join(OUT, name + ".json"), "w") as fh:
            json.dump(f, fh, indent=2)
            fh.write("\n")
    print(f"wrote {len(FIXTURES)} fixtures to {os.path.normpath(OUT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
