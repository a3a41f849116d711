"""The asyncio client (``grpc.aio``): the sync :class:`chitin_client.Client`'s
calls as coroutines, with the same decisions (one append's attempts are the
shared ``_Append``; an idempotent call moves on by the shared ``_elsewhere``),
the same typed outcomes and events, and the same pure assignment copy.

    from chitin_client.aio import Client
    async with Client("10.0.0.1:50051,10.0.0.2:50051") as client:
        outcome = await client.append("orders", b"hello")
        watch = client.watch_ownership(acknowledges=True)
        async for event in watch:
            if isinstance(event, Draining):
                await flush(event.shard)
                await watch.released(event.shard, event.epoch)

The fences (:mod:`chitin_client.fence`) take a DB-API connection and run
short statements; an asyncio application runs the same ones on its driver's
async connection: ``fence.POSTGRES`` and ``fence.MYSQL`` hold them,
``fence.CLAIM_SCRIPT`` and ``fence.WRITE_SCRIPT`` are the Redis scripts.
"""

import asyncio
from typing import List, Optional, Sequence, Tuple, Union

import grpc
import grpc.aio

from chitin_client import (
    Outcome,
    Unreachable,
    _Append,
    _Options,
    _elsewhere,
    _target,
    parse_nodes,
    stream_key,
)
from chitin_client.assignments import Assignments, OutOfStep
from chitin_client.proto import chitin_pb2 as pb
from chitin_client.proto import chitin_pb2_grpc as rpc
from chitin_client.watch import _KINDS, Event, Gap, Subscribed

__all__ = ["AssignmentMap", "Client", "OwnershipWatch"]

# Longest pause between subscription attempts, in seconds.
_MAX_PAUSE = 1.0


