"""One append's decisions across its attempts (``_Append``), which the sync
and the asyncio client share: a table of failed attempts and what follows
each, without I/O."""

import grpc
import pytest

from chitin_client import Holder, NotApplied, Refused, Unknown, _Append


class Failure(grpc.RpcError):
    """A failed call as grpc reports it."""

    def __init__(self, code, details="", trailers=()):
        self._code, self._details, self._trailers = code, details, trailers

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._trailers


class Nodes:
    """The part of a client an append's decisions read and move."""

    def __init__(self, nodes, attempts):
        self.nodes, self.attempts, self._current, self._routes = nodes, attempts, 0, {"s": "cached:1"}

    def _next_node(self, failed):
        if self.nodes[self._current % len(self.nodes)] == failed:
            self._current = (self._current + 1) % len(self.nodes)

    def _pause(self, n):
        return 0.1 * (n + 1)


NOT_SENT = Failure(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses")
UNKNOWN = Failure(grpc.StatusCode.UNAVAILABLE, "x", (("chitin-outcome", "unknown"),))
AT_HOLDER = Failure(
    grpc.StatusCode.UNAVAILABLE,
    "moved",
    (("chitin-outcome", "not-applied"), ("chitin-holder", "n2"), ("chitin-holder-address", "b:2")),
)


# Each row: the failures in order, then per attempt (target, pause, forget),
# then the outcome's type and what it names.
CASES = [
    # Never sent anywhere: the next node, a growing pause, nothing forgotten;
    # certainly not applied, the holder left to ask.
    ([NOT_SENT, NOT_SENT], [("a:1", 0.1, False), ("b:1", 0.0, False)], NotApplied, None),
    # A holder named: followed at once, no pause, and named in the answer.
    ([AT_HOLDER, NOT_SENT], [("a:1", 0.0, False), ("b:2", 0.0, False)], NotApplied, Holder("n2", "b:2")),
    # Maybe applied: its channel dropped, the next node; unknown at the end
    # even when a later attempt was certainly not applied.
    ([UNKNOWN, NOT_SENT, NOT_SENT], [("a:1", 0.1, True), ("b:1", 0.2, False), ("a:1", 0.0, False)], Unknown, None),
]


@pytest.mark.parametrize("failures,steps,outcome,named", CASES)
def test_each_failed_attempt_decides_the_next(failures, steps, outcome, named):
    client = Nodes(["a:1", "b:1"], attempts=len(failures))
    one = _Append(client, "s", b"p", "rid")
    for failure, (target, pause, forget) in zip(failures, steps):
        assert one.attempt < client.attempts
        # The route is asked only while nothing failed and no holder is named.
        assert one.wants_route() == (one.attempt == 0)
        assert one.target(None) == target
        assert one.failed(failure, target) == (pause, forget)
    assert one.attempt == client.attempts
    assert client._routes == {}, "a failed attempt forgets the stream's cached route"
    answer = one.outcome()
    assert isinstance(answer, outcome) and answer.request_id == "rid", answer
    if outcome is NotApplied:
        assert answer.go_to == named
        assert one.needs_holder() == (named is None)


def test_a_refused_attempt_raises_and_is_not_retried():
    one = _Append(Nodes(["a:1"], attempts=3), "s", b"p", None)
    one.target(None)
    with pytest.raises(Refused) as e:
        one.failed(Failure(grpc.StatusCode.INVALID_ARGUMENT, "stream must be 1..=255 bytes"), "a:1")
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert len(one.request_id) == 36, "a fresh UUID when none was given"
