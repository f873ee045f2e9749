"""The replies of the plain-queue scripts (``lua/queue_*.lua``), read once into frozen
dataclasses, as :mod:`flo_redis._wire.replies` does for the other families."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flo_redis._wire.aside import SetAside
from flo_redis._wire.replies import row_starts, set_aside
from flo_redis.types.queue import Message


def _messages(reply: Sequence[Any], at: int) -> tuple[Message, ...]:
    """``n, (seq, payload, enqueued_at_ms, delivery_count, priority) * n``, n at ``at``."""
    return tuple(
        Message(
            seq=int(reply[i]),
            payload=bytes(reply[i + 1]),
            enqueued_at_ms=int(reply[i + 2]),
            delivery_count=int(reply[i + 3]),
            priority=int(reply[i + 4]),
        )
        for i in row_starts(reply, at, 5)
    )


@dataclass(frozen=True, slots=True)
class Taken:
    """``queue_dequeue``: the messages delivered, the server time, and the earliest
    visibility deadline still running (-1: no message is out)."""

    status: int
    now_ms: int
    next_deadline_ms: int
    messages: tuple[Message, ...]
    aside: tuple[SetAside, ...] = ()  # message records this call set aside (quarantine)


def taken(reply: Any, _keys: object) -> Taken:
    if len(reply) < 4:
        return Taken(int(reply[0]), 0, -1, ())
    end = 4 + 5 * int(reply[3])
    return Taken(
        int(reply[0]),
        int(reply[1]),
        int(reply[2]),
        _messages(reply, 3),
        set_aside(reply[end:]) if len(reply) > end else (),
    )


@dataclass(frozen=True, slots=True)
class Listed:
    """``queue_peek`` / ``queue_dlq_list``: messages, nothing changed."""

    status: int
    messages: tuple[Message, ...]


def listed(reply: Any, _keys: object) -> Listed:
    if len(reply) < 2:
        return Listed(int(reply[0]), ())
    return Listed(int(reply[0]), _messages(reply, 1))


@dataclass(frozen=True, slots=True)
class PerSeq:
    """``queue_ack`` / ``queue_nack`` / ``queue_dlq_requeue``: one status per seq sent."""

    status: int
    statuses: tuple[int, ...]


def per_seq(reply: Any, _keys: object) -> PerSeq:
    n = int(reply[1]) if len(reply) > 1 else 0
    return PerSeq(int(reply[0]), tuple(int(v) for v in reply[2 : 2 + n]))