class Client(_Options):
    """An asyncio client of several nodes (a list or ``"a:1,b:2"``), tried in
    order; the options are the sync client's."""

    def __init__(self, nodes: Union[str, Sequence[str]], **options):
        super().__init__(nodes, **options)
        # Channels dropped after a failure, closed with the client.
        self._closing: List[grpc.aio.Channel] = []

    async def close(self) -> None:
        if self._map is not None:
            await self._map.close()
            self._map = None
        for c in list(self._channels.values()) + self._closing:
            await c.close()
        self._channels.clear()
        self._closing.clear()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    def _channel(self, address: str) -> grpc.aio.Channel:
        if address not in self._channels:
            target = _target(address)
            self._channels[address] = (
                grpc.aio.secure_channel(target, self._credentials)
                if self._credentials
                else grpc.aio.insecure_channel(target)
            )
        return self._channels[address]

    def _forget(self, address: str) -> None:
        # Closed with the client: closing here would cancel a call another
        # task still has on it.
        channel = self._channels.pop(address, None)
        if channel is not None:
            self._closing.append(channel)

    async def append(self, stream: str, payload: bytes, request_id: Optional[str] = None) -> Outcome:
        """Appends ``payload``; however many attempts it takes, it applies at
        most once. Raises :class:`chitin_client.Refused` for a request no
        retry can help."""
        one = _Append(self, stream, payload, request_id)
        while one.attempt < self.attempts:
            routed = await self._route_of(stream) if one.wants_route() else None
            target = one.target(routed)
            try:
                stub = rpc.JournalStub(self._channel(target))
                r = await stub.Append(one.request, timeout=self.attempt_timeout, metadata=self._metadata)
                return one.applied(r, target)
            except grpc.RpcError as e:
                pause, forget = one.failed(e, target)
            if forget:
                self._forget(target)
            if pause:
                await asyncio.sleep(pause)
        if one.needs_holder():
            try:
                one.named_by(await self.route_stream(stream))
            except (Unreachable, grpc.RpcError):
                pass
        return one.outcome()

    async def _route_of(self, stream: str) -> Optional[str]:
        if self._map is not None:
            shard = self._map.current().route(self.application, stream_key(stream))
            if shard is not None and shard.holder_address:
                return shard.holder_address
        if not self.route_appends:
            return None
        if stream not in self._routes:
            try:
                lease = await self.route_stream(stream)
            except (Unreachable, grpc.RpcError):
                return None
            if not lease.holder_address:
                return None
            if len(self._routes) >= 4096:
                self._routes.clear()
            self._routes[stream] = lease.holder_address
        return self._routes[stream]

    async def _any_node(self, call):
        """Awaits an idempotent ``call(channel)`` at the current node, moving
        on after a failure that may be the node's; every node at least once."""
        failures = []
        tries = max(len(self.nodes), self.attempts)
        for i in range(tries):
            address = self.nodes[self._current % len(self.nodes)]
            try:
                return await call(self._channel(address))
            except grpc.RpcError as e:
                failures.append((address, _elsewhere(e)))
                self._forget(address)
            self._next_node(address)
            if (i + 1) % len(self.nodes) == 0 and i + 1 < tries:
                await asyncio.sleep(self._pause(i))
        raise Unreachable(failures)

    async def route(self, application: str, key: int) -> "pb.ShardLease":
        """Which node holds the shard covering ``key`` of ``application``."""
        request = pb.RouteRequest(application=application, key=key)
        return await self._any_node(
            lambda ch: rpc.OwnershipStub(ch).Route(request, timeout=self.attempt_timeout, metadata=self._metadata)
        )

    async def route_stream(self, stream: str) -> "pb.ShardLease":
        """The lease of the shard ``stream``'s appends go to."""
        return await self.route(self.application, stream_key(stream))

    async def read(self, stream: str, from_: int = 1, limit: int = 1000) -> "pb.ReadResponse":
        """Entries of ``stream`` from sequence ``from_`` (any node answers)."""
        request = pb.ReadRequest(stream=stream, limit=limit, **{"from": from_})
        return await self._any_node(
            lambda ch: rpc.JournalStub(ch).Read(request, timeout=self.attempt_timeout, metadata=self._metadata)
        )

    async def report_load(self, samples: Sequence["pb.LoadSample"]) -> int:
        """Reports the application's load since its previous report (as the
        sync client's ``report_load``); the number of samples counted."""
        request = pb.ReportLoadRequest(samples=list(samples))
        answer = await self._any_node(
            lambda ch: rpc.OwnershipStub(ch).ReportLoad(request, timeout=self.attempt_timeout, metadata=self._metadata)
        )
        return answer.counted

    def watch_ownership(self, acknowledges: bool = False) -> "OwnershipWatch":
        """The ownership events of the first node that answers, surviving
        gaps, as an async iterator (the sync watch's events)."""
        return OwnershipWatch(self, acknowledges)

    def assignment_map(self) -> "AssignmentMap":
        """Starts following the whole assignment map in a task of the
        running loop and routes this client's appends by it from then on.
        ``close()`` stops it."""
        if self._map is None:
            self._map = AssignmentMap(self)
        return self._map


