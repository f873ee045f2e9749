"""``client.queue``: flo's queue API with at-least-once delivery.

flo-python 0.1.2's queue is at-most-once (dequeue acknowledges as it hands out). Here,
with flo's signatures and result types, a dequeued message is *delivered*: invisible to
other consumers until it is acked (removed), nacked (ready again at once) or its
visibility timeout passes (ready again) — or until its consumer's process is gone, which
Redis tells through owner liveness (:mod:`flo_redis._session.liveness`) within about a second.
Each delivery raises the message's ``delivery_count``, which is also its fencing token
and only grows, across dead-lettering and requeues too; past ``max_deliveries`` deliveries
(counted since its last requeue) a message goes to the dead-letter queue, where
``dlq_list`` shows it and ``dlq_requeue`` gives it back. Priorities are strict (0 first,
255 last), FIFO within one. Every transition is one script (``lua/queue_*.lua``) on the
queue's single hash slot; a blocking dequeue sleeps on the queue's wake channel, not on a
timer.

Ack and nack are answered for the client that dequeued the message (its owner id): a
message since delivered again, or never delivered to this client, is refused as stale
(:class:`ConflictError`) and nothing changes. Dead consumers' messages are taken back by
the dequeues of the queue's other consumers (every 250 ms while messages are out), so a
queue nobody dequeues from keeps them until someone does.

The scripts' arguments are checked, and their replies read, by the I/O-free builders of
:mod:`flo_redis.queue.requests`; this module sends.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import math
import uuid
from collections.abc import Mapping, Sequence

from flo_redis._session.reclaim import RECLAIM_BATCH, ReclaimResult, sweep
from flo_redis._session.session import Session
from flo_redis._session.wake import Attempt, long_poll
from flo_redis._wire import runner
from flo_redis._wire.aside import scope_of, warn_set_aside
from flo_redis._wire.checks import (
    check_bytes,
    check_count,
    check_options,
    check_priority,
    validate_block_ms,
)
from flo_redis._wire.codec import pack
from flo_redis._wire.gateway import (
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
from flo_redis._wire.keys import QueueKeys, check_name, queue_keys
from flo_redis._wire.lru import Lru
from flo_redis._wire.queue_replies import PerSeq
from flo_redis.durability import DurabilityLike
from flo_redis.errors import (
    DequeueReplyLostError,
    is_connection_error,
)
from flo_redis.queue.requests import (
    check_status,
    listed,
    per_seq,
    raise_report_refusals,
    raise_requeue_refusals,
    reclaim_refused,
    refusals,
    seqs_arg,
    tokens_arg,
)
from flo_redis.retry import Backoff, is_refused_unrun
from flo_redis.types.queue import (
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

__all__ = ["QueueOperations"]

log = logging.getLogger("flo_redis.queue")

MAX_COUNT = 1000
"""Most messages one dequeue, peek, ack, nack or requeue script call handles."""
MAX_VISIBILITY_MS = 12 * 3600 * 1000
MAX_DELIVERIES = 1000
RESEND_AT_MOST_S = 60.0
"""A dequeue whose reply was lost is sent again (same poll id) until Redis answers, for
as long as its deliveries can still be handed over — their visibility timeout — but at
most this long: half the two minutes a poll id is remembered (``lib/polls.lua``), so a
caller given :class:`DequeueReplyLostError` still has a minute to ask with its poll id."""
_RESEND_PAUSE_S = (0.05, 0.5)
"""The jittered pause before each resend: first ceiling, doubling to the last."""
_UNREACHED_SENDS = 3
"""Sends of a dequeue that never reached Redis (nothing could have been handed out)
before the error is raised as it is."""
RECLAIM_EVERY_S = 0.25
"""How often a client's dequeues look for gone consumers while messages are out."""


