"""``client.queue``: flo's queue API with at-least-once delivery.

flo-python 0.1.2's queue is at-most-once (dequeue acknowledges as it hands out). Here,
with flo's signatures and result types, a dequeued message is *delivered*: invisible to
other consumers until it is acked (removed), nacked (ready again at once) or its
visibility timeout passes (ready again) — or until its consumer's process is gone, which
Redis tells through owner liveness (:mod:`flo_redis.liveness`) within about a second.
Each delivery raises the message's ``delivery_count``, which is also its fencing token;
past ``max_deliveries`` a message goes to the dead-letter queue, where ``dlq_list`` shows
it and ``dlq_requeue`` gives it back. Priorities are strict (0 first, 255 last), FIFO
within one. Every transition is one script (``lua/queue_*.lua``) on the queue's single
hash slot; a blocking dequeue sleeps on the queue's wake channel, not on a timer.

Ack and nack are answered for the client that dequeued the message (its owner id): a
message since delivered again, or never delivered to this client, is refused as stale
(:class:`ConflictError`) and nothing changes. Dead consumers' messages are taken back by
the dequeues of the queue's other consumers (every 250 ms while messages are out), so a
queue nobody dequeues from keeps them until someone does.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import math
import uuid
from collections.abc import Mapping, Sequence

from . import _scripts
from ._checks import check_bytes, check_count, check_int, check_options, check_priority
from ._gateway import (
    QUEUE_ACK,
    QUEUE_DEQUEUE,
    QUEUE_DLQ_LIST,
    QUEUE_DLQ_REQUEUE,
    QUEUE_ENQUEUE,
    QUEUE_NACK,
    QUEUE_PEEK,
    QUEUE_RECLAIM,
    Script,
)
from ._queue_replies import Listed, PerSeq
from ._queue_types import (
    AckOptions,
    DequeueOptions,
    DequeueResult,
    DlqListOptions,
    DlqRequeueOptions,
    EnqueueOptions,
    Message,
    NackOptions,
    PeekOptions,
)
from ._status import Status, refusal
from ._wake import Attempt, long_poll
from .codec import pack
from .errors import ValidationError, is_connection_error, validate_block_ms
from .keys import QueueKeys, check_name, queue_keys
from .reclaim import RECLAIM_BATCH, ReclaimResult, sweep
from .session import Session

__all__ = ["QueueOperations"]

log = logging.getLogger("flo_redis.queue")

MAX_COUNT = 1000
"""Most messages one dequeue, peek, ack, nack or requeue script call handles."""
MAX_VISIBILITY_MS = 12 * 3600 * 1000
MAX_DELIVERIES = 1000
MAX_SEQ = 2**45 - 1
"""Sequence numbers stay below 2^45 (they share a sorted-set score with the priority)."""
_LOST_REPLY_PAUSES_S = (0.05, 0.25)
"""Pauses before the second and third send of a dequeue whose reply was lost."""
RECLAIM_EVERY_S = 0.25
"""How often a client's dequeues look for gone consumers while messages are out."""


