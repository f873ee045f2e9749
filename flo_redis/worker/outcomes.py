"""What an action handler's end becomes: one report type per kind (:class:`Completed`,
:class:`Failed`, :class:`Released`, :class:`Dropped`), each delivering itself through a
worker's :class:`RunReporter` (completes batched, every report fenced by its token and
resent by :func:`flo_redis.worker.delivery.send_report`), and the worker's load and completed
counters, sent in batches.

A complete is handed to the batch and its handler slot goes on: the batch's answer is dealt
with where it arrives, and only the rare complete that needs more (a lost connection, a
result too large to store) gets a task of its own, which the worker waits for as it
waits for its handlers.

A run offered to the worker's poller by a hand-off (``lua/lib/offer.lua``) is accepted
the same way, in batches of their own (:meth:`RunReporter.accept`), sent as its handler
starts, never before it: a refused accept (the offer ran out and the run moved on)
stops the handler, which reports nothing, as when a touch is refused."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from flo_redis._aio import sleep_unless_stopped
from flo_redis.actions.results import (
    ResultSerializer,
    check_outcome,
    check_result_data,
    encode_result,
    error_text,
    error_traceback,
)
from flo_redis.actions.workers import Claimed, WorkerOperations
from flo_redis.errors import (
    NonRetryableError,
    PermissionDeniedError,
    ServerError,
    is_connection_error,
)
from flo_redis.retry import is_refused_unrun
from flo_redis.types import Reason, RunStatus, WorkerFailOptions
from flo_redis.worker.coalescer import Coalescer
from flo_redis.worker.context import ActionResult
from flo_redis.worker.delivery import drop_refused, send_report
from flo_redis.worker.handlers import HandlerTimeout
from flo_redis.worker.observe import WorkerObserver, overrides

if TYPE_CHECKING:
    from flo_redis.worker.context import ActionContext

log = logging.getLogger("flo_redis.worker")

# How often batched load / completed counters are sent.
COUNTS_INTERVAL_S = 0.2


@dataclass(slots=True)
class Completed:
    """The handler returned: complete the run with its encoded result."""

    data: bytes
    outcome: str = "success"
    handled: ClassVar[str] = "completed"

    async def deliver(self, to: RunReporter, ctx: ActionContext) -> None:
        # Into the next batch, answered there: nothing to wait for here.
        to.complete(ctx, self)

    async def resend(self, to: RunReporter, ctx: ActionContext, item: _Own) -> None:
        """The batch carrying this complete lost its connection: send it again."""
        answers: list[ServerError | None] = []

        async def send() -> None:
            answers.append(await to.submit_complete(ctx.action_name, item))

        if await to.send(ctx, "complete", send, sent=1):
            await self.answered(to, ctx, answers[-1])

    async def answered(
        self, to: RunReporter, ctx: ActionContext, refusal: ServerError | None
    ) -> None:
        """The store's answer to this complete: ``None`` (accepted) or its refusal."""
        if refusal is None:
            to.observer.run_completed(ctx.action_name, self.outcome)
        elif refusal.reason == Reason.FIELD_TOO_LONG:
            # A result the store will never accept fails its run at once, for good:
            # running the handler again would most likely produce the same result.
            await Failed(f"result refused: {refusal}", retry=False).deliver(to, ctx)
        else:
            what = f"complete of {ctx.task_id}"
            drop_refused(what, refusal, log, report="complete", observer=to.observer)


@dataclass(slots=True)
class Failed:
    """The handler raised or timed out: fail the attempt (retried if ``retry``)."""

    message: str
    retry: bool = True
    traceback: str = ""
    error: BaseException | None = None  # what failed the attempt, for on_failure
    handled: ClassVar[str] = "failed"

    async def deliver(self, to: RunReporter, ctx: ActionContext) -> None:
        options = WorkerFailOptions(
            retry=self.retry, token=ctx.token, traceback=self.traceback or None
        )

        async def send() -> None:
            try:
                after = await to.ops.fail(
                    to.worker_id, ctx.action_name, ctx.task_id, self.message, options
                )
            except PermissionDeniedError as exc:
                to.refuse(exc)
                raise
            to.observer.run_failed(ctx.action_name, after == RunStatus.PENDING)

        await to.send(ctx, "fail", send)


@dataclass(slots=True)
class Released:
    """The worker stops before the handler ended: give the run back unspent."""

    async def deliver(self, to: RunReporter, ctx: ActionContext) -> None:
        to.left()

        async def send() -> None:
            try:
                await to.ops.release(to.worker_id, ctx.action_name, ctx.task_id, ctx.token)
            except ServerError as exc:
                to.observer.report_refused("release")
                log.info("release of %s refused (%s)", ctx.task_id, exc)
            else:
                to.observer.run_released(ctx.action_name)

        await to.send(ctx, "release", send)


