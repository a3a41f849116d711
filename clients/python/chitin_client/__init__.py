"""A thin client of chitin nodes: several nodes, failover with the same
request id, typed append outcomes. The contract is docs/clients.md (the Rust
crate chitin-client follows the same one):

- an append goes to its stream's shard holder (from the assignment map once
  :meth:`Client.assignment_map` started one, else asked once per stream with
  ``Ownership.Route``) or else to the node the client is on; any node accepts
  it and forwards, so routing only saves a hop;
- a failed attempt is judged by its ``chitin-outcome`` trailer, never by the
  wording: ``not-applied`` (certainly not committed; go to the holder it
  names, if any), ``unknown`` (may have committed). The next attempt carries
  the **same request id**, which applies at most once;
- after ``attempts`` the answer is :class:`NotApplied` only if every attempt
  certainly did not apply, else :class:`Unknown`.

    from chitin_client import Client, Applied
    client = Client("10.0.0.1:50051,10.0.0.2:50051", token=os.environ.get("CHITIN_CLIENT_TOKEN"))
    outcome = client.append("orders", b"hello")
    if isinstance(outcome, Applied):
        print(outcome.sequence)
"""

import time
import uuid
from typing import Dict, List, NamedTuple, Optional, Sequence, Union

import grpc

try:  # The caller's trace context goes with every call when OpenTelemetry is there.
    from opentelemetry import propagate as _propagate
except ImportError:  # pragma: no cover - exercised where opentelemetry-api is absent
    _propagate = None

from chitin_client.proto import chitin_pb2 as pb
from chitin_client.assignments import AssignmentMap, Assignments, OutOfStep
from chitin_client.proto import chitin_pb2_grpc as rpc
from chitin_client.watch import Acquired, Draining, Gap, Lost, OwnershipWatch, Subscribed

__all__ = [
    "Acquired",
    "Applied",
    "AssignmentMap",
    "Assignments",
    "Client",
    "Draining",
    "Gap",
    "Holder",
    "Lost",
    "NotApplied",
    "OutOfStep",
    "OwnershipWatch",
    "Refused",
    "Subscribed",
    "Unknown",
    "classify",
    "parse_nodes",
    "pb",
    "stream_key",
]

# Trailer keys of an append's typed outcome (proto/chitin.proto).
OUTCOME = "chitin-outcome"
NOT_APPLIED = "not-applied"
UNKNOWN = "unknown"
HOLDER = "chitin-holder"
HOLDER_ADDRESS = "chitin-holder-address"


class Holder(NamedTuple):
    """A shard's holder: send the same request to ``address``."""

    name: str
    address: str


class Applied(NamedTuple):
    """Applied now, or earlier under the same request id."""

    request_id: str
    sequence: int
    epoch: int
    shard: str
    holder: str
    node: str
    attempts: int


class NotApplied(NamedTuple):
    """Certainly not committed by any attempt."""

    request_id: str
    reason: str
    go_to: Optional[Holder]


class Unknown(NamedTuple):
    """Some attempt may have committed: retry later with the same request id."""

    request_id: str
    reason: str
    attempts: int


Outcome = Union[Applied, NotApplied, Unknown]


class Refused(Exception):
    """Refused before it ran (invalid request, token, protocol): a retry does not help."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"the node refused the request ({code.name}): {message}")
        self.code = code
        self.message = message


class Unreachable(Exception):
    """No node answered; ``failures`` lists (address, error) in order."""

    def __init__(self, failures):
        super().__init__("; ".join(f"{a}: {e}" for a, e in failures) or "no node")
        self.failures = failures


def fnv1a(data: bytes) -> int:
    """32-bit FNV-1a, the key hash of journal streams."""
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def stream_key(stream: str) -> int:
    """The 32-bit key of a journal stream (FNV-1a over its UTF-8 bytes)."""
    return fnv1a(stream.encode("utf-8"))


def parse_nodes(nodes: Union[str, Sequence[str]]) -> List[str]:
    """``"a:1,b:2"`` or a list; each entry ``host:port`` or ``http(s)://host:port``."""
    parts = [p.strip() for p in nodes.split(",")] if isinstance(nodes, str) else list(nodes)
    if not parts or parts == [""]:
        raise ValueError("no node address given; pass one or more, comma-separated: host:port[,host:port...]")
    for i, p in enumerate(parts, 1):
        if not p:
            raise ValueError(f"node address #{i} is empty (in {nodes!r}); separate addresses with single commas")
        rest = p.split("://", 1)[1] if "://" in p else p
        host, _, port = rest.split("/", 1)[0].rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"`{p}` is not a node address; expected host:port (e.g. 127.0.0.1:50051)")
    return parts