class QueueOperations:
    """flo's ``client.queue``: enqueue, dequeue, ack, nack, dlq_list, dlq_requeue, peek."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._reclaim_due: dict[str, float] = {}

    def _keys(self, queue: str, namespace: str | None) -> QueueKeys:
        return queue_keys(self._session.get_namespace(namespace), queue)

    async def enqueue(
        self, queue: str, payload: bytes, options: EnqueueOptions | None = None
    ) -> int:
        """Add ``payload`` to ``queue``; returns its sequence number. ``priority`` 0-255,
        lower is taken first; FIFO within one priority. Wakes blocked dequeues."""
        opts = check_options(options, EnqueueOptions)
        keys = self._keys(queue, opts.namespace)
        priority = check_priority(opts.priority)
        data = check_bytes("payload", payload, self._session.max_payload_bytes)
        reply = await QUEUE_ENQUEUE(self._session, keys, [priority, data])
        _check_status(reply.status, "enqueue")
        return reply.value

    async def dequeue(
        self, queue: str, count: int, options: DequeueOptions | None = None
    ) -> DequeueResult:
        """Deliver up to ``count`` messages (1..1000), lowest priority first, waiting up
        to ``block_ms`` for the first one (None or 0: answer now). Each stays invisible to
        other consumers for ``visibility_timeout_ms`` unless acked or nacked first."""
        opts = check_options(options, DequeueOptions)
        keys = self._keys(queue, opts.namespace)
        check_count("count", count, 1, MAX_COUNT)
        block_ms = 0 if opts.block_ms is None else opts.block_ms
        validate_block_ms(block_ms)
        visibility = check_count(
            "visibility_timeout_ms", opts.visibility_timeout_ms, 1, MAX_VISIBILITY_MS
        )
        limit = check_count("max_deliveries", opts.max_deliveries, 1, MAX_DELIVERIES)
        poll_id = uuid.uuid4().hex if opts.poll_id is None else check_name("poll id", opts.poll_id)
        args: list[_scripts.Arg] = [self._session.owner_id, count, visibility, limit, poll_id]

        async def attempt() -> Attempt[Message]:
            until_reclaim_s = await self._reclaim_if_due(keys)
            messages, next_deadline_ms = await self._take(keys, args)
            if next_deadline_ms < 0:
                return Attempt(messages)
            # Messages are out: one may come back by its deadline, or from a consumer
            # found gone.
            return Attempt(messages, min(next_deadline_ms, math.ceil(until_reclaim_s * 1000)))

        return DequeueResult(await long_poll(self._session.waker, [keys.wake], block_ms, attempt))

    async def ack(self, queue: str, seqs: list[int], options: AckOptions | None = None) -> None:
        """Remove delivered messages for good. Acking a message acked before changes
        nothing; one not delivered to this client now (or delivered again since the
        token in ``options.tokens``) is refused with :class:`ConflictError` after the
        others took effect; a seq never handed out is :class:`NotFoundError`."""
        opts = check_options(options, AckOptions)
        await self._report(QUEUE_ACK, "ack", queue, seqs, opts.tokens, opts.namespace)

    async def nack(self, queue: str, seqs: list[int], options: NackOptions | None = None) -> None:
        """Give delivered messages back: each is ready again at once (or dead-lettered
        past its ``max_deliveries``). Refusals as for :meth:`ack`."""
        opts = check_options(options, NackOptions)
        await self._report(QUEUE_NACK, "nack", queue, seqs, opts.tokens, opts.namespace)

    async def dlq_list(self, queue: str, options: DlqListOptions | None = None) -> DequeueResult:
        """The dead letters, oldest first (at most ``options.limit``); changes nothing."""
        opts = check_options(options, DlqListOptions)
        keys = self._keys(queue, opts.namespace)
        limit = check_count("limit", opts.limit, 1, MAX_COUNT)
        return DequeueResult(_listed(await QUEUE_DLQ_LIST(self._session, keys, [limit])))

    async def dlq_requeue(
        self, queue: str, seqs: list[int], options: DlqRequeueOptions | None = None
    ) -> None:
        """Move dead letters back to the queue with a fresh delivery count, in their
        priority's FIFO place. A seq that is not a dead letter is :class:`NotFoundError`
        (raised after the others were requeued)."""
        opts = check_options(options, DlqRequeueOptions)
        if not seqs:
            return
        keys = self._keys(queue, opts.namespace)
        wanted = _seqs_arg(seqs, queue)
        missing: builtins.list[int] = []
        for i in range(0, len(wanted), MAX_COUNT):
            chunk = wanted[i : i + MAX_COUNT]
            reply = _per_seq(await QUEUE_DLQ_REQUEUE(self._session, keys, [pack(chunk)]), chunk)
            missing += [s for s, st in zip(chunk, reply, strict=True) if st != Status.OK]
        if missing:
            raise refusal(
                Status.NOT_FOUND,
                f"seq(s) {_few(missing)} of queue {queue!r} are not dead letters (never "
                "handed out, acked, or already requeued); list them with dlq_list",
            )

    async def peek(
        self, queue: str, count: int, options: PeekOptions | None = None
    ) -> DequeueResult:
        """Up to ``count`` ready messages in delivery order, without taking them."""
        opts = check_options(options, PeekOptions)
        keys = self._keys(queue, opts.namespace)
        check_count("count", count, 1, MAX_COUNT)
        return DequeueResult(_listed(await QUEUE_PEEK(self._session, keys, [count])))

    # --- beyond flo ----------------------------------------------------------------

    async def reclaim_gone_owners(self, queue: str, namespace: str | None = None) -> ReclaimResult:
        """Take back the messages of consumers whose process is gone (absent from their
        liveness channel for the client's ``liveness_grace_ms``); suspects are marked.
        Dequeues do this themselves; this is for an operator or a test."""
        keys = self._keys(queue, namespace)
        args: builtins.list[_scripts.Arg] = [
            self._session.settings.liveness_grace_ms,
            RECLAIM_BATCH,
        ]
        return await sweep(self._session, QUEUE_RECLAIM, keys, args, _reclaim_refused)

    # --- internals -----------------------------------------------------------------

    async def _reclaim_if_due(self, keys: QueueKeys) -> float:
        """Look for gone consumers if this client has not for RECLAIM_EVERY_S (sooner
        when a suspect's grace ends); returns the seconds until the next look is due."""
        now = asyncio.get_running_loop().time()
        due = self._reclaim_due.get(keys.tag, 0.0)
        if now < due:
            return due - now
        due = now + RECLAIM_EVERY_S
        self._reclaim_due[keys.tag] = due
        result = await self.reclaim_gone_owners(keys.queue, keys.namespace)
        if result.more:
            due = now
        elif result.wait_ms >= 0:
            due = min(due, now + result.wait_ms / 1000.0 + 0.005)
        self._reclaim_due[keys.tag] = due
        return max(due - now, 0.0)

    async def _take(
        self, keys: QueueKeys, args: Sequence[_scripts.Arg]
    ) -> tuple[builtins.list[Message], int]:
        """One dequeue: the messages, and the ms until the earliest visibility deadline
        still running (-1: no message is out). A call whose reply was lost
        (the connection dropped) is sent again with the same poll id, which the script
        answers with what it handed that poll: nothing is taken twice or stranded."""
        for pause in (*_LOST_REPLY_PAUSES_S, None):
            try:
                reply = await QUEUE_DEQUEUE(self._session, keys, args)  # holds liveness first
                break
            except Exception as exc:
                if pause is None or not is_connection_error(exc):
                    raise
                log.info("dequeue from %r: reply lost (%s); asking again", keys.queue, exc)
                await asyncio.sleep(pause)
        _check_status(reply.status, "dequeue")
        messages = list(reply.messages)
        if reply.next_deadline_ms < 0:
            return messages, -1
        return messages, max(reply.next_deadline_ms - reply.now_ms, 1)

    async def _report(
        self,
        script: Script[PerSeq],
        verb: str,
        queue: str,
        seqs: Sequence[int],
        tokens: Mapping[int, int] | None,
        namespace: str | None,
    ) -> None:
        if not seqs:
            return  # as flo: nothing to send
        keys = self._keys(queue, namespace)
        wanted = _seqs_arg(seqs, queue)
        fences = _tokens_arg(wanted, tokens)
        stale: builtins.list[int] = []
        unknown: builtins.list[int] = []
        for i in range(0, len(wanted), MAX_COUNT):
            chunk = wanted[i : i + MAX_COUNT]
            args: list[_scripts.Arg] = [
                self._session.owner_id,
                pack(chunk),
                pack(fences[i : i + MAX_COUNT]),
            ]
            for seq, st in zip(
                chunk, _per_seq(await script(self._session, keys, args), chunk), strict=True
            ):
                if st == Status.STALE:
                    stale.append(seq)
                elif st == Status.NOT_FOUND:
                    unknown.append(seq)
        if unknown:
            raise refusal(
                Status.NOT_FOUND,
                f"{verb}: seq(s) {_few(unknown)} of queue {queue!r} not found (never "
                "handed out)",
            )
        if stale:
            raise refusal(
                Status.STALE,
                f"{verb} of seq(s) {_few(stale)} of queue {queue!r} refused: not delivered "
                "to this client now (delivered again since, given back, or never dequeued "
                "here); "
                "those changed nothing",
            )


def _few(seqs: Sequence[int], most: int = 10) -> str:
    """Seqs for an error message: all of a few, the first ``most`` and a count of many."""
    if len(seqs) <= most:
        return str(list(seqs))
    shown = ", ".join(map(str, seqs[:most]))
    return f"[{shown}, ... {len(seqs) - most} more]"


def _reclaim_refused(status: int) -> Exception:
    return refusal(status, "queue reclaim: an argument is out of range")


def _check_status(status: int, what: str) -> None:
    if status != Status.OK:
        raise refusal(status, f"queue {what}: an argument is out of range")


def _listed(reply: Listed) -> builtins.list[Message]:
    _check_status(reply.status, "listing")
    return list(reply.messages)


def _per_seq(reply: PerSeq, sent: Sequence[int]) -> tuple[int, ...]:
    _check_status(reply.status, "report")
    if len(reply.statuses) != len(sent):
        raise refusal(Status.OUT_OF_RANGE, "queue script answered a different number of seqs")
    return reply.statuses


def _seqs_arg(seqs: object, queue: str) -> builtins.list[int]:
    """Validated sequence numbers: a list of ints (ValidationError otherwise); an int no
    message of any queue can have is unknown (NotFoundError), before anything is sent."""
    if isinstance(seqs, str | bytes) or not isinstance(seqs, Sequence):
        raise ValidationError(f"seqs must be a list of int, got {type(seqs).__name__}")
    out = []
    for i, seq in enumerate(seqs):
        check_int(f"seqs[{i}]", seq)
        if not 1 <= seq <= MAX_SEQ:
            raise refusal(
                Status.NOT_FOUND,
                f"seq {seq} of queue {queue!r} not found: sequence numbers start at 1, as "
                "returned by enqueue",
            )
        out.append(seq)
    return out


def _tokens_arg(seqs: Sequence[int], tokens: Mapping[int, int] | None) -> builtins.list[int]:
    if tokens is None:
        return [0] * len(seqs)
    if not isinstance(tokens, Mapping):
        raise ValidationError(f"tokens must map seq to delivery_count, got {tokens!r}")
    out = []
    for seq in seqs:
        token = tokens.get(seq, 0)
        if token != 0:
            check_count(f"tokens[{seq}]", token, 1, MAX_DELIVERIES)
        out.append(token)
    return out
