"""One run as its handler and its worker hold it: what the handler gets
(:class:`ActionContext`) and may return (:class:`ActionResult`), the worker's record of
the hand-out (:class:`HeldRun`) and, in one place, the run's lease: the touch
(``ctx.touch``, and the worker's ``auto_touch``) and the lease's end as the worker knows
it (loop time by which the lease has surely ended, for the resends of its reports)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from flo_redis._session.session import Session
from flo_redis._session.tracer import unpack_context
from flo_redis._wire.keys import action_keys
from flo_redis._wire.replies import Claimed
from flo_redis.actions import reports
from flo_redis.actions.graph_reads import parent_results
from flo_redis.actions.reports import MAX_TOUCH_EXTEND_MS
from flo_redis.actions.results import ResultSerializer, check_outcome, encode_result
from flo_redis.errors import FloError, ServerError, is_connection_error
from flo_redis.types import GraphPage, Reason, StatusCode
from flo_redis.worker.handlers import Running
from flo_redis.worker.payload import PayloadReading

log = logging.getLogger("flo_redis.worker")


class _Config(Protocol):
    worker_id: str


class RunHolder(Protocol):
    """What a context asks of the worker running it."""

    _serializer: ResultSerializer

    @property
    def config(self) -> _Config: ...

    @property
    def session(self) -> Session: ...

    async def _touch(self, ctx: ActionContext, extend_ms: int) -> None: ...

    async def _progress(self, ctx: ActionContext, value: Any) -> None: ...


class RateLimited(FloError):
    """Raise from an action handler when what it calls said "too many requests": the
    run is given back without spending its attempt, and waits ``retry_after_ms``
    (1 .. 86,400,000); the runs of its flow key (``ActionInvokeOptions.flow_key``) wait
    as long too, across every worker. A run without a key waits alone."""

    def __init__(self, retry_after_ms: int, message: str = "") -> None:
        if isinstance(retry_after_ms, bool) or not isinstance(retry_after_ms, int):
            raise TypeError(f"retry_after_ms must be an int, got {type(retry_after_ms).__name__}")
        if not 1 <= retry_after_ms <= MAX_RATE_LIMITED_MS:
            raise ValueError(f"retry_after_ms must be 1 .. {MAX_RATE_LIMITED_MS}")
        super().__init__(message or f"rate limited: try again in {retry_after_ms} ms")
        self.retry_after_ms = retry_after_ms

    def __reduce__(self) -> tuple[Any, ...]:  # pickled whole (from a handler process)
        return (type(self), (self.retry_after_ms, str(self)))


MAX_RATE_LIMITED_MS = 86_400_000  # RateLimited.retry_after_ms: a day (lua/run_release.lua)


class ActionResult:
    """A handler's result with a named outcome (``ctx.result("approved", value)``)."""

    __slots__ = ("data", "outcome")

    def __init__(self, outcome: str, data: bytes) -> None:
        self.outcome = outcome
        self.data = data

    def __repr__(self) -> str:
        return f"ActionResult(outcome={self.outcome!r}, data={self.data!r})"


