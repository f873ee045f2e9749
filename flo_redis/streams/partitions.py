"""Partition fan-out: what every part of ``client.stream`` builds on.

A stream has one partition unless it was created with more (:meth:`create`); each
partition is a complete stream with its own hash slot (:mod:`flo_redis.streams.placement` has
where the count lives and which partition a record goes to). :class:`PartitionedStreams`
answers the keys of every partition of a stream (or of the one an option names), keeps
the per-client turn counters that spread appends and group reads over them (and the poll
ids of its recent group reads, so that a retried one is known as such), merges
per-partition answers in id order, waits for records on the partitions' wake channels,
and puts each stream used in its namespace's stream registry.
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


class PartitionedStreams:
    """The state and helpers shared by every part of ``client.stream``, and its
    ``create`` / ``partitions`` calls."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._counts = PartitionCounts(session)
        self._turn: Lru[tuple[str, ...], itertools.count[int]] = Lru()
        self._polls: Lru[tuple[str, ...], str] = Lru(POLLS_KEPT)  # see _sent_before
        self._listed: Lru[tuple[str, str], bool] = Lru()  # streams this client registered

    def _keys(self, stream: str, namespace: str | None) -> StreamKeys:
        return stream_keys(self._session.get_namespace(namespace), stream)

    async def _partitions(
        self, stream: str, namespace: str | None, only: int | None = None
    ) -> builtins.list[StreamKeys]:
        """Keys of every partition of ``stream`` (or only of partition ``only``)."""
        first = self._keys(stream, namespace)
        count = await self._counts.get(first.namespace, stream, first.meta)
        if only is not None:
            return [stream_keys(first.namespace, stream, partition_arg(stream, only, count))]
        return [first] + [stream_keys(first.namespace, stream, p) for p in range(1, count)]

    async def _partition(self, stream: str, namespace: str | None, partition: int) -> StreamKeys:
        """Keys of partition ``partition`` of ``stream`` (0 is never looked up)."""
        if partition == 0:
            return self._keys(stream, namespace)
        (keys,) = await self._partitions(stream, namespace, partition)
        return keys

    def _next_turn(self, *key: str) -> int:
        """A per-client counter (round-robin appends, fair group reads)."""
        counter = self._turn.get(key)
        if counter is None:
            counter = itertools.count()
            self._turn.put(key, counter)
        return next(counter)

    def _sent_before(self, poll_id: str, *key: str) -> bool:
        """Whether this client sent a read under ``poll_id`` (for ``key``) before: a retry.
        Remembered as the scripts keep poll memos (``lua/lib/polls.lua``): the last poll
        id of each poller ``<poller>#<n>``, any other poll id on its own; at most
        :data:`POLLS_KEPT`, the least recently used forgotten first."""
        if not poll_id:
            return False
        head, sep, _ = poll_id.rpartition("#")
        field = (*key, head if sep and head else poll_id)
        again = self._polls.get(field) == poll_id
        self._polls.put(field, poll_id)
        return again

    async def _long_poll(
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
            self._session.waker, [k.wake for k in parts], block_ms, attempt, since=since
        )

    async def _remember_stream(self, namespace: str, stream: str) -> None:
        """Put ``stream`` in its namespace's stream registry, once per client."""
        if self._listed.get((namespace, stream)):
            return
        await remember(self._session.redis, namespace, namespace_keys(namespace).streams, stream)
        self._listed.put((namespace, stream), True)

    async def create(self, stream: str, partitions: int = 1, namespace: str | None = None) -> int:
        """Create ``stream`` with ``partitions`` partitions (1..1024), each in its own hash
        slot, and return the count. The count is fixed once recorded: creating again with
        the same count changes nothing, another count is refused with
        :class:`ConflictError`, and so is a count above 1 for a stream already used
        without one. A stream never created has one partition."""
        count = partitions_arg(partitions)
        keys = self._keys(stream, namespace)
        await self._remember_stream(keys.namespace, stream)  # first: see append
        reply = await STREAM_CREATE(self._session, keys, [count])
        recorded = reply.value
        if reply.status == Status.CONFLICT:
            raise refusal(
                Status.CONFLICT,
                f"stream {stream!r} in namespace {keys.namespace!r} already has {recorded} "
                f"partition(s); the count is fixed when a stream is first created or used",
            )
        self._counts.remember(keys.namespace, stream, recorded)
        return recorded

    async def partitions(self, stream: str, namespace: str | None = None) -> int:
        """How many partitions ``stream`` has (1 unless it was created with more)."""
        keys = self._keys(stream, namespace)
        return await self._counts.get(keys.namespace, stream, keys.meta)
