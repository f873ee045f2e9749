"""One worker's reports and counters: what a handler's return becomes (:class:`Completed`),
completes and accepts coalesced into batches (:mod:`flo_redis.worker.coalescer`), each
answer dealt with where it arrives, and the load and completed counters, sent in
batches. The other reports (a fail, a release) and how a report is resent:
:mod:`flo_redis.worker.delivery`.

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
from typing import Any, ClassVar, NamedTuple

from flo_redis._aio import sleep_unless_stopped
from flo_redis._session.session import Session
from flo_redis._wire.keys import action_keys
from flo_redis._wire.replies import Claimed
from flo_redis.actions import reports
from flo_redis.actions.graph import deps_request
from flo_redis.actions.results import (
    ResultSerializer,
    check_outcome,
    check_result_data,
    encode_result,
)
from flo_redis.errors import (
    NotDurableError,
    PermissionDeniedError,
    ServerError,
    is_connection_error,
)
from flo_redis.retry import is_refused_unrun
from flo_redis.types import Reason, WaitFor
from flo_redis.worker.coalescer import Coalescer
from flo_redis.worker.context import ActionResult, HeldRun
from flo_redis.worker.delivery import (
    Dropped,
    Failed,
    Released,
    Suspended,
    drop_refused,
    failure,
    send_report,
)
from flo_redis.worker.observe import WorkerObserver, overrides
from flo_redis.worker.replay import Replay

log = logging.getLogger("flo_redis.worker")

# How often batched load / completed counters are sent.
COUNTS_INTERVAL_S = 0.2


@dataclass(slots=True)
class Completed:
    """The handler returned: complete the run with its encoded result (in its action's
    next batch of completes, answered there)."""

    data: bytes
    outcome: str = "success"
    handled: ClassVar[str] = "completed"

    async def deliver(self, to: RunReporter, held: HeldRun) -> None:
        to.complete(held, self)


Report = Completed | Failed | Released | Dropped | Suspended


def completion(
    result: object, serializer: ResultSerializer
) -> Completed | Failed | Released | Suspended:
    """What a handler's return value becomes: an :class:`ActionResult` as it is, a
    :class:`WaitFor` a wait for more runs, any other value encoded by ``serializer`` (one
    it cannot encode fails the run, as do runs to wait for that are not run ids)."""
    if type(result) is bytes:  # the common case, as encode_result answers it
        return Completed(result)
    try:
        if isinstance(result, WaitFor):
            return Suspended(deps_request(result.depends_on, None))
        if isinstance(result, ActionResult):
            return Completed(check_result_data(result.data), check_outcome(result.outcome))
        return Completed(encode_result(result, serializer))
    except Exception as exc:  # a bad outcome, or a serializer's own error: the run fails
        return failure(exc)


class RunReporter:
    """Sends one worker's reports and its load / completed counters."""

    def __init__(
        self,
        session: Session,
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
        self.session = session
        self.worker_id = worker_id
        self.observer = observer
        # Whether to tell the observer of each accepted complete (a hook of its own).
        self.tell_completed = overrides(observer, "run_completed")
        self.refuse = refuse
        self._stopping = stopping
        self._track = track
        self._completes: Coalescer[HeldRun] = Coalescer(
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
        # Completes answered lately, sent again after an outage (flo_redis.worker.replay).
        self.replay: Replay[HeldRun] = Replay(
            "completes", self._complete_again, asyncio.get_running_loop().time
        )
        self._load_delta = 0
        self._completed_delta = 0

    def claimed(self, count: int) -> None:
        """``count`` runs were handed to this worker."""
        self._load_delta += count

    def left(self) -> None:
        """A run leaves this worker without a complete or a fail."""
        self._load_delta -= 1

    def send(
        self, held: HeldRun, kind: str, send: Callable[[], Awaitable[object]], *, sent: int = 0
    ) -> Awaitable[bool]:
        """Send one report of ``held``'s run, resent while its lease may still hold;
        whether the store took it (``sent``: sends already lost)."""
        return send_report(
            f"{kind} of {held.task_id}",
            send,
            self._stopping,
            log,
            sent=sent,
            report=kind,
            observer=self.observer,
            lease_end=lambda: held.lease_end,
        )

    def complete(self, held: HeldRun, report: Completed) -> None:
        """Complete ``held``'s run in the next batch of its action's completes; its
        answer is dealt with when the batch is answered (:meth:`_answered`)."""
        held.result = report.data
        held.outcome = report.outcome
        self._completes.post(held.ctx.action_name, held)

    def _answered(
        self, held: HeldRun, refusal: ServerError | None, error: BaseException | None
    ) -> None:
        """The answer to a complete posted by :meth:`complete` (an accepted one only
        when the observer is to be told of it)."""
        if error is not None:
            self._complete_failed(held, error)
        elif refusal is None:
            self.observer.run_completed(held.ctx.action_name, held.outcome)
        else:
            self._spawn(self._refused(held, refusal), held.task_id)

    def _complete_failed(self, held: HeldRun, error: BaseException) -> None:
        # A complete that did not reach the worker's level was applied: its resend, an
        # identical report, is answered once the replicas have it (as delivery's are).
        if (
            is_connection_error(error)
            or is_refused_unrun(error)
            or isinstance(error, NotDurableError)
        ):
            log.info("complete of %s: not answered (%s); sending again", held.task_id, error)
            self._spawn(self._resend(held), held.task_id)
        elif isinstance(error, PermissionDeniedError):
            self.refuse(error)
        elif not isinstance(error, asyncio.CancelledError):
            log.error("complete of %s failed: %r", held.task_id, error, exc_info=error)

    async def _resend(self, held: HeldRun) -> None:
        """The batch carrying ``held``'s complete lost its connection, or was not
        answered at the worker's level: send it again."""
        answers: list[ServerError | None] = []

        async def send() -> None:
            answers.append(await self._completes.submit(held.ctx.action_name, held))

        if await self.send(held, "complete", send, sent=1):
            refusal = answers[-1]
            if refusal is None:
                self.observer.run_completed(held.ctx.action_name, held.outcome)
            else:
                await self._refused(held, refusal)

    async def _refused(self, held: HeldRun, refusal: ServerError) -> None:
        """The store refused ``held``'s complete."""
        if refusal.reason == Reason.FIELD_TOO_LONG:
            # A result the store will never accept fails its run at once, for good:
            # running the handler again would most likely produce the same result.
            await Failed(f"result refused: {refusal}", retry=False).deliver(self, held)
        else:
            what = f"complete of {held.task_id}"
            drop_refused(what, refusal, log, report="complete", observer=self.observer)

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
        keys = action_keys(self.session.namespace, action)
        return await reports.accept(self.session, self.worker_id, keys, packed)

    def _spawn(self, coro: Coroutine[Any, Any, None], run_id: str) -> None:
        self._track(asyncio.create_task(coro, name=f"flo-complete-{run_id}"))

    async def _complete_batch(
        self, action: str, items: Sequence[HeldRun]
    ) -> Sequence[ServerError | None]:
        answers, _ = await reports.complete_many(
            self.session, self.worker_id, action, items, claimed=True
        )
        # Each accepted, an identical resend too: a batch whose answer was lost is
        # counted once, when its resend is answered.
        applied = answers.count(None)
        self._load_delta -= applied
        self._completed_delta += applied
        self.replay.answered(action, items, answers)
        return answers

    async def _complete_again(self, action: str, items: Sequence[HeldRun]) -> int:
        """Send completes the store answered before an outage again, not counted again
        (:mod:`flo_redis.worker.replay`); how many had been lost and took effect now."""
        _, applied = await reports.complete_many(
            self.session, self.worker_id, action, items, claimed=True
        )
        return applied

    async def flush_counts(self) -> None:
        """Send the load and completed counters gathered since the last flush."""
        load, completed = self._load_delta, self._completed_delta
        if load or completed:
            self._load_delta -= load
            self._completed_delta -= completed
            try:
                await reports.tally(
                    self.session, self.worker_id, self.session.namespace, load, completed, 0
                )
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


class _Offer(NamedTuple):
    """One accept of a batch, made by :meth:`RunReporter.accept`: the run offered (its
    action, id and token), and the loop time by which its offer has surely run out."""

    action: str
    run_id: str
    token: int
    until: float


_new_offer = tuple.__new__


__all__ = ["Completed", "Report", "RunReporter", "completion"]
