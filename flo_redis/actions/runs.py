"""Invoke, status and wait as requests and replies, shared by the asyncio client
(``client.action``) and the blocking one (:mod:`flo_redis.sync`): each side only sends.

A request is a script's ARGV (its KEYS come from the gateway), or the hash field to read;
a reply is turned into flo's result classes or the typed error here, once for both
clients.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flo_redis._session.notices import cancel_notice
from flo_redis._wire.checks import (
    check_bytes,
    check_count,
    check_flow_key,
    check_idempotency_key,
    check_labels,
    check_name,
    check_priority,
    stored_int,
)
from flo_redis._wire.codec import BadRecord, pack, tag_labels, text, unpack_record
from flo_redis._wire.keys import ActionKeys, notice_channel, run_id_prefix
from flo_redis._wire.refusals import bad_settings, not_registered, raise_run_refusal
from flo_redis._wire.replies import Cancelled, Invoked
from flo_redis._wire.runner import Arg, RedisConn, redis_errors
from flo_redis._wire.status import Status, refusal
from flo_redis.actions.graph import deps_request
from flo_redis.errors import BadRecordError, ValueTooLargeError, WaitTimeoutError
from flo_redis.types import ActionInvokeOptions, ActionInvokeResult, ActionRunStatus, RunStatus
from flo_redis.types.base import LUA_INT

# A run in one of these states changes no more (unless re-queued).
FINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.CANCELLED})
DEFAULT_WAIT_MS = 30_000


def invoke_request(
    keys: ActionKeys,
    input_data: object,
    opts: ActionInvokeOptions,
    limit: int,
    trace: bytes,
    deps: bytes | None = None,
) -> tuple[list[Arg], int]:
    """The ARGV of ``action_invoke`` and the input's size; the input is checked before
    anything is sent. ``trace`` is the packed trace context to store (b"": none);
    ``deps`` the packed parents when made already (else from ``opts.depends_on``)."""
    data = check_bytes("input_data", input_data, limit)
    priority = check_priority(opts.priority)
    check_labels(opts.labels)
    idempotency_key = check_idempotency_key(opts.idempotency_key)
    flow_key = check_flow_key(opts.flow_key, optional=True)
    labels = pack(tag_labels(opts.labels)) if opts.labels else b""
    if deps is None:
        deps = deps_request(opts.depends_on, opts.flow_key)
    return (
        [
            run_id_prefix(keys.action),
            data,
            labels,
            opts.delay_ms,
            opts.run_at_ms or 0,
            idempotency_key,
            priority,
            trace,
            flow_key,
            deps,
            "" if opts.batch is None else check_name("batch", opts.batch),
        ],
        len(data),
    )


def invoke_reply(reply: Invoked, keys: ActionKeys, size: int) -> ActionInvokeResult:
    if reply.status == Status.NO_ACTION:
        raise not_registered(keys)
    if reply.status == Status.BAD_SETTING:
        raise bad_settings(keys)
    if reply.status == Status.TOO_LARGE:
        raise ValueTooLargeError(
            f"input_data is {size} bytes; action {keys.action!r} accepts at most "
            f"{reply.limit} (its max_payload_bytes)"
        )
    return ActionInvokeResult(run_id=reply.run_id)


def run_status(run_id: str, rec: dict[str, Any], due_at_ms: int | None = None) -> ActionRunStatus:
    """A run record (``lib/run.lua``) as flo's ``ActionRunStatus``; ``due_at_ms`` is the
    run's score in the delayed set, for a delayed run."""
    return ActionRunStatus(
        run_id=run_id,
        status=RunStatus(int(rec["s"])),
        created_at_ms=int(rec["c"]),
        attempt=int(rec.get("a", 0)),
        started_at_ms=int(rec["st"]) if rec.get("st") is not None else None,
        completed_at_ms=int(rec["ct"]) if rec.get("ct") is not None else None,
        output=bytes(rec["out"]) if rec.get("out") is not None else None,
        error_message=text(rec.get("err")),
        worker_id=text(rec.get("w")),
        max_retries=int(rec.get("mr", 0)),
        outcome=text(rec.get("oc")),
        token=int(rec.get("t", 0)),
        error_traceback=text(rec.get("tb")),
        due_at_ms=due_at_ms,
        priority=int(rec.get("p", 0)),
        progress=bytes(rec["pg"]) if rec.get("pg") is not None else None,
        progress_at_ms=int(rec["pt"]) if rec.get("pt") is not None else None,
        flow_key=text(rec.get("fk")),
        parents=int(rec.get("dn", 0)),
        waiting_on=int(rec.get("dw", 0)),
        has_dependents=bool(rec.get("gd")),
        batch=text(rec.get("bt")) or None,
    )


def read_run(run_id: str, raw: Any, due: Any = None) -> ActionRunStatus:
    """The run's status from its stored record and its score in the delayed set (None
    when it is not there): :func:`run_status` of the decoded record, or
    :class:`BadRecord` when the record does not decode or lacks what a status needs."""
    rec = unpack_record(raw)
    try:
        waiting = due is not None and int(rec["s"]) == RunStatus.PENDING
        return run_status(run_id, rec, stored_int(due, 0, LUA_INT) if waiting else None)
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise BadRecord(f"{type(exc).__name__}: {exc}") from None


