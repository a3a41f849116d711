"""The assignment map: the pure copy (snapshot, deltas, routing, updates out
of step) without I/O, and the map of a real standalone node routing appends."""

import time

import pytest

from chitin_client import Applied, Assignments, Client, OutOfStep, pb, stream_key

from test_client import fresh


def shard(sid, app, lower, upper, routable=True, holder="a"):
    return pb.Assignment(
        shard=sid,
        application=app,
        lower=lower,
        upper=upper,
        state="active" if routable else "activating",
        routable=routable,
        holder=holder,
        holder_address=f"{holder}:1" if holder else "",
        epoch=1,
    )


def update(node, version, snapshot, changed=(), removed=()):
    return pb.AssignmentUpdate(node=node, version=version, snapshot=snapshot, changed=list(changed), removed=list(removed))


def holder(m, app, key):
    s = m.route(app, key)
    return s.holder if s is not None else None


# case: map-copy
def test_a_snapshot_then_deltas_route_every_key_to_its_shard():
    m = Assignments()
    assert m.route("kv", 0) is None
    m.apply(update("n1", 3, True, [shard("lo", "kv", 0, 0x7FFFFFFF, holder="a"), shard("hi", "kv", 0x80000000, 0xFFFFFFFF, holder="b")]))
    for key, expected in [(0, "a"), (0x7FFFFFFF, "a"), (0x80000000, "b"), (0xFFFFFFFF, "b")]:
        assert holder(m, "kv", key) == expected, hex(key)
    assert m.route("other", 0) is None
    # A split: the children route only once active; the parent goes.
    m.apply(update("n1", 4, False, [shard("hi.0", "kv", 0x80000000, 0xBFFFFFFF, False, ""), shard("hi.1", "kv", 0xC0000000, 0xFFFFFFFF, False, "")]))
    assert holder(m, "kv", 0xC0000000) == "b"
    m.apply(update("n1", 6, False, [shard("hi.0", "kv", 0x80000000, 0xBFFFFFFF, holder="c"), shard("hi.1", "kv", 0xC0000000, 0xFFFFFFFF, holder="a")], ["hi"]))
    assert (holder(m, "kv", 0x80000000), holder(m, "kv", 0xFFFFFFFF), m.shard("hi"), m.version) == ("c", "a", None, 6)
    # Another node's snapshot replaces everything.
    m.apply(update("n2", 1, True, [shard("all", "kv", 0, 0xFFFFFFFF, holder="d")]))
    assert (m.node, m.version, len(list(m.shards())), holder(m, "kv", 0x80000000)) == ("n2", 1, 1, "d")


def test_an_update_out_of_step_is_refused_and_changes_nothing():
    m = Assignments()
    with pytest.raises(OutOfStep, match="before its snapshot"):
        m.apply(update("n1", 2, False, [shard("s", "kv", 0, 0xFFFFFFFF)]))
    assert m.version == 0 and m.route("kv", 0) is None
    m.apply(update("n1", 5, True, [shard("s", "kv", 0, 0xFFFFFFFF)]))
    for bad in [update("n1", 5, False, removed=["s"]), update("n1", 4, False, removed=["s"]), update("n2", 6, False, removed=["s"])]:
        with pytest.raises(OutOfStep):
            m.apply(bad)
        assert (m.node, m.version, holder(m, "kv", 7)) == ("n1", 5, "a")


def test_journal_streams_route_in_the_journal_application_or_the_only_one():
    only = Assignments()
    only.apply(update("n", 1, True, [shard("s", "orders", 0, 0xFFFFFFFF)]))
    assert only.route_stream("x").shard == "s"
    two = Assignments()
    two.apply(update("n", 1, True, [shard("j", "journal", 0, 0xFFFFFFFF), shard("o", "orders", 0, 0xFFFFFFFF)]))
    assert two.route_stream("x").shard == "j" and two.route("orders", stream_key("x")).shard == "o"
    neither = Assignments()
    neither.apply(update("n", 1, True, [shard("p", "a", 0, 0xFFFFFFFF), shard("q", "b", 0, 0xFFFFFFFF)]))
    assert neither.route_stream("x") is None


# case: map-routes
def test_the_map_of_a_node_routes_appends_to_its_holder(node, dead):
    with Client([dead, node.api], route=False, backoff=0.01) as c:
        m = c.assignment_map()
        assert m.ready(timeout=10), "no snapshot within 10 s"
        # Deltas follow until the node holds every shard (it may still be
        # taking them when the stream opens).
        deadline = time.monotonic() + 20
        while not all(s.holder_address == node.api for s in m.current().shards()):
            assert m.wait_changed(m.current().version, deadline - time.monotonic()), list(m.current().shards())
        copy = m.current()
        assert copy.connected and copy.version >= 1
        shards = list(copy.shards())
        assert len(shards) == 16 and all(s.routable for s in shards), shards
        covered = sum(s.upper - s.lower + 1 for s in shards)
        assert covered == 1 << 32, "the ranges cover the keyspace"
        stream = fresh("mapped")
        lease = c.route_stream(stream)
        assert (copy.route_stream(stream).shard, copy.route_stream(stream).epoch) == (lease.shard, lease.epoch)
        # Routed by the map (routing by Route is off): the first attempt goes
        # to the holder, not to the dead first node of the list.
        out = c.append(stream, b"m")
        assert isinstance(out, Applied), out
        assert (out.attempts, out.node, out.shard) == (1, node.api, lease.shard)
    assert not m._thread.is_alive(), "close() ends the map's thread"
