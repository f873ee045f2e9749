"""``ActionWorker``: flo's high-level action worker, hardened, on Redis.

A worker registers its actions and itself, then loops: claim up to its free capacity in
one script call per action queue (and, while a backlog lasts and its handlers are short,
a few runs ahead of them: :mod:`flo_redis._prefetch`), run each handler under the local
``action_timeout``, and report the outcome with the run's fencing token. Reports never
wait behind a poll (polls hold no connection while they wait), lost reports are resent
and never converted, and ``stop()`` lets running handlers finish and still sends their
results.

The handler's context is :mod:`flo_redis.action_context`, its reports
:mod:`flo_redis._action_reports`, and what both workers share :mod:`flo_redis._lifecycle`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ._action_reports import (
    Completed,
    Dropped,
    Failed,
    Released,
    Report,
    RunReporter,
    completion,
    failure,
    stopped_report,
)
from ._aio import CAN_UNCANCEL, cancel_and_wait, is_async_handler
from ._checks import check_count, check_seconds
from ._gc import YoungGeneration
from ._handlers import HandlerRunner, HandlerStopped, HandlerTimeout
from ._lifecycle import ClientLike, WorkerLifecycle, generate_worker_id, worker_block_ms
from ._poller import ActionPoller
from ._prefetch import InHand, Prefetch
from ._registration import Registration
from ._slots import HandlerSlots
from .action_context import (
    ActionContext,
    ActionHandler,
    ActionResult,
    new_context,
    start_auto_touch,
    touch_run,
)
from .errors import (
    BlockTooLongError,
    NotFoundError,
    ServerError,
)
from .keys import action_keys, check_name
from .notices import Notices
from .observe import overrides, settle
from .progress import encode_progress, report_progress
from .reclaim import Reaper
from .results import (
    JSON,
    ResultSerializer,
    check_handler,
)
from .schedules import Missed, ScheduleDeclaration, check_spec, check_timezone

# flo's module ``flo.worker`` holds the stream worker's classes as well; flo code imports
# them from here, so they are importable from here too (they live in stream_worker.py).
from .stream_worker import (
    StreamContext,
    StreamHandler,
    StreamRecordHandler,
    StreamWorker,
    StreamWorkerOptions,
)
from .types import (
    DEFAULT_WORKER_BLOCK_MS,
    ActionRegisterOptions,
    Reason,
)
from .worker_ops import Claimed, WorkerOperations

log = logging.getLogger("flo_redis.worker")

_HEARTBEAT_INTERVAL_S = 30.0
# A health check that passed this recently is reused by the next poll (a drain or an
# unhealthy verdict is seen within this time).
_HEALTH_TTL_S = 0.5


@dataclass
class ActionWorkerOptions:
    """An ActionWorker's settings. ``block_ms`` 0/None means 30000; above 300000 is
    refused with :class:`BlockTooLongError`. ``tune_gc``: while the worker runs, the
    garbage collector's young generation holds what its runs in flight keep alive
    (``gc.set_threshold``, first value at least ``concurrency * 100``; put back when it
    stops; :mod:`flo_redis._gc`); False leaves the process's collector alone."""

    worker_id: str = ""
    concurrency: int = 10
    action_timeout: float = 300.0
    block_ms: int = DEFAULT_WORKER_BLOCK_MS
    auto_touch: bool = False
    tune_gc: bool = True

    def __post_init__(self) -> None:
        self.block_ms = worker_block_ms(self.block_ms)
        check_count("concurrency", self.concurrency, 1)
        check_seconds("action_timeout", self.action_timeout)


