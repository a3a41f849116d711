import subprocess
import sys
import uuid
from pathlib import Path

import grpc
import pytest

from chitin_client import Applied, Client, NotApplied, Refused, Subscribed, parse_nodes, pb, stream_key
from chitin_client.proto import chitin_pb2_grpc as rpc

HERE = Path(__file__).resolve().parent


def fresh(name: str) -> str:
    return f"py-{name}-{uuid.uuid4().hex[:8]}"


def test_the_committed_stubs_are_current():
    done = subprocess.run([sys.executable, str(HERE.parent / "generate.py"), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# case: stream-key
def test_stream_key_is_the_nodes_fnv1a():
    assert stream_key("") == 0x811C9DC5
    assert stream_key("a") == 0xE40C292C
    assert stream_key("foobar") == 0xBF9CF968


# case: node-list
def test_bad_node_lists_say_what_is_wrong():
    assert parse_nodes(" a:1 ,b:2") == ["a:1", "b:2"]
    with pytest.raises(ValueError, match="node address #2 is empty"):
        Client("a:1,,b:2")
    with pytest.raises(ValueError, match="`localhost` is not a node address"):
        Client("localhost")
    with pytest.raises(ValueError, match="no node address given"):
        Client("")


# case: failover
def test_an_append_fails_over_past_a_dead_node(node, dead):
    stream = fresh("failover")
    with Client([dead, node.api], route=False, backoff=0.01) as c:
        out = c.append(stream, b"one")
        assert isinstance(out, Applied), out
        assert (out.attempts, out.node) == (2, node.api)
        assert [e.payload for e in c.read(stream).entries] == [b"one"]


# case: applies-once
def test_the_same_request_id_applies_once(node, dead):
    stream = fresh("dedup")
    with Client([node.api]) as first, Client([dead, node.api], route=False, backoff=0.01) as second:
        a = first.append(stream, b"x", request_id="py-once")
        b = second.append(stream, b"x", request_id="py-once")
        assert isinstance(a, Applied) and isinstance(b, Applied), (a, b)
        assert b.sequence == a.sequence and b.attempts == 2
        assert [e.request_id for e in first.read(stream).entries] == ["py-once"]


# case: routes-to-holder
def test_routing_sends_to_the_holder(node, dead):
    stream = fresh("routed")
    with Client([dead, node.api], backoff=0.01) as c:
        lease = c.route_stream(stream)
        out = c.append(stream, b"r")
        assert isinstance(out, Applied), out
        assert (out.attempts, out.node, out.shard) == (1, lease.holder_address, lease.shard)


# case: not-applied-names-holder
def test_not_applied_names_the_holder(node, dead):
    stream = fresh("not-applied")
    with Client([dead, node.api], route=False, attempts=1) as c:
        out = c.append(stream, b"n")
        assert isinstance(out, NotApplied), out
        assert "not sent" in out.reason
        lease = c.route_stream(stream)
        assert out.go_to is not None and out.go_to.address == lease.holder_address and out.go_to.name == lease.holder
        assert list(c.read(stream).entries) == []


# case: refused
def test_a_bad_request_is_refused_not_retried(node):
    with Client([node.api]) as c:
        with pytest.raises(Refused) as e:
            c.append("", b"p")
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "stream must be 1..=255 bytes" in e.value.message


# case: watch-snapshot
# case: answer-nobody-waits-for
def test_a_watch_subscribes_past_a_dead_node_with_everything_held(node, dead):
    with Client([dead, node.api], backoff=0.01) as c:
        watch = c.watch_ownership(acknowledges=True)
        first = next(watch)
        assert isinstance(first, Subscribed), first
        assert first.node == node.api
        # A standalone node holds every shard: any stream's is among them.
        assert c.route_stream(fresh("w")).shard in {lease.shard for lease in first.held}
        # A RELEASED that no handoff waits for is refused by the node: nothing to do.
        lease = first.held[0]
        assert watch.released(lease.shard, lease.epoch) is False
        watch.close()


# case: load-report
def test_reported_load_is_counted_or_refused_naming_the_sample(node):
    with Client([node.api]) as c:
        key = 0x12345678
        ok = pb.LoadSample(application="journal", key=key, ops=60.0, bytes=10.0)
        bad = pb.LoadSample(application="no-such-app", key=1, ops=1.0)
        with pytest.raises(Refused) as e:
            c.report_load([ok, bad])
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "sample #1: unknown application `no-such-app`" in e.value.message
        assert c.report_load([ok]) == 1
        shard = c.route("journal", key).shard
        admin = rpc.AdminStub(c._channel(node.api))
        loads = admin.Load(pb.LoadRequest(shard=shard), timeout=10).shards
        # 60 ops (and nothing from the refused report) at a 60 s half-life.
        assert len(loads) == 1 and 0.65 < loads[0].ops_per_sec < 1.0, loads


def test_calls_carry_the_callers_trace_context():
    from opentelemetry import context, trace

    client = Client("127.0.0.1:1", token="t")
    assert dict(client._metadata) == {"authorization": "Bearer t"}, "no trace current: the token alone"
    caller = trace.SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )
    attached = context.attach(trace.set_span_in_context(trace.NonRecordingSpan(caller)))
    try:
        sent = dict(client._metadata)
    finally:
        context.detach(attached)
    assert sent["traceparent"] == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert sent["authorization"] == "Bearer t"
