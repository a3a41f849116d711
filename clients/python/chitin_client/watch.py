"""An ownership watch that survives gaps, as the Rust crate's
``OwnershipWatch`` (docs/clients.md): the events of one node's
``WatchOwnership`` stream; when the stream breaks (the node restarted, or
DATA_LOSS: this watcher fell behind) it yields :class:`Gap`, subscribes again
at the first node of the list that answers and yields :class:`Subscribed`
with everything that node holds now (subscribed before ``Held`` is asked, so
no change falls between the two).

A watch opened with ``acknowledges=True`` takes part in handoffs: after
:class:`Draining` the node still serves the application's writes to the
shard until :meth:`OwnershipWatch.released` (or the node's
``release_timeout_ms``), and only then gives the shard away.

    for event in client.watch_ownership(acknowledges=True):
        if isinstance(event, Draining):
            flush(event.shard)
            watch.released(event.shard, event.epoch)
"""

import time
from typing import Iterator, List, NamedTuple, Optional, Tuple, Union

import grpc

from chitin_client.proto import chitin_pb2 as pb
from chitin_client.proto import chitin_pb2_grpc as rpc


class Subscribed(NamedTuple):
    """(Re)subscribed to ``node``: ``held`` is everything it holds now."""

    node: str
    held: List["pb.ShardLease"]


class Acquired(NamedTuple):
    shard: str
    epoch: int


class Draining(NamedTuple):
    """Stop taking new work for the shard: its lease is being handed over."""

    shard: str
    epoch: int


class Lost(NamedTuple):
    """Stop writing for the shard: the lease is gone."""

    shard: str
    epoch: int


class Gap(NamedTuple):
    """The stream from ``node`` ended: events may have been missed; a
    :class:`Subscribed` follows once a node answers."""

    node: str
    reason: str


Event = Union[Subscribed, Acquired, Draining, Lost, Gap]

_KINDS = {
    pb.OwnershipEvent.ACQUIRED: Acquired,
    pb.OwnershipEvent.DRAINING: Draining,
    pb.OwnershipEvent.LOST: Lost,
}

# Longest pause between subscription attempts, in seconds.
_MAX_PAUSE = 1.0


class OwnershipWatch:
    """Iterate it for events; it waits (subscribing again as needed) until
    there is one. Made by ``Client.watch_ownership``."""

    def __init__(self, client, acknowledges: bool):
        self._client = client
        self._acknowledges = acknowledges
        self._stream: Optional[Tuple[str, object]] = None
        self._pause = 0.05

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        while True:
            if self._stream is None:
                event = self._subscribe()
                if event is not None:
                    return event
                time.sleep(self._pause)
                self._pause = min(self._pause * 2, _MAX_PAUSE)
                continue
            node, stream = self._stream
            try:
                e = next(stream)
            except StopIteration:
                reason = "the node ended the stream"
            except grpc.RpcError as err:
                reason = f"{err.code().name}: {err.details() or ''}"
            else:
                kind = _KINDS.get(e.kind)
                if kind is None:  # a kind this client does not know (a newer node)
                    continue
                return kind(e.shard, e.epoch)
            self._stream = None
            return Gap(node, reason)

    def released(self, shard: str, epoch: int) -> bool:
        """Answers a :class:`Draining` of a watch that acknowledges: the
        application finished and flushed the shard; the node may hand it
        over now. ``False`` when nothing waits for this answer any more (the
        handoff went on, or the node is gone): safe to ignore."""
        return self._acknowledge(pb.AcknowledgeRequest.RELEASED, shard, epoch)

    def ready(self, shard: str, epoch: int) -> bool:
        """Answers an :class:`Acquired` of a watch that acknowledges: the
        application claimed its fence for the shard and is ready; the node
        serves the shard's writes (forwards included) from now on, not before
        (at most its ``ready_timeout_ms``). ``False`` when nothing waits for
        this answer any more: safe to ignore."""
        return self._acknowledge(pb.AcknowledgeRequest.READY, shard, epoch)

    def _acknowledge(self, ack, shard: str, epoch: int) -> bool:
        if self._stream is None:
            return False
        node = self._stream[0]
        request = pb.AcknowledgeRequest(ack=ack, shard=shard, epoch=epoch)
        try:
            rpc.OwnershipStub(self._client._channel(node)).Acknowledge(
                request, timeout=self._client.attempt_timeout, metadata=self._client._metadata
            )
            return True
        except grpc.RpcError:
            return False

    def close(self) -> None:
        """Ends the stream (and this watch's part in handoffs)."""
        if self._stream is not None:
            self._stream[1].cancel()
            self._stream = None

    def _subscribe(self) -> Optional[Subscribed]:
        for node in self._client.nodes:
            stub = rpc.OwnershipStub(self._client._channel(node))
            stream = None
            try:
                stream = stub.WatchOwnership(
                    pb.WatchRequest(acknowledges=self._acknowledges), metadata=self._client._metadata
                )
                held = stub.Held(pb.HeldRequest(), timeout=self._client.attempt_timeout, metadata=self._client._metadata)
            except grpc.RpcError:
                if stream is not None:
                    stream.cancel()
                self._client._forget(node)
                continue
            self._stream = (node, stream)
            self._pause = 0.05
            return Subscribed(node, list(held.leases))
        return None
