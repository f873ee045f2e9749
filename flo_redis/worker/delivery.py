"""Delivering a worker's reports (complete, fail, ack, nack): resent, never converted;
and an action run's reports other than a complete (:class:`Failed`, :class:`Released`,
:class:`Dropped`: a complete is batched by :mod:`flo_redis.worker.run_reporter`), each
delivering itself through its worker's :class:`Reporter`.

A report is fenced by its token, so sending it again is always safe: the scripts answer
an identical resend of a report that already took effect as success, and refuse one whose
lease was taken back. So a report lost to a dropped connection (a restart, a failover, a
network blackout) is sent again, identically, until the store answers it, refuses it, or
the lease it belongs to has surely ended (after that a resend could only be refused, and
the run is handed out again anyway). A report that took effect but did not reach the
worker's durability level in time (:class:`NotDurableError`) is sent again the same way:
its resend is answered once the replicas caught up. The pause between sends starts at
:data:`RESEND_FIRST_S` and doubles up to :data:`RESEND_MAX_S`.

A report the store refused (stale lease, unknown run) is logged and dropped: resending it
would be refused too, and turning it into another report (a complete into a fail, an ack
into a nack) would be wrong. Once the worker stops, resends get :data:`STOP_RESEND_S` more
in all; then the report is given up and the run comes back to the queue through liveness
(the stopped process's owner channel empties) or its lease deadline.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol

from flo_redis._session.session import Session
from flo_redis._wire.keys import action_keys
from flo_redis._wire.replies import FailReported
from flo_redis.actions import graph, reports
from flo_redis.actions.results import error_text, error_traceback
from flo_redis.errors import (
    NonRetryableError,
    NotDurableError,
    PermissionDeniedError,
    ServerError,
    is_connection_error,
)
from flo_redis.retry import Backoff, is_refused_unrun
from flo_redis.types import RunStatus
from flo_redis.worker.context import ActionContext, HeldRun, RateLimited
from flo_redis.worker.handlers import HandlerTimeout
from flo_redis.worker.observe import NO_OBSERVER, WorkerObserver

log = logging.getLogger("flo_redis.worker")

#: The first pause before a report is sent again...
RESEND_FIRST_S = 0.1
#: ...doubling (with jitter) up to this.
RESEND_MAX_S = 1.0
#: How long a stopping worker keeps resending before it gives a report up.
STOP_RESEND_S = 2.0


async def send_report(
    what: str,
    send: Callable[[], Awaitable[object]],
    stopping: Callable[[], bool],
    log: logging.Logger,
    *,
    sent: int = 0,
    report: str = "",
    observer: WorkerObserver = NO_OBSERVER,
    lease_end: Callable[[], float | None] = lambda: None,
) -> bool:
    """Send one report; True once the store accepted it, False if refused or given up.

    ``sent`` counts sends the caller already made (lost to a connection error). Lost
    sends, and sends Redis refused without running them (``LOADING`` while a restarted
    Redis loads its data, a cluster moving the slot), are repeated until the store
    answers, or until ``lease_end()`` (an event-loop time by which the report's lease
    has surely ended; None: not known) has passed, or until :data:`STOP_RESEND_S`
    after ``stopping()`` became true. The ``observer`` hears of each resend and
    refusal of this ``report`` kind."""
    loop = asyncio.get_running_loop()
    backoff: Backoff | None = None  # made on the first resend: most reports need none
    stop_deadline: float | None = None
    attempt = sent
    while True:
        if attempt:
            if backoff is None:
                backoff = Backoff(RESEND_FIRST_S, RESEND_MAX_S)
            pause = _pause_before_resend(loop.time(), backoff, lease_end(), stop_deadline)
            if pause is None:
                log.error("%s given up after %d sends: its lease has ended", what, attempt)
                return False
            await asyncio.sleep(pause)
            observer.report_resent(report)
        attempt += 1
        try:
            await send()
            return True
        except Exception as exc:
            unrun = is_refused_unrun(exc)  # e.g. LOADING after a restart: it did not run
            if isinstance(exc, ServerError) and not unrun:
                drop_refused(what, exc, log, report=report, observer=observer)
                return False
            if not (unrun or is_connection_error(exc) or isinstance(exc, NotDurableError)):
                raise
            if stopping():
                if stop_deadline is None:
                    stop_deadline = loop.time() + STOP_RESEND_S
                if loop.time() >= stop_deadline:
                    log.error("%s given up while stopping (%s)", what, exc)
                    return False
            log.info("%s: not answered (%s); sending again", what, exc)


def drop_refused(
    what: str,
    refusal: ServerError,
    log: logging.Logger,
    *,
    report: str = "",
    observer: WorkerObserver = NO_OBSERVER,
) -> None:
    """A report the store refused is dropped: resending it would be refused too."""
    observer.report_refused(report)
    log.warning("%s refused (%s); dropped", what, refusal)


def _pause_before_resend(
    now: float, backoff: Backoff, lease_end: float | None, stop_deadline: float | None
) -> float | None:
    """The pause before the next send, or None when no send can matter any more."""
    if lease_end is not None and now >= lease_end:
        return None
    pause = backoff.next()
    for end in (lease_end, stop_deadline):
        if end is not None:
            pause = min(pause, max(end - now, 0.0))
    return pause


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

    def left(self) -> None: ...


@dataclass(slots=True)
class Failed:
    """The handler raised or timed out: fail the attempt (retried if ``retry``)."""

    message: str
    retry: bool = True
    traceback: str = ""
    error: BaseException | None = None  # what failed the attempt, for on_failure
    handled: ClassVar[str] = "failed"

    async def deliver(self, to: Reporter, held: HeldRun) -> None:
        """Report the failure, then log it (ERROR, with its traceback) saying what the
        store made of it: the next attempt and when, or that the run ended."""
        ctx = held.ctx
        answers: list[FailReported] = []

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
            answers.append(after)
            to.observer.run_failed(ctx.action_name, after.run_status == RunStatus.PENDING)

        await to.send(held, "fail", send)
        self._log(ctx, to.worker_id, answers[-1] if answers else None)

    def _log(self, ctx: ActionContext, worker_id: str, after: FailReported | None) -> None:
        log.error(
            "run %s of %r failed on attempt %d (worker %s): %s; %s",
            ctx.task_id,
            ctx.action_name,
            ctx.attempt,
            worker_id,
            self.message,
            next_step(after, self.retry),
            exc_info=self.error,
            extra={
                "run_id": ctx.task_id,
                "action": ctx.action_name,
                "attempt": ctx.attempt,
                "worker_id": worker_id,
            },
        )


def next_step(after: FailReported | None, retry: bool) -> str:
    """What comes after a failed attempt, as the store answered its report (None: no
    answer came): "will retry in 2.0 s (attempt 2 of 3)" or why it is final."""
    if after is None:
        return "its report was not delivered: the run is taken back when its lease ends"
    if after.duplicate or after.retry_in_ms < 0:
        if not retry:
            return "final: not retried"
        if after.duplicate:
            return "reported before"
        return f"final: no attempts left ({after.attempt} of {after.max_retries})"
    when = f"in {after.retry_in_ms / 1000:.1f} s" if after.retry_in_ms else "now"
    return f"will retry {when} (attempt {after.attempt + 1} of {after.max_retries})"


@dataclass(slots=True)
class Released:
    """The worker stops before the handler ended, or the handler raised RateLimited:
    give the run back unspent (after ``delay_ms``, with its flow key's runs)."""

    delay_ms: int = 0

    async def deliver(self, to: Reporter, held: HeldRun) -> None:
        to.left()
        ctx = held.ctx
        delay_ms = self.delay_ms

        async def send() -> None:
            try:
                await reports.release(
                    to.session,
                    to.worker_id,
                    ctx.action_name,
                    ctx.task_id,
                    ctx.token,
                    delay_ms=delay_ms,
                )
            except ServerError as exc:
                to.observer.report_refused("release")
                log.info("release of %s refused (%s)", ctx.task_id, exc)
            else:
                to.observer.run_released(ctx.action_name)

        await to.send(held, "release", send)


@dataclass(slots=True)
class Suspended:
    """The handler returned ``ctx.wait_for(...)``: the run ends its attempt waiting for
    those runs (``deps``, packed), unspent, and runs again once they ended."""

    deps: bytes
    handled: ClassVar[str] = "suspended"

    async def deliver(self, to: Reporter, held: HeldRun) -> None:
        to.left()
        ctx = held.ctx
        keys = action_keys(ctx.namespace, ctx.action_name)

        async def send() -> None:
            try:
                await graph.suspend(
                    to.session, keys, ctx.task_id, ctx.token, to.worker_id, self.deps
                )
            except ServerError as exc:
                to.observer.report_refused("suspend")
                log.warning("run %s could not wait for more runs (%s)", ctx.task_id, exc)

        await to.send(held, "suspend", send)


@dataclass(slots=True)
class Dropped:
    """The run's lease was lost (it moved on): nobody takes a report."""

    handled: ClassVar[str] = "lease_lost"

    async def deliver(self, to: Reporter, held: HeldRun) -> None:
        to.left()


def failure(exc: BaseException) -> Failed | Released:
    """The report of a handler's failure: retried unless the error is a
    :class:`NonRetryableError` (logged once the report is answered: :class:`Failed`);
    a :class:`RateLimited` gives the run back unspent, to wait as it says."""
    if isinstance(exc, RateLimited):
        return Released(delay_ms=exc.retry_after_ms)
    retry = not isinstance(exc, NonRetryableError)
    return Failed(error_text(exc), retry=retry, traceback=error_traceback(exc), error=exc)


def stopped_report(stop: Exception) -> Failed | Dropped:
    """The report of a handler the runner stopped: past its time limit, a failure (not
    retried unless the handler surely stopped: ``HandlerTimeout.retry``); stopped
    otherwise (cancelled, or its lease was lost), none at all."""
    if isinstance(stop, HandlerTimeout):
        error = TimeoutError("Action timed out")
        return Failed("Action timed out", retry=stop.retry, error=error)
    return Dropped()  # nobody takes a report


__all__ = [
    "Dropped",
    "Failed",
    "Released",
    "Reporter",
    "Suspended",
    "drop_refused",
    "failure",
    "send_report",
    "stopped_report",
]