def _target(address: str) -> str:
    # grpc wants host:port; a scheme is dropped (TLS is the channel's choice).
    return address.split("://", 1)[1] if "://" in address else address


# Kinds of a failed attempt.
_NOT_APPLIED, _UNKNOWN, _REFUSED = "not_applied", "unknown", "refused"


def classify(error: grpc.RpcError):
    """``(kind, reason, holder)`` of a failed append: kind is ``not_applied``,
    ``unknown`` or ``refused``; ``holder`` a :class:`Holder` or None."""
    trailers: Dict[str, str] = {}
    for k, v in error.trailing_metadata() or ():
        trailers[k] = v
    reason = error.details() or error.code().name
    outcome = trailers.get(OUTCOME)
    if outcome == NOT_APPLIED:
        name, address = trailers.get(HOLDER), trailers.get(HOLDER_ADDRESS)
        return _NOT_APPLIED, reason, Holder(name, address) if name and address else None
    if outcome == UNKNOWN:
        return _UNKNOWN, reason, None
    code = error.code()
    if code in (
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.FAILED_PRECONDITION,
        # A request id applied before with another payload.
        grpc.StatusCode.ALREADY_EXISTS,
    ):
        return _REFUSED, reason, None
    # gRPC answers UNAVAILABLE "failed to connect to all addresses" when no
    # connection could be made: the request never left. Every other failure
    # (a broken connection, a deadline) may have reached the node.
    if code == grpc.StatusCode.UNAVAILABLE and "failed to connect" in reason:
        return _NOT_APPLIED, f"not sent: {reason}", None
    return _UNKNOWN, f"{code.name}: {reason}", None


def _elsewhere(error: grpc.RpcError) -> str:
    """Judges a failed idempotent call: the reason to try the next node, or
    raises (:class:`Refused`, or the error itself when no node would
    answer otherwise)."""
    kind, reason, _ = classify(error)
    if kind == _REFUSED:
        raise Refused(error.code(), error.details() or "")
    retryable = (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
    )
    if error.code() not in retryable:
        raise error
    return reason