@dataclass
class ActionContext(PayloadReading):
    """What a handler gets: the run, its input, and ways to touch, check cancellation
    and name an outcome. ``token`` is this hand-out's fencing token (pass it to your own
    downstream writes to fence them); ``cancelled`` turns true when the run was cancelled
    (``client.action.cancel``) or its lease lost, or the worker gave the run back while
    shutting down."""

    task_id: str
    action_name: str
    payload: bytes
    attempt: int
    created_at: int
    namespace: str
    _worker: RunHolder = field(repr=False)
    _cancelled: bool = field(default=False, repr=False)  # see ``cancelled``
    token: int = 0
    _trace: bytes = field(default=b"", repr=False)  # the run's packed trace context

    @property
    def trace_context(self) -> dict[str, str]:
        """The trace headers (W3C ``traceparent``, ``tracestate``) of the invoke that
        created this run, for a propagator's ``extract``; {} when it carried none
        (:mod:`flo_redis.ops.tracing`)."""
        return unpack_context(self._trace)

    async def progress(self, value: Any) -> None:
        """Store ``value`` as the run's progress (bytes as they are, anything else by the
        worker's serializer; at most 1 KiB, else :class:`ValueTooLargeError`): shown in its
        status and heard by ``wait(..., on_progress=...)``. Fenced by the token:
        :class:`ConflictError` once this lease is no longer current."""
        await self._worker._progress(self, value)

    async def touch(self, extend_ms: int = 30000) -> None:
        """Extend this run's lease to ``extend_ms`` from now (fenced by the token)."""
        await self._worker._touch(self, extend_ms)

    async def parents(self, after: str | None = None, count: int = 100) -> GraphPage:
        """A page of the results of the runs this one waited for (``depends_on``), in id
        order: each a :class:`~flo_redis.types.ParentResult` (status, output, outcome,
        error). A parent of the ``ignore`` policy that did not complete is left out.
        ``after``: the previous page's ``after`` (None: the first page); at most
        ``count`` (1 .. 1000) a page, so a run with 10,000 parents reads them in turn."""
        keys = action_keys(self.namespace, self.action_name)
        return await parent_results(self._worker.session, keys, self.task_id, after, count)

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    async def check_cancelled(self) -> None:
        if self._cancelled:
            raise asyncio.CancelledError("run cancelled: its lease was lost")

    def result(self, outcome: str, value: Any = None) -> ActionResult:
        """A result with a named outcome (a str of at most 255 UTF-8 bytes, else
        :class:`ValidationError` here); ``value`` is encoded as a return value is (bytes
        as they are, anything else by the worker's serializer), None gives no data."""
        outcome = check_outcome(outcome)
        data = b"" if value is None else encode_result(value, self._worker._serializer)
        return ActionResult(outcome, data)


def cancel(ctx: ActionContext) -> None:
    """Turn ``ctx.cancelled`` true, for the worker holding its run (a plain flag: a sync
    handler reads it from its thread)."""
    ctx._cancelled = True


def new_context(
    run_id: str,
    action: str,
    payload: bytes,
    attempt: int,
    created_at: int,
    namespace: str,
    worker: RunHolder,
    token: int,
    trace: bytes,
) -> ActionContext:
    """The context of one hand-out of a run, as ``ActionContext(task_id=run_id, ...)``
    makes it: a worker makes one per run, and a call with the fields in their order takes
    half the time of one that names them."""
    return ActionContext(
        run_id, action, payload, attempt, created_at, namespace, worker, False, token, trace
    )


# An ``async def`` handler, or a plain function (run in the worker's thread pool).
ActionHandler = Callable[[ActionContext], Awaitable[Any]] | Callable[[ActionContext], Any]


MIN_TOUCH_INTERVAL_MS = 100
TOUCH_FINAL = (StatusCode.CONFLICT, StatusCode.NOT_FOUND, StatusCode.BAD_REQUEST)


class HeldRun:
    """One hand-out of a run, as the worker holding it keeps it: the handler's context,
    the loop time by which the lease has surely ended (None: never), the handler while
    it runs, and whether the hand-out was revoked (cancelled, or its offer ran out: it
    reports nothing). Once its handler returned it carries its complete, as
    :class:`flo_redis.actions.reports.OwnComplete` reads one (``task_id``, ``token``,
    ``result``, ``outcome``): one record per run, nothing more made per complete."""

    __slots__ = ("ctx", "lease_end", "outcome", "result", "revoked", "running", "task_id", "token")
    result: bytes
    outcome: str

    def __init__(self, ctx: ActionContext, claimed_at: float, lease_s: float | None) -> None:
        """``claimed_at``: the loop time the claim was answered (it ran before), so the
        lease surely ends by then plus the action's lease ``lease_s`` (None: never)."""
        self.ctx = ctx
        self.task_id = ctx.task_id
        self.token: int | None = ctx.token
        self.lease_end = None if lease_s is None else claimed_at + lease_s
        self.running: Running | None = None
        self.revoked = False
        # result and outcome: set by the run reporter as the run completes.

    def cancel(self) -> None:
        """Turn its context's ``cancelled`` true (its handler is being stopped)."""
        cancel(self.ctx)

    def revoke(self) -> None:
        """The run is no longer this hand-out's: its handler is cancelled as for a lost
        lease (a sync handler sees ``ctx.cancelled``) and it reports nothing."""
        self.revoked = True
        cancel(self.ctx)
        if self.running is not None:
            self.running.stop()


