"""Reporting runs, as plain functions over a :class:`Session`: accept, touch, complete,
complete many, fail and release, and the worker counters they move. ``client.worker``
(:mod:`flo_redis.actions.workers`) checks its caller's arguments and calls these; an
:class:`~flo_redis.ActionWorker` calls them with its own runs.

Every report is one Lua script (``lua/run_*.lua``), fenced by the run's token: a report
from a holder whose lease was taken back is refused and changes nothing, and an
identical resend of a report that took effect is answered as success.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from flo_redis._session.session import Session
from flo_redis._wire.aside import SetAside, scope_of, warn_set_aside
from flo_redis._wire.checks import (
    check_bytes,
    check_count,
    check_text,
    token_arg,
)
from flo_redis._wire.codec import pack
from flo_redis._wire.gateway import (
    RUN_ACCEPT,
    RUN_COMPLETE,
    RUN_COMPLETE_MANY,
    RUN_FAIL,
    RUN_RELEASE,
    RUN_TOUCH,
    WORKER_TALLY,
)
from flo_redis._wire.keys import (
    MAX_NAME_SIZE,
    ActionKeys,
    action_keys,
    action_of_run,
    check_name,
    namespace_keys,
)
from flo_redis._wire.refusals import not_registered, raise_run_refusal
from flo_redis._wire.replies import FailReported, Reported
from flo_redis._wire.runner import Arg
from flo_redis._wire.status import Status, refusal
from flo_redis.durability import DurabilityLike
from flo_redis.errors import ServerError, ValidationError, ValueTooLargeError, server_error
from flo_redis.types import (
    Ran,
    Reason,
    RunStatus,
    StatusCode,
)

MAX_TOUCH_EXTEND_MS = 3_600_000
COMPLETE_BATCH = 1000  # runs per run_complete_many call
ACCEPT_BATCH = 1000  # runs per run_accept call
# Counter changes a tally may carry (each way): far beyond any real batch.
MAX_TALLY = 2**32 - 1


def _out_of_range(message: str) -> ServerError:
    return server_error(StatusCode.BAD_REQUEST, Reason.OUT_OF_RANGE, message, Ran.UNKNOWN)


@dataclass(frozen=True, slots=True)
class CompleteItem:
    """One complete in a :meth:`WorkerOperations.complete_many` batch."""

    task_id: str
    result: bytes
    outcome: str = "success"
    token: int | None = None


class OwnComplete(Protocol):
    """A worker's own complete of a run it claimed: what a :class:`CompleteItem` says,
    read from the worker's own record of the run (no item is made per run)."""

    @property
    def task_id(self) -> str: ...

    @property
    def result(self) -> bytes: ...

    @property
    def outcome(self) -> str: ...

    @property
    def token(self) -> int | None: ...


def run_keys(session: Session, action_name: str, task_id: str, namespace: str | None) -> ActionKeys:
    """The keys of ``action_name``; :class:`NotFoundError` when ``task_id`` is a run of
    another action."""
    keys = action_keys(session.get_namespace(namespace), action_name)
    if action_of_run(task_id) != action_name:
        raise refusal(
            Status.NOT_FOUND,
            f"run {task_id!r} not found in action {action_name!r}: it belongs to another action",
        )
    return keys


def check_report(reply: Reported, keys: ActionKeys, run_id: str, worker_id: str, what: str) -> None:
    """Raise the typed refusal of a report (``what``: accept, touch, complete, ...)."""
    status = reply.status
    if status == Status.STALE:
        state = RunStatus(reply.run_status).name
        raise refusal(
            status,
            f"{what} of run {run_id!r} by worker {worker_id!r} refused: the run is "
            f"{state} and this worker's lease is no longer current (taken back, or "
            "finished); drop the report",
        )
    raise_run_refusal(status, keys, run_id)


def _answers(
    statuses: Sequence[int],
    details: Sequence[int],
    keys: ActionKeys,
    run_ids: Sequence[str],
    worker_id: str,
    what: str,
) -> list[ServerError | None]:
    """Each item's answer from its status: ``None`` (OK) or its refusal."""
    answers: list[ServerError | None] = []
    for run_id, status, detail in zip(run_ids, statuses, details, strict=True):
        try:
            check_report(Reported(status, False, detail, -1), keys, run_id, worker_id, what)
        except ServerError as exc:
            answers.append(exc)
        else:
            answers.append(None)
    return answers


