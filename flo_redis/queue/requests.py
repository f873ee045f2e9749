"""The queue's requests and replies, I/O-free: the checked arguments of its scripts, and
their replies turned into results or the typed refusal, for ``client.queue``
(:mod:`flo_redis.queue.operations`), which only sends.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence

from flo_redis._wire.aside import SetAside, scope_of, warn_set_aside
from flo_redis._wire.checks import check_count, check_int
from flo_redis._wire.keys import QueueKeys
from flo_redis._wire.queue_replies import Listed, PerSeq
from flo_redis._wire.status import Status, refusal
from flo_redis.errors import ValidationError
from flo_redis.types.base import LUA_INT
from flo_redis.types.queue import Message

MAX_SEQ = 2**53 - 1
"""Sequence numbers stay below 2^53, exact in the scripts' numbers (``lua/lib/ids.lua``)."""


def seqs_arg(seqs: object, queue: str) -> builtins.list[int]:
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


def tokens_arg(seqs: Sequence[int], tokens: Mapping[int, int] | None) -> builtins.list[int]:
    """Each seq's fencing token (its delivery count; 0: none given)."""
    if tokens is None:
        return [0] * len(seqs)
    if not isinstance(tokens, Mapping):
        raise ValidationError(f"tokens must map seq to delivery_count, got {tokens!r}")
    out = []
    for seq in seqs:
        token = tokens.get(seq, 0)
        if token != 0:
            check_count(f"tokens[{seq}]", token, 1, LUA_INT)
        out.append(token)
    return out


def check_status(status: int, what: str) -> None:
    if status != Status.OK:
        raise refusal(status, f"queue {what}: an argument is out of range")


def reclaim_refused(status: int) -> Exception:
    return refusal(status, "queue reclaim: an argument is out of range")


def listed(reply: Listed) -> builtins.list[Message]:
    check_status(reply.status, "listing")
    return list(reply.messages)


def per_seq(reply: PerSeq, sent: Sequence[int]) -> tuple[int, ...]:
    """Each sent seq's status, in the order sent."""
    check_status(reply.status, "report")
    if len(reply.statuses) != len(sent):
        raise refusal(Status.OUT_OF_RANGE, "queue script answered a different number of seqs")
    return reply.statuses


def refusals(sent: Sequence[int], statuses: Sequence[int]) -> builtins.list[tuple[int, int]]:
    """The ``(seq, status)`` of each sent seq a script did not take (none, most often)."""
    if statuses.count(Status.OK) == len(statuses):
        return []
    return [(seq, st) for seq, st in zip(sent, statuses, strict=True) if st != Status.OK]


def raise_report_refusals(keys: QueueKeys, verb: str, answered: Sequence[tuple[int, int]]) -> None:
    """Raise for the seqs an ack or nack (``verb``) refused (``answered``: their
    :func:`refusals`), after the others took effect: set aside (BAD_RECORD), never
    handed out (NOT_FOUND), then stale."""
    stale = [seq for seq, st in answered if st == Status.STALE]
    unknown = [seq for seq, st in answered if st == Status.NOT_FOUND]
    raise_set_aside(keys, verb, [seq for seq, st in answered if st == Status.BAD_RECORD])
    if unknown:
        raise refusal(
            Status.NOT_FOUND,
            f"{verb}: seq(s) {few(unknown)} of queue {keys.queue!r} not found (never handed out)",
        )
    if stale:
        raise refusal(
            Status.STALE,
            f"{verb} of seq(s) {few(stale)} of queue {keys.queue!r} refused: not delivered "
            "to this client now (delivered again since, given back, or never dequeued "
            "here); those changed nothing",
        )


def raise_requeue_refusals(keys: QueueKeys, answered: Sequence[tuple[int, int]]) -> None:
    """Raise for the seqs a ``dlq_requeue`` refused, after the others were requeued."""
    missing = [seq for seq, st in answered if st == Status.NOT_FOUND]
    raise_set_aside(keys, "dlq_requeue", [seq for seq, st in answered if st == Status.BAD_RECORD])
    if missing:
        raise refusal(
            Status.NOT_FOUND,
            f"seq(s) {few(missing)} of queue {keys.queue!r} are not dead letters (never "
            "handed out, acked, or already requeued); list them with dlq_list",
        )


def raise_set_aside(keys: QueueKeys, verb: str, seqs: Sequence[int]) -> None:
    """Log and raise for messages a script answered BAD_RECORD: their records did not
    decode, and were set aside into the queue's quarantine (the others took effect)."""
    if not seqs:
        return
    reason = "its stored record does not decode"
    warn_set_aside(scope_of(keys), [SetAside("message", str(s), reason) for s in seqs])
    raise refusal(
        Status.BAD_RECORD,
        f"{verb}: the record(s) of seq(s) {few(seqs)} of queue {keys.queue!r} do not "
        "decode; set aside into the queue's quarantine (flo-redis quarantine list "
        f"--queue {keys.queue} --namespace {keys.namespace})",
    )


def few(seqs: Sequence[int], most: int = 10) -> str:
    """Seqs for an error message: all of a few, the first ``most`` and a count of many."""
    if len(seqs) <= most:
        return str(list(seqs))
    shown = ", ".join(map(str, seqs[:most]))
    return f"[{shown}, ... {len(seqs) - most} more]"