def hold(
    run: Claimed, claimed_at: float, lease_s: float | None, namespace: str, worker: RunHolder
) -> HeldRun:
    """The worker's record of ``run``, claimed at loop time ``claimed_at`` under a lease
    of ``lease_s`` (None: never ends), with its handler's context."""
    ctx = new_context(
        run.run_id,
        run.action,
        run.payload,
        run.attempt,
        run.created_at_ms,
        namespace,
        worker,
        run.token,
        run.trace,
    )
    return HeldRun(ctx, claimed_at, lease_s)


class LeaseLost(Exception):
    """The run's lease is gone (taken back or finished elsewhere); report nothing."""


async def touch(
    session: Session, worker_id: str, ctx: ActionContext, extend_ms: int, held: HeldRun | None
) -> None:
    """Extend ``ctx``'s lease (``held``: the worker's record of it, while the worker
    holds it); a refusal that no later touch can undo sets the context cancelled and
    raises :class:`LeaseLost`."""
    try:
        await reports.touch(
            session, worker_id, ctx.action_name, ctx.task_id, ctx.token, extend_ms, ctx.namespace
        )
    except ServerError as exc:
        if exc.status_code in TOUCH_FINAL and exc.reason != Reason.OUT_OF_RANGE:
            cancel(ctx)
            log.warning("lease of %s lost (%s); cancelling its handler", ctx.task_id, exc)
            raise LeaseLost(str(exc)) from exc
        raise
    finally:
        # Answered or not, a touch that may have run moved the lease's end to at
        # most now + extend_ms (the script ran before this moment).
        if held is not None and held.lease_end is not None and 0 < extend_ms <= MAX_TOUCH_EXTEND_MS:
            end = asyncio.get_running_loop().time() + extend_ms / 1000.0
            held.lease_end = max(held.lease_end, end)


def start_auto_touch(
    session: Session, worker_id: str, held: HeldRun, running: Running, timeout_ms: int
) -> asyncio.Task[None] | None:
    """A task keeping alive a lease of ``timeout_ms`` (touching at a third of it) while
    its handler runs; None when the run's lease never ends."""
    if timeout_ms <= 0:
        return None
    extend_ms = min(timeout_ms, MAX_TOUCH_EXTEND_MS)
    interval_s = max(extend_ms / 3, MIN_TOUCH_INTERVAL_MS) / 1000.0
    return asyncio.create_task(
        _keep_touching(session, worker_id, held, running, extend_ms, interval_s),
        name=f"flo-touch-{held.task_id}",
    )


async def _keep_touching(
    session: Session,
    worker_id: str,
    held: HeldRun,
    running: Running,
    extend_ms: int,
    interval_s: float,
) -> None:
    """Touch ``ctx``'s run every ``interval_s`` until cancelled; once its lease is lost,
    stop its handler."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await touch(session, worker_id, held.ctx, extend_ms, held)
        except LeaseLost:
            running.stop()
            return
        except ServerError as exc:
            log.warning("touch of %s refused (%s); trying again later", held.task_id, exc)
        except Exception as exc:
            if not is_connection_error(exc):
                raise
            log.info("touch of %s failed (%s); trying again later", held.task_id, exc)


__all__ = [
    "ActionContext",
    "ActionHandler",
    "ActionResult",
    "HeldRun",
    "LeaseLost",
    "cancel",
    "hold",
    "new_context",
    "start_auto_touch",
    "touch",
]