@dataclass(slots=True)
class Dropped:
    """The run's lease was lost (it moved on): nobody takes a report."""

    handled: ClassVar[str] = "lease_lost"

    async def deliver(self, to: RunReporter, ctx: ActionContext) -> None:
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


class RunReporter:
    """Sends one worker's reports and its load / completed counters."""

    def __init__(
        self,
        ops: WorkerOperations,
        worker_id: str,
        observer: WorkerObserver,
        stopping: Callable[[], bool],
        refuse: Callable[[PermissionDeniedError], None],
        track: Callable[[asyncio.Task[None]], None],
        lost: Callable[[str, int], None] = lambda run_id, token: None,
    ) -> None:
        """``track`` is told of every task the reporter starts (the worker waits for
        them as it waits for its handlers); ``lost(run_id, token)`` of each offered run
        whose accept was refused (its handler is to stop and report nothing)."""
        self.ops = ops
        self.worker_id = worker_id
        self.observer = observer
        # Whether to tell the observer of each accepted complete (a hook of its own).
        self.tell_completed = overrides(observer, "run_completed")
        self.refuse = refuse
        self._stopping = stopping
        self._track = track
        self._completes: Coalescer[_Own] = Coalescer(
            self._complete_batch,
            "flo-complete-batches",
            track,
            self._answered,
            tell_accepted=self.tell_completed,
        )
        self._accepts: Coalescer[_Offer] = Coalescer(
            self._accept_batch,
            "flo-accept-batches",
            track,
            self._accept_answered,
            tell_accepted=False,
        )
        self._lost = lost
        self._load_delta = 0
        self._completed_delta = 0

    def claimed(self, count: int) -> None:
        """``count`` runs were handed to this worker."""
        self._load_delta += count

    def left(self) -> None:
        """A run leaves this worker without a complete or a fail."""
        self._load_delta -= 1

    def send(
        self,
        ctx: ActionContext,
        kind: str,
        send: Callable[[], Awaitable[object]],
        *,
        sent: int = 0,
    ) -> Awaitable[bool]:
        """Send one report of ``ctx``'s run, resent while its lease may still hold;
        whether the store took it (``sent``: sends already lost)."""
        return send_report(
            f"{kind} of {ctx.task_id}",
            send,
            self._stopping,
            log,
            sent=sent,
            report=kind,
            observer=self.observer,
            lease_end=lambda: ctx._lease_end,
        )

    def submit_complete(self, action: str, item: _Own) -> Awaitable[ServerError | None]:
        """Complete ``item`` in the next batch of ``action``'s completes; its refusal."""
        return self._completes.submit(action, item)

    def complete(self, ctx: ActionContext, report: Completed) -> None:
        """Complete ``ctx``'s run in the next batch of its action's completes; its answer
        is dealt with when the batch is answered (:meth:`_answered`)."""
        item = _new_own(_Own, (ctx.task_id, ctx.token, report.data, report.outcome, ctx, report))
        self._completes.post(ctx.action_name, item)

    def _answered(
        self, item: _Own, refusal: ServerError | None, error: BaseException | None
    ) -> None:
        """The answer to a complete posted by :meth:`complete` (an accepted one only
        when the observer is to be told of it)."""
        ctx, report = item.ctx, item.report
        if error is not None:
            self._complete_failed(ctx, report, item, error)
        elif refusal is None:
            self.observer.run_completed(ctx.action_name, report.outcome)
        else:
            self._spawn(report.answered(self, ctx, refusal), ctx)

    def _complete_failed(
        self, ctx: ActionContext, report: Completed, item: _Own, error: BaseException
    ) -> None:
        if is_connection_error(error) or is_refused_unrun(error):
            log.info("complete of %s: not answered (%s); sending again", ctx.task_id, error)
            self._spawn(report.resend(self, ctx, item), ctx)
        elif isinstance(error, PermissionDeniedError):
            self.refuse(error)
        elif not isinstance(error, asyncio.CancelledError):
            log.error("complete of %s failed: %r", ctx.task_id, error, exc_info=error)

    def accept(self, run: Claimed, window_s: float) -> None:
        """Accept ``run``, offered to the worker's poller by a hand-off with an offer
        window of ``window_s``, in the next batch of its action's accepts (call it once
        the run is started: the batch goes out after the handler's first step, so it
        never delays the start). Answered in :meth:`_accept_answered`."""
        until = asyncio.get_running_loop().time() + window_s
        offer = _new_offer(_Offer, (run.action, run.run_id, run.token, until))
        self._accepts.post(run.action, offer)

    def _accept_answered(
        self, item: _Offer, refusal: ServerError | None, error: BaseException | None
    ) -> None:
        """The answer to an accept that was not accepted: its refusal (the run moved on:
        its handler stops), or the error its batch failed with (sent again, alone, while
        the offer may still stand)."""
        if refusal is not None:
            self.observer.report_refused("accept")
            log.warning("run %s was not accepted in time (%s); stopping it", item.run_id, refusal)
            self._lost(item.run_id, item.token)
        elif error is not None:
            if is_connection_error(error) or is_refused_unrun(error):
                log.info("accept of %s: not answered (%s); sending again", item.run_id, error)
                self._track(
                    asyncio.create_task(self._accept_again(item), name=f"flo-accept-{item.run_id}")
                )
            elif isinstance(error, PermissionDeniedError):
                self.refuse(error)
            elif not isinstance(error, asyncio.CancelledError):
                log.error("accept of %s failed: %r", item.run_id, error, exc_info=error)

    async def _accept_again(self, item: _Offer) -> None:
        """Send ``item``'s accept again, alone, until answered or its offer surely ran
        out (then its complete or touch tells)."""
        answers: list[ServerError | None] = []

        async def send() -> None:
            answers.append(await self._accepts.submit(item.action, item))

        if await send_report(
            f"accept of {item.run_id}",
            send,
            self._stopping,
            log,
            sent=1,
            report="accept",
            observer=self.observer,
            lease_end=lambda: item.until,
        ):
            self._accept_answered(item, answers[-1], None)

    async def _accept_batch(
        self, action: str, items: Sequence[_Offer]
    ) -> Sequence[ServerError | None]:
        packed: list[str | int] = []
        for item in items:
            packed += (item.run_id, item.token)
        return await self.ops._accept(self.worker_id, self.ops._action_keys(action, None), packed)

    def _spawn(self, coro: Coroutine[Any, Any, None], ctx: ActionContext) -> None:
        self._track(asyncio.create_task(coro, name=f"flo-complete-{ctx.task_id}"))

    async def _complete_batch(
        self, action: str, items: Sequence[_Own]
    ) -> Sequence[ServerError | None]:
        answers = await self.ops._complete_many(
            self.worker_id, action, items, tally=False, claimed=True
        )
        applied = answers.count(None)
        self._load_delta -= applied
        self._completed_delta += applied
        return answers

    async def flush_counts(self) -> None:
        """Send the load and completed counters gathered since the last flush."""
        load, completed = self._load_delta, self._completed_delta
        if load or completed:
            self._load_delta -= load
            self._completed_delta -= completed
            try:
                await self.ops.tally(self.worker_id, load, completed)
            except Exception:
                self._load_delta += load
                self._completed_delta += completed
                raise

    async def counts_loop(self, stop: asyncio.Event) -> None:
        """Flush the counters every :data:`COUNTS_INTERVAL_S` until ``stop``."""
        while not await sleep_unless_stopped(stop, COUNTS_INTERVAL_S):
            try:
                await self.flush_counts()
            except Exception as exc:
                log.debug("counter update failed (%s); retrying later", exc)

    async def close(self) -> None:
        """Send the batched accepts and completes, then the counters (best effort)."""
        await self._accepts.close()
        await self._completes.close()
        try:
            await self.flush_counts()
        except Exception as exc:
            log.debug("last counter update failed (%s)", exc)


class _Own(NamedTuple):
    """One complete of a batch, made by :meth:`RunReporter.complete`: the item sent
    (:class:`OwnComplete`, read from the run's context and report) and what its answer
    is dealt with by; one small tuple, no task or future."""

    task_id: str
    token: int | None
    result: bytes
    outcome: str
    ctx: ActionContext
    report: Completed


# Makes an _Own from a tuple of its fields in C, without the named tuple's Python-level
# __new__: one is made per complete.
_new_own = tuple.__new__


class _Offer(NamedTuple):
    """One accept of a batch, made by :meth:`RunReporter.accept`: the run offered (its
    action, id and token), and the loop time by which its offer has surely run out."""

    action: str
    run_id: str
    token: int
    until: float


_new_offer = tuple.__new__


__all__ = [
    "Completed",
    "Dropped",
    "Failed",
    "Released",
    "Report",
    "RunReporter",
    "completion",
    "failure",
    "stopped_report",
]
