"""The runs an :class:`~flo_redis.worker.ActionWorker` has taken: started in its handler
slots or held in hand, each run's handler with its hooks, and each outcome's report.

Started runs count against the worker's concurrency from the moment they are queued for
a slot until their handler ends: their report is then on its way (a complete in its
action's next batch, anything else in a task of its own), so a slot never waits for one
and the next run in hand starts in it at once. A run in hand (claimed ahead,
:mod:`flo_redis.worker.prefetch`) that will not be started is released without spending its
attempt; so is a started run whose handler never began, or was cancelled by the
worker's own shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from flo_redis._aio import cancel_and_wait
from flo_redis._session.session import Session
from flo_redis.actions.results import JSON, ResultSerializer
from flo_redis.actions.workers import Claimed
from flo_redis.types import ActionRegisterOptions
from flo_redis.worker.context import (
    ActionContext,
    ActionHandler,
    HeldRun,
    RunHolder,
    new_context,
    start_auto_touch,
)
from flo_redis.worker.delivery import Dropped, Failed, Released, failure, stopped_report
from flo_redis.worker.handlers import HandlerRunner, HandlerSlots, HandlerStopped, HandlerTimeout
from flo_redis.worker.observe import NO_OBSERVER, WorkerObserver, overrides, settle
from flo_redis.worker.prefetch import InHand, Prefetch
from flo_redis.worker.run_reporter import Completed, Report, RunReporter, completion

log = logging.getLogger("flo_redis.worker")

# Awaits an observer's hook whose errors must not stop the worker: (name, hook, *args).
HookCaller = Callable[..., Awaitable[None]]


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
        hook: HookCaller,
    ) -> None:
        self._holder = holder  # what each run's context asks (touch, progress, results)
        self._track = track
        self._stopped = stopped
        self._hook = hook
        # The worker's record of each run started (in a handler, or in a slot's queue).
        self._held: dict[str, HeldRun] = {}
        self._concurrency = 1
        self._slots: HandlerSlots[HeldRun] = HandlerSlots(
            self._concurrency,
            self._execute,
            name="flo-handler-slot",
            track=track,
            abandon=self._release,
            log=log,
        )
        self._prefetch = Prefetch(self._concurrency, enabled=False)  # made by configure()
        self._wake = asyncio.Event()  # the poll loop waits for room on it
        self._waiting = False  # ...and is waiting now
        # Made by configure(), once the worker's session and settings are known.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: Session
        self._worker_id = ""
        self._namespace = ""
        self._serializer: ResultSerializer = JSON
        self._observer: WorkerObserver = NO_OBSERVER
        self._hooks_before = self._hooks_after = self._tell_ended = True
        self._tell_claimed = self._tell_handled = True
        self._auto_touch = False
        self._handlers: Mapping[str, ActionHandler] = {}
        self._options: Mapping[str, ActionRegisterOptions] = {}
        self._lease_s: dict[str, float] = {}
        self._handler_runner: HandlerRunner
        self._reports: RunReporter

    def reset(self, concurrency: int) -> None:
        """Before a start: slots for ``concurrency`` handlers (the worker's setting as
        it is then)."""
        self._concurrency = concurrency
        self._slots.reset()
        self._slots.size = concurrency

    def configure(
        self,
        *,
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
        """Once the worker is set up, before any run is taken."""
        self._loop = asyncio.get_running_loop()
        self._session = session
        self._worker_id = worker_id
        self._namespace = session.namespace
        self._serializer = serializer
        self._observer = observer
        self._auto_touch = auto_touch
        self._handlers = handlers
        self._options = options
        self._handler_runner = runner
        self._reports = reports
        self._lease_s = {
            name: o.timeout_ms / 1000.0 for name, o in options.items() if o.timeout_ms > 0
        }
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
        now = self._time()
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
        """The poll loop ended: release the runs in hand, which will not be started,
        without spending their attempts, and let the slots end once their queue is
        empty."""
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
        """A started run whose handler never began (its slot was cancelled): release
        it without spending its attempt."""
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
        """The handler finished (at loop time ``now``): its slot is free while its
        report is still on the way (a pending report uses no handler capacity;
        ``current_load`` counts handlers), so the next run in hand starts in it."""
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

    def _time(self) -> float:
        """The event loop's time (asking asyncio for the loop on every run costs a
        getpid() system call on Python 3.11)."""
        return (self._loop or asyncio.get_running_loop()).time()

    # --- one run ------------------------------------------------------------------------

    def _hold(self, run: Claimed, claimed_at: float) -> HeldRun:
        """The worker's record of ``run``, claimed at loop time ``claimed_at``, with its
        handler's context."""
        lease_s = self._lease_s.get(run.action)
        ctx = new_context(
            run.run_id,
            run.action,
            run.payload,
            run.attempt,
            run.created_at_ms,
            self._namespace,
            self._holder,
            run.token,
            run.trace,
        )
        return HeldRun(ctx, claimed_at, lease_s)

    async def _execute(self, held: HeldRun, slot: asyncio.Task[Any]) -> None:
        """Run one started run's handler with its hooks, in the handler slot ``slot``,
        through the handler runner (its time limit counted from when it began, its
        lease kept alive meanwhile with ``auto_touch``); its report is on its way when
        this returns."""
        loop = self._loop or asyncio.get_running_loop()
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
                report = failure(ctx, exc, self._worker_id)
            else:
                handler = self._handlers.get(ctx.action_name)
                if handler is None:
                    report = Failed(f"No handler for: {ctx.action_name}", retry=True)
                elif held.revoked:
                    report = Dropped()  # cancelled before its handler began
                else:
                    runner = self._handler_runner
                    running = held.running = runner.running(held.cancel, handler_began)
                    toucher = None
                    if self._auto_touch:
                        timeout_ms = self._options[ctx.action_name].timeout_ms
                        toucher = start_auto_touch(
                            self._session, self._worker_id, held, running, timeout_ms
                        )
                    try:
                        result = await runner.run(handler, ctx, running, slot)
                    except (HandlerTimeout, HandlerStopped) as stop:
                        report = stopped_report(stop)
                    except Exception as exc:
                        report = failure(ctx, exc, self._worker_id)
                    else:
                        if type(result) is bytes:  # completion's common case
                            report = Completed(result)
                        else:
                            report = completion(ctx, result, self._serializer, self._worker_id)
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

    # --- cancel notices -----------------------------------------------------------------

    def revoke(self, run_id: str, token: int, why: str = "was cancelled") -> None:
        """A cancel notice (:mod:`flo_redis._session.notices`), or a refused accept (``why``:
        the run's offer ran out and it moved on): the run is no longer this hand-out's,
        so its handler is cancelled as for a lost lease (a sync handler sees
        ``ctx.cancelled``) and reports nothing. A run in hand is dropped unstarted."""
        held = self._held.get(run_id)
        if held is None and self._prefetch.take(run_id, token) is not None:
            log.info("run %s %s before its handler began", run_id, why)
            self._reports.left()
            return
        if held is None or held.token != token or held.revoked:
            return
        log.info("run %s %s; cancelling its handler", run_id, why)
        held.revoke()