class _Append:
    """One append's decisions across its attempts, without I/O: the sync
    and the asyncio client run the same ones (docs/clients.md)."""

    def __init__(self, client, stream: str, payload: bytes, request_id: Optional[str]):
        self.client = client
        self.stream = stream
        self.request_id = request_id or str(uuid.uuid4())
        self.request = pb.AppendRequest(stream=stream, request_id=self.request_id, payload=payload)
        self.attempt = 0
        self.maybe_applied = False
        self.reason = ""
        # A holder a not-applied answer named: the next attempt goes there.
        self.go_to: Optional[Holder] = None
        self.named: Optional[Holder] = None
        self.use_route = True
        self.routed: Optional[str] = None
        self.pauses = 0

    def wants_route(self) -> bool:
        """Whether the next attempt asks the client's route (a map or Route)."""
        return self.go_to is None and self.use_route

    def target(self, routed: Optional[str]) -> str:
        """The next attempt's node: a named holder, the route, or the node
        the client is on."""
        self.attempt += 1
        if self.go_to is not None:
            routed, self.go_to = self.go_to.address, None
        self.routed = routed
        return routed or self.client.nodes[self.client._current % len(self.client.nodes)]

    def applied(self, r, target: str) -> Applied:
        return Applied(self.request_id, r.sequence, r.epoch, r.shard, r.holder, target, self.attempt)

    def failed(self, error: grpc.RpcError, target: str):
        """Judges a failed attempt at ``target``: ``(pause, forget)``, the
        seconds to wait before the next attempt and whether to drop the
        target's channel. Raises :class:`Refused`."""
        kind, self.reason, holder = classify(error)
        if kind == _REFUSED:
            raise Refused(error.code(), error.details() or "")
        self.client._routes.pop(self.stream, None)
        self.use_route = False
        if kind == _NOT_APPLIED and holder is not None and holder.address != target:
            self.named = self.go_to = holder  # follow the named holder at once
            return 0.0, False
        if kind == _UNKNOWN:
            self.maybe_applied = True
        if self.routed is None:
            self.client._next_node(target)
        if self.attempt >= self.client.attempts:
            return 0.0, kind == _UNKNOWN
        pause = self.client._pause(self.pauses)
        self.pauses += 1
        return pause, kind == _UNKNOWN

    def needs_holder(self) -> bool:
        """Whether the final answer still wants the holder asked (`Route`)."""
        return not self.maybe_applied and self.named is None

    def named_by(self, lease) -> None:
        if lease.holder_address:
            self.named = Holder(lease.holder, lease.holder_address)

    def outcome(self) -> Outcome:
        if self.maybe_applied:
            return Unknown(self.request_id, self.reason, self.client.attempts)
        return NotApplied(self.request_id, self.reason, self.named)


def trace_context() -> tuple:
    """The OpenTelemetry context current here as gRPC metadata (W3C
    ``traceparent``, through the global propagator), so that the nodes'
    spans join the caller's trace; nothing without ``opentelemetry-api``."""
    if _propagate is None:
        return ()
    carrier: Dict[str, str] = {}
    _propagate.inject(carrier)
    return tuple(carrier.items())


class _Options:
    """What the sync and the asyncio client share: the node list, the
    options and the rotation over the nodes (no I/O)."""

    @property
    def _metadata(self) -> tuple:
        """Every call's metadata: the token, and the caller's trace context."""
        return self._auth + trace_context()

    def __init__(
        self,
        nodes: Union[str, Sequence[str]],
        token: Optional[str] = None,
        attempts: int = 6,
        attempt_timeout: float = 30.0,
        backoff: float = 0.1,
        route: bool = True,
        application: str = "journal",
        credentials: Optional[grpc.ChannelCredentials] = None,
    ):
        self.nodes = parse_nodes(nodes)
        self.attempts = max(1, attempts)
        self.attempt_timeout = attempt_timeout
        self.backoff = backoff
        self.route_appends = route
        self.application = application
        self._auth = (("authorization", f"Bearer {token}"),) if token else ()
        self._credentials = credentials
        self._channels: Dict[str, object] = {}
        self._routes: Dict[str, str] = {}
        self._current = 0
        self._map = None

    def _next_node(self, failed: str) -> None:
        if self.nodes[self._current % len(self.nodes)] == failed:
            self._current = (self._current + 1) % len(self.nodes)

    def _pause(self, n: int) -> float:
        """Seconds to wait before the attempt after the ``n``-th pause."""
        return min(self.backoff * (2 ** min(n, 5)), 2.0)


