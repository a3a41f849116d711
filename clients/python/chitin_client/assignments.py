"""The cluster's whole assignment map, kept current from a node's
``WatchAssignments`` stream, as the Rust crate's ``AssignmentMap``
(docs/clients.md): every shard's key range, state, lineage and holder as the
streaming node last read them, so that keys are routed here and not asked of
a node per request. A holder is a route, not a grant: a request sent to a
node that no longer holds the shard is forwarded by it or answered with the
new holder, and the holder's fence decides.

    with Client("10.0.0.1:50051,10.0.0.2:50051") as c:
        m = c.assignment_map()           # appends are routed by it from now on
        m.ready(timeout=10)
        shard = m.current().route("orders", key)
        print(shard.holder, shard.holder_address, shard.epoch)
"""

import bisect
import threading
import time
from typing import Dict, Iterator, List, Optional, Tuple

import grpc

from chitin_client.proto import chitin_pb2 as pb
from chitin_client.proto import chitin_pb2_grpc as rpc

# The application journal streams route through when the map has it.
_JOURNAL = "journal"

# Longest pause between subscription attempts, in seconds.
_MAX_PAUSE = 1.0


class OutOfStep(ValueError):
    """An update that does not fit the copy it is applied to (a delta before
    the stream's snapshot, another node's delta, an old version)."""


class Assignments:
    """The map at one version of one node's stream. ``node`` and ``version``
    are empty/0 before the first snapshot; ``connected`` is false once the
    stream broke (the copy is the last one seen)."""

    def __init__(self):
        self.node = ""
        self.version = 0
        self.connected = False
        self._shards: Dict[str, "pb.Assignment"] = {}
        # Per application: its routable shards as sorted (lower, upper, id).
        self._ranges: Dict[str, List[Tuple[int, int, str]]] = {}

    def copy(self) -> "Assignments":
        c = Assignments()
        c.node, c.version, c.connected = self.node, self.version, self.connected
        c._shards, c._ranges = dict(self._shards), {a: list(r) for a, r in self._ranges.items()}
        return c

    def apply(self, update: "pb.AssignmentUpdate") -> None:
        """Applies one update of a stream: a snapshot replaces the copy, a
        delta changes it. Raises :class:`OutOfStep` (the copy unchanged)."""
        if not update.snapshot:
            if self.version == 0 or self.node != update.node:
                raise OutOfStep(f"a delta of version {update.version} from `{update.node}` came before its snapshot")
            if update.version <= self.version:
                raise OutOfStep(f"version {update.version} from `{update.node}` does not follow {self.version}")
        shards = {} if update.snapshot else self._shards
        for shard in update.removed:
            shards.pop(shard, None)
        for a in update.changed:
            shards[a.shard] = a
        self._shards, self.node, self.version = shards, update.node, update.version
        self._ranges = {}
        for a in shards.values():
            if a.routable:
                self._ranges.setdefault(a.application, []).append((a.lower, a.upper, a.shard))
        for r in self._ranges.values():
            r.sort()

    def applied(self, update: "pb.AssignmentUpdate") -> "Assignments":
        """A connected copy with ``update`` applied (this one unchanged).
        Raises :class:`OutOfStep`."""
        c = self.copy()
        c.apply(update)
        c.connected = True
        return c

    def broken(self) -> "Assignments":
        """A copy marked as no longer connected: the stream broke after it
        served; routing goes on from the last map seen."""
        c = self.copy()
        c.connected = False
        return c

    def route(self, application: str, key: int) -> Optional["pb.Assignment"]:
        """The routable shard of ``application`` covering ``key``."""
        ranges = self._ranges.get(application)
        if not ranges:
            return None
        at = bisect.bisect_right(ranges, (key, 0xFFFFFFFF, "\uffff")) - 1
        if at < 0 or key > ranges[at][1]:
            return None
        return self._shards[ranges[at][2]]

    def route_stream(self, stream: str) -> Optional["pb.Assignment"]:
        """The shard of journal stream ``stream``: routed in the ``journal``
        application, or in the only application there is."""
        from chitin_client import stream_key

        if _JOURNAL in self._ranges:
            application = _JOURNAL
        elif len(self._ranges) == 1:
            application = next(iter(self._ranges))
        else:
            return None
        return self.route(application, stream_key(stream))

    def shard(self, shard: str) -> Optional["pb.Assignment"]:
        return self._shards.get(shard)

    def shards(self) -> Iterator["pb.Assignment"]:
        return iter(list(self._shards.values()))


class AssignmentMap:
    """A live copy of the map, followed by a daemon thread until
    :meth:`close`. Made by ``Client.assignment_map``."""

    def __init__(self, client, application: str = ""):
        self._client = client
        self._application = application
        self._latest = Assignments()
        self._changed = threading.Condition()
        self._closed = False
        self._call = None
        self._thread = threading.Thread(target=self._follow, name="chitin-assignments", daemon=True)
        self._thread.start()

    def current(self) -> Assignments:
        """The copy as it is now (do not change it)."""
        with self._changed:
            return self._latest

    def ready(self, timeout: float) -> bool:
        """Waits for the first snapshot, at most ``timeout`` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: self._latest.version > 0, timeout)

    def wait_changed(self, version: int, timeout: float) -> bool:
        """Waits for a copy other than ``version`` (or a break), at most
        ``timeout`` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: self._latest.version != version or self._closed, timeout)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            call = self._call
        if call is not None:
            call.cancel()
        self._thread.join(timeout=5)

    def _publish(self, latest: Assignments) -> None:
        with self._changed:
            self._latest = latest
            self._changed.notify_all()

    def _follow(self) -> None:
        pause = 0.05
        while not self._closed:
            for node in self._client.nodes:
                if self._closed:
                    return
                request = pb.WatchAssignmentsRequest(application=self._application)
                served = False
                try:
                    stub = rpc.OwnershipStub(self._client._channel(node))
                    call = stub.WatchAssignments(request, metadata=self._client._metadata)
                    with self._changed:
                        self._call = call
                    for update in call:
                        self._publish(self._latest.applied(update))
                        served, pause = True, 0.05
                except (grpc.RpcError, OutOfStep):
                    pass
                if served:
                    # The stream broke after it served: keep the copy, marked.
                    self._publish(self._latest.broken())
                    break
            if self._closed:
                return
            time.sleep(pause)
            pause = min(pause * 2, _MAX_PAUSE)
