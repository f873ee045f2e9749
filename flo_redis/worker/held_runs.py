"""The runs an :class:`~flo_redis.worker.ActionWorker` has taken: started in its handler
slots or held in hand, each run's handler with its hooks, and each outcome's report.

Started runs count against the worker's concurrency from the moment they are queued for
a slot until their handler ends: their report is then on its way (a complete in its
action's next batch, anything else in a task of its own), so a slot never waits for one
and the next run in hand starts in it at once.

**Runs in hand** (:class:`Prefetch`). A worker whose handlers are short would sit idle
for every claim's round trip, so while a backlog lasts it keeps a few claimed runs in
hand (each under its lease, with its token) and its next claim in flight while its
handlers run. How many: enough to cover twice the time a claim takes at the rate the
handlers finish (``2 * concurrency * claim time / handler time``), never more than the
concurrency. Long handlers make it none (one second per handler and a millisecond per
claim make 0.2 of a run at concurrency 100): their runs wait in the queue, where any
worker can take them; short ones make it at most what the handlers finish within two
claim round trips, so no other worker waits longer, and a run of a lower priority
number queued meanwhile overtakes at most that. A run in hand whose lease is half gone
is given back instead of started (a handler's auto-touch touches at a third of the
lease from its start: still before the end of a lease started half a lease earlier).
A run in hand that will not be started is released without spending its attempt; so
is a started run whose handler never began, or was cancelled by the worker's shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NamedTuple

from flo_redis._aio import cancel_and_wait
from flo_redis._session.session import Session
from flo_redis.actions.results import ResultSerializer
from flo_redis.actions.workers import Claimed
from flo_redis.types import ActionRegisterOptions
from flo_redis.worker.context import (
    ActionContext,
    ActionHandler,
    HeldRun,
    RunHolder,
    hold,
    start_auto_touch,
)
from flo_redis.worker.delivery import Dropped, Failed, Released, failure, stopped_report
from flo_redis.worker.handlers import HandlerRunner, HandlerStopped, HandlerTimeout
from flo_redis.worker.observe import WorkerObserver, overrides, settle
from flo_redis.worker.run_reporter import Completed, Report, RunReporter, completion
from flo_redis.worker.slots import HandlerSlots

log = logging.getLogger("flo_redis.worker")

# How much a new sample moves an estimate (exponentially weighted mean).
_WEIGHT = 0.2
# What a claim is taken to cost until one was timed (seconds).
_FIRST_CLAIM_S = 0.001


class InHand(NamedTuple):
    """A run claimed ahead, and when (event-loop time) its claim was answered."""

    run: Claimed
    claimed_at: float


class Prefetch:
    """The runs a worker holds ahead of its handlers, and how many it may hold."""

    __slots__ = ("_claim_s", "_handler_s", "backlog", "concurrency", "enabled", "runs")

    def __init__(self, concurrency: int, *, enabled: bool) -> None:
        self.concurrency = concurrency
        self.enabled = enabled
        self.runs: deque[InHand] = deque()
        self._claim_s = _FIRST_CLAIM_S
        self._handler_s = 0.0  # not known until a handler ended: hold nothing before
        self.backlog = False  # the last poll took all it asked for: claim ahead

    def depth(self) -> int:
        """How many claimed runs to hold beyond the running handlers."""
        if not self.enabled or self._handler_s <= 0.0:
            return 0
        ahead = 2.0 * self.concurrency * self._claim_s / self._handler_s
        return self.concurrency if ahead >= self.concurrency else int(ahead)

    def room(self, running: int) -> int:
        """How many runs the next poll may take now, with ``running`` handlers started (0:
        wait): with a slot free, every free slot and the runs to hold in hand; with every
        slot busy, a claim ahead once the runs in hand fell to half of what to hold."""
        concurrency = self.concurrency
        depth = self.depth() if self.backlog else 0
        room = concurrency + depth - running - len(self.runs)
        if running < concurrency:
            return room
        return room if depth and room >= max(1, depth // 2) else 0

    def polled(self, taken: int, room: int, ahead: bool, took_s: float) -> None:
        """A poll for ``room`` runs (``ahead``: every slot busy) took ``taken`` runs in
        ``took_s`` seconds."""
        self.backlog = taken >= room
        if ahead or taken >= room > 1:  # answered without waiting for work: timed
            self._claim_s += _WEIGHT * (took_s - self._claim_s)

    def handler_took(self, seconds: float) -> None:
        """A handler ended ``seconds`` after it began."""
        seconds = max(seconds, 1e-6)
        if self._handler_s <= 0.0:
            self._handler_s = seconds
        else:
            self._handler_s += _WEIGHT * (seconds - self._handler_s)

    def take(self, run_id: str, token: int) -> InHand | None:
        """Remove and return the run in hand with this id and token, if any."""
        for held in self.runs:
            if held.run.run_id == run_id and held.run.token == token:
                self.runs.remove(held)
                return held
        return None


class ActionRuns:
    """One worker's runs in flight and in hand: :meth:`start` takes what a poll
    claimed (or what was handed to its poller), :meth:`room` says how much the next poll
    may take, :meth:`revoke` stops a cancelled run's handler."""

    def __init__(
        self,
        holder: RunHolder,
        *,
        track: Callable[[asyncio.Task[None]], None],
        stopped: Callable[[], bool],
        hook: Callable[..., Awaitable[None]],
    ) -> None:
        self._holder = holder  # what each run's context asks (touch, progress, results)
        self._track = track
        self._stopped = stopped
        self._hook = hook  # awaits an observer's hook whose errors must not stop the worker
        # The worker's record of each run started (in a handler, or in a slot's queue).
        self._held: dict[str, HeldRun] = {}
        self._concurrency = 1  # and the rest, set by configure() before any run is taken
        self._slots: HandlerSlots[HeldRun] = HandlerSlots(
            self._concurrency,
            self._execute,
            name="flo-handler-slot",
            track=track,
            abandon=self._release,
            log=log,
        )
        self._wake = asyncio.Event()  # the poll loop waits for room on it
        self._waiting = False  # ...and is waiting now

    def configure(
        self,
        *,
        concurrency: int,
        session: Session,
        worker_id: str,
        serializer: ResultSerializer,
        observer: WorkerObserver,
        auto_touch: bool,
        handlers: Mapping[str, ActionHandler],
        options: Mapping[str, ActionRegisterOptions],
        runner: HandlerRunner,
        reports: RunReporter,
    ) -> None:
        """Once the worker is set up, before any run is taken: slots for ``concurrency``
        handlers (the worker's setting as it is then)."""
        self._concurrency = concurrency
        self._slots.reset()
        self._slots.size = concurrency
        self._loop: asyncio.AbstractEventLoop = asyncio.get_running_loop()
        self._session = session
        self._worker_id = worker_id
        self._namespace = session.namespace
        self._serializer = serializer
        self._observer = observer
        self._handlers = handlers
        self._handler_runner = runner
        self._reports = reports
        self._lease_s = {n: o.timeout_ms / 1000.0 for n, o in options.items() if o.timeout_ms > 0}
        # The lease each action's handler keeps alive while it runs (0: none).
        self._touch_ms = {n: o.timeout_ms if auto_touch else 0 for n, o in options.items()}
        # Runs in hand would count against a limit shared with other workers while they
        # wait, so a worker serving a limited action claims only for free slots.
        limited = any(o.max_concurrency or o.rate_limit for o in options.values())
        self._prefetch = Prefetch(self._concurrency, enabled=not limited)
        # The run hooks the observer has (set before start): only those are called.
        self._hooks_before = overrides(observer, "before_run")
        self._hooks_after = overrides(observer, "after_run")
        self._tell_ended = overrides(observer, "run_ended")
        self._tell_claimed = overrides(observer, "run_claimed")
        self._tell_handled = overrides(observer, "run_handled")

    # --- room for the next poll -------------------------------------------------------

    def full(self) -> bool:
        """Every slot is busy: a poll now claims ahead."""
        return len(self._held) >= self._concurrency

    async def room(self) -> int:
        """How many runs the next poll may take now (:meth:`Prefetch.room`), or 0 once
        there is room after waiting for it (or the worker is stopping: :meth:`wake_poll`)."""
        room = self._prefetch.room(len(self._held))
        if room > 0:
            return room
        self._wake.clear()
        self._waiting = True
        try:
            await self._wake.wait()
        finally:
            self._waiting = False
        # Let handlers finishing in the same moment free their slots too, so the next
        # claim fills several at once.
        await asyncio.sleep(0)
        return 0

    def wake_poll(self) -> None:
        """A poll loop waiting for room goes on (the worker stops)."""
        self._wake.set()

    def polled(self, taken: Sequence[Claimed], room: int, ahead: bool, took_s: float) -> None:
        """A poll for ``room`` runs (``ahead``: every slot busy) took ``taken``."""
        self._prefetch.polled(len(taken), room, ahead, took_s)

    # --- starting runs ------------------------------------------------------------------

    def start(self, runs: list[Claimed]) -> None:
        """Start ``runs``, claimed or handed to the poller (it calls this), in free
        slots; the rest are held in hand, in order."""
        self._reports.claimed(len(runs))
        now = self._loop.time()  # the loop kept: asking asyncio for it costs a getpid()
        in_hand = self._prefetch.runs
        concurrency = self._concurrency
        if self._tell_claimed:
            for run in runs:
                pickup_ms = max(0, run.claimed_at_ms - run.ready_at_ms)
                self._observer.run_claimed(run.action, pickup_ms / 1000)
        for run in runs:
            if not in_hand and len(self._held) < concurrency:
                self._start(run, now)
            else:
                in_hand.append(InHand(run, now))
        self._slots.wake()

    def _start(self, run: Claimed, claimed_at: float) -> None:
        """Count ``run`` as running and queue it for a handler slot (the caller wakes
        one, or is a slot that goes on to it)."""
        held = self._held[run.run_id] = self._hold(run, claimed_at)
        self._slots.queue.append(held)

    def stop_taking(self) -> None:
        """The poll loop ended: release the runs in hand unspent (they will not be
        started), and let the slots end once their queue is empty."""
        while self._prefetch.runs:
            self._give_back(self._prefetch.runs.popleft())
        self._slots.close()

    def load(self) -> int:
        """How many runs are started (in a handler, or queued for a slot)."""
        return len(self._held)

    def in_handler(self) -> list[asyncio.Task[None]]:
        """The slots' tasks: each is in a handler or idle, and either may be cancelled."""
        return list(self._slots.tasks)

    def held(self, ctx: ActionContext) -> HeldRun | None:
        """The worker's record of ``ctx``'s run, while this hand-out of it is started."""
        held = self._held.get(ctx.task_id)
        return held if held is not None and held.ctx is ctx else None

    def _give_back(self, waiting: InHand) -> None:
        self._deliver(Released(), self._hold(waiting.run, waiting.claimed_at))

    def _release(self, held: HeldRun) -> None:
        """A started run whose handler never began (its slot was cancelled): released unspent."""
        if self._held.get(held.task_id) is held:
            del self._held[held.task_id]
        self._deliver(Released(), held)

    def _deliver(self, report: Report, held: HeldRun) -> None:
        """Send ``report`` of ``held``'s run: a complete into its batch, any other in a
        task of its own, so a handler slot never waits for a report."""
        if isinstance(report, Completed):
            self._reports.complete(held, report)
        else:
            send = report.deliver(self._reports, held)
            self._track(asyncio.create_task(send, name=f"flo-report-{held.task_id}"))

    def _handler_done(self, run_id: str, now: float) -> None:
        """The handler finished (at loop time ``now``): its slot is free, its report on
        the way (``current_load`` counts handlers), so the next run in hand starts."""
        if self._held.pop(run_id, None) is None:
            return  # told already (a cancelled handler's run was given back)
        in_hand = self._prefetch.runs
        if in_hand and not self._stopped():
            lease_s = self._lease_s
            while in_hand and len(self._held) < self._concurrency:
                waiting = in_hand.popleft()
                lease = lease_s.get(waiting.run.action)
                if lease is not None and now - waiting.claimed_at > lease / 2:
                    self._give_back(waiting)  # half its lease spent waiting
                else:
                    self._start(waiting.run, waiting.claimed_at)  # the slot ending goes on
        if self._waiting and self._prefetch.room(len(self._held)) > 0:
            self._wake.set()

    # --- one run ------------------------------------------------------------------------

    def _hold(self, run: Claimed, claimed_at: float) -> HeldRun:
        lease_s = self._lease_s.get(run.action)
        return hold(run, claimed_at, lease_s, self._namespace, self._holder)

    async def _execute(self, held: HeldRun, slot: asyncio.Task[Any]) -> None:
        """Run one started run's handler with its hooks, in the handler slot ``slot``,
        through the handler runner (its time limit counted from when it began, its
        lease kept alive meanwhile with ``auto_touch``); its report is on its way when
        this returns."""
        loop = self._loop
        began = handler_began = loop.time()
        ctx = held.ctx
        report: Report
        ended: float | None = None
        observer = self._observer
        try:
            try:
                if self._hooks_before:
                    await settle(observer.before_run(ctx))
                    handler_began = loop.time()  # the hook's time is not the handler's
            except Exception as exc:
                report = failure(exc)
            else:
                handler = self._handlers.get(ctx.action_name)
                if handler is None:
                    report = Failed(f"No handler for: {ctx.action_name}", retry=True)
                elif held.revoked:
                    report = Dropped()  # cancelled before its handler began
                else:
                    runner = self._handler_runner
                    running = held.running = runner.running(held.cancel, handler_began)
                    touch_ms = self._touch_ms.get(ctx.action_name, 0)
                    toucher = None
                    if touch_ms > 0:
                        toucher = start_auto_touch(
                            self._session, self._worker_id, held, running, touch_ms
                        )
                    try:
                        result = await runner.run(handler, ctx, running, slot)
                    except (HandlerTimeout, HandlerStopped) as stop:
                        report = stopped_report(stop)
                    except Exception as exc:
                        report = failure(exc)
                    else:
                        if type(result) is bytes:  # completion's common case
                            report = Completed(result)
                        else:
                            report = completion(result, self._serializer)
                    finally:
                        if toucher is not None:
                            await cancel_and_wait(toucher)
                        held.running = None  # it ended (the record holds no cycle)
            if isinstance(report, Completed):
                if self._hooks_after:
                    await self._hook("after_run", observer.after_run, ctx, report.data)
            elif isinstance(report, Failed):
                error = report.error or RuntimeError(report.message)
                await self._hook("on_failure", observer.on_failure, ctx, error)
            ended = loop.time()
            if not isinstance(report, Released):
                self._prefetch.handler_took(ended - began)
                if self._tell_handled:
                    observer.run_handled(ctx.action_name, report.handled, ended - began)
        except asyncio.CancelledError:
            # Shutdown: hand the run back without counting the attempt. The handler is
            # over, so an abort that cancels again does not cancel the release.
            self._handler_done(ctx.task_id, loop.time())
            await Released().deliver(self._reports, held)
            raise
        finally:
            self._handler_done(ctx.task_id, loop.time() if ended is None else ended)
            if self._tell_ended:
                observer.run_ended(ctx)
        if type(report) is Completed:
            self._reports.complete(held, report)
        else:
            self._deliver(report, held)

    def revoke(self, run_id: str, token: int, why: str = "was cancelled") -> None:
        """A cancel notice (:mod:`flo_redis._session.notices`), or a refused accept (``why``:
        its offer ran out): the run is no longer this hand-out's, so its handler is
        cancelled as for a lost lease and reports nothing; a run in hand is dropped."""
        held = self._held.get(run_id)
        if held is None and self._prefetch.take(run_id, token) is not None:
            log.info("run %s %s before its handler began", run_id, why)
            self._reports.left()
            return
        if held is None or held.token != token or held.revoked:
            return
        log.info("run %s %s; cancelling its handler", run_id, why)
        held.revoke()