class Client(_Options):
    """A client of several nodes (a list or ``"a:1,b:2"``), tried in order;
    the options are :class:`_Options`'s."""

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        for c in self._channels.values():
            c.close()
        self._channels.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _channel(self, address: str) -> grpc.Channel:
        if address not in self._channels:
            target = _target(address)
            self._channels[address] = (
                grpc.secure_channel(target, self._credentials) if self._credentials else grpc.insecure_channel(target)
            )
        return self._channels[address]

    def _forget(self, address: str) -> None:
        channel = self._channels.pop(address, None)
        if channel is not None:
            channel.close()

    def append(self, stream: str, payload: bytes, request_id: Optional[str] = None) -> Outcome:
        """Appends ``payload``; however many attempts it takes, it applies at
        most once. Raises :class:`Refused` for a request no retry can help."""
        one = _Append(self, stream, payload, request_id)
        while one.attempt < self.attempts:
            routed = self._route_of(stream) if one.wants_route() else None
            target = one.target(routed)
            try:
                stub = rpc.JournalStub(self._channel(target))
                r = stub.Append(one.request, timeout=self.attempt_timeout, metadata=self._metadata)
                return one.applied(r, target)
            except grpc.RpcError as e:
                pause, forget = one.failed(e, target)
            if forget:
                self._forget(target)
            if pause:
                time.sleep(pause)
        if one.needs_holder():
            try:
                one.named_by(self.route_stream(stream))
            except (Unreachable, grpc.RpcError):
                pass
        return one.outcome()

    def _route_of(self, stream: str) -> Optional[str]:
        if self._map is not None:
            shard = self._map.current().route(self.application, stream_key(stream))
            if shard is not None and shard.holder_address:
                return shard.holder_address
        if not self.route_appends:
            return None
        if stream not in self._routes:
            try:
                lease = self.route_stream(stream)
            except (Unreachable, grpc.RpcError):
                return None
            if not lease.holder_address:
                return None
            if len(self._routes) >= 4096:
                self._routes.clear()
            self._routes[stream] = lease.holder_address
        return self._routes[stream]

    def _any_node(self, call):
        """Runs an idempotent ``call(channel)`` at the current node, moving on
        after a failure that may be the node's; every node at least once."""
        failures = []
        tries = max(len(self.nodes), self.attempts)
        for i in range(tries):
            address = self.nodes[self._current % len(self.nodes)]
            try:
                return call(self._channel(address))
            except grpc.RpcError as e:
                failures.append((address, _elsewhere(e)))
                self._forget(address)
            self._next_node(address)
            if (i + 1) % len(self.nodes) == 0 and i + 1 < tries:
                time.sleep(self._pause(i))
        raise Unreachable(failures)

    def route(self, application: str, key: int) -> "pb.ShardLease":
        """Which node holds the shard covering ``key`` of ``application``."""
        request = pb.RouteRequest(application=application, key=key)
        return self._any_node(
            lambda ch: rpc.OwnershipStub(ch).Route(request, timeout=self.attempt_timeout, metadata=self._metadata)
        )

    def route_stream(self, stream: str) -> "pb.ShardLease":
        """The lease of the shard ``stream``'s appends go to."""
        return self.route(self.application, stream_key(stream))

    def watch_ownership(self, acknowledges: bool = False) -> "OwnershipWatch":
        """The ownership events of the first node that answers, surviving
        gaps (:mod:`chitin_client.watch`); with ``acknowledges`` the watch
        takes part in handoffs (answer each Draining with ``released``)."""
        return OwnershipWatch(self, acknowledges)

    def assignment_map(self) -> "AssignmentMap":
        """Starts following the whole assignment map
        (:mod:`chitin_client.assignments`) and routes this client's appends by
        it from then on, with no ``Route`` call: each goes to the holder the
        map names, and to a node's forward only when the map is stale.
        ``close()`` stops it."""
        if self._map is None:
            self._map = AssignmentMap(self)
        return self._map

    def report_load(self, samples: Sequence["pb.LoadSample"]) -> int:
        """Reports load the application served since its previous report
        (``Ownership.ReportLoad``; each sample an application and key, or a
        shard, with ``ops`` and ``bytes``): counted with the node's appends.
        Raises :class:`Refused` naming the first bad sample. The number of
        samples counted."""
        request = pb.ReportLoadRequest(samples=list(samples))
        return self._any_node(
            lambda ch: rpc.OwnershipStub(ch).ReportLoad(request, timeout=self.attempt_timeout, metadata=self._metadata)
        ).counted

    def read(self, stream: str, from_: int = 1, limit: int = 1000) -> "pb.ReadResponse":
        """Entries of ``stream`` from sequence ``from_`` (any node answers)."""
        request = pb.ReadRequest(stream=stream, limit=limit, **{"from": from_})
        return self._any_node(
            lambda ch: rpc.JournalStub(ch).Read(request, timeout=self.attempt_timeout, metadata=self._metadata)
        )
