"""The asyncio client (chitin_client.aio) against a real node: the cases of
clients/CASES.md that make calls, as the sync client's tests run them. Each
test runs its own event loop (no pytest plugin needed)."""

import asyncio
import time
import uuid

import grpc
import pytest

from chitin_client import Applied, NotApplied, Refused, Subscribed, Unknown, pb
from chitin_client.aio import Client


def fresh(name: str) -> str:
    return f"py-aio-{name}-{uuid.uuid4().hex[:8]}"


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


# case: failover
def test_an_async_append_fails_over_past_a_dead_node(node, dead):
    async def go():
        stream = fresh("failover")
        async with Client([dead, node.api], route=False, backoff=0.01) as c:
            out = await c.append(stream, b"one")
            assert isinstance(out, Applied), out
            assert (out.attempts, out.node) == (2, node.api)
            assert [e.payload for e in (await c.read(stream)).entries] == [b"one"]

    run(go())


# case: applies-once
def test_the_same_request_id_applies_once_however_many_tasks_send_it(node, dead):
    async def go():
        stream = fresh("dedup")
        async with Client([node.api]) as first, Client([dead, node.api], route=False, backoff=0.01) as second:
            # Sent at once from two clients, one failing over: one entry.
            a, b = await asyncio.gather(
                first.append(stream, b"x", request_id="aio-once"), second.append(stream, b"x", request_id="aio-once")
            )
            assert isinstance(a, Applied) and isinstance(b, Applied), (a, b)
            assert b.sequence == a.sequence and b.attempts == 2
            assert [e.request_id for e in (await first.read(stream)).entries] == ["aio-once"]

    run(go())


# case: routes-to-holder
def test_async_routing_sends_to_the_holder(node, dead):
    async def go():
        stream = fresh("routed")
        async with Client([dead, node.api], backoff=0.01) as c:
            lease = await c.route_stream(stream)
            out = await c.append(stream, b"r")
            assert isinstance(out, Applied), out
            assert (out.attempts, out.node, out.shard) == (1, lease.holder_address, lease.shard)

    run(go())


# case: not-applied-names-holder
def test_an_async_not_applied_names_the_holder(node, dead):
    async def go():
        stream = fresh("not-applied")
        async with Client([dead, node.api], route=False, attempts=1) as c:
            out = await c.append(stream, b"n")
            assert isinstance(out, NotApplied), out
            assert "not sent" in out.reason
            lease = await c.route_stream(stream)
            assert out.go_to is not None and out.go_to.address == lease.holder_address
            assert list((await c.read(stream)).entries) == []

    run(go())


def test_an_async_append_whose_only_node_is_dead_is_not_applied_and_never_unknown(dead):
    async def go():
        async with Client([dead], attempts=2, backoff=0.01) as c:
            out = await c.append(fresh("dead"), b"d")
            assert isinstance(out, NotApplied) and not isinstance(out, Unknown), out
            assert out.go_to is None

    run(go())


# case: refused
def test_a_bad_async_request_is_refused_not_retried(node):
    async def go():
        async with Client([node.api]) as c:
            with pytest.raises(Refused) as e:
                await c.append("", b"p")
            assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
            assert "stream must be 1..=255 bytes" in e.value.message

    run(go())


# case: watch-snapshot
# case: answer-nobody-waits-for
def test_an_async_watch_subscribes_past_a_dead_node_with_everything_held(node, dead):
    async def go():
        async with Client([dead, node.api], backoff=0.01) as c:
            watch = c.watch_ownership(acknowledges=True)
            first = await watch.__anext__()
            assert isinstance(first, Subscribed), first
            assert first.node == node.api
            assert (await c.route_stream(fresh("w"))).shard in {lease.shard for lease in first.held}
            lease = first.held[0]
            assert await watch.released(lease.shard, lease.epoch) is False
            assert await watch.ready(lease.shard, lease.epoch) is False
            watch.close()

    run(go())


# case: map-routes
def test_the_async_map_routes_appends_to_the_holder(node, dead):
    async def go():
        async with Client([dead, node.api], route=False, backoff=0.01) as c:
            m = c.assignment_map()
            assert await m.ready(timeout=10), "no snapshot within 10 s"
            deadline = time.monotonic() + 20
            while not all(s.holder_address == node.api for s in m.current().shards()):
                left = deadline - time.monotonic()
                assert left > 0 and await m.wait_changed(m.current().version, left), list(m.current().shards())
            copy = m.current()
            assert copy.connected and len(list(copy.shards())) == 16
            stream = fresh("mapped")
            lease = await c.route_stream(stream)
            assert copy.route_stream(stream).shard == lease.shard
            # Routed by the map (Route is off): the first attempt goes to the
            # holder, not to the dead first node of the list.
            out = await c.append(stream, b"m")
            assert isinstance(out, Applied), out
            assert (out.attempts, out.node, out.shard) == (1, node.api, lease.shard)
        assert m._task.done(), "close() ends the map's task"

    run(go())


# case: load-report
def test_async_reported_load_is_counted_or_refused_naming_the_sample(node):
    async def go():
        async with Client([node.api]) as c:
            ok = pb.LoadSample(application="journal", key=0x2345678, ops=6.0)
            bad = pb.LoadSample(application="no-such-app", key=1, ops=1.0)
            with pytest.raises(Refused) as e:
                await c.report_load([ok, bad])
            assert "sample #1: unknown application `no-such-app`" in e.value.message
            assert await c.report_load([ok]) == 1

    run(go())