def unreadable_run(run_id: str, keys: ActionKeys, why: object) -> BadRecordError:
    """The error for a run whose stored record cannot be read."""
    return BadRecordError(
        f"run {run_id!r} of action {keys.action!r} (namespace {keys.namespace!r}) has a "
        f"stored record that does not decode ({why}); the first claim, report, cancel or "
        "requeue that meets it sets it aside into the action's quarantine (flo-redis "
        f"quarantine list --action {keys.action} --namespace {keys.namespace})"
    )


def status_reply(run_id: str, keys: ActionKeys, raw: Any, due: Any = None) -> ActionRunStatus:
    """The run's status from its stored record and its score in the delayed set (None
    when it is not there); :class:`NotFoundError` when there is no record,
    :class:`BadRecordError` when it does not decode."""
    if raw is None:
        raise refusal(
            Status.NOT_FOUND,
            f"run {run_id!r} not found in namespace {keys.namespace!r} (never created, "
            "deleted with its action, past its retention, or set aside in quarantine)",
        )
    try:
        return read_run(run_id, raw, due)
    except BadRecord as exc:
        raise unreadable_run(run_id, keys, exc) from None


def group_field(raw: Any) -> str | None:
    """For a run's record that names its group (``dg``) and no dependents of its own
    (``gd``), the field of the group's record in ``graph``: runs that wait for the group
    as a whole (lua/lib/graph.lua, "Groups") depend on the run too, which the group's
    record says (:func:`with_group`). None for any other record."""
    if not isinstance(raw, bytes) or b"\xa2dg" not in raw or b"\xa2gd" in raw:
        return None
    try:
        group = text(unpack_record(raw).get("dg"))
    except BadRecord:
        return None
    return f"g\0{group}" if group else None


def with_group(status: ActionRunStatus, group_raw: Any) -> ActionRunStatus:
    """``status`` with ``has_dependents`` when its group's record (read at
    :func:`group_field`) says runs wait for the group as a whole."""
    if isinstance(group_raw, bytes) and b"\xa2gd" in group_raw:
        return dataclasses.replace(status, has_dependents=True)
    return status


def cancel_request(run_id: str, keys: ActionKeys, raw: Any) -> tuple[list[Arg], list[str]]:
    """The ARGV and KEYS tail of ``run_cancel``, from the run's stored record as read
    just before (``raw``; None if there is none): its holder, if it is running, is named
    with its notice channel so the script tells it (``lua/README.md``, "Cancel")."""
    holder = ""
    if raw is not None:
        try:
            rec = unpack_record(raw)
        except BadRecord:
            rec = {}  # the script sets it aside and refuses the cancel (BAD_RECORD)
        if rec.get("s") == RunStatus.RUNNING and isinstance(rec.get("o"), bytes):
            holder = text(rec.get("o")) or ""
    return [run_id, holder], [notice_channel(keys.tag, holder)] if holder else []


async def cancel_confirmed(conn: RedisConn, keys: ActionKeys, run_id: str, token: int) -> bool:
    """Whether Redis says a cancel revoked the lease ``token`` of ``run_id``: its record
    is CANCELLED under that token (the fencing token a cancel leaves in place). What a
    worker asks before it acts on a cancel notice (:mod:`flo_redis._session.notices`)."""
    with redis_errors("confirming a cancel notice"):
        raw = await conn.hget(keys.runs, run_id)
    if raw is None:
        return False
    rec = unpack_record(raw)
    return rec.get("s") == RunStatus.CANCELLED and int(rec.get("t", 0)) == token


def cancel_reply(reply: Cancelled, keys: ActionKeys, run_id: str) -> tuple[str, str] | None:
    """Raise the typed refusal of a cancel; else the notice the client still has to
    publish, ``(channel, message)``, when the run changed hands between the read and
    the script (None: the script told the holder, or nobody held the run)."""
    if reply.status == Status.CONFLICT:
        raise refusal(
            reply.status,
            f"run {run_id!r} already ended {RunStatus(reply.was).name}; only PENDING "
            "(waiting or delayed) and RUNNING runs can be cancelled",
        )
    raise_run_refusal(reply.status, keys, run_id)
    if not reply.holder or reply.told:
        return None
    return notice_channel(keys.tag, reply.holder), cancel_notice(reply.token, run_id)


#: The longest a wait may be asked to last: a day (wait again for longer).
MAX_WAIT_MS = 86_400_000


ProgressMark = tuple[int | None, bytes | None]
NO_PROGRESS: ProgressMark = (None, None)


def progress_mark(status: ActionRunStatus) -> ProgressMark:
    """What tells one progress report of a run from the next, for a wait's
    ``on_progress``: its time and its value (two reports may share a millisecond)."""
    return status.progress_at_ms, status.progress


def check_wait_ms(timeout_ms: object) -> int:
    return check_count("timeout_ms", timeout_ms, 0, MAX_WAIT_MS, fix="a day at most; wait again")


def wait_timed_out(status: ActionRunStatus, timeout_ms: int) -> WaitTimeoutError:
    return WaitTimeoutError(
        f"run {status.run_id!r} did not end within {timeout_ms} ms (it is "
        f"{status.status.name}); wait again, or read it later with status()",
        status,
    )


__all__ = [
    "DEFAULT_WAIT_MS",
    "FINAL",
    "cancel_reply",
    "cancel_request",
    "check_wait_ms",
    "group_field",
    "invoke_reply",
    "invoke_request",
    "read_run",
    "run_status",
    "status_reply",
    "wait_timed_out",
    "with_group",
]
