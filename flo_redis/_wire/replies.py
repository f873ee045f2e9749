"""The scripts' replies, read once: one frozen dataclass and one parser per reply shape.

Every script answers a flat ``{status, ...}`` array (its header's ``Returns`` line). The
parsers here are the only code that reads such an array by position; everything above
the gateway (:mod:`flo_redis._wire.gateway`) sees named fields. A parser takes the raw reply
and the script's first key object (some rows carry its action, stream or partition).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, NamedTuple, TypeVar

import msgpack

from flo_redis._wire.aside import SetAside
from flo_redis._wire.codec import text
from flo_redis._wire.status import Status
from flo_redis.types import StreamID, TaskAssignment

Reply = TypeVar("Reply")

_READ: dict[str, Callable[[Any], object]] = {
    "int": int,
    "bool": lambda v: bool(int(v)),
    "str": lambda v: text(v) or "",
    "bytes": lambda v: bytes(v or b""),
    "StreamID": StreamID.from_redis,
}


def fixed(cls: type[Reply]) -> Callable[[Any, object], Reply]:
    """The parser of a fixed-shape reply ``{status, v1, v2, ...}``: ``cls`` (a dataclass
    of int, bool, str and bytes fields, in reply order) with each value read as its
    field's type (a bool from 0/1, a str from bytes). A shorter reply, such as a
    refusal's bare ``{status}``, leaves the fields it lacks their defaults. A StreamID
    field reads ``<ms>-<seq>``. Fields of another type (what a call set aside: :func:`with_aside`)
    come last and keep their defaults."""
    read = tuple(
        _READ[str(f.type)]
        for f in fields(cls)  # type: ignore[arg-type]
        if str(f.type) in _READ
    )

    def parse(reply: Any, _keys: object) -> Reply:
        return cls(*(r(v) for r, v in zip(read, reply, strict=False)))  # short: defaults

    return parse


def row_starts(reply: Any, at: int, width: int) -> range:
    """Where each of the ``n`` rows of ``width`` values starts, in a reply holding ``n``
    at ``reply[at]`` and the rows right after it."""
    start = at + 1
    return range(start, start + width * int(reply[at]), width)


def set_aside(values: Any) -> tuple[SetAside, ...]:
    """``(kind, field, why) * m``, the tail of a reply that lists what it set aside."""
    return tuple(
        SetAside(text(values[i]) or "", text(values[i + 1]) or "", text(values[i + 2]) or "")
        for i in range(0, len(values) - 2, 3)
    )


class Claimed(NamedTuple):
    """A run handed to a worker by one claim. Immutable like the frozen dataclasses
    here, but a named tuple: a worker reads one per run it takes, and a tuple is made
    in a quarter of the time a frozen dataclass's ``__init__`` takes."""

    action: str
    run_id: str
    token: int
    attempt: int
    created_at_ms: int
    payload: bytes
    ready_at_ms: int = 0
    """Server time the run became ready to claim (its created, due or retry time)."""
    claimed_at_ms: int = 0
    """Server time the run was handed out; minus ``ready_at_ms``, its pickup latency."""
    trace: bytes = b""
    """The producer's packed trace context (:mod:`flo_redis.ops.tracing`), or empty."""

    def assignment(self) -> TaskAssignment:
        return TaskAssignment(
            task_id=self.run_id,
            task_type=self.action,
            payload=self.payload,
            created_at=self.created_at_ms,
            attempt=self.attempt,
            token=self.token,
        )


@dataclass(frozen=True, slots=True)
class ClaimReply:
    """What one claim script call answered: runs, and when to look again."""

    runs: tuple[Claimed, ...]
    next_due_ms: int  # when a delayed run is due or a lease expires; -1 if never
    registered: bool
    rate_next_ms: int = -1  # runs wait for the rate limit: when the next start is allowed
    aside: tuple[SetAside, ...] = ()  # records this claim set aside (quarantine)


