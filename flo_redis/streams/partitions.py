"""Partition fan-out: the state every stream operation runs on.

A stream has one partition unless it was created with more (:func:`create_stream`); each
partition is a complete stream with its own hash slot (:mod:`flo_redis.streams.placement`
has where the count lives and which partition a record goes to). :class:`StreamState` is
a session with what one client remembers of its streams: it answers the keys of every
partition of a stream (or of the one an option names), keeps the turn counters that
spread appends and group reads over them (and the poll ids of its recent group reads, so
that a retried one is known as such), waits for records on the partitions' wake
channels, and puts each stream used in its namespace's stream registry. The operations
of :mod:`flo_redis.streams` are plain functions over it, called by ``client.stream`` and
by the StreamWorker alike.
"""

from __future__ import annotations

import builtins
import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

from flo_redis._session.registry import remember
from flo_redis._session.session import Session
from flo_redis._session.wake import Attempt, long_poll
from flo_redis._wire.gateway import STREAM_CREATE
from flo_redis._wire.keys import StreamKeys, namespace_keys, stream_keys
from flo_redis._wire.lru import Lru
from flo_redis._wire.status import Status, refusal
from flo_redis.streams.placement import PartitionCounts, partition_arg, partitions_arg
from flo_redis.types import StreamID, StreamRecord


class _PerPartition(Protocol):
    @property
    def id(self) -> StreamID: ...

    @property
    def partition(self) -> int: ...


P = TypeVar("P", bound=_PerPartition)

POLLS_KEPT = 4096
"""How many pollers' (or other poll ids') last group reads a client remembers, the
least recently used forgotten first."""


def merged(batches: Sequence[Sequence[P]], count: int) -> builtins.list[P]:
    """The first ``count`` items of per-partition batches, in id order (then partition)."""
    items = [item for batch in batches for item in batch]
    items.sort(key=lambda item: (item.id.as_tuple(), item.partition))
    return items[:count]


class StreamState:
    """A session and what its client remembers of its streams (each memory bounded,
    least recently used forgotten first): partition counts, turn counters, the last poll
    id of each poller, and which streams it put in their namespace's registry."""

    __slots__ = ("counts", "listed", "polls", "session", "turns")

    def __init__(self, session: Session) -> None:
        self.session = session
        self.counts = PartitionCounts(session)
        self.turns: Lru[tuple[str, ...], itertools.count[int]] = Lru()
        self.polls: Lru[tuple[str, ...], str] = Lru(POLLS_KEPT)  # see sent_before
        self.listed: Lru[tuple[str, str], bool] = Lru()  # streams this client registered

    def keys(self, stream: str, namespace: str | None) -> StreamKeys:
        """Keys of partition 0 of ``stream`` in ``namespace`` (None: the session's)."""
        return stream_keys(self.session.get_namespace(namespace), stream)

    async def parts(
        self, stream: str, namespace: str | None, only: int | None = None
    ) -> builtins.list[StreamKeys]:
        """Keys of every partition of ``stream`` (or only of partition ``only``)."""
        first = self.keys(stream, namespace)
        count = await self.counts.get(first.namespace, stream, first.meta)
        if only is not None:
            return [stream_keys(first.namespace, stream, partition_arg(stream, only, count))]
        return [first] + [stream_keys(first.namespace, stream, p) for p in range(1, count)]

    async def part(self, stream: str, namespace: str | None, partition: int) -> StreamKeys:
        """Keys of partition ``partition`` of ``stream`` (0 is never looked up)."""
        if partition == 0:
            return self.keys(stream, namespace)
        (keys,) = await self.parts(stream, namespace, partition)
        return keys

    def next_turn(self, *key: str) -> int:
        """A per-client counter (round-robin appends, fair group reads)."""
        counter = self.turns.get(key)
        if counter is None:
            counter = itertools.count()
            self.turns.put(key, counter)
        return next(counter)

    def sent_before(self, poll_id: str, *key: str) -> bool:
        """Whether this client sent a read under ``poll_id`` (for ``key``) before: a retry.
        Remembered as the scripts keep poll memos (``lua/lib/polls.lua``): the last poll
        id of each poller ``<poller>#<n>``, any other poll id on its own; at most
        :data:`POLLS_KEPT`, the least recently used forgotten first."""
        if not poll_id:
            return False
        head, sep, _ = poll_id.rpartition("#")
        field = (*key, head if sep and head else poll_id)
        again = self.polls.get(field) == poll_id
        self.polls.put(field, poll_id)
        return again

    async def long_poll(
        self,
        parts: Sequence[StreamKeys],
        block_ms: int,
        attempt: Callable[[], Awaitable[Attempt[StreamRecord]]],
        since: int | None = None,
    ) -> builtins.list[StreamRecord]:
        """Records of ``attempt``, waiting on the partitions' wake channels (see
        :func:`flo_redis._session.wake.long_poll`, also for ``since``); ``due_ms`` is ms
        from now."""
        return await long_poll(
            self.session.waker, [k.wake for k in parts], block_ms, attempt, since=since
        )

    async def remember(self, namespace: str, stream: str) -> None:
        """Put ``stream`` in its namespace's stream registry, once per client."""
        if self.listed.get((namespace, stream)):
            return
        await remember(self.session.redis, namespace, namespace_keys(namespace).streams, stream)
        self.listed.put((namespace, stream), True)


async def create_stream(
    state: StreamState, stream: str, partitions: int, namespace: str | None
) -> int:
    """Create ``stream`` with ``partitions`` partitions, or find it so created; the count
    (:meth:`~flo_redis.streams.operations.StreamOperations.create`)."""
    count = partitions_arg(partitions)
    keys = state.keys(stream, namespace)
    await state.remember(keys.namespace, stream)  # first: see append
    reply = await STREAM_CREATE(state.session, keys, [count])
    recorded = reply.value
    if reply.status == Status.CONFLICT:
        raise refusal(
            Status.CONFLICT,
            f"stream {stream!r} in namespace {keys.namespace!r} already has {recorded} "
            f"partition(s); the count is fixed when a stream is first created or used",
        )
    state.counts.remember(keys.namespace, stream, recorded)
    return recorded


async def partition_count(state: StreamState, stream: str, namespace: str | None) -> int:
    """How many partitions ``stream`` has (1 unless it was created with more)."""
    keys = state.keys(stream, namespace)
    return await state.counts.get(keys.namespace, stream, keys.meta)