class QueueOperations:
    """flo's ``client.queue``: enqueue, dequeue, ack, nack, dlq_list, dlq_requeue, peek."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._reclaim_due: Lru[str, float] = Lru()  # queue tag -> when to look again

    def _keys(self, queue: str, namespace: str | None) -> QueueKeys:
        return queue_keys(self._session.get_namespace(namespace), queue)

    async def enqueue(
        self,
        queue: str,
        payload: bytes,
        options: EnqueueOptions | None = None,
        *,
        durability: DurabilityLike | None = None,
    ) -> int:
        """Add ``payload`` to ``queue``; returns its sequence number. ``priority`` 0-255,
        lower is taken first; FIFO within one priority. Wakes blocked dequeues.
        ``durability``: this write's level, else the client's."""
        opts = check_options(options, EnqueueOptions)
        keys = self._keys(queue, opts.namespace)
        priority = check_priority(opts.priority)
        data = check_bytes("payload", payload, self._session.max_payload_bytes)
        reply = await QUEUE_ENQUEUE(self._session, keys, [priority, data], durability=durability)
        check_status(reply.status, "enqueue")
        return reply.value

    async def dequeue(
        self, queue: str, count: int, options: DequeueOptions | None = None
    ) -> DequeueResult:
        """Deliver up to ``count`` messages (1..1000), lowest priority first, waiting up
        to ``block_ms`` for the first one (None or 0: answer now). Each stays invisible to
        other consumers for ``visibility_timeout_ms`` unless acked or nacked first.

        A dequeue whose connection drops is sent again under the same poll id until Redis
        answers — the replay hands over what a lost reply carried, as that delivery — for
        up to the visibility timeout (at most :data:`RESEND_AT_MOST_S`); then it raises
        :class:`DequeueReplyLostError`, naming the poll id."""
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
        args: list[runner.Arg] = [self._session.owner_id, count, visibility, limit, poll_id]

        # Liveness first (the dequeue itself would hold it): a user refused it is refused
        # before the reclaim's side job writes anything.
        await self._session.liveness.hold(keys.tag)

        async def attempt() -> Attempt[Message]:
            until_reclaim_s = await self._reclaim_if_due_or_later(keys)
            messages, next_deadline_ms = await self._take(keys, args, poll_id, visibility)
            if next_deadline_ms < 0:
                return Attempt(messages)
            # Messages are out: one may come back by its deadline, or from a consumer
            # found gone.
            return Attempt(messages, min(next_deadline_ms, math.ceil(until_reclaim_s * 1000)))

        return DequeueResult(await long_poll(self._session.waker, [keys.wake], block_ms, attempt))

    async def ack(
        self,
        queue: str,
        seqs: list[int],
        options: AckOptions | None = None,
        *,
        durability: DurabilityLike | None = None,
    ) -> None:
        """Remove delivered messages for good. Acking a message acked before changes
        nothing; one not delivered to this client now (or delivered again since the
        token in ``options.tokens``) is refused with :class:`ConflictError` after the
        others took effect; a seq never handed out is :class:`NotFoundError`."""
        opts = check_options(options, AckOptions)
        await self._report(QUEUE_ACK, "ack", queue, seqs, opts.tokens, opts.namespace, durability)

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
        return DequeueResult(listed(await QUEUE_DLQ_LIST(self._session, keys, [limit])))

    async def dlq_requeue(
        self, queue: str, seqs: list[int], options: DlqRequeueOptions | None = None
    ) -> None:
        """Move dead letters back to the queue with a fresh allowance of
        ``max_deliveries``, in their priority's FIFO place. ``delivery_count`` (the
        token) goes on from where it was, so a report from a delivery before the dead
        letter stays refused. A seq that is not a dead letter is :class:`NotFoundError`
        (raised after the others were requeued)."""
        opts = check_options(options, DlqRequeueOptions)
        if not seqs:
            return
        keys = self._keys(queue, opts.namespace)
        wanted = seqs_arg(seqs, queue)
        refused: builtins.list[tuple[int, int]] = []
        for i in range(0, len(wanted), MAX_COUNT):
            chunk = wanted[i : i + MAX_COUNT]
            reply = await QUEUE_DLQ_REQUEUE(self._session, keys, [pack(chunk)])
            refused += refusals(chunk, per_seq(reply, chunk))
        if refused:
            raise_requeue_refusals(keys, refused)

    async def peek(
        self, queue: str, count: int, options: PeekOptions | None = None
    ) -> DequeueResult:
        """Up to ``count`` ready messages in delivery order, without taking them."""
        opts = check_options(options, PeekOptions)
        keys = self._keys(queue, opts.namespace)
        check_count("count", count, 1, MAX_COUNT)
        return DequeueResult(listed(await QUEUE_PEEK(self._session, keys, [count])))

    # --- beyond flo ----------------------------------------------------------------

    async def reclaim_gone_owners(self, queue: str, namespace: str | None = None) -> ReclaimResult:
        """Take back the messages of consumers whose process is gone (absent from their
        liveness channel for the client's ``liveness_grace_ms``); suspects are marked.
        Dequeues do this themselves; this is for an operator or a test."""
        keys = self._keys(queue, namespace)
        args: builtins.list[runner.Arg] = [
            self._session.settings.liveness_grace_ms,
            RECLAIM_BATCH,
        ]
        return await sweep(self._session, QUEUE_RECLAIM, keys, args, reclaim_refused)

    # --- internals -----------------------------------------------------------------

    async def _reclaim_if_due_or_later(self, keys: QueueKeys) -> float:
        """:meth:`_reclaim_if_due`, put off (to its next turn) when the connection drops:
        a dequeue does not fail for its side job; its own send is resent (:meth:`_take`)."""
        try:
            return await self._reclaim_if_due(keys)
        except Exception as exc:
            if not (is_connection_error(exc) or is_refused_unrun(exc)):
                raise
            log.info("dequeue from %r: reclaim put off (%s)", keys.queue, exc)
            return RECLAIM_EVERY_S

    async def _reclaim_if_due(self, keys: QueueKeys) -> float:
        """Look for gone consumers if this client has not for RECLAIM_EVERY_S (sooner
        when a suspect's grace ends); returns the seconds until the next look is due."""
        now = asyncio.get_running_loop().time()
        due = self._reclaim_due.get(keys.tag) or 0.0
        if now < due:
            return due - now
        due = now + RECLAIM_EVERY_S
        self._reclaim_due.put(keys.tag, due)
        result = await self.reclaim_gone_owners(keys.queue, keys.namespace)
        if result.more:
            due = now
        elif result.wait_ms >= 0:
            due = min(due, now + result.wait_ms / 1000.0 + 0.005)
        self._reclaim_due.put(keys.tag, due)
        return max(due - now, 0.0)

    async def _take(
        self, keys: QueueKeys, args: Sequence[runner.Arg], poll_id: str, visibility_ms: int
    ) -> tuple[builtins.list[Message], int]:
        """One dequeue: the messages, and the ms until the earliest visibility deadline
        still running (-1: no message is out). A call whose reply was lost (the
        connection dropped, or Redis refused it unrun) is sent again with the same poll
        id until Redis answers, which the script does with what it handed that poll:
        nothing is taken twice or stranded. It gives up (:class:`DequeueReplyLostError`)
        once the deliveries it may have made would have timed out anyway, or after
        :data:`RESEND_AT_MOST_S`."""
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + min(visibility_ms / 1000.0, RESEND_AT_MOST_S)
        pause = Backoff(*_RESEND_PAUSE_S)
        sends = 0
        reached = False  # a send may have run: its reply is what may be lost
        while True:
            sends += 1
            try:
                reply = await QUEUE_DEQUEUE(self._session, keys, args)  # holds liveness first
                break
            except Exception as exc:
                if not (is_connection_error(exc) or is_refused_unrun(exc)):
                    raise
                reached = reached or not _never_sent(exc)
                if not reached and sends >= _UNREACHED_SENDS:
                    raise  # Redis was never reached: nothing was handed out, nothing lost
                left = give_up_at - loop.time()
                if left <= 0:
                    raise _reply_lost(keys.queue, poll_id, visibility_ms, sends) from exc
                if sends == 1:
                    log.info("dequeue from %r: no reply (%s); asking again", keys.queue, exc)
                await asyncio.sleep(min(pause.next(), left))  # the last send at give_up_at
        if sends > 1:
            log.info("dequeue from %r: answered after %d sends", keys.queue, sends)
        check_status(reply.status, "dequeue")
        if reply.aside:
            warn_set_aside(scope_of(keys), reply.aside)
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
        durability: DurabilityLike | None = None,
    ) -> None:
        if not seqs:
            return  # as flo: nothing to send
        keys = self._keys(queue, namespace)
        wanted = seqs_arg(seqs, queue)
        fences = tokens_arg(wanted, tokens)
        refused: builtins.list[tuple[int, int]] = []
        for i in range(0, len(wanted), MAX_COUNT):
            chunk = wanted[i : i + MAX_COUNT]
            args: list[runner.Arg] = [
                self._session.owner_id,
                pack(chunk),
                pack(fences[i : i + MAX_COUNT]),
            ]
            reply = await script(self._session, keys, args, durability=durability)
            refused += refusals(chunk, per_seq(reply, chunk))
        if refused:
            raise_report_refusals(keys, verb, refused)


def _never_sent(exc: BaseException) -> bool:
    """Whether a failed call never reached Redis: no connection could be made (redis-py
    says "Error 111 connecting to ...", "Timeout connecting to server") or the client's
    liveness, held before any send, could not be. Such a call ran nothing."""
    seen: BaseException | None = exc
    while seen is not None:
        text = str(seen)
        if "connecting to" in text or "liveness subscription failed" in text:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _reply_lost(queue: str, poll_id: str, visibility_ms: int, sends: int) -> Exception:
    said = (
        f"dequeue from queue {queue!r}: Redis did not answer ({sends} sends of poll id "
        f"{poll_id!r}); messages it may have handed out stay delivered to this client "
    )
    if visibility_ms / 1000.0 <= RESEND_AT_MOST_S:
        then = (
            f"until their visibility timeout ({visibility_ms} ms), which runs out about "
            "now: they come back to the next dequeue, that delivery counted"
        )
    else:
        then = (
            f"and come back after their visibility timeout ({visibility_ms} ms), that "
            "delivery counted; to get them now, dequeue again within a minute with "
            f"DequeueOptions(poll_id={poll_id!r})"
        )
    return DequeueReplyLostError(
        f"{said}{then}; check that Redis is reachable", poll_id, visibility_ms
    )
