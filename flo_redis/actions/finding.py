"""One run as an operator sees it, and finding runs in an action.

:func:`run_details` reads a run's status with what it was invoked with (its input and
idempotency key) in one pipelined read. :func:`find_runs` looks a text up three ways: as
a run id of the action and as an idempotency key (each one ``HGET``, exact), then as a
piece of an error message, through ``lua/action_find.lua`` over the action's runs state
by state (failed first), at most :data:`FIND_STEP` runs per script call and ``scan``
runs per search; a search that stopped early answers a cursor to go on from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from flo_redis._session.session import Session
from flo_redis._wire import runner
from flo_redis._wire.aside import warn_unreadable
from flo_redis._wire.checks import check_count, check_text, stored_int
from flo_redis._wire.codec import BadRecord, text, unpack_record
from flo_redis._wire.gateway import ACTION_FIND
from flo_redis._wire.keys import ActionKeys, action_of_run
from flo_redis._wire.refusals import not_registered
from flo_redis._wire.runner import Arg
from flo_redis._wire.status import Status, refusal
from flo_redis.actions.runs import read_run, status_reply, unreadable_run
from flo_redis.errors import NotFoundError, ValidationError
from flo_redis.types import ActionRunStatus, RunStatus
from flo_redis.types.base import LUA_INT

FIND_STEP = 250  # runs one action_find call examines at most
DEFAULT_SCAN = 5000  # runs one search examines at most, by default
MAX_SCAN = 100_000
MAX_QUERY = 256  # bytes of a search text
MAX_FOUND = 1000
# The order a search goes through an action's runs: failures first, finished runs last.
FIND_ORDER = ("failed", "delayed", "pending", "running", "completed")


#: Why a run shows no input: a completed run of an action without keep_inputs; one
#: that completed while its action did not keep inputs; anything else.
NOT_KEPT = (
    "not kept: completed runs keep their input only with keep_inputs=True (ActionRegisterOptions)"
)
NOT_KEPT_THEN = (
    "not kept: the run completed while its action was registered without "
    "keep_inputs=True (ActionRegisterOptions)"
)
NONE_STORED = "none stored for this run"


@dataclass(frozen=True, slots=True)
class RunDetails:
    """A run with what it was invoked with. ``input``: the bytes it was invoked with,
    as stored; None once they are no longer kept (a completed run's input is deleted
    when it completes, unless its action was registered with ``keep_inputs=True``).
    ``idempotency_key``: the key it was invoked with, if any. ``input_missing``: why
    ``input`` is None (:data:`NOT_KEPT`, :data:`NOT_KEPT_THEN`, :data:`NONE_STORED`),
    None when it is there."""

    status: ActionRunStatus
    input: bytes | None
    idempotency_key: str | None = None
    input_missing: str | None = None


@dataclass(frozen=True, slots=True)
class FoundRun:
    """A run a search found, and how: ``"run id"``, ``"idempotency key"`` or
    ``"error"`` (its error message holds the text)."""

    run: ActionRunStatus
    by: str


@dataclass(frozen=True, slots=True)
class FoundRuns:
    """What one search call found (exact matches first, then runs whose error holds the
    text, failed ones newest first), and how many runs it examined. ``cursor``: pass
    it back to go on where it stopped (None: every run was examined)."""

    action: str
    query: str
    runs: tuple[FoundRun, ...]
    examined: int
    cursor: bytes | None = None


async def run_details(session: Session, keys: ActionKeys, run_id: str) -> RunDetails:
    """The run's status, input and idempotency key, read together.
    :class:`NotFoundError` for an unknown run, :class:`BadRecordError` for one whose
    record does not decode."""
    with runner.redis_errors("details"):
        async with session.redis.pipeline(transaction=False) as pipe:
            pipe.hget(keys.runs, run_id)
            pipe.zscore(keys.delayed, run_id)
            pipe.hget(keys.inputs, run_id)
            pipe.hget(keys.definition, "keep_inputs")
            raw, due, data, keeps = await pipe.execute()
    status = status_reply(run_id, keys, raw, due)
    return RunDetails(status, data, _idempotency_key(raw), _missing(status, data, keeps))


def _missing(status: ActionRunStatus, data: bytes | None, keeps: bytes | None) -> str | None:
    """Why a run's input is not there (:class:`RunDetails`); ``keeps``: its action's
    stored keep_inputs, read as ``lua/lib/inputs.lua`` reads it."""
    if data is not None:
        return None
    if status.status is not RunStatus.COMPLETED:
        return NONE_STORED
    return NOT_KEPT_THEN if stored_int(keeps, 0, 1) == 1 else NOT_KEPT


def _idempotency_key(raw: Any) -> str | None:
    try:
        return text(unpack_record(raw).get("ik"))
    except (BadRecord, TypeError, ValueError):
        return None


def check_query(query: object) -> str:
    """A search text: 1 to :data:`MAX_QUERY` UTF-8 bytes; :class:`ValidationError`."""
    found = check_text("query", query, limit=MAX_QUERY)
    if not found:
        raise ValidationError("query is empty; give a run id, an idempotency key or error text")
    return found


_CURSOR = re.compile(r"(?P<state>[a-z]+)(?: (?P<score>0|[1-9][0-9]{0,15}) (?P<run>.+))?", re.S)


def find_cursor(cursor: bytes | None) -> tuple[str, str, str]:
    """A search cursor (``b"<state>"`` or ``b"<state> <score> <run id>"``, as a search
    answered it) as (state, after score, after id); the start for None.
    :class:`ValidationError` for anything else, before anything is sent."""
    if cursor is None:
        return FIND_ORDER[0], "", ""
    bad = ValidationError(
        f"cursor {cursor!r} is malformed; pass back the cursor a previous search returned"
    )
    if not isinstance(cursor, bytes) or len(cursor) > 4096:
        raise bad
    match = _CURSOR.fullmatch(cursor.decode(errors="replace"))
    if match is None or match["state"] not in FIND_ORDER:
        raise bad
    score = match["score"] or ""
    if score and int(score) > LUA_INT:
        raise bad
    return match["state"], score, match["run"] or ""


async def _exact(session: Session, keys: ActionKeys, query: str) -> list[FoundRun]:
    """The run whose id is ``query`` (of this action), and the run invoked with
    ``query`` as its idempotency key: two exact reads."""
    try:
        as_id = query if action_of_run(query) == keys.action else None
    except (NotFoundError, ValidationError):
        as_id = None
    with runner.redis_errors("find"):
        run_id = await session.redis.hget(keys.idempotency, query)
    found: list[FoundRun] = []
    for candidate, by in ((as_id, "run id"), (text(run_id), "idempotency key")):
        if candidate is None or any(f.run.run_id == candidate for f in found):
            continue
        try:
            details = await run_details(session, keys, candidate)
        except NotFoundError:
            continue
        found.append(FoundRun(details.status, by))
    return found


async def find_runs(
    session: Session,
    keys: ActionKeys,
    query: str,
    limit: int,
    cursor: bytes | None,
    scan: int,
) -> FoundRuns:
    """Search ``keys``' action for ``query`` (module docstring): at most ``limit``
    runs found and ``scan`` runs examined. :class:`NotFoundError` if the action is not
    registered."""
    query = check_query(query)
    check_count("limit", limit, 1, MAX_FOUND)
    check_count("scan", scan, 1, MAX_SCAN)
    state, after_score, after_id = find_cursor(cursor)
    found = await _exact(session, keys, query) if cursor is None else []
    exact = {f.run.run_id for f in found}
    examined = 0
    needle = query.encode()
    while len(found) < limit and examined < scan:
        step = min(FIND_STEP, scan - examined)
        args: list[Arg] = [state, after_score, after_id, step, needle, limit - len(found)]
        reply = await ACTION_FIND(session, keys, args)
        if reply.status == Status.NO_ACTION:
            raise not_registered(keys)
        if reply.status != Status.OK:
            raise refusal(reply.status, "find: state, cursor or step refused")
        examined += reply.examined
        for row in reply.rows:
            if row.run_id in exact or not row.record:
                continue
            try:
                due = row.score if state == "delayed" else None
                found.append(FoundRun(read_run(row.run_id, row.record, due), "error"))
            except BadRecord as exc:
                why = str(unreadable_run(row.run_id, keys, exc))
                warn_unreadable(("run", keys.tag, row.run_id), why)
        if reply.more:
            after_score, after_id = reply.last_score, reply.last_id
            continue
        following = FIND_ORDER.index(state) + 1
        if following == len(FIND_ORDER):
            return FoundRuns(keys.action, query, tuple(found), examined)
        state, after_score, after_id = FIND_ORDER[following], "", ""
    where = f"{state} {after_score} {after_id}" if after_score else state
    return FoundRuns(keys.action, query, tuple(found), examined, where.encode())
