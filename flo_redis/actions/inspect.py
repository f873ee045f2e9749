"""Seeing and steering an action's queue: exact counts, runs by state, bulk requeue/purge.

Every figure comes from one read-only script over the queue's own sets and counters
(``lua/action_counts.lua``, ``lua/action_runs.lua``), so each call is O(1) or bounded by
its page, never a scan. Bulk steering runs in batches, each one script call touching at
most ``batch`` runs, so no call holds Redis for long whatever the backlog; a bulk call
acts on the runs that were in the state when it started and ends even while workers keep
failing or finishing runs.
"""

from __future__ import annotations

import builtins
import enum
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from flo_redis._session.session import Operations, Session
from flo_redis._wire import runner
from flo_redis._wire.aside import scope_of, warn_set_aside, warn_unreadable
from flo_redis._wire.checks import MAX_LIST_LIMIT, check_count
from flo_redis._wire.codec import BadRecord, decoded
from flo_redis._wire.gateway import (
    ACTION_COUNTS,
    ACTION_FLOW_KEYS,
    ACTION_PURGE,
    ACTION_REQUEUE_FAILED,
    ACTION_RUNS,
    Script,
)
from flo_redis._wire.inspect_replies import ActionCounts as ActionCounts  # beside its parser
from flo_redis._wire.inspect_replies import BulkStep
from flo_redis._wire.inspect_replies import FlowKeys as FlowKeys  # beside its parser
from flo_redis._wire.keys import ActionKeys, action_of_run
from flo_redis._wire.refusals import not_registered
from flo_redis._wire.runner import Arg
from flo_redis._wire.status import Status, refusal
from flo_redis.actions.finding import DEFAULT_SCAN, FoundRuns, RunDetails, find_runs, run_details
from flo_redis.actions.history import DEFAULT_SINCE, ActionHistory, read_history
from flo_redis.actions.runs import read_run, unreadable_run
from flo_redis.errors import ValidationError
from flo_redis.types import ActionRunStatus
from flo_redis.types.base import LUA_INT

T = TypeVar("T")

MAX_BATCH = 500  # runs per bulk script call: 4-8 ms of Redis time, tens of ms at worst
# The default keeps every call far under 50 ms of Redis time even on a loaded machine: 25
# runs take 0.3 ms a call (median), 10 ms at worst (Valkey's first calls on 50,000 runs).
DEFAULT_BATCH = 25


class RunState(str, enum.Enum):
    """Where a run is in its action's queue (the sets ``runs``/``purge`` page through).

    ``PENDING`` runs are ready to be claimed, ``DELAYED`` ones wait for their due time
    (their status reads ``PENDING`` with ``due_at_ms`` set), ``RUNNING`` ones are leased,
    ``COMPLETED`` ones are kept for the action's retention and ``FAILED`` holds FAILED,
    TIMED_OUT and CANCELLED runs until they are re-queued or purged."""

    PENDING = "pending"
    DELAYED = "delayed"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