class ActionWorker(WorkerLifecycle):
    """Runs action handlers for runs taken from Redis; flo 0.1.2's ActionWorker API."""

    config: ActionWorkerOptions

    def __init__(
        self,
        parent_client: ClientLike,
        *,
        worker_id: str | None = None,
        concurrency: int = 10,
        action_timeout: float = 300.0,
        block_ms: int = 30000,
        auto_touch: bool = False,
        serializer: ResultSerializer = JSON,
        tune_gc: bool = True,
    ) -> None:
        super().__init__(parent_client)
        self.config = ActionWorkerOptions(
            worker_id=worker_id or generate_worker_id(),
            concurrency=concurrency,
            action_timeout=action_timeout,
            block_ms=block_ms,
            auto_touch=auto_touch,
            tune_gc=tune_gc,
        )
        check_name("worker id", self.config.worker_id)
        self._serializer = serializer
        self._handlers: dict[str, ActionHandler] = {}
        self._options: dict[str, ActionRegisterOptions] = {}
        self._schedules: list[ScheduleDeclaration] = []
        # Runs started (in a handler, or about to be in a slot's queue) and their contexts.
        self._running: set[str] = set()
        self._contexts: dict[str, ActionContext] = {}
        self._slots = HandlerSlots(
            self.config.concurrency,
            self._execute,
            name="flo-handler-slot",
            track=self._track,
            abandon=self._release,
            log=log,
        )
        self._prefetch = Prefetch(self.config.concurrency, enabled=False)  # made by start()
        self._backlog = False  # the last poll took all it asked for: claim ahead
        self._wake = asyncio.Event()  # the poll loop waits for room on it
        self._hooks_before = self._hooks_after = True  # made by start()
        self._tell_claimed = self._tell_handled = True  # ...as are these
        self._waiting = False  # ...and is waiting now
        self._awaited: dict[str, ActionHandler] = {}  # made by start()
        self._lease_s: dict[str, float] = {}  # ...as is each action's lease length (s)
        self._namespace = ""  # ...and the session's namespace
        # The loop the worker runs on, known from start(): asking asyncio for it on
        # every run costs a getpid() system call on Python 3.11.
        self._loop: asyncio.AbstractEventLoop | None = None
        # Made by start(), on the worker's own session.
        self._ops: WorkerOperations
        self._run_handlers: HandlerRunner
        self._registration: Registration
        self._names: list[str]
        self._notices: Notices
        self._reports: RunReporter

    # --- registration --------------------------------------------------------------

    def action(
        self, name: str, options: ActionRegisterOptions | None = None
    ) -> Callable[[ActionHandler], ActionHandler]:
        """Decorator registering ``fn`` as the handler of action ``name``."""

        def decorator(fn: ActionHandler) -> ActionHandler:
            self.register_action(name, fn, options)
            return fn

        return decorator

    def cron(
        self,
        cron_or_interval: str | timedelta,
        *,
        action: str | None = None,
        name: str | None = None,
        input: bytes = b"",
        timezone: str = "UTC",
        missed: Missed | str = Missed.ONCE,
        options: ActionRegisterOptions | None = None,
    ) -> Callable[[ActionHandler], ActionHandler]:
        """Decorator registering ``fn`` as the handler of ``action`` (default: the
        function's name) and scheduling it, as :meth:`ActionOperations.schedule` does,
        when the worker starts. A bad cron expression, interval or time zone is refused
        here (:class:`ValidationError`)."""
        check_spec(cron_or_interval)
        check_timezone(timezone)
        policy = Missed(missed)

        def decorator(fn: ActionHandler) -> ActionHandler:
            action_name = action or str(getattr(fn, "__name__", ""))
            self.register_action(action_name, fn, options)
            self._schedules.append(
                ScheduleDeclaration(action_name, cron_or_interval, name, input, timezone, policy)
            )
            return fn

        return decorator

    def register_action(
        self, name: str, handler: ActionHandler, options: ActionRegisterOptions | None = None
    ) -> None:
        """Register ``handler`` for ``name``; ValueError if the name already has one.
        ``options.namespace`` is ignored: the worker's namespace is used. ``handler`` is
        an ``async def`` function or a plain one (run in a bounded thread pool);
        :class:`ValidationError` for anything that cannot be called."""
        check_name("action name", name)
        check_handler(f"action {name!r}", handler)
        if name in self._handlers:
            raise ValueError(f"Action handler already registered: {name}")
        self._handlers[name] = handler
        self._options[name] = options or ActionRegisterOptions()

    # --- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        """Register and work until :meth:`stop` (or a drain); returns once running
        handlers have finished and their results were sent. Raises
        :class:`PermissionDeniedError` (after that same shutdown) when Redis's ACL refuses
        what a worker needs."""
        if not self._handlers:
            raise ValueError("No action handlers registered")
        young = YoungGeneration(self.config.concurrency) if self.config.tune_gc else None
        if young is not None:
            young.hold()
        try:
            await self._serve()
        finally:
            if young is not None:
                young.release()

    def _new_runner(self) -> HandlerRunner:
        # Sized here, so settings changed on the config before start take effect.
        self._slots.reset()
        self._slots.size = self.config.concurrency
        return HandlerRunner(self.config.concurrency, self.config.action_timeout, "flo-handler")

    async def _setup(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._ops = WorkerOperations(self.session)
        self._run_handlers = self._handler_runner
        self._namespace = self.session.namespace
        self._lease_s = {
            name: o.timeout_ms / 1000.0 for name, o in self._options.items() if o.timeout_ms > 0
        }
        # Runs in hand would count against a limit shared with other workers while they
        # wait, so a worker serving a limited action claims only for free slots.
        limited = any(o.max_concurrency or o.rate_limit for o in self._options.values())
        self._prefetch = Prefetch(self.config.concurrency, enabled=not limited)
        # The run hooks the observer has (set before start): only those are called.
        self._hooks_before = overrides(self.observer, "before_run")
        self._hooks_after = overrides(self.observer, "after_run")
        self._tell_claimed = overrides(self.observer, "run_claimed")
        self._tell_handled = overrides(self.observer, "run_handled")
        # The handlers awaited in their slot's own task; the rest go through the runner
        # (a plain function runs in its thread pool; auto_touch keeps a lease alive;
        # Python 3.10 cannot take a cancellation back, so each gets a task there).
        self._awaited = (
            {n: h for n, h in self._handlers.items() if is_async_handler(h)}
            if CAN_UNCANCEL and not self.config.auto_touch
            else {}
        )
        self._reports = RunReporter(
            self._ops,
            self.config.worker_id,
            self.observer,
            self._stop.is_set,
            self._refuse,
            self._track,
        )
        self._registration = Registration(
            self.session,
            self._ops,
            self.config.worker_id,
            self._options,
            self._schedules,
            self.config.concurrency,
        )
        await self._registration.register_all()
        self._names = sorted(self._handlers)
        session = self.session
        self._notices = Notices(
            session.waker,
            session.owner_id,
            [action_keys(session.namespace, name).tag for name in self._handlers],
            self._revoke,
        )
        await self._notices.hold()
        log.info(
            "worker %s started: actions %s, concurrency %d",
            self.config.worker_id,
            sorted(self._handlers),
            self.config.concurrency,
        )

    def _background(self) -> Iterable[tuple[str, Coroutine[Any, Any, None]]]:
        reaper = Reaper(
            self.session,
            sorted(self._handlers),
            grace_ms=self.session.liveness_grace_ms,
            on_reclaimed=self.observer.runs_reclaimed,
            on_unregistered=self._registration.restore_action,
        )
        return (
            (
                "flo-heartbeat",
                self._registration.heartbeat_loop(self._stop, _HEARTBEAT_INTERVAL_S, self._load),
            ),
            ("flo-counters", self._reports.counts_loop(self._stop)),
            ("flo-reaper", reaper.run(self._stop)),
            ("flo-cancel-notices", self._notices.run()),
        )

    async def _finish(self) -> None:
        await self._reports.close()

    def _in_handler(self) -> Iterable[asyncio.Task[None]]:
        return list(self._slots.tasks)  # a slot is in a handler or idle; both may be cancelled

    def _load(self) -> int:
        return len(self._running)

    # --- polling -------------------------------------------------------------------

    def stop(self) -> None:
        super().stop()
        self._wake.set()

    def _poll_room(self) -> int:
        """How many runs the next poll may take now; 0: wait. With a slot free, every
        free slot and the runs to hold in hand (flo_redis/_prefetch.py); with every slot
        busy, a claim ahead once the runs in hand fell to half of what to hold."""
        concurrency = self.config.concurrency
        running = len(self._running)
        depth = self._prefetch.depth() if self._backlog else 0
        room = concurrency + depth - running - len(self._prefetch.runs)
        if running < concurrency:
            return room
        return room if depth and room >= max(1, depth // 2) else 0

    async def _room(self) -> int:
        room = self._poll_room()
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

    async def _poll_loop(self) -> None:
        # The poller parks in the queues for hand-offs (flo_redis/_poller.py).
        self._poller = ActionPoller(
            self.session,
            self._ops,
            self.config.worker_id,
            self._names,
            self._start_runs,
            health_ttl_s=_HEALTH_TTL_S,
            on_unregistered=self._registration.restore_action,
        )
        try:
            async with self._poller:
                try:
                    await super()._poll_loop()
                finally:
                    # Runs handed to parks still standing are this worker's: start them.
                    with contextlib.suppress(Exception):
                        await self._poller.leave()
        finally:
            # Runs in hand were not started: give them back unspent.
            while self._prefetch.runs:
                self._give_back(self._prefetch.runs.popleft())
            self._slots.close()

    async def _poll(self, poll_id: str, room: int) -> Sequence[Claimed]:
        # The poller has started what it returns (handed runs as their message is read).
        # A claim ahead (every slot busy) neither waits nor parks: a run handed to a
        # parked poller is for a worker that can start it.
        ahead = len(self._running) >= self.config.concurrency
        loop = asyncio.get_running_loop()
        began = loop.time()
        taken = await self._poller.poll(poll_id, room, 0 if ahead else self.config.block_ms)
        self._backlog = len(taken) >= room
        if ahead or len(taken) >= room > 1:  # answered without waiting for work
            self._prefetch.claim_took(loop.time() - began)
        return taken

    async def _poll_failed(self, exc: Exception) -> bool:
        if not isinstance(exc, ServerError):
            return await super()._poll_failed(exc)
        if exc.reason == Reason.WORKER_DRAINING:
            log.info("worker %s is draining; stopping", self.config.worker_id)
            return False
        if exc.reason == Reason.WORKER_UNHEALTHY:
            log.warning("worker %s unhealthy; heartbeating", self.config.worker_id)
            with contextlib.suppress(Exception):
                await self._registration.heartbeat(self._load())
        elif isinstance(exc, NotFoundError):
            with contextlib.suppress(Exception):
                await self._registration.register_worker()
        else:
            log.warning("poll refused: %s", exc)
        return True

    async def _take(self, items: Sequence[Claimed]) -> None:
        # Started by the poller already: let the handlers begin before the next poll.
        await asyncio.sleep(0)

    def _start_runs(self, runs: list[Claimed]) -> None:
        """Start ``runs``, claimed or handed to the poller (it calls this), in free
        slots; the rest are held in hand, in order."""
        self._reports.claimed(len(runs))
        now = self._time()
        in_hand = self._prefetch.runs
        concurrency = self.config.concurrency
        if self._tell_claimed:
            for run in runs:
                pickup_ms = max(0, run.claimed_at_ms - run.ready_at_ms)
                self.observer.run_claimed(run.action, pickup_ms / 1000)
        for run in runs:
            if not in_hand and len(self._running) < concurrency:
                self._start(run, now)
            else:
                in_hand.append(InHand(run, now))
        self._slots.wake()

    def _start(self, run: Claimed, claimed_at: float) -> None:
        """Count ``run`` as running and queue it for a handler slot (the caller wakes
        one, or is a slot that goes on to it)."""
        ctx = self._context(run, claimed_at)
        self._running.add(run.run_id)
        self._contexts[run.run_id] = ctx
        self._slots.queue.append(ctx)

    def _give_back(self, held: InHand) -> None:
        """Release a run in hand that will not be started, without spending its
        attempt."""
        self._deliver(Released(), self._context(held.run, held.claimed_at))

    def _release(self, ctx: ActionContext) -> None:
        """A started run whose handler never began (its slot was cancelled): release
        it without spending its attempt."""
        self._running.discard(ctx.task_id)
        self._contexts.pop(ctx.task_id, None)
        self._deliver(Released(), ctx)

    def _deliver(self, report: Report, ctx: ActionContext) -> None:
        """Send ``report`` of ``ctx``'s run: a complete into its batch, any other in a
        task of its own, so a handler slot never waits for a report."""
        if isinstance(report, Completed):
            self._reports.complete(ctx, report)
        else:
            send = report.deliver(self._reports, ctx)
            self._track(asyncio.create_task(send, name=f"flo-report-{ctx.task_id}"))

    def _handler_done(self, run_id: str, now: float) -> None:
        """The handler finished (at loop time ``now``): its slot is free while its
        report is still on the way (a pending report uses no handler capacity;
        ``current_load`` counts handlers), so the next run in hand starts in it."""
        self._contexts.pop(run_id, None)
        try:
            self._running.remove(run_id)
        except KeyError:
            return  # told already (a cancelled handler's run was given back)
        in_hand = self._prefetch.runs
        if in_hand and not self._stop.is_set():
            lease_s = self._lease_s
            while in_hand and len(self._running) < self.config.concurrency:
                held = in_hand.popleft()
                lease = lease_s.get(held.run.action)
                if lease is not None and now - held.claimed_at > lease / 2:
                    self._give_back(held)  # half its lease spent waiting
                else:
                    self._start(held.run, held.claimed_at)  # the slot ending goes on to it
        if self._waiting and self._poll_room() > 0:
            self._wake.set()

    def _time(self) -> float:
        """The event loop's time."""
        return (self._loop or asyncio.get_running_loop()).time()

    # --- one run -------------------------------------------------------------------

    def _context(self, run: Claimed, claimed_at: float) -> ActionContext:
        # The claim ran before its reply arrived, so the lease ends by then + its length.
        lease = self._lease_s.get(run.action)
        return new_context(
            run.run_id,
            run.action,
            run.payload,
            run.attempt,
            run.created_at_ms,
            self._namespace,
            self,
            run.token,
            run.trace,
            None if lease is None else claimed_at + lease,
        )

    async def _execute(self, ctx: ActionContext, slot: asyncio.Task[Any]) -> None:
        """Run one started run's handler with its hooks, in the handler slot ``slot``;
        its report is on its way when this returns."""
        loop = self._loop or asyncio.get_running_loop()
        began = handler_began = loop.time()
        report: Report
        ended: float | None = None
        try:
            try:
                if self._hooks_before:
                    await settle(self.observer.before_run(ctx))
                    handler_began = loop.time()  # the hook's time is not the handler's
            except Exception as exc:
                report = failure(ctx, exc, self.config.worker_id)
            else:
                handler = self._awaited.get(ctx.action_name)
                if handler is None or ctx._revoked:
                    report = await self._run_handler(ctx, handler_began, slot)
                else:
                    # An ``async def`` handler awaited right here, in the slot's task: a
                    # coroutine fewer per run than HandlerRunner.run (the same steps).
                    runner = self._run_handlers
                    running = ctx._running = runner.enter(ctx._cancel, handler_began, slot)
                    try:
                        try:
                            result = await handler(ctx)
                        except asyncio.CancelledError:
                            if not running.why:
                                raise  # the worker's own cancellation: see below
                            report = stopped_report(runner.stopped(running))
                        except Exception as exc:
                            report = failure(ctx, exc, self.config.worker_id)
                        else:
                            if running.why:  # it swallowed the cancellation and returned
                                report = stopped_report(runner.stopped(running))
                            elif type(result) is bytes:  # completion's common case
                                report = Completed(result)
                            else:
                                report = completion(
                                    ctx, result, self._serializer, self.config.worker_id
                                )
                    finally:
                        runner.leave(running)
                        ctx._running = None  # it ended (no cycle left to collect)
            if isinstance(report, Completed):
                if self._hooks_after:
                    await self._hook("after_run", self.observer.after_run, ctx, report.data)
            elif isinstance(report, Failed):
                error = report.error or RuntimeError(report.message)
                await self._hook("on_failure", self.observer.on_failure, ctx, error)
            ended = loop.time()
            if not isinstance(report, Released):
                self._prefetch.handler_took(ended - began)
                if self._tell_handled:
                    self.observer.run_handled(ctx.action_name, report.handled, ended - began)
        except asyncio.CancelledError:
            # Shutdown: hand the run back without counting the attempt. The handler is
            # over, so an abort that cancels again does not cancel the release.
            self._handler_done(ctx.task_id, loop.time())
            await Released().deliver(self._reports, ctx)
            raise
        finally:
            self._handler_done(ctx.task_id, loop.time() if ended is None else ended)
            if ctx._ended:
                for call in ctx._ended:
                    call()
        if type(report) is Completed:
            self._reports.complete(ctx, report)
        else:
            self._deliver(report, ctx)

    async def _run_handler(
        self, ctx: ActionContext, began: float, slot: asyncio.Task[Any]
    ) -> Report:
        """``ctx``'s handler's report, its time limit counted from ``began`` (loop
        time), run in the task ``slot`` through the handler runner: a plain function in
        its thread pool, the lease kept alive by ``auto_touch``, or on Python 3.10."""
        handler = self._handlers.get(ctx.action_name)
        if handler is None:
            return Failed(f"No handler for: {ctx.action_name}", retry=True)
        if ctx._revoked:
            return Dropped()  # cancelled before its handler began
        runner = self._handler_runner
        running = ctx._running = runner.running(ctx._cancel, began)
        toucher = None
        if self.config.auto_touch:
            timeout_ms = self._options[ctx.action_name].timeout_ms
            toucher = start_auto_touch(self._touch, ctx, running, timeout_ms)
        try:
            result = await runner.run(handler, ctx, running, slot)
        except (HandlerTimeout, HandlerStopped) as stop:
            return stopped_report(stop)
        except Exception as exc:
            return failure(ctx, exc, self.config.worker_id)
        finally:
            if toucher is not None:
                await cancel_and_wait(toucher)
            ctx._running = None  # it ended (and the context holds no cycle to be collected)
        return completion(ctx, result, self._serializer, self.config.worker_id)

    # --- what a context asks of its worker ------------------------------------------

    def _revoke(self, run_id: str, token: int) -> None:
        """A cancel notice (:mod:`flo_redis.notices`): the run's lease was revoked, so
        its handler is cancelled as for a lost lease (a sync handler sees
        ``ctx.cancelled``) and reports nothing."""
        ctx = self._contexts.get(run_id)
        if ctx is None and self._prefetch.take(run_id, token) is not None:
            log.info("run %s was cancelled before its handler began", run_id)
            self._reports.left()
            return
        if ctx is None or ctx.token != token or ctx._revoked:
            return
        log.info("run %s was cancelled; cancelling its handler", run_id)
        ctx._revoked = True
        ctx._cancel()
        if ctx._running is not None:
            ctx._running.stop()

    async def _touch(self, ctx: ActionContext, extend_ms: int) -> None:
        await touch_run(self._ops, self.config.worker_id, ctx, extend_ms)

    async def _progress(self, ctx: ActionContext, value: Any) -> None:
        data = encode_progress(value, self._serializer)
        await report_progress(
            self.session, self.config.worker_id, ctx.action_name, ctx.task_id, ctx.token, data
        )


__all__ = [
    "ActionContext",
    "ActionResult",
    "ActionWorker",
    "ActionWorkerOptions",
    "BlockTooLongError",
    "StreamContext",
    "StreamHandler",
    "StreamRecordHandler",
    "StreamWorker",
    "StreamWorkerOptions",
]