class OwnershipWatch:
    """``async for`` it for events (:mod:`chitin_client.watch`): it waits,
    subscribing again as needed, until there is one."""

    def __init__(self, client: Client, acknowledges: bool):
        self._client = client
        self._acknowledges = acknowledges
        self._stream: Optional[Tuple[str, object]] = None
        self._pause = 0.05

    def __aiter__(self):
        return self

    async def __anext__(self) -> Event:
        while True:
            if self._stream is None:
                event = await self._subscribe()
                if event is not None:
                    return event
                await asyncio.sleep(self._pause)
                self._pause = min(self._pause * 2, _MAX_PAUSE)
                continue
            node, stream = self._stream
            try:
                e = await stream.read()
            except grpc.RpcError as err:
                reason = f"{err.code().name}: {err.details() or ''}"
            else:
                if e is grpc.aio.EOF:
                    reason = "the node ended the stream"
                else:
                    kind = _KINDS.get(e.kind)
                    if kind is None:  # a kind this client does not know (a newer node)
                        continue
                    return kind(e.shard, e.epoch)
            self._stream = None
            return Gap(node, reason)

    async def released(self, shard: str, epoch: int) -> bool:
        """Answers a ``Draining`` (see the sync watch): ``False`` when
        nothing waits for the answer any more, safe to ignore."""
        return await self._acknowledge(pb.AcknowledgeRequest.RELEASED, shard, epoch)

    async def ready(self, shard: str, epoch: int) -> bool:
        """Answers an ``Acquired`` (see the sync watch): ``False`` when
        nothing waits for the answer any more, safe to ignore."""
        return await self._acknowledge(pb.AcknowledgeRequest.READY, shard, epoch)

    async def _acknowledge(self, ack, shard: str, epoch: int) -> bool:
        if self._stream is None:
            return False
        request = pb.AcknowledgeRequest(ack=ack, shard=shard, epoch=epoch)
        try:
            await rpc.OwnershipStub(self._client._channel(self._stream[0])).Acknowledge(
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

    async def _subscribe(self) -> Optional[Subscribed]:
        for node in self._client.nodes:
            stub = rpc.OwnershipStub(self._client._channel(node))
            stream = None
            try:
                stream = stub.WatchOwnership(
                    pb.WatchRequest(acknowledges=self._acknowledges), metadata=self._client._metadata
                )
                # The subscription is made before Held is asked, so no change
                # falls between the two.
                await stream.wait_for_connection()
                held = await stub.Held(
                    pb.HeldRequest(), timeout=self._client.attempt_timeout, metadata=self._client._metadata
                )
            except grpc.RpcError:
                if stream is not None:
                    stream.cancel()
                self._client._forget(node)
                continue
            self._stream = (node, stream)
            self._pause = 0.05
            return Subscribed(node, list(held.leases))
        return None


class AssignmentMap:
    """A live copy of the map (:class:`chitin_client.Assignments`), followed
    by a task until :meth:`close`. Made by ``Client.assignment_map``."""

    def __init__(self, client: Client, application: str = ""):
        self._client = client
        self._application = application
        self._latest = Assignments()
        self._changed = asyncio.Condition()
        self._task = asyncio.get_running_loop().create_task(self._follow())

    def current(self) -> Assignments:
        """The copy as it is now (do not change it)."""
        return self._latest

    async def ready(self, timeout: float) -> bool:
        """Waits for the first snapshot, at most ``timeout`` seconds."""
        return await self._wait(lambda: self._latest.version > 0, timeout)

    async def wait_changed(self, version: int, timeout: float) -> bool:
        """Waits for a copy other than ``version``, at most ``timeout`` seconds."""
        return await self._wait(lambda: self._latest.version != version, timeout)

    async def _wait(self, predicate, timeout: float) -> bool:
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(predicate), timeout)
                return True
            except asyncio.TimeoutError:
                return predicate()

    async def close(self) -> None:
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass

    async def _publish(self, latest: Assignments) -> None:
        async with self._changed:
            self._latest = latest
            self._changed.notify_all()

    async def _follow(self) -> None:
        pause = 0.05
        while True:
            for node in self._client.nodes:
                request = pb.WatchAssignmentsRequest(application=self._application)
                served = False
                try:
                    call = rpc.OwnershipStub(self._client._channel(node)).WatchAssignments(
                        request, metadata=self._client._metadata
                    )
                    async for update in call:
                        await self._publish(self._latest.applied(update))
                        served, pause = True, 0.05
                except (grpc.RpcError, OutOfStep):
                    pass
                if served:
                    # The stream broke after it served: keep the copy, marked.
                    await self._publish(self._latest.broken())
                    break
            await asyncio.sleep(pause)
            pause = min(pause * 2, _MAX_PAUSE)