NEWEST_FIRST = (RunState.COMPLETED, RunState.FAILED)


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of runs in one state; pass ``cursor`` back for the next (None: the last).
    ``unreadable``: the ids of runs on the page whose stored records do not decode
    (left out of ``runs``; the first claim, report or requeue that meets one sets it
    aside into the action's quarantine)."""

    action: str
    state: RunState
    runs: tuple[ActionRunStatus, ...]
    cursor: bytes | None = None
    unreadable: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BulkResult:
    """What a bulk requeue or purge did: how many runs it moved, in how many script calls."""

    action: str
    state: RunState
    count: int
    calls: int


def state_arg(state: RunState | str) -> RunState:
    """``state`` as a :class:`RunState`; :class:`ValidationError` naming the choices."""
    try:
        return RunState(state)
    except ValueError:
        choices = ", ".join(s.value for s in RunState)
        raise ValidationError(f"state {state!r} is not one of: {choices}") from None


_SCORE = re.compile(r"0|[1-9][0-9]{0,15}")


def run_cursor(cursor: bytes | None) -> tuple[str, str]:
    """A ``runs`` page cursor (``b"<score> <run id>"``, as a page returned it) as the
    score and run id the script takes; ('', '') for None. The score is read strictly, as
    the decimal integer a page writes (never ``nan``, ``inf``, an exponent or
    underscores, which ``float`` would take): anything else is refused with
    :class:`ValidationError` before anything is sent."""
    if cursor is None:
        return "", ""
    if not isinstance(cursor, bytes) or len(cursor) > 4096:
        raise ValidationError("cursor must be the bytes a previous page returned")
    score, sep, run_id = cursor.decode(errors="replace").partition(" ")
    if not sep or not run_id or not _SCORE.fullmatch(score) or int(score) > LUA_INT:
        raise ValidationError(
            f"cursor {cursor!r} is malformed; pass back the cursor a previous page returned"
        )
    return score, run_id


async def failed_runs(session: Session, keys: ActionKeys, limit: int) -> list[ActionRunStatus]:
    """The oldest ``limit`` failed (FAILED / TIMED_OUT) runs of ``keys``' action; a run
    whose record does not decode is logged and left out (a requeue of it sets it
    aside)."""
    conn = session.redis
    with runner.redis_errors("failed"):
        ids = [decoded(i) for i in await conn.zrange(keys.failed, 0, limit - 1)]
        raws = await conn.hmget(keys.runs, ids) if ids else []
    found: list[ActionRunStatus] = []
    for run_id, raw in zip(ids, raws, strict=True):
        if raw is None:
            continue
        try:
            found.append(read_run(run_id, raw))
        except BadRecord as exc:
            warn_unreadable(("run", keys.tag, run_id), str(unreadable_run(run_id, keys, exc)))
    return found


def _registered(keys: ActionKeys, answer: T | None) -> T:
    """A read's ``answer``; :class:`NotFoundError` when the read found no registered
    action (its reply's answer is None for NO_ACTION)."""
    if answer is None:
        raise not_registered(keys)
    return answer


class ActionInspection(Operations):
    """The operator half of ``client.action``: counts, runs by state, bulk steering."""

    async def counts(self, name: str, namespace: str | None = None) -> ActionCounts:
        """Exact counts of ``name``'s runs by state and per minute over the last hour, read
        in one atomic, read-only script call. :class:`NotFoundError` if not registered."""
        keys = self._action_keys(name, namespace)
        return _registered(keys, (await ACTION_COUNTS(self._session, keys)).counts)

    async def history(
        self,
        name: str,
        since: timedelta | str = DEFAULT_SINCE,
        namespace: str | None = None,
        *,
        detail: bool = True,
    ) -> ActionHistory:
        """What ``name``'s runs did in each minute of the last ``since`` (1 minute to 72
        hours; a timedelta or ``'30m'``, ``'6h'``, ``'72h'``): completed, failed and
        retried, and the p50/p90/p99 of their pickup latency and handler duration,
        counted by every worker of the fleet on Redis's clock. ``detail=False`` reads the
        counts only. One read-only script call. :class:`NotFoundError` if not registered,
        :class:`ValidationError` for a window out of range."""
        return await read_history(self._session, self._action_keys(name, namespace), since, detail)

    async def flow_keys(
        self, name: str, limit: int = 20, sample: int = 500, namespace: str | None = None
    ) -> FlowKeys:
        """``name``'s busiest flow keys (at most ``limit``, 1..1000), busiest first, with
        their running, held-back and in-window counts and their RateLimited pause, read
        in one bounded, read-only script call; a key's ``waiting`` counts its runs among
        the first ``sample`` (1..1000) waiting. :class:`NotFoundError` if not registered."""
        keys = self._action_keys(name, namespace)
        limit = check_count("limit", limit, 1, 1000)
        sample = check_count("sample", sample, 1, 1000)
        reply = await ACTION_FLOW_KEYS(self._session, keys, [limit, sample])
        return _registered(keys, reply.flow_keys)

    async def runs(
        self,
        name: str,
        state: RunState | str = RunState.PENDING,
        limit: int = 100,
        cursor: bytes | None = None,
        namespace: str | None = None,
    ) -> RunPage:
        """One page (``limit`` 1..1024) of ``name``'s runs in ``state``: pending runs in
        queue order, delayed ones by due time (``due_at_ms`` set), running ones by lease
        deadline, completed and failed ones newest first. Pass the page's ``cursor`` back
        for the next; paging stays in order while runs come and go."""
        st = state_arg(state)
        check_count("limit", limit, 1, MAX_LIST_LIMIT)
        after_score, after_id = run_cursor(cursor)
        keys = self._action_keys(name, namespace)
        reply = await ACTION_RUNS(self._session, keys, [st.value, after_score, after_id, limit])
        if reply.status != Status.OK:
            raise refusal(reply.status, f"runs: state {st.value!r} or limit refused")
        more = reply.more
        found: builtins.list[ActionRunStatus] = []
        unreadable: builtins.list[str] = []
        last = b""
        for row in reply.rows:
            run_id, score, raw = row.run_id, row.score, row.record
            last = f"{score} {run_id}".encode()
            if raw:
                try:
                    found.append(read_run(run_id, raw, score if st is RunState.DELAYED else None))
                except BadRecord as exc:
                    unreadable.append(run_id)
                    warn_unreadable(
                        ("run", keys.tag, run_id), str(unreadable_run(run_id, keys, exc))
                    )
        cursor = last if more and last else None
        return RunPage(name, st, tuple(found), cursor, tuple(unreadable))

    async def details(self, run_id: str, namespace: str | None = None) -> RunDetails:
        """The run's status with its input and idempotency key, read together (the
        operator's view of one run; ``status`` stays lean for waits and polls).
        :class:`NotFoundError` for an unknown run."""
        keys = self._action_keys(action_of_run(run_id), namespace)
        return await run_details(self._session, keys, run_id)

    async def find(
        self,
        name: str,
        query: str,
        limit: int = 20,
        cursor: bytes | None = None,
        scan: int = DEFAULT_SCAN,
        namespace: str | None = None,
    ) -> FoundRuns:
        """Runs of ``name`` that ``query`` names: the run with that id and the run
        invoked with that idempotency key (exact, O(1)), then runs whose error message
        holds it (ASCII case ignored), failed ones first, newest first. At most
        ``limit`` (1..1000) runs found and ``scan`` (1..100,000) runs examined per call,
        each script call examining at most 250; pass the answer's ``cursor`` back to go
        on. :class:`NotFoundError` if the action is not registered."""
        keys = self._action_keys(name, namespace)
        return await find_runs(self._session, keys, query, limit, cursor, scan)

    async def requeue_failed(
        self, name: str, batch: int = DEFAULT_BATCH, namespace: str | None = None
    ) -> BulkResult:
        """Re-queue every FAILED, TIMED_OUT and CANCELLED run of ``name`` (each with a
        fresh set of attempts, oldest first), ``batch`` (1..500) runs per script call.
        Acts on the runs that had failed when it started; a run that fails again while it
        works is left failed. :class:`NotFoundError` if not registered."""
        check_count("batch", batch, 1, MAX_BATCH)
        keys = self._action_keys(name, namespace)
        return await self._in_batches(keys, RunState.FAILED, ACTION_REQUEUE_FAILED, [], batch)

    async def purge(
        self,
        name: str,
        state: RunState | str,
        batch: int = DEFAULT_BATCH,
        namespace: str | None = None,
    ) -> BulkResult:
        """Delete every run of ``name`` in ``state`` (pending, delayed, completed or
        failed) with its input, ``batch`` (1..500) runs per script call. Acts on the
        runs in the state when it started; runs that arrive later stay. Running runs are
        refused with :class:`ValidationError` (their workers hold them: let them finish,
        or delete the action). :class:`NotFoundError` if not registered."""
        st = state_arg(state)
        if st is RunState.RUNNING:
            raise ValidationError(
                "running runs cannot be purged: their workers hold them; wait for them to "
                "finish (or fail) and purge those, or delete the action"
            )
        check_count("batch", batch, 1, MAX_BATCH)
        keys = self._action_keys(name, namespace)
        return await self._in_batches(keys, st, ACTION_PURGE, [st.value], batch)

    async def _in_batches(
        self,
        keys: ActionKeys,
        state: RunState,
        script: Script[BulkStep],
        args: builtins.list[Arg],
        batch: int,
    ) -> BulkResult:
        upto = ""
        count = calls = 0
        while True:
            reply = await script(self._session, keys, [*args, upto, batch])
            calls += 1
            status = reply.status
            if status == Status.NO_ACTION:
                raise not_registered(keys)
            if status != Status.OK:
                raise refusal(status, f"{script.name}: batch or bound refused")
            if reply.aside:
                warn_set_aside(scope_of(keys), reply.aside)
            count += reply.count
            upto = reply.upto
            if reply.remaining == 0:
                return BulkResult(keys.action, state, count, calls)
