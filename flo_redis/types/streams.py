"""The stream types of flo-python 0.1.2 (``flo.types``): ids, records and results,
and the options of ``client.stream`` and its consumer groups. Exported from
:mod:`flo_redis.types` like the rest."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from flo_redis.types.base import U32, U64, StorageTier, check_int_field, check_optional_int_field

__all__ = [
    "PendingEntry",
    "StreamAppendOptions",
    "StreamAppendResult",
    "StreamClaimResult",
    "StreamGroupAckOptions",
    "StreamGroupJoinOptions",
    "StreamGroupNackOptions",
    "StreamGroupReadOptions",
    "StreamID",
    "StreamInfo",
    "StreamInfoOptions",
    "StreamReadOptions",
    "StreamReadResult",
    "StreamRecord",
    "StreamTrimOptions",
    "StreamTrimResult",
]

# =============================================================================
# Stream ids
# =============================================================================

_REDIS_ID = re.compile(r"^(\d+)(?:-(\d+))?$")


@dataclass(order=True)
class StreamID:
    """A position in a stream: ``timestamp_ms`` then ``sequence``, both u64.

    Ids order as (timestamp_ms, sequence) tuples. ``to_bytes`` gives 16
    big-endian bytes, so byte order equals id order; ``to_redis`` gives Redis's
    ``"<ms>-<seq>"`` text. ``StreamID.MIN`` and ``StreamID.MAX`` are the lowest
    and highest ids; they are shared instances, so don't mutate them.

    Like flo's, a StreamID is a mutable dataclass and so is not hashable; use
    ``to_redis()`` or a tuple as a dict key.
    """

    MIN: ClassVar[StreamID]
    MAX: ClassVar[StreamID]

    timestamp_ms: int = 0
    sequence: int = 0

    def __post_init__(self) -> None:
        check_int_field("StreamID", "timestamp_ms", self.timestamp_ms, 0, U64)
        check_int_field("StreamID", "sequence", self.sequence, 0, U64)

    def to_bytes(self) -> bytes:
        """The id as 16 bytes: timestamp_ms then sequence, each u64 big-endian."""
        return self.timestamp_ms.to_bytes(8, "big") + self.sequence.to_bytes(8, "big")

    @classmethod
    def from_bytes(cls, data: bytes) -> StreamID:
        """Read an id from the first 16 bytes of data; ValueError if shorter."""
        if len(data) < 16:
            raise ValueError(f"a StreamID needs 16 bytes, got {len(data)}")
        return cls(int.from_bytes(data[:8], "big"), int.from_bytes(data[8:16], "big"))

    def to_redis(self) -> str:
        """The id as Redis writes stream ids: ``"<timestamp_ms>-<sequence>"``."""
        return f"{self.timestamp_ms}-{self.sequence}"

    @classmethod
    def from_redis(cls, value: bytes | str) -> StreamID:
        """Parse a Redis stream id (``"ms-seq"``, or ``"ms"`` meaning sequence 0;
        ``"-"`` and ``"+"`` mean MIN and MAX). ValueError if malformed."""
        text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
        if text == "-":
            return cls(0, 0)
        if text == "+":
            return cls(U64 - 1, U64 - 1)
        match = _REDIS_ID.match(text)
        if match is None:
            raise ValueError(f"not a Redis stream id: {text!r}")
        return cls(int(match.group(1)), int(match.group(2) or 0))

    def as_tuple(self) -> tuple[int, int]:
        """The id as a hashable ``(timestamp_ms, sequence)`` tuple."""
        return (self.timestamp_ms, self.sequence)

    def __repr__(self) -> str:
        # What the generated one writes, without its recursion guard (two ints cannot
        # recurse): ``str(record.id)`` is common in handlers and logs.
        return f"StreamID(timestamp_ms={self.timestamp_ms!r}, sequence={self.sequence!r})"


StreamID.MIN = StreamID(0, 0)
StreamID.MAX = StreamID(U64 - 1, U64 - 1)


# =============================================================================
# Stream results
# =============================================================================


class _IdOrMin:
    """A result whose ``id`` given as None (its default, as flo's) is made
    :class:`StreamID` ``0-0``."""

    id: StreamID

    def __post_init__(self) -> None:
        if self.id is None:
            self.id = StreamID()


@dataclass
class StreamRecord(_IdOrMin):
    """One stream record. ``id`` is never None after construction (a None
    becomes StreamID.MIN); ``stream`` is the stream's name when the call knows it.

    flo_redis adds ``delivery_count``: on a record from group_read / group_claim,
    how many times the group delivered it, this delivery included (0 for plain
    reads). It is the delivery's fencing token: pass it as ``token`` to
    group_ack / group_nack and a report from a superseded delivery is refused.

    ``partition`` (flo_redis) is the partition the record lives in (0 for a stream
    without partitions); ids are per partition, so acks and nacks name it."""

    id: StreamID = None  # type: ignore[assignment]
    tier: StorageTier = StorageTier.HOT
    stream: str = ""
    payload: bytes = b""
    headers: dict[str, str] | None = None
    delivery_count: int = 0
    partition: int = 0


@dataclass
class StreamAppendResult(_IdOrMin):
    """The id the appended record got; ``partition`` (flo_redis): the partition it
    went to (0 for a stream without partitions)."""

    id: StreamID = None  # type: ignore[assignment]
    partition: int = 0


@dataclass
class StreamReadResult:
    """Records in id order; empty when nothing came before the wait ran out."""

    records: list[StreamRecord]


@dataclass
class PendingEntry(_IdOrMin):
    """A delivered but not yet acked entry of a consumer group.

    ``delivery_count`` is how often it was delivered, ``consumer`` who holds
    it. flo_redis adds ``idle_ms``: time since its last delivery, and
    ``partition``: the partition the entry lives in."""

    id: StreamID = None  # type: ignore[assignment]
    consumer: str = ""
    delivery_count: int = 0
    idle_ms: int = 0
    partition: int = 0


@dataclass
class StreamClaimResult:
    """One page of group_claim: the claimed records, the ``start_id`` for the
    next page, and ``done`` once the pending list has been scanned to the end."""

    records: list[StreamRecord]
    next_cursor: StreamID = None  # type: ignore[assignment]
    done: bool = False

    def __post_init__(self) -> None:
        if self.next_cursor is None:
            self.next_cursor = StreamID()


@dataclass
class StreamInfo:
    """A stream's size and bounds. For an empty stream both ids are MIN."""

    count: int
    bytes_size: int
    first_id: StreamID = None  # type: ignore[assignment]
    last_id: StreamID = None  # type: ignore[assignment]
    partition_count: int = 1

    def __post_init__(self) -> None:
        if self.first_id is None:
            self.first_id = StreamID()
        if self.last_id is None:
            self.last_id = StreamID()


@dataclass
class StreamTrimResult:
    """How many records a trim removed (or with dry_run would remove), and the
    sequence of the first record left (meaningful only if any remain)."""

    removed: int
    first_seq: int


# =============================================================================
# Stream options
# =============================================================================


@dataclass
class StreamAppendOptions:
    """Options for stream.append.

    ``partition_key`` (flo_redis) routes the record to a partition by key."""

    namespace: str | None = None
    headers: dict[str, str] | None = None
    partition_key: str | None = None


@dataclass
class StreamReadOptions:
    """Options for stream.read. ``start`` and ``end`` are inclusive; ``tail``
    reads from the end (not with ``start``); ``block_ms`` None or 0 means don't
    wait, at most MAX_BLOCK_MS."""

    namespace: str | None = None
    start: StreamID | None = None
    end: StreamID | None = None
    tail: bool = False
    partition: int | None = None
    count: int | None = None
    block_ms: int | None = None


@dataclass
class StreamTrimOptions:
    """Options for stream.trim; exactly one of ``before`` (inclusive),
    ``max_len`` or ``max_age_seconds`` must be set. ``dry_run`` removes nothing."""

    namespace: str | None = None
    before: StreamID | None = None
    max_len: int | None = None
    max_age_seconds: int | None = None
    dry_run: bool = False


@dataclass
class StreamInfoOptions:
    """Options for stream.info."""

    namespace: str | None = None


@dataclass
class StreamGroupJoinOptions:
    """Options for group_join and group_leave.

    flo_redis adds the group's settings, applied when given (None keeps the
    current ones, or the defaults for a new group: 30 s and 10):
    ``ack_timeout_ms`` is how long a delivered entry may stay unacked before it
    is delivered again (0 turns that off); ``max_deliver`` is how many
    deliveries an entry gets before it is dead-lettered."""

    namespace: str | None = None
    ack_timeout_ms: int | None = None
    max_deliver: int | None = None

    def __post_init__(self) -> None:
        name = "StreamGroupJoinOptions"
        check_optional_int_field(name, "ack_timeout_ms", self.ack_timeout_ms, 0, U32)
        check_optional_int_field(name, "max_deliver", self.max_deliver, 1, U32)


@dataclass
class StreamGroupReadOptions:
    """Options for group_read, group_pending and group_claim. ``block_ms`` None
    or 0 means don't wait, at most MAX_BLOCK_MS.

    ``poll_id`` (flo_redis) names this blocking read so it can be woken early,
    for example by a stopping worker. ``partition`` (flo_redis) limits the call to
    one partition of a partitioned stream (None: all of them)."""

    namespace: str | None = None
    count: int | None = None
    block_ms: int | None = None
    poll_id: str | None = None
    partition: int | None = None


@dataclass
class _GroupSettleOptions:
    """What group_ack and group_nack take. ``consumer`` is informational: any consumer
    may settle an entry.

    ``token`` (flo_redis) is the delivery count of the caller's delivery; when
    given, the call is refused if the entry was delivered again since.
    ``partition`` (flo_redis) is the partition the ids live in (a record's
    ``partition``); 0 for a stream without partitions."""

    namespace: str | None = None
    consumer: str = ""
    token: int | None = None
    partition: int = 0


@dataclass
class StreamGroupAckOptions(_GroupSettleOptions):
    """Options for group_ack: the fields of :class:`_GroupSettleOptions`."""


@dataclass
class StreamGroupNackOptions(_GroupSettleOptions):
    """Options for group_nack: the fields of :class:`_GroupSettleOptions`."""
