"""The option and result types of ``client.queue``, as flo-python 0.1.2 defines them
(same fields, order and defaults), with trailing fields for what flo-redis adds:
a visibility timeout and a delivery limit on dequeue, fencing on ack and nack, a limit on
listing dead letters. Exported from :mod:`flo_redis.types` like the rest."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_VISIBILITY_TIMEOUT_MS = 30_000
"""How long a delivered message stays invisible to other consumers unless acked or nacked."""
DEFAULT_MAX_DELIVERIES = 10
"""Deliveries a message gets before a nack, expiry or dead consumer sends it to the DLQ."""


@dataclass
class Message:
    """A queue message as delivered (or peeked, or listed as a dead letter).

    ``delivery_count`` counts the deliveries so far, this one included (0 for a message
    never delivered), across dead-lettering and ``dlq_requeue`` too: it is also the
    delivery's fencing token (``AckOptions.tokens``), so it never goes back. After a
    requeue, ``max_deliveries`` counts the deliveries since (a requeued message is
    delivered that many more times)."""

    seq: int
    payload: bytes
    enqueued_at_ms: int = 0
    delivery_count: int = 0
    priority: int = 0


@dataclass
class DequeueResult:
    """Messages handed out by dequeue, or shown by peek and dlq_list."""

    messages: list[Message]


@dataclass
class EnqueueOptions:
    """Options for enqueue: ``priority`` 0-255, lower is taken first (FIFO within one)."""

    namespace: str | None = None
    priority: int = 0


@dataclass
class DequeueOptions:
    """Options for dequeue.

    ``block_ms``: wait up to this long for a message (None or 0: don't wait; at most
    300000). ``visibility_timeout_ms``: how long each delivered message stays invisible
    before it is delivered again unless acked or nacked (1 .. 12 h).
    ``max_deliveries``: a message nacked, expired or taken back from a dead consumer after
    this many deliveries (since its last ``dlq_requeue``) goes to the dead-letter queue
    instead (1 .. 1000).
    ``poll_id``: reuse one when sending a dequeue again after its reply was lost: within
    two minutes it is answered with the messages that poll was handed and still holds
    (None: a fresh id per call, which dequeue itself reuses when it resends; a
    ``DequeueReplyLostError`` names it)."""

    namespace: str | None = None
    block_ms: int | None = None
    visibility_timeout_ms: int = DEFAULT_VISIBILITY_TIMEOUT_MS
    max_deliveries: int = DEFAULT_MAX_DELIVERIES
    poll_id: str | None = None


@dataclass
class AckOptions:
    """Options for ack. ``tokens`` maps a seq to the ``delivery_count`` it was received
    with: that ack is refused as stale if the message was delivered again since."""

    namespace: str | None = None
    tokens: dict[int, int] | None = None


@dataclass
class NackOptions:
    """Options for nack; ``tokens`` as for :class:`AckOptions`."""

    namespace: str | None = None
    tokens: dict[int, int] | None = None


@dataclass
class DlqListOptions:
    """Options for dlq_list: at most ``limit`` dead letters (1 .. 1000), oldest first."""

    namespace: str | None = None
    limit: int = 100


@dataclass
class DlqRequeueOptions:
    """Options for dlq_requeue."""

    namespace: str | None = None


@dataclass
class PeekOptions:
    """Options for peek."""

    namespace: str | None = None


__all__ = [
    "DEFAULT_MAX_DELIVERIES",
    "DEFAULT_VISIBILITY_TIMEOUT_MS",
    "AckOptions",
    "DequeueOptions",
    "DequeueResult",
    "DlqListOptions",
    "DlqRequeueOptions",
    "EnqueueOptions",
    "Message",
    "NackOptions",
    "PeekOptions",
]
