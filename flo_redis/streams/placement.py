"""Partitioned streams: where a stream's partition count lives, which partition a record
goes to, and the claim cursor that walks the partitions in turn.

A stream has one partition unless it was created with more (``client.stream.create``);
the count is recorded in partition 0's meta hash (field ``partitions``, written once by
``lua/stream_create.lua``) and fixed from then on. Each partition is a complete stream of
its own with its own hash tag (``keys.stream_keys``), so on a cluster partitions spread
over the nodes.
"""

from __future__ import annotations

import time
import zlib

from flo_redis._session.session import Session
from flo_redis._wire import runner
from flo_redis._wire.checks import check_count, is_int
from flo_redis._wire.lru import Lru
from flo_redis.errors import ValidationError
from flo_redis.types import StreamID

MAX_PARTITIONS = 1024
UNRECORDED_TTL_S = 1.0
"""How long a client believes a stream without a recorded count has one partition
before it looks again (a recorded count never changes, so it is kept for good)."""

_CURSOR_SHIFT = 48
_CURSOR_MASK = (1 << _CURSOR_SHIFT) - 1


def partition_of_key(key: str, partitions: int) -> int:
    """The partition of ``partition_key`` ``key``: CRC-32 of its UTF-8 bytes modulo the
    count, the same in every process and language, so one key's records stay in order
    in one partition."""
    return zlib.crc32(key.encode()) % partitions


def partitions_arg(value: object) -> int:
    return check_count("partitions", value, 1, MAX_PARTITIONS)


def partition_arg(stream: str, value: object, partitions: int) -> int:
    if not is_int(value) or not 0 <= value < partitions:
        raise ValidationError(
            f"partition {value!r} does not exist; stream {stream!r} has {partitions} "
            f"partition(s) (0..{partitions - 1})"
        )
    return value


def encode_cursor(partition: int, entry: StreamID) -> StreamID:
    """A ``group_claim`` cursor of a partitioned stream: the partition in the top 16 bits
    of ``timestamp_ms`` (real stream ids stay below 2**48 ms until the year 10889)."""
    if partition == 0:
        return entry
    return StreamID((partition << _CURSOR_SHIFT) | entry.timestamp_ms, entry.sequence)


def decode_cursor(cursor: StreamID) -> tuple[int, StreamID]:
    return cursor.timestamp_ms >> _CURSOR_SHIFT, StreamID(
        cursor.timestamp_ms & _CURSOR_MASK, cursor.sequence
    )


class PartitionCounts:
    """A client's cache of stream partition counts."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._known: Lru[tuple[str, str], tuple[int, float]] = Lru()

    def remember(self, namespace: str, stream: str, partitions: int) -> None:
        self._known.put((namespace, stream), (partitions, float("inf")))

    async def get(self, namespace: str, stream: str, meta_key: str) -> int:
        """The partition count of ``stream`` (1 when none was recorded)."""
        now = time.monotonic()
        known = self._known.get((namespace, stream))
        if known is not None and known[1] > now:
            return known[0]
        with runner.redis_errors("partitions"):
            raw = await self._session.redis.hget(meta_key, "partitions")
        if raw is None:
            self._known.put((namespace, stream), (1, now + UNRECORDED_TTL_S))
            return 1
        count = int(raw)
        self.remember(namespace, stream, count)
        return count