def claim_reply(reply: Any, keys: Any) -> ClaimReply:
    """``{status, next_due_ms, n, (run_id, token, attempt, created_ms, ready_ms,
    claimed_ms, input, trace) * n, rate_next_ms, (kind, field, why) * m}``."""
    if int(reply[0]) != Status.OK:
        return ClaimReply((), -1, False)
    end = 3 + 8 * int(reply[2])
    action = keys.action
    # One run's eight values at a time, unpacked in C (no index arithmetic per field);
    # the numbers are the script's integers and the input and trace its strings, as
    # Redis answers them (bytes and ints already). A Claimed is made by tuple.__new__,
    # in the field order, without the named tuple's Python-level __new__.
    values = iter(reply[3:end])
    runs = tuple(
        [
            _new_claimed(
                Claimed,
                (action, run_id.decode(), token, attempt, created, data, ready, taken, trace),
            )
            for run_id, token, attempt, created, ready, taken, data, trace in zip(
                values, values, values, values, values, values, values, values, strict=True
            )
        ]
    )
    if len(reply) <= end + 1:  # the common case: nothing set aside
        return ClaimReply(runs, int(reply[1]), True, int(reply[end]) if len(reply) > end else -1)
    return ClaimReply(runs, int(reply[1]), True, int(reply[end]), set_aside(reply[end + 1 :]))


_new_claimed = tuple.__new__


@dataclass(frozen=True, slots=True)
class Handed:
    """A message on a poller's hand-off channel (``lua/lib/handoff.lua``): the poll it
    answers, and the run handed to it. ``run`` is None when the message carries no run
    to start: its input was too large to send (the poller's next claim answers with the
    run), or the poller's park was ended for it to look again (``run_id`` empty)."""

    poll_id: str
    run_id: str
    run: Claimed | None


def handed(data: bytes, action: str) -> Handed:
    """``{poll_id, run_id, token, attempt, created_ms, ready_ms, claimed_ms, input,
    trace}`` (input false: not sent), or ``{poll_id}``."""
    fields = msgpack.unpackb(data, raw=True)
    poll_id = fields[0].decode()
    if len(fields) < 8:
        return Handed(poll_id, "", None)
    run_id = fields[1].decode()
    if fields[7] is False:
        return Handed(poll_id, run_id, None)
    # In the field order, by tuple.__new__ as a claim's runs are (nine keywords through
    # the named tuple's own __new__ took most of this function's time).
    run = _new_claimed(
        Claimed,
        (
            action,
            run_id,
            int(fields[2]),  # token
            int(fields[3]),  # attempt
            int(fields[4]),  # created_at_ms
            bytes(fields[7]),  # payload
            int(fields[5]),  # ready_at_ms
            int(fields[6]),  # claimed_at_ms
            bytes(fields[8]),  # trace
        ),
    )
    return Handed(poll_id, run_id, run)


# --- fixed shapes: a status and a few values -----------------------------------------


@dataclass(frozen=True, slots=True)
class Done:
    """``{status}``."""

    status: int


done = fixed(Done)


@dataclass(frozen=True, slots=True)
class Names:
    """``{status, name...}``: e.g. the actions a drained worker serves, the ids of the
    entries a group set aside."""

    status: int
    names: tuple[str, ...]


def names_from(start: int) -> Callable[[Any, object], Names]:
    """The parser of a reply whose names run from ``reply[start]`` to its end."""

    def parse(reply: Any, _keys: object) -> Names:
        return Names(int(reply[0]), tuple(text(n) or "" for n in reply[start:]))

    return parse


names = names_from(1)


@dataclass(frozen=True, slots=True)
class Flag:
    """``{status, flag}``: existed, created, left, reclaimed ... as a bool."""

    status: int
    flag: bool = False


flag = fixed(Flag)


@dataclass(frozen=True, slots=True)
class Number:
    """``{status, n}``: a run status, a partition count, a worker status, a limit."""

    status: int
    value: int = 0


number = fixed(Number)


@dataclass(frozen=True, slots=True)
class Cancelled:
    """``run_cancel``: the run's status before, and a running run's holder and token
    (a refusal answers ``{status}`` or ``{CONFLICT, was}``)."""

    status: int
    was: int = 0
    holder: str = ""
    token: int = 0
    told: bool = False


cancelled = fixed(Cancelled)


@dataclass(frozen=True, slots=True)
class Invoked:
    """``action_invoke``: the run id, or on TOO_LARGE the action's payload limit;
    ``handed``: the new run went straight to a parked poller."""

    status: int
    run_id: str
    limit: int
    handed: bool = False


def invoked(reply: Any, _keys: object) -> Invoked:
    status = int(reply[0])
    if status == Status.TOO_LARGE:  # the limit where the run id would be
        return Invoked(status, "", int(reply[1]))
    if len(reply) > 3:
        return Invoked(status, text(reply[1]) or "", -1, reply[3] == 1)
    return Invoked(status, text(reply[1]) or "" if len(reply) > 1 else "", -1)


