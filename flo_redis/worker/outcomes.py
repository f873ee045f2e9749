"""What an action handler's end becomes: one report type per kind (:class:`Completed`,
:class:`Failed`, :class:`Released`, :class:`Dropped`), each delivering itself through a
worker's :class:`Reporter` (:class:`flo_redis.worker.run_reporter.RunReporter`: completes
batched, every report fenced by its token and resent by
:func:`flo_redis.worker.delivery.send_report`), and what a handler's return value or error
becomes."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol

from flo_redis._session.session import Session
from flo_redis.actions import reports
from flo_redis.actions.results import (
    ResultSerializer,
    check_outcome,
    check_result_data,
    encode_result,
    error_text,
    error_traceback,
)
from flo_redis.errors import (
    NonRetryableError,
    PermissionDeniedError,
    ServerError,
)
from flo_redis.types import RunStatus
from flo_redis.worker.context import ActionContext, ActionResult, HeldRun
from flo_redis.worker.handlers import HandlerTimeout
from flo_redis.worker.observe import WorkerObserver

log = logging.getLogger("flo_redis.worker")


class Reporter(Protocol):
    """What a report is delivered through: one worker's
    :class:`flo_redis.worker.run_reporter.RunReporter`."""

    session: Session
    worker_id: str
    observer: WorkerObserver
    refuse: Callable[[PermissionDeniedError], None]

    def send(
        self, held: HeldRun, kind: str, send: Callable[[], Awaitable[object]], *, sent: int = 0
    ) -> Awaitable[bool]: ...

    def complete(self, held: HeldRun, report: Completed) -> None: ...

    def left(self) -> None: ...


@dataclass(slots=True)
class Completed:
    """The handler returned: complete the run with its encoded result (in its action's
    next batch of completes, answered there)."""

    data: bytes
    outcome: str = "success"
    handled: ClassVar[str] = "completed"

    async def deliver(self, to: Reporter, held: HeldRun) -> None:
        to.complete(held, self)


@dataclass(slots=True)
class Failed:
    """The handler raised or timed out: fail the attempt (retried if ``retry``)."""

    message: str
    retry: bool = True
    traceback: str = ""
    error: BaseException | None = None  # what failed the attempt, for on_failure
    handled: ClassVar[str] = "failed"

    async def deliver(self, to: Reporter, held: HeldRun) -> None:
        ctx = held.ctx

        async def send() -> None:
            try:
                after = await reports.fail(
                    to.session,
                    to.worker_id,
                    ctx.action_name,
                    ctx.task_id,
                    self.message,
                    retry=self.retry,
                    traceback=self.traceback or None,
                    token=ctx.token,
                )
            except PermissionDeniedError as exc:
                to.refuse(exc)
                raise
            to.observer.run_failed(ctx.action_name, after == RunStatus.PENDING)

        await to.send(held, "fail", send)


@dataclass(slots=True)
class Released:
    """The worker stops before the handler ended: give the run back unspent."""

    async def deliver(self, to: Reporter, held: HeldRun) -> None:
        to.left()
        ctx = held.ctx

        async def send() -> None:
            try:
                await reports.release(
                    to.session, to.worker_id, ctx.action_name, ctx.task_id, ctx.token
                )
            except ServerError as exc:
                to.observer.report_refused("release")
                log.info("release of %s refused (%s)", ctx.task_id, exc)
            else:
                to.observer.run_released(ctx.action_name)

        await to.send(held, "release", send)


@dataclass(slots=True)
class Dropped:
    """The run's lease was lost (it moved on): nobody takes a report."""

    handled: ClassVar[str] = "lease_lost"

    async def deliver(self, to: Reporter, held: HeldRun) -> None:
        to.left()


Report = Completed | Failed | Released | Dropped


def completion(
    ctx: ActionContext, result: object, serializer: ResultSerializer, worker_id: str
) -> Completed | Failed:
    """What a handler's return value becomes: an :class:`ActionResult` as it is, any
    other value encoded by ``serializer`` (one it cannot encode fails the run)."""
    if type(result) is bytes:  # the common case, as encode_result answers it
        return Completed(result)
    try:
        if isinstance(result, ActionResult):
            return Completed(check_result_data(result.data), check_outcome(result.outcome))
        return Completed(encode_result(result, serializer))
    except Exception as exc:  # a bad outcome, or a serializer's own error: the run fails
        return failure(ctx, exc, worker_id)


def failure(ctx: ActionContext, exc: BaseException, worker_id: str) -> Failed:
    """Log a handler's failure (ERROR, with its traceback) and say what the run keeps:
    retried unless the error is a :class:`NonRetryableError`."""
    message = error_text(exc)
    retry = not isinstance(exc, NonRetryableError)
    log.error(
        "run %s of %r failed on attempt %d (worker %s)%s: %s",
        ctx.task_id,
        ctx.action_name,
        ctx.attempt,
        worker_id,
        "" if retry else ", not retried",
        message,
        exc_info=exc,
        extra={
            "run_id": ctx.task_id,
            "action": ctx.action_name,
            "attempt": ctx.attempt,
            "worker_id": worker_id,
        },
    )
    return Failed(message, retry=retry, traceback=error_traceback(exc), error=exc)


def stopped_report(stop: Exception) -> Failed | Dropped:
    """The report of a handler the runner stopped: past its time limit, a failure not
    retried; stopped otherwise (cancelled, or its lease was lost), none at all."""
    if isinstance(stop, HandlerTimeout):
        return Failed("Action timed out", retry=False, error=TimeoutError("Action timed out"))
    return Dropped()  # nobody takes a report


__all__ = [
    "Completed",
    "Dropped",
    "Failed",
    "Released",
    "Report",
    "Reporter",
    "completion",
    "failure",
    "stopped_report",
]
