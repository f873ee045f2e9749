"""``ActionWorker``: flo's high-level action worker, hardened, on Redis.

A worker registers its actions and itself, then loops: claim up to its free capacity in
one script call per action queue (and, while a backlog lasts and its handlers are short,
a few runs ahead of them), run each handler under the local ``action_timeout``, and
report the outcome with the run's fencing token. Reports never wait behind a poll (polls
hold no connection while they wait), lost reports are resent and never converted, and
``stop()`` lets running handlers finish and still sends their results.

Its runs in flight and in hand, each run's handler with its hooks, are
:mod:`flo_redis.worker.held_runs`; the handler's context is :mod:`flo_redis.worker.context`,
its reports :mod:`flo_redis.worker.run_reporter` and :mod:`flo_redis.worker.delivery`,
and what both workers share :mod:`flo_redis.worker.lifecycle`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterable, Sequence
from datetime import timedelta
from typing import Any

from flo_redis._session.notices import Notices
from flo_redis._wire.checks import check_options
from flo_redis._wire.keys import action_keys, action_of_run, check_name
from flo_redis.actions.claims import Gate
from flo_redis.actions.results import JSON, ResultSerializer, check_handler, check_serializer
from flo_redis.actions.runs import cancel_confirmed
from flo_redis.actions.schedules import Missed, ScheduleDeclaration, check_spec, check_timezone
from flo_redis.actions.workers import Claimed, WorkerOperations
from flo_redis.durability import DurabilityLike, worker_durability
from flo_redis.errors import NotFoundError, ServerError, ValidationError
from flo_redis.types import ActionRegisterOptions, Reason
from flo_redis.worker.action_options import (
    DEFAULT_OFFER_WINDOW_MS,
    ActionWorkerOptions,
    ProcessExecutor,
)
from flo_redis.worker.context import ActionContext, ActionHandler, touch
from flo_redis.worker.executors import WorkerPools, check_process_handler, placed
from flo_redis.worker.forwarder import Forwarder
from flo_redis.worker.gc import YoungGeneration
from flo_redis.worker.handlers import HandlerRunner
from flo_redis.worker.held_runs import ActionRuns
from flo_redis.worker.lifecycle import ClientLike, WorkerLifecycle, generate_worker_id
from flo_redis.worker.poller import ActionPoller
from flo_redis.worker.progress import encode_progress, report_progress
from flo_redis.worker.reaper import Reaper
from flo_redis.worker.registration import Registration
from flo_redis.worker.run_reporter import RunReporter

log = logging.getLogger("flo_redis.worker")

_HEARTBEAT_INTERVAL_S = 30.0
# A health check that passed this recently is reused by the next poll (a drain or an
# unhealthy verdict is seen within this time).
_HEALTH_TTL_S = 0.5


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
        offer_window_ms: int = DEFAULT_OFFER_WINDOW_MS,
        durability: DurabilityLike | None = None,
        executor: ProcessExecutor | None = None,
    ) -> None:
        super().__init__(parent_client)
        self.config = ActionWorkerOptions(
            worker_id=worker_id or generate_worker_id(),
            concurrency=concurrency,
            action_timeout=action_timeout,
            block_ms=block_ms,
            auto_touch=auto_touch,
            tune_gc=tune_gc,
            offer_window_ms=offer_window_ms,
            durability=worker_durability(durability),
            executor=executor,
        )
        check_name("worker id", self.config.worker_id)
        check_serializer(serializer)
        self._serializer = serializer
        self._handlers: dict[str, ActionHandler] = {}
        self._options: dict[str, ActionRegisterOptions] = {}
        self._executors: dict[str, ProcessExecutor] = {}  # actions' own
        self._pools = WorkerPools()
        self._schedules: list[ScheduleDeclaration] = []
        # Its runs in flight and in hand (flo_redis/worker/held_runs.py).
        self._runs = ActionRuns(self, track=self._track, stopped=self._stop.is_set, hook=self._hook)
        # Made by start(), on the worker's own session.
        self._ops: WorkerOperations
        self._registration: Registration
        self._names: list[str]
        self._notices: Notices
        self._reports: RunReporter

    # --- registration --------------------------------------------------------------

    def action(
        self,
        name: str,
        options: ActionRegisterOptions | None = None,
        *,
        executor: ProcessExecutor | None = None,
    ) -> Callable[[ActionHandler], ActionHandler]:
        """Decorator registering ``fn`` as the handler of action ``name``."""

        def decorator(fn: ActionHandler) -> ActionHandler:
            self.register_action(name, fn, options, executor=executor)
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
        self,
        name: str,
        handler: ActionHandler,
        options: ActionRegisterOptions | None = None,
        *,
        executor: ProcessExecutor | None = None,
    ) -> None:
        """Register ``handler`` for ``name``; ValueError if the name already has one.
        ``options.namespace`` is ignored: the worker's namespace is used. ``handler`` is
        an ``async def`` function or a plain one (run in a bounded thread pool, or in
        the processes of ``executor``, else of the worker's ``executor``);
        :class:`ValidationError` for anything that cannot be called with the context,
        options that are not an :class:`ActionRegisterOptions`, or a handler ``executor``
        cannot run (an ``async def``, or one a process cannot import by name)."""
        check_name("action name", name)
        check_handler(f"action {name!r}", handler)
        if executor is not None:
            check_process_handler(f"action {name!r}", handler, executor)
        if options is not None and not isinstance(options, ActionRegisterOptions):
            raise ValidationError(
                f"the options of action {name!r} must be an ActionRegisterOptions, got "
                f"{type(options).__name__}; e.g. ActionRegisterOptions(timeout_ms=60_000)"
            )
        check_options(options, ActionRegisterOptions)  # and again at start, when registered
        if name in self._handlers:
            raise ValueError(f"Action handler already registered: {name}")
        self._handlers[name] = handler
        self._options[name] = options or ActionRegisterOptions()
        if executor is not None:
            self._executors[name] = executor

    # --- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        """Register and work until :meth:`stop` (or a drain); returns once running
        handlers have finished and their results were sent. Raises
        :class:`PermissionDeniedError` (after that same shutdown) when Redis's ACL refuses
        what a worker needs."""
        if not self._handlers:
            raise ValueError("No action handlers registered")
        self.config.check()
        check_name("worker id", self.config.worker_id)
        young = YoungGeneration(self.config.concurrency) if self.config.tune_gc else None
        if young is not None:
            young.hold()
        try:
            await self._serve()
        finally:
            if young is not None:
                young.release()

    def check_handlers(self) -> None:
        """Refuse, before the worker starts, a handler its executor cannot run in a
        process (:class:`ValidationError` naming it: a lambda, a function defined inside
        another); :meth:`start` does the same."""
        placed(self._handlers, self._executors, self.config.executor)

    async def reload(self) -> int:
        """Start new handler processes, which import the handlers' code afresh, and
        retire the old ones as their runs end (``flo-redis worker`` does this on
        SIGHUP): no run is lost or run twice. How many process pools were reloaded (0
        when every handler runs in threads or on the event loop, which keep their code).
        :class:`HandlerProcessError`, the old processes kept, when the new code does
        not start."""
        return await self._pools.reload()

    def _new_runner(self) -> HandlerRunner:
        # Sized here, so settings changed on the config before start take effect.
        return HandlerRunner(self.config.concurrency, self.config.action_timeout, "flo-handler")

    async def _setup(self) -> None:
        self._ops = WorkerOperations(self.session)
        self._reports = RunReporter(
            self.session,
            self.config.worker_id,
            self.observer,
            self._stop.is_set,
            self._refuse,
            self._track,
            lambda run_id, token: self._runs.revoke(run_id, token, "was not accepted in time"),
        )
        self._replay = self._reports.replay
        handlers = await self._pools.start(
            self._handlers,
            self._executors,
            self.config.executor,
            self.config.concurrency,
            self.observer.handler_process_replaced,
        )
        self._registration = Registration(
            self.session,
            self._ops,
            self.config.worker_id,
            self._options,
            self._schedules,
            self.config.concurrency,
        )
        self._runs.configure(
            concurrency=self.config.concurrency,
            session=self.session,
            worker_id=self.config.worker_id,
            serializer=self._serializer,
            observer=self.observer,
            auto_touch=self.config.auto_touch,
            handlers=handlers,
            options=self._options,
            runner=self._handler_runner,
            reports=self._reports,
        )
        await self._registration.register_all()
        self._names = sorted(self._handlers)
        session = self.session

        async def confirm(run_id: str, token: int) -> bool:
            keys = action_keys(session.namespace, action_of_run(run_id))
            return await cancel_confirmed(session.redis, keys, run_id, token)

        self._notices = Notices(
            session.waker,
            session.owner_id,
            [action_keys(session.namespace, name).tag for name in self._handlers],
            self._runs.revoke,
            confirm,
        )
        await self._notices.hold()
        log.info(
            "worker %s started: actions %s, concurrency %d",
            self.config.worker_id,
            sorted(self._handlers),
            self.config.concurrency,
        )

    def _background(self) -> Iterable[tuple[str, Coroutine[Any, Any, None]]]:
        self._forwarder = Forwarder(self.session, sorted(self._handlers))
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
            ("flo-graph", self._forwarder.run()),
            ("flo-cancel-notices", self._notices.run()),
        )

    async def _finish(self) -> None:
        await self._reports.close()
        await self._forwarder.flush()

    async def _end_handlers(self) -> None:
        await self._pools.close()

    def _in_handler(self) -> Iterable[asyncio.Task[None]]:
        return self._runs.in_handler()

    def _load(self) -> int:
        return self._runs.load()

    # --- polling -------------------------------------------------------------------

    def stop(self) -> None:
        super().stop()
        self._runs.wake_poll()

    async def _room(self) -> int:
        return await self._runs.room()

    async def _poll_loop(self) -> None:
        # The poller parks in the queues for hand-offs (flo_redis/worker/poller.py).
        self._poller = ActionPoller(
            self.session,
            Gate(),
            self.config.worker_id,
            self._names,
            self._runs.start,
            health_ttl_s=_HEALTH_TTL_S,
            on_unregistered=self._registration.restore_action,
            offer_ms=self.config.offer_window_ms,
            accept=self._reports.accept,
        )
        try:
            async with self._poller:
                try:
                    await super()._poll_loop()
                finally:
                    # Leave the hand-off channels, end every park the poller may hold
                    # (sent again while Redis does not answer) and start what was handed.
                    with contextlib.suppress(Exception):
                        await self._poller.leave()
        finally:
            # Runs in hand were not started: give them back unspent.
            self._runs.stop_taking()

    async def _poll(self, poll_id: str, room: int) -> Sequence[Claimed]:
        # The poller has started what it returns (handed runs as their message is read).
        # A claim ahead (every slot busy) neither waits nor parks: a run handed to a
        # parked poller is for a worker that can start it.
        ahead = self._runs.full()
        loop = asyncio.get_running_loop()
        began = loop.time()
        taken = await self._poller.poll(poll_id, room, 0 if ahead else self.config.block_ms)
        self._runs.polled(taken, room, ahead, loop.time() - began)
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

    # --- what a context asks of its worker ------------------------------------------

    async def _touch(self, ctx: ActionContext, extend_ms: int) -> None:
        held = self._runs.held(ctx)
        await touch(self.session, self.config.worker_id, ctx, extend_ms, held)

    async def _progress(self, ctx: ActionContext, value: Any) -> None:
        data = encode_progress(value, self._serializer)
        await report_progress(
            self.session, self.config.worker_id, ctx.action_name, ctx.task_id, ctx.token, data
        )