@dataclass(frozen=True, slots=True)
class InvokedMany:
    """``action_invoke_many``: the first run sequence; on TOO_LARGE the limit and the
    index of the first oversized input."""

    status: int
    first_seq: int = 0
    index: int = 0


invoked_many = fixed(InvokedMany)


@dataclass(frozen=True, slots=True)
class Reported:
    """A run report (``run_complete``, ``run_fail``, ``run_touch``, ``run_release``):
    whether it was an identical resend, the reply's last value (the run's status; a
    touch's new deadline) and, on TOO_LARGE / OUT_OF_RANGE, the limit passed."""

    status: int
    duplicate: bool
    run_status: int
    limit: int


def reported(reply: Any, _keys: object) -> Reported:
    status = int(reply[0])
    if len(reply) < 2:
        return Reported(status, False, 0, -1)
    if status in (Status.TOO_LARGE, Status.OUT_OF_RANGE):
        return Reported(status, False, int(reply[-1]), int(reply[1]))
    return Reported(status, len(reply) > 2 and bool(int(reply[1])), int(reply[-1]), -1)


@dataclass(frozen=True, slots=True)
class FailReported(Reported):
    """``run_fail``: a :class:`Reported`, and on OK what comes next for the run: the
    attempt that failed, the attempts allowed and the ms until the next attempt (-1:
    none, the run ended)."""

    attempt: int = 0
    max_retries: int = 0
    retry_in_ms: int = -1


def fail_reported(reply: Any, keys: object) -> FailReported:
    """``{status, duplicate, run_status, attempt, max_retries, retry_in_ms}``; a refusal
    (``{status}``, ``{STALE, 0, run_status}``) read as :func:`reported` reads it."""
    if len(reply) < 6:
        base = reported(reply, keys)
        return FailReported(base.status, base.duplicate, base.run_status, base.limit)
    status, duplicate, run_status, attempt, max_retries, retry_in_ms = (int(v) for v in reply)
    return FailReported(status, bool(duplicate), run_status, -1, attempt, max_retries, retry_in_ms)


@dataclass(frozen=True, slots=True)
class ReportedMany:
    """``run_complete_many``: the call's status and, per item in the order sent, its
    status, resend flag (1: an identical resend) and detail (the run's status, or on
    TOO_LARGE the limit)."""

    status: int
    statuses: tuple[int, ...]
    duplicates: tuple[int, ...]
    details: tuple[int, ...]


def reported_many(reply: Any, _keys: object) -> ReportedMany:
    """``{status, (item_status, duplicate, detail) * n}``: each column read in one slice
    (the script's integers, as Redis answers them), no object per item."""
    status = int(reply[0])
    if status != Status.OK:
        return ReportedMany(status, (), (), ())
    body = reply[1:]
    return ReportedMany(status, tuple(body[0::3]), tuple(body[1::3]), tuple(body[2::3]))


def with_aside(cls: type[Reply], width: int) -> Callable[[Any, object], Reply]:
    """The parser of a fixed-shape reply of ``width`` values followed by what the call
    set aside (``(kind, field, why) * m``): ``cls`` has an ``aside`` field last."""
    parse = fixed(cls)

    def parse_aside(reply: Any, keys: object) -> Reply:
        parsed = parse(reply[:width], keys)
        if len(reply) > width:
            parsed = dataclasses.replace(parsed, aside=set_aside(reply[width:]))  # type: ignore[type-var]
        return parsed

    return parse_aside


@dataclass(frozen=True, slots=True)
class Reaped:
    status: int
    ready: int = 0
    next_due_ms: int = -1
    aside: tuple[SetAside, ...] = ()


reaped = with_aside(Reaped, 3)


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """``action_reclaim`` / ``group_reclaim`` / ``slot_reclaim`` / ``queue_reclaim``."""

    status: int
    reclaimed: int = 0
    wait_ms: int = -1
    more: bool = False
    aside: tuple[SetAside, ...] = ()


reclaimed = with_aside(Reclaimed, 4)


@dataclass(frozen=True, slots=True)
class SlotTaken:
    """``slot_acquire``: slot 0 when every slot is held."""

    status: int
    slot: int = 0
    token: int = 0
    deadline_ms: int = 0
    aside: tuple[SetAside, ...] = ()


slot_taken = with_aside(SlotTaken, 4)