async def accept(
    session: Session, worker_id: str, keys: ActionKeys, packed: Sequence[str | int]
) -> list[ServerError | None]:
    """Accept offered runs, ``packed`` the run id and token of each in turn, as their
    hand-off messages named them, one call per :data:`ACCEPT_BATCH`; each answered on
    its own: ``None`` where the run is the caller's, else the refusal."""
    replies: list[ServerError | None] = []
    for start in range(0, len(packed), 2 * ACCEPT_BATCH):
        chunk = packed[start : start + 2 * ACCEPT_BATCH]
        reply = await RUN_ACCEPT(session, keys, [pack(chunk)])
        if reply.status != Status.OK:
            raise _out_of_range(f"accept: at most {ACCEPT_BATCH} runs per call")
        if reply.statuses.count(Status.OK) == len(chunk) // 2:  # the common case
            replies += [None] * (len(chunk) // 2)
            continue
        run_ids = [str(chunk[at]) for at in range(0, len(chunk), 2)]
        replies += _answers(reply.statuses, reply.details, keys, run_ids, worker_id, "accept")
    return replies


async def touch(
    session: Session,
    worker_id: str,
    action_name: str,
    task_id: str,
    token: int | None,
    extend_ms: int,
    namespace: str | None = None,
) -> None:
    """Extend the run's lease to ``extend_ms`` from now (at most one hour), for its
    current holder only: :class:`ConflictError` (``STALE_REPORT``) otherwise."""
    check_name("worker id", worker_id)
    check_count(
        "extend_ms",
        extend_ms,
        1,
        MAX_TOUCH_EXTEND_MS,
        fix="one hour at most; touch again later to hold a run longer",
        error=_out_of_range,
    )
    keys = run_keys(session, action_name, task_id, namespace)
    reply = await RUN_TOUCH(session, keys, [task_id, token_arg(token), worker_id, extend_ms])
    check_report(reply, keys, task_id, worker_id, "touch")


async def complete(
    session: Session,
    worker_id: str,
    action_name: str,
    task_id: str,
    result: bytes,
    token: int | None,
    outcome: str,
    namespace: str | None = None,
    *,
    durability: DurabilityLike | None = None,
) -> None:
    """Complete the run with ``result``, for its current holder only; the worker's
    counters move unless it was an identical resend. ``durability``: the write's level."""
    check_name("worker id", worker_id)
    check_text("outcome", outcome, limit=MAX_NAME_SIZE)
    data = check_bytes("result", result, session.max_payload_bytes)
    keys = run_keys(session, action_name, task_id, namespace)
    argv: list[Arg] = [task_id, token_arg(token), worker_id, data, outcome]
    reply = await RUN_COMPLETE(session, keys, argv, durability=durability)
    if reply.status == Status.TOO_LARGE:
        raise ValueTooLargeError(
            f"result is {len(data)} bytes; action {action_name!r} accepts at most {reply.limit}"
        )
    check_report(reply, keys, task_id, worker_id, "complete")
    if not reply.duplicate:
        await tally(session, worker_id, keys.namespace, -1, 1, 0)


def _pack_completes(
    session: Session,
    action_name: str,
    items: Sequence[CompleteItem] | Sequence[OwnComplete],
    namespace: str | None,
    claimed: bool,
) -> tuple[list[str | int | bytes], dict[int, ServerError]]:
    """The flat ARGV of ``items`` (run id, token, result, outcome of each in turn: one
    array to decode in the script) and the refusals of those never sent (a result over
    the client's limit, answered on its own; its neighbours go ahead)."""
    limit = session.max_payload_bytes
    packed: list[str | int | bytes] = []
    early: dict[int, ServerError] = {}
    for index, item in enumerate(items):
        if claimed:  # a worker's own plain complete: nothing to check
            result, token = item.result, item.token
            if (
                item.outcome == "success"
                and type(result) is bytes
                and len(result) <= limit
                and type(token) is int
            ):
                # The token as the int it is: the scripts read a token with tonumber.
                packed += (item.task_id, token, result, "success")
                continue
            item = CompleteItem(item.task_id, result, item.outcome, item.token)
        if not isinstance(item, CompleteItem):
            raise ValidationError(f"items[{index}] must be a CompleteItem")
        run_keys(session, action_name, item.task_id, namespace)
        check_text(f"items[{index}].outcome", item.outcome, limit=MAX_NAME_SIZE)
        try:
            data = check_bytes("result", item.result, limit)
        except ValueTooLargeError as exc:
            early[index] = refusal(Status.TOO_LARGE, f"result of {item.task_id!r}: {exc}")
            continue
        packed += (item.task_id, token_arg(item.token), data, item.outcome)
    return packed, early


async def complete_many(
    session: Session,
    worker_id: str,
    action_name: str,
    items: Sequence[CompleteItem] | Sequence[OwnComplete],
    namespace: str | None = None,
    *,
    claimed: bool = False,
    durability: DurabilityLike | None = None,
) -> tuple[list[ServerError | None], int]:
    """Complete several runs of one action in one call per :data:`COMPLETE_BATCH`, each
    under :func:`complete`'s rules and answered on its own (``None``: it took effect, or
    was an identical resend; else its refusal), and how many took effect now (the
    caller moves the worker's counters). ``claimed``: the items are a worker's own,
    their run ids and tokens as its claims gave them, so only results and outcomes that
    are not a plain default need checking. ``durability``: each call's level."""
    keys = action_keys(session.get_namespace(namespace), action_name)
    packed, early = _pack_completes(session, action_name, items, namespace, claimed)
    replies: list[ServerError | None] = []
    applied = 0
    for start in range(0, len(packed), 4 * COMPLETE_BATCH):
        chunk = packed[start : start + 4 * COMPLETE_BATCH]
        n = len(chunk) // 4
        reply = await RUN_COMPLETE_MANY(
            session, keys, [worker_id, pack(chunk)], durability=durability
        )
        if reply.status == Status.NO_ACTION:
            raise not_registered(keys)
        statuses = reply.statuses
        if statuses.count(Status.OK) == n:  # the common case: all accepted
            applied += n - reply.duplicates.count(1)
            replies += [None] * n
            continue
        for at, status, duplicate, detail in zip(
            range(0, len(chunk), 4), statuses, reply.duplicates, reply.details, strict=True
        ):
            if status == Status.OK:
                applied += 0 if duplicate else 1
                replies.append(None)
            elif status == Status.TOO_LARGE:
                sent = chunk[at + 2]
                size = len(sent) if isinstance(sent, bytes) else 0
                replies.append(
                    refusal(
                        status,
                        f"result of {chunk[at]!r} is {size} bytes; action "
                        f"{action_name!r} accepts at most {detail} (raise the "
                        "action's max_payload_bytes or store large results elsewhere and "
                        "return a reference)",
                    )
                )
            else:
                replies += _answers(
                    [status], [detail], keys, [str(chunk[at])], worker_id, "complete"
                )
    if not early:
        return replies, applied
    answers = iter(replies)
    return [early[i] if i in early else next(answers) for i in range(len(items))], applied


async def fail(
    session: Session,
    worker_id: str,
    action_name: str,
    task_id: str,
    error_message: str,
    *,
    retry: bool,
    traceback: str | None,
    token: int | None,
    namespace: str | None = None,
    durability: DurabilityLike | None = None,
) -> FailReported:
    """Fail the run: with ``retry`` and attempts left it runs again (after the action's
    backoff), else it ends FAILED, kept with its error; :func:`complete`'s holder and
    resend rules. What comes next: the run's status after, PENDING (another attempt,
    in ``retry_in_ms``) or FAILED, and its attempts."""
    check_name("worker id", worker_id)
    check_text("error_message", error_message, limit=session.max_payload_bytes)
    check_text("traceback", traceback, optional=True, limit=session.max_payload_bytes)
    keys = run_keys(session, action_name, task_id, namespace)
    argv: list[Arg] = [
        task_id,
        token_arg(token),
        worker_id,
        error_message,
        1 if retry else 0,
        traceback or "",
    ]
    reply = await RUN_FAIL(session, keys, argv, durability=durability)
    check_report(reply, keys, task_id, worker_id, "fail")
    if not reply.duplicate:
        await tally(session, worker_id, keys.namespace, -1, 0, 1)
    return reply


async def release(
    session: Session,
    worker_id: str,
    action_name: str,
    task_id: str,
    token: int | None,
    namespace: str | None = None,
    *,
    delay_ms: int = 0,
) -> None:
    """Give a held run back to its queue as it was, not counted as an attempt (after
    ``delay_ms``, with its flow key's runs: RateLimited); refused with
    :class:`ConflictError` (``STALE_REPORT``) if the caller no longer holds it."""
    check_name("worker id", worker_id)
    fence = token_arg(token)
    delay = check_count("delay_ms", delay_ms, 0, 86_400_000)
    keys = run_keys(session, action_name, task_id, namespace)
    reply = await RUN_RELEASE(session, keys, [task_id, fence, worker_id, delay])
    check_report(reply, keys, task_id, worker_id, "release")


def check_tally(load: int, completed: int, failed: int) -> None:
    for what, value in (("load", load), ("completed", completed), ("failed", failed)):
        check_count(what, value, -MAX_TALLY, MAX_TALLY)


async def tally(
    session: Session, worker_id: str, namespace: str, load: int, completed: int, failed: int
) -> None:
    """Add to a worker's counters (load never below zero); a worker record that does
    not decode is set aside (and logged)."""
    ns = namespace_keys(namespace)
    reply = await WORKER_TALLY(session, ns, [worker_id, load, completed, failed])
    if reply.status == Status.BAD_RECORD:
        reason = "its stored record does not decode"
        warn_set_aside(scope_of(ns), [SetAside("worker", worker_id, reason)])


__all__ = [
    "COMPLETE_BATCH",
    "CompleteItem",
    "OwnComplete",
    "accept",
    "complete",
    "complete_many",
    "fail",
    "release",
    "run_keys",
    "tally",
    "touch",
]
