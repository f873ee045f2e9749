"""The stream and consumer-group scripts' replies: one frozen dataclass and one parser
per reply shape. The other shapes, and :func:`~flo_redis._wire.replies.fixed` that parses
every fixed-shape reply, are in :mod:`flo_redis._wire.replies`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flo_redis._wire.codec import BadRecord, text
from flo_redis._wire.replies import fixed, names_from, row_starts
from flo_redis._wire.status import Status
from flo_redis._wire.stream_codec import decode_headers, sid
from flo_redis.types import StorageTier, StreamID, StreamRecord


@dataclass(frozen=True, slots=True)
class BadEntry:
    """A record whose stored headers do not decode: the record (its headers None), the
    headers' bytes, and why."""

    record: StreamRecord
    headers: bytes
    reason: str


def records(
    stream: str, reply: Any, at: int, partition: int = 0, *, tokens: bool = False
) -> tuple[list[StreamRecord], tuple[BadEntry, ...]]:
    """Records of an ``(id, payload, headers) * n`` reply whose count is at ``reply[at]``;
    with ``tokens``, of an ``(id, token, payload, headers) * n`` one (group deliveries:
    the token is the delivery count). Records whose headers do not decode are also
    answered apart, as :class:`BadEntry` (in the list too, without headers)."""
    width = 4 if tokens else 3
    body = width - 2  # where the payload is: after the id (and the token)
    hot = StorageTier.HOT
    try:
        # Positional (StreamRecord's field order): a hundred records a batch, each counts.
        return [
            StreamRecord(
                sid(reply[i]),
                hot,
                stream,
                bytes(reply[i + body]),
                decode_headers(reply[i + body + 1]) if reply[i + body + 1] else None,
                int(reply[i + 1]) if tokens else 0,
                partition,
            )
            for i in row_starts(reply, at, width)
        ], ()
    except BadRecord:
        pass
    found: list[StreamRecord] = []
    bad: list[BadEntry] = []
    for i in row_starts(reply, at, width):
        raw = reply[i + body + 1]
        record = StreamRecord(
            sid(reply[i]), hot, stream, bytes(reply[i + body]), None,
            int(reply[i + 1]) if tokens else 0, partition,
        )  # fmt: skip
        try:
            record.headers = decode_headers(raw) if raw else None
        except BadRecord as exc:
            bad.append(BadEntry(record, bytes(raw), str(exc)))
        found.append(record)
    return found, tuple(bad)


@dataclass(frozen=True, slots=True)
class Appended:
    status: int
    id: StreamID


appended = fixed(Appended)


@dataclass(frozen=True, slots=True)
class Records:
    """``stream_read``: records of the key object's stream and partition."""

    status: int
    records: list[StreamRecord]
    bad: tuple[BadEntry, ...] = ()


def stream_records(reply: Any, keys: Any) -> Records:
    return Records(int(reply[0]), *records(keys.stream, reply, 1, keys.partition))


@dataclass(frozen=True, slots=True)
class Delivered:
    """``group_read``: entries handed out, and ms until one falls due (-1: none)."""

    status: int
    wait_ms: int
    records: list[StreamRecord]
    bad: tuple[BadEntry, ...] = ()


def delivered(reply: Any, keys: Any) -> Delivered:
    return Delivered(
        int(reply[0]), int(reply[1]), *records(keys.stream, reply, 2, keys.partition, tokens=True)
    )


@dataclass(frozen=True, slots=True)
class ClaimedPage:
    """``group_claim``: entries taken, and the next id to scan from unless done."""

    status: int
    done: bool
    next_id: StreamID | None
    records: list[StreamRecord]
    bad: tuple[BadEntry, ...] = ()


def claimed_page(reply: Any, keys: Any) -> ClaimedPage:
    finished = bool(int(reply[1]))
    return ClaimedPage(
        int(reply[0]),
        finished,
        None if finished else sid(reply[2]),
        *records(keys.stream, reply, 3, keys.partition, tokens=True),
    )


@dataclass(frozen=True, slots=True)
class StreamStats:
    """``stream_info``: one partition's record count, bytes and first/last id."""

    status: int
    count: int
    bytes_size: int
    first_id: StreamID
    last_id: StreamID
    entries_added: int


stream_stats = fixed(StreamStats)


@dataclass(frozen=True, slots=True)
class Trimmed:
    """``stream_trim``: one bounded step."""

    status: int
    removed: int = 0
    more: bool = False
    last_id: str = ""
    cutoff: str = ""
    length: int = 0
    entries_added: int = 0


trimmed = fixed(Trimmed)


@dataclass(frozen=True, slots=True)
class Settled:
    """``group_ack`` / ``group_nack``: on STALE, the entry refused, its current delivery
    count and holder; on OK, of a nack, how many entries were given back for redelivery
    and how many moved to the dead letters (entries no longer pending are neither)."""

    status: int
    stale_id: str
    current_count: int
    holder: str
    redelivered: int = 0
    dead: int = 0


def settled(reply: Any, _keys: object) -> Settled:
    status = int(reply[0])
    if status != Status.STALE or len(reply) < 4:
        return Settled(status, "", 0, "")
    return Settled(status, text(reply[-3]) or "", int(reply[-2]), text(reply[-1]) or "")


def nack_settled(reply: Any, keys: object) -> Settled:
    """``group_nack``'s reply: {status, nacked, dead, stale_id, current_count, holder}."""
    status = int(reply[0])
    if status != Status.OK or len(reply) < 3:
        return settled(reply, keys)
    return Settled(status, "", 0, "", redelivered=int(reply[1]), dead=int(reply[2]))


@dataclass(frozen=True, slots=True)
class SettledMany:
    """``group_ack_many``: each item's status and current delivery count, in order
    (none unless the call's status is OK)."""

    status: int
    statuses: tuple[int, ...]
    counts: tuple[int, ...]


def settled_many(reply: Any, _keys: object) -> SettledMany:
    status = int(reply[0])
    body = reply[1:] if status == Status.OK else []
    return SettledMany(status, tuple(map(int, body[0::2])), tuple(map(int, body[1::2])))


@dataclass(frozen=True, slots=True)
class PendingRow:
    id: StreamID
    consumer: str
    idle_ms: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class Pending:
    status: int
    rows: tuple[PendingRow, ...]


def pending(reply: Any, _keys: object) -> Pending:
    rows = tuple(
        PendingRow(sid(reply[i]), text(reply[i + 1]) or "", int(reply[i + 2]), int(reply[i + 3]))
        for i in row_starts(reply, 1, 4)
    )
    return Pending(int(reply[0]), rows)


@dataclass(frozen=True, slots=True)
class Replayed:
    """``group_replay``: the new record id of each dead letter replayed."""

    status: int
    new_ids: tuple[StreamID, ...]


def replayed(reply: Any, _keys: object) -> Replayed:
    return Replayed(int(reply[0]), tuple(sid(reply[i + 1]) for i in row_starts(reply, 1, 2)))


set_aside_ids = names_from(2)
"""``group_quarantine``: ``{status, n, entry_id * n}``, the ids of the entries it set aside."""


@dataclass(frozen=True, slots=True)
class Reappended:
    """``group_quarantine_replay``: the id of the record appended again ('' when
    refused)."""

    status: int
    new_id: str = ""


reappended = fixed(Reappended)
