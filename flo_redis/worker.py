"""``ActionWorker``: flo's high-level action worker, hardened, on Redis.

A worker registers its actions and itself, then loops: claim up to its free capacity in
one script call per action queue, run each handler under the local ``action_timeout``,
and report the outcome with the run's fencing token. Reports never wait behind a poll
(polls hold no connection while they wait), lost reports are resent and never converted,
and ``stop()`` lets running handlers finish and still sends their results.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import secrets
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from . import _outage
from ._batch import Coalescer
from ._checks import check_seconds
from ._lifecycle import WorkerLifecycle
from ._reports import send_report
from ._wake import raise_if_cancelling
from .errors import (
    BlockTooLongError,
    NonRetryableError,
    NotFoundError,
    PermissionDeniedError,
    ServerError,
    ValidationError,
    is_connection_error,
    validate_block_ms,
)
from .keys import action_keys, check_name
from .notices import Notices
from .observe import Hook, settle
from .progress import encode_progress, report_progress
from .reclaim import Reaper
from .results import (
    JSON,
    HandlerPool,
    ResultEncodingError,
    ResultSerializer,
    check_handler,
    encode_result,
    error_text,
    error_traceback,
)
from .retry import EmptyPollBackoff, sleep_unless_stopped, worker_backoff
from .schedules import Missed, ScheduleDeclaration, check_spec, check_timezone
from .stream_worker import (
    StreamContext,
    StreamHandler,
    StreamRecordHandler,
    StreamWorker,
    StreamWorkerOptions,
)
from .tracing import unpack_context
from .types import (
    DEFAULT_WORKER_BLOCK_MS,
    ActionRegisterOptions,
    ActionType,
    Reason,
    RunStatus,
    StatusCode,
    WorkerAwaitOptions,
    WorkerFailOptions,
    WorkerRegisterOptions,
    WorkerTouchOptions,
)
from .worker_ops import Claimed, CompleteItem

if TYPE_CHECKING:
    from .client import FloClient

log = logging.getLogger("flo_redis.worker")

_HEARTBEAT_INTERVAL_S = 30.0
_MAX_TOUCH_EXTEND_MS = 3_600_000
_MIN_TOUCH_INTERVAL_MS = 100
# asyncio.timeout (3.11+) runs a handler in the worker's own task without a timer task.
_INLINE_TIMEOUT = sys.version_info >= (3, 11)
# A health check that passed this recently is reused by the next poll (a drain or an
# unhealthy verdict is seen within this time).
_HEALTH_TTL_S = 0.5
# How often batched load / completed counters are sent.
_COUNTS_INTERVAL_S = 0.2
_TOUCH_FINAL = (StatusCode.CONFLICT, StatusCode.NOT_FOUND, StatusCode.BAD_REQUEST)
# How a handler ended, as the observer hears it (report kind -> result).
_HANDLER_RESULT = {"complete": "completed", "fail": "failed", "none": "lease_lost"}


def _worker_block_ms(block_ms: object) -> int:
    """flo's rule for workers: 0 or None waits the default, so poll loops never spin."""
    if block_ms is None or block_ms == 0:
        return DEFAULT_WORKER_BLOCK_MS
    validate_block_ms(block_ms)
    assert isinstance(block_ms, int)
    return block_ms


def _generate_id() -> str:
    return f"{socket.gethostname()}-{secrets.token_hex(4)}"


class ActionResult:
    """A handler's result with a named outcome (``ctx.result("approved", value)``)."""

    __slots__ = ("data", "outcome")

    def __init__(self, outcome: str, data: bytes) -> None:
        self.outcome = outcome
        self.data = data

    def __repr__(self) -> str:
        return f"ActionResult(outcome={self.outcome!r}, data={self.data!r})"


@dataclass
class ActionWorkerOptions:
    """An ActionWorker's settings. ``block_ms`` 0/None means 30000; above 300000 is
    refused with :class:`BlockTooLongError`."""

    worker_id: str = ""
    concurrency: int = 10
    action_timeout: float = 300.0
    block_ms: int = DEFAULT_WORKER_BLOCK_MS
    auto_touch: bool = False

    def __post_init__(self) -> None:
        self.block_ms = _worker_block_ms(self.block_ms)
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int):
            raise ValidationError(f"concurrency must be an int, got {self.concurrency!r}")
        if self.concurrency < 1:
            raise ValidationError(f"concurrency must be at least 1, got {self.concurrency}")
        check_seconds("action_timeout", self.action_timeout)


@dataclass
class ActionContext:
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
    _worker: ActionWorker = field(repr=False)
    _cancel_event: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    token: int = 0
    _deadline: float = field(default=0.0, repr=False)  # loop time the handler must end by
    _timed_out: bool = field(default=False, repr=False)
    # Loop time by which the run's lease has surely ended (None: it never ends).
    _lease_end: float | None = field(default=None, repr=False)
    _work: asyncio.Future[Any] | None = field(default=None, repr=False)  # handler in a task
    _revoked: bool = field(default=False, repr=False)  # cancelled: report nothing
    _trace: bytes = field(default=b"", repr=False)  # the run's packed trace context

    @property
    def trace_context(self) -> dict[str, str]:
        """The trace headers (W3C ``traceparent``, ``tracestate``) of the invoke that
        created this run, for a propagator's ``extract``; {} when it carried none
        (:mod:`flo_redis.tracing`)."""
        return unpack_context(self._trace)

    def input(self) -> bytes:
        return self.payload

    def json(self) -> Any:
        if not self.payload:
            raise ValueError("No input data")
        return json.loads(self.payload)

    def into(self, cls: type[Any]) -> Any:
        data = self.json()
        return cls(**data) if isinstance(data, dict) else cls(data)

    @staticmethod
    def to_bytes(value: Any) -> bytes:
        return json.dumps(value).encode()

    async def progress(self, value: Any) -> None:
        """Store ``value`` as the run's progress (bytes as they are, anything else by the
        worker's serializer; at most 1 KiB, else :class:`ValueTooLargeError`): shown in its
        status and heard by ``wait(..., on_progress=...)``. Fenced by the token:
        :class:`ConflictError` once this lease is no longer current."""
        worker = self._worker
        data = encode_progress(value, worker._serializer)
        await report_progress(
            worker.client, worker.config.worker_id, self.action_name, self.task_id, self.token, data
        )

    async def touch(self, extend_ms: int = 30000) -> None:
        """Extend this run's lease to ``extend_ms`` from now (fenced by the token)."""
        await self._worker._touch(self, extend_ms)

    @property
    def cancelled(self) -> bool:
        return self._cancel_event.is_set()

    async def check_cancelled(self) -> None:
        if self._cancel_event.is_set():
            raise asyncio.CancelledError("run cancelled: its lease was lost")

    def result(self, outcome: str, value: Any = None) -> ActionResult:
        """A result with a named outcome; ``value`` is encoded as a return value is (bytes
        as they are, anything else by the worker's serializer), None gives no data."""
        data = b"" if value is None else encode_result(value, self._worker._serializer)
        return ActionResult(outcome, data)


# An ``async def`` handler, or a plain function (run in the worker's thread pool).
ActionHandler = Callable[[ActionContext], Awaitable[Any]] | Callable[[ActionContext], Any]


@dataclass
class _Report:
    kind: str  # "complete" | "fail" | "release" | "none"
    data: bytes = b""
    outcome: str = "success"
    message: str = ""
    retry: bool = True
    traceback: str = ""
    error: BaseException | None = None  # what failed the attempt, for on_failure


class _LeaseLost(Exception):
    """The run's lease is gone (taken back or finished elsewhere); report nothing."""


class ActionWorker(WorkerLifecycle):
    """Runs action handlers for runs taken from Redis; flo 0.1.2's ActionWorker API."""

    def __init__(
        self,
        parent_client: FloClient,
        *,
        worker_id: str | None = None,
        concurrency: int = 10,
        action_timeout: float = 300.0,
        block_ms: int = 30000,
        auto_touch: bool = False,
        serializer: ResultSerializer = JSON,
    ) -> None:
        super().__init__(parent_client)
        self.config = ActionWorkerOptions(
            worker_id=worker_id or _generate_id(),
            concurrency=concurrency,
            action_timeout=action_timeout,
            block_ms=block_ms,
            auto_touch=auto_touch,
        )
        check_name("worker id", self.config.worker_id)
        self._serializer = serializer
        self._refused: PermissionDeniedError | None = None
        self._pool = HandlerPool(self.config.concurrency, "flo-handler")
        self._handlers: dict[str, ActionHandler] = {}
        self._options: dict[str, ActionRegisterOptions] = {}
        self._schedules: list[ScheduleDeclaration] = []
        self._running: dict[str, asyncio.Task[None]] = {}  # runs whose handler runs
        self._tasks: set[asyncio.Task[None]] = set()  # every run: handler, then report
        self._slot_free = asyncio.Event()
        self._load_delta = 0
        self._inline: dict[str, ActionContext] = {}
        self._contexts: dict[str, ActionContext] = {}  # runs whose handler runs
        self._completed_delta = 0
        self._completes: Coalescer[CompleteItem] = Coalescer(
            self._complete_batch, "flo-complete-batches"
        )

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
        # Sized here, so a concurrency set on the config before start takes effect.
        self._pool = HandlerPool(self.config.concurrency, "flo-handler")
        client = self._open_client()
        try:
            await client.connect()
            await self._register_all()
            await settle(self.observer.on_start(self))
            log.info(
                "worker %s started: actions %s, concurrency %d",
                self.config.worker_id,
                sorted(self._handlers),
                self.config.concurrency,
            )
            heartbeat = asyncio.create_task(self._heartbeat_loop(), name="flo-heartbeat")
            counts = asyncio.create_task(self._counts_loop(), name="flo-counters")
            watchdog = asyncio.create_task(self._watchdog(), name="flo-handler-timeouts")
            reaper = asyncio.create_task(
                Reaper(
                    client.session,
                    sorted(self._handlers),
                    grace_ms=client.liveness_grace_ms,
                    on_reclaimed=self.observer.runs_reclaimed,
                    on_unregistered=self._restore_action,
                ).run(self._stop),
                name="flo-reaper",
            )
            reaper.add_done_callback(self._reaper_ended)
            notices = Notices(
                client.session.waker,
                client.owner_id,
                [action_keys(client.namespace, name).tag for name in self._handlers],
                self._revoke,
            )
            await notices.hold()
            listen = asyncio.create_task(notices.run(self._stop), name="flo-cancel-notices")
            try:
                await self._poll_loop()
                await self._wait_handlers()
                await self._completes.close()
                with contextlib.suppress(Exception):
                    await self._flush_counts()
            finally:
                for background in (heartbeat, counts, reaper, watchdog, listen):
                    background.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await background
                await self._middleware("on_stop", self.observer.on_stop, self)
        except asyncio.CancelledError:
            await self._give_back_running()
            raise
        finally:
            self._pool.close()
            await client.close()
            self._finished.set()
        if self._refused is not None:
            raise self._refused

    def _reaper_ended(self, task: asyncio.Task[None]) -> None:
        """A reaper refused by the ACL stops the worker (start() raises the refusal)."""
        if task.cancelled() or not isinstance(task.exception(), PermissionDeniedError):
            return
        self._refuse(task.exception())  # type: ignore[arg-type]

    def _refuse(self, refusal: PermissionDeniedError) -> None:
        """Redis's ACL refuses what a worker needs: retrying cannot help until the ACL
        changes. Finish what runs, stop, and raise it from start()."""
        if self._refused is None:
            log.error("worker %s stops: %s", self.config.worker_id, refusal)
            self._refused = refusal
        self.stop()

    # --- registration with the store -----------------------------------------------

    async def _register_all(self) -> None:
        for name, opts in self._options.items():
            await self.client.action.register(name, ActionType.USER, _in_namespace(opts, None))
        for declared in self._schedules:
            await declared.apply(self.client.session)
        await self._register_worker()

    async def _restore_action(self, name: str) -> None:
        """This worker's action was found not registered (its Redis lost its data):
        register it again with this worker's options, so invokes are accepted again."""
        log.warning("action %r is not registered (Redis lost its data?); registering again", name)
        await self.client.action.register(
            name, ActionType.USER, _in_namespace(self._options[name], None)
        )
        for declared in self._schedules:
            if declared.action == name:
                await declared.apply(self.client.session)

    async def _register_worker(self) -> None:
        await self.client.worker.register(
            self.config.worker_id,
            sorted(self._handlers),
            WorkerRegisterOptions(
                concurrency=self.config.concurrency, machine_id=socket.gethostname()
            ),
        )

    async def _heartbeat(self) -> None:
        try:
            await self.client.worker.heartbeat(self.config.worker_id, len(self._running))
        except NotFoundError:
            log.warning("worker %s was removed; registering again", self.config.worker_id)
            await self._register_worker()

    async def _heartbeat_loop(self) -> None:
        while not await sleep_unless_stopped(self._stop, _HEARTBEAT_INTERVAL_S):
            try:
                await self._heartbeat()
            except Exception as exc:
                if is_connection_error(exc):
                    _outage.failed(log, self.client.redis, "heartbeat", exc)
                else:
                    log.warning("heartbeat of %s failed: %s", self.config.worker_id, exc)

    # --- polling -------------------------------------------------------------------

    async def _poll_loop(self) -> None:
        loop = asyncio.get_running_loop()
        names = sorted(self._handlers)
        empty = EmptyPollBackoff(self.config.block_ms, self._stop)
        failures = 0
        poll_id: str | None = None
        # "<poller>#<n>": a new n tells the claim script the reply to poll n - 1 arrived,
        # so it keeps one replay memo per poller rather than one per claim.
        poller, polls = secrets.token_hex(6), itertools.count()
        while not self._stop.is_set():
            raise_if_cancelling()
            free = self.config.concurrency - len(self._running)
            if free <= 0:
                self._slot_free.clear()
                await _wait_any(self._slot_free, self._stop)
                # Let handlers finishing in the same moment free their slots too, so the
                # next claim fills several at once.
                await asyncio.sleep(0)
                continue
            poll_id = poll_id or f"{poller}#{next(polls)}"
            began = loop.time()
            try:
                claimed = await self.client.worker.await_tasks(
                    self.config.worker_id,
                    names,
                    free,
                    WorkerAwaitOptions(block_ms=self.config.block_ms, poll_id=poll_id),
                    tally=False,
                    health_ttl_s=_HEALTH_TTL_S,
                    on_unregistered=self._restore_action,
                )
            except ServerError as exc:
                if isinstance(exc, PermissionDeniedError):
                    self._refuse(exc)
                    return
                if exc.reason == Reason.WORKER_DRAINING:
                    log.info("worker %s is draining; stopping", self.config.worker_id)
                    return
                if exc.reason == Reason.WORKER_UNHEALTHY:
                    log.warning("worker %s unhealthy; heartbeating", self.config.worker_id)
                    with contextlib.suppress(Exception):
                        await self._heartbeat()
                elif isinstance(exc, NotFoundError):
                    with contextlib.suppress(Exception):
                        await self._register_worker()
                else:
                    log.warning("poll refused: %s", exc)
                failures += 1
                await sleep_unless_stopped(self._stop, worker_backoff(failures))
                continue
            except Exception as exc:
                if not is_connection_error(exc):
                    raise
                failures += 1
                _outage.failed(log, self.client.redis, "poll", exc)
                await sleep_unless_stopped(self._stop, worker_backoff(failures))
                continue  # same poll id: a claim whose reply was lost is replayed
            if failures:
                _outage.reached(log, self.client.redis)
            failures = 0
            poll_id = None
            if not claimed:
                await empty.empty(loop.time() - began)
                continue
            empty.reset()
            self._load_delta += len(claimed)
            for run in claimed:
                self._spawn(run)

    def _spawn(self, run: Claimed) -> None:
        self.observer.run_claimed(run.action, max(0, run.claimed_at_ms - run.ready_at_ms) / 1000)
        task = asyncio.create_task(self._execute(run), name=f"flo-run-{run.run_id}")
        self._running[run.run_id] = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _handler_done(self, run_id: str) -> None:
        """The handler finished: its slot is free while its report is still on the way
        (a pending report uses no handler capacity; ``current_load`` counts handlers)."""
        self._contexts.pop(run_id, None)
        if self._running.pop(run_id, None) is not None:
            self._slot_free.set()

    async def _wait_handlers(self) -> None:
        """Wait for every run: its handler and its report. After :meth:`abort`, running
        handlers are cancelled and give their runs back without spending the attempt."""
        await self._wait_tasks(self._tasks, lambda: list(self._running.values()))

    async def _give_back_running(self) -> None:
        """The worker itself is being cancelled: cancel handlers; each gives its run back
        without spending the attempt. Reports already on their way are still sent."""
        for task in list(self._running.values()):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # --- one run -------------------------------------------------------------------

    async def _execute(self, run: Claimed) -> None:
        ctx = ActionContext(
            task_id=run.run_id,
            action_name=run.action,
            payload=run.payload,
            attempt=run.attempt,
            created_at=run.created_at_ms,
            namespace=self.client.namespace,
            _worker=self,
            token=run.token,
            _trace=run.trace,
        )
        self._contexts[run.run_id] = ctx
        began = asyncio.get_running_loop().time()
        # The claim ran before its reply arrived, so the lease ends by now + its length.
        timeout_ms = self._options[run.action].timeout_ms if run.action in self._options else 0
        if timeout_ms > 0:
            ctx._lease_end = began + timeout_ms / 1000.0
        try:
            try:
                await settle(self.observer.before_run(ctx))
            except Exception as exc:
                report = self._failure_report(ctx, exc)
            else:
                report = await self._run_handler(ctx)
            if report.kind == "complete":
                await self._middleware("after_run", self.observer.after_run, ctx, report.data)
            elif report.kind == "fail":
                error = report.error or RuntimeError(report.message)
                await self._middleware("on_failure", self.observer.on_failure, ctx, error)
            self.observer.run_handled(
                ctx.action_name,
                _HANDLER_RESULT[report.kind],
                asyncio.get_running_loop().time() - began,
            )
        except asyncio.CancelledError:
            # Shutdown: hand the run back without counting the attempt. The handler is
            # over, so an abort that cancels again does not cancel the release.
            self._handler_done(ctx.task_id)
            await self._deliver(ctx, _Report("release"))
            raise
        finally:
            self._handler_done(ctx.task_id)
        await self._deliver(ctx, report)

    async def _middleware(self, name: str, hook: Callable[..., Hook], *args: Any) -> None:
        """Await an observer's middleware hook whose errors must not stop the worker."""
        try:
            await settle(hook(*args))
        except Exception:
            log.exception("%s hook of worker %s failed", name, self.config.worker_id)

    async def _run_handler(self, ctx: ActionContext) -> _Report:
        handler = self._handlers.get(ctx.action_name)
        if handler is None:
            return _Report("fail", message=f"No handler for: {ctx.action_name}", retry=True)
        if ctx._revoked:
            return _Report("none")  # cancelled before its handler began
        if not self.config.auto_touch and _INLINE_TIMEOUT:
            return await self._run_inline(handler, ctx)
        work: asyncio.Future[Any] = asyncio.ensure_future(self._pool.call(handler, ctx))
        ctx._work = work
        toucher = self._start_auto_touch(ctx, work)
        try:
            # asyncio.wait, not wait_for: the worker's own cancellation must never be
            # swallowed, and a timeout must not cancel the handler before we decide.
            await asyncio.wait({work}, timeout=self.config.action_timeout)
        except asyncio.CancelledError:
            work.cancel()
            with contextlib.suppress(BaseException):
                await work
            raise
        finally:
            if toucher is not None:
                toucher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await toucher
        if not work.done():
            ctx._cancel_event.set()
            work.cancel()
            with contextlib.suppress(BaseException):
                await work
            return _Report(
                "fail",
                message="Action timed out",
                retry=False,
                error=TimeoutError("Action timed out"),
            )
        if work.cancelled():
            if ctx.cancelled:
                return _Report("none")  # the lease was lost: nobody takes a report
            return _Report("fail", message="Action cancelled", retry=True)
        exc = work.exception()
        if exc is not None:
            return self._failure_report(ctx, exc)
        return self._result_report(ctx, work.result())

    async def _run_inline(self, handler: ActionHandler, ctx: ActionContext) -> _Report:
        """The handler in this task, its ``action_timeout`` kept by the worker's one
        watchdog: no extra task and no timer per run (the fast path when nothing else
        needs to cancel the handler)."""
        ctx._deadline = asyncio.get_running_loop().time() + self.config.action_timeout
        self._inline[ctx.task_id] = ctx
        try:
            result = await self._pool.call(handler, ctx)
        except asyncio.CancelledError:
            if not (ctx._timed_out or ctx._revoked):
                raise
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()  # type: ignore[attr-defined,unused-ignore]
            if not ctx._timed_out:
                return _Report("none")  # cancelled: nobody takes a report
            return _Report(
                "fail",
                message="Action timed out",
                retry=False,
                error=TimeoutError("Action timed out"),
            )
        except Exception as exc:
            return self._failure_report(ctx, exc)
        finally:
            ctx._deadline = 0.0
            self._inline.pop(ctx.task_id, None)
        return self._result_report(ctx, result)

    def _result_report(self, ctx: ActionContext, result: object) -> _Report:
        if isinstance(result, ActionResult):
            return _Report("complete", data=result.data, outcome=result.outcome)
        try:
            return _Report("complete", data=encode_result(result, self._serializer))
        except ResultEncodingError as exc:
            return self._failure_report(ctx, exc)

    def _failure_report(self, ctx: ActionContext, exc: BaseException) -> _Report:
        """Log the failure (ERROR, with its traceback) and say what the run keeps."""
        message = error_text(exc)
        retry = not isinstance(exc, NonRetryableError)
        log.error(
            "run %s of %r failed on attempt %d (worker %s)%s: %s",
            ctx.task_id,
            ctx.action_name,
            ctx.attempt,
            self.config.worker_id,
            "" if retry else ", not retried",
            message,
            exc_info=exc,
            extra={
                "run_id": ctx.task_id,
                "action": ctx.action_name,
                "attempt": ctx.attempt,
                "worker_id": self.config.worker_id,
            },
        )
        return _Report(
            "fail", message=message, retry=retry, traceback=error_traceback(exc), error=exc
        )

    def _start_auto_touch(
        self, ctx: ActionContext, work: asyncio.Future[Any]
    ) -> asyncio.Task[None] | None:
        if not self.config.auto_touch:
            return None
        timeout_ms = self._options[ctx.action_name].timeout_ms
        if timeout_ms <= 0:
            return None
        extend_ms = min(timeout_ms, _MAX_TOUCH_EXTEND_MS)
        interval_s = max(extend_ms / 3, _MIN_TOUCH_INTERVAL_MS) / 1000.0
        return asyncio.create_task(
            self._keep_touching(ctx, work, extend_ms, interval_s), name=f"flo-touch-{ctx.task_id}"
        )

    async def _keep_touching(
        self, ctx: ActionContext, work: asyncio.Future[Any], extend_ms: int, interval_s: float
    ) -> None:
        while not work.done():
            await asyncio.sleep(interval_s)
            if work.done():
                return
            try:
                await self._touch(ctx, extend_ms)
            except _LeaseLost:
                work.cancel()
                return
            except ServerError as exc:
                log.warning("touch of %s refused (%s); trying again later", ctx.task_id, exc)
            except Exception as exc:
                if not is_connection_error(exc):
                    raise
                log.info("touch of %s failed (%s); trying again later", ctx.task_id, exc)

    async def _touch(self, ctx: ActionContext, extend_ms: int) -> None:
        try:
            await self.client.worker.touch(
                self.config.worker_id,
                ctx.action_name,
                ctx.task_id,
                WorkerTouchOptions(extend_ms=extend_ms, token=ctx.token),
            )
        except ServerError as exc:
            if exc.status_code in _TOUCH_FINAL and exc.reason != Reason.OUT_OF_RANGE:
                ctx._cancel_event.set()
                log.warning("lease of %s lost (%s); cancelling its handler", ctx.task_id, exc)
                raise _LeaseLost(str(exc)) from exc
            raise
        finally:
            # Answered or not, a touch that may have run moved the lease's end to at
            # most now + extend_ms (the script ran before this moment).
            if ctx._lease_end is not None and 0 < extend_ms <= _MAX_TOUCH_EXTEND_MS:
                end = asyncio.get_running_loop().time() + extend_ms / 1000.0
                ctx._lease_end = max(ctx._lease_end, end)

    async def _deliver(self, ctx: ActionContext, report: _Report) -> None:
        worker = self.client.worker
        wid = self.config.worker_id
        observer = self.observer
        send: Callable[[], Awaitable[object]]
        sent = 0
        if report.kind in ("none", "release"):
            self._load_delta -= 1  # the run leaves this worker without a complete or fail
        if report.kind == "none":
            return
        oversized: list[ServerError] = []
        if report.kind == "complete":
            item = CompleteItem(ctx.task_id, report.data, report.outcome, ctx.token)
            # The common case in one step; the resend rules only after a lost connection.
            try:
                refusal = await self._completes.submit(ctx.action_name, item)
            except Exception as exc:
                if not is_connection_error(exc):
                    raise
                log.info("complete of %s: connection lost (%s); sending again", ctx.task_id, exc)
                sent = 1
            else:
                if refusal is not None and refusal.reason == Reason.FIELD_TOO_LONG:
                    await self._deliver(ctx, _oversized_report(refusal))
                elif refusal is not None:
                    observer.report_refused("complete")
                    log.warning("complete of %s refused (%s); dropped", ctx.task_id, refusal)
                else:
                    observer.run_completed(ctx.action_name, report.outcome)
                return

            async def send() -> None:
                refusal = await self._completes.submit(ctx.action_name, item)
                if refusal is not None and refusal.reason == Reason.FIELD_TOO_LONG:
                    oversized.append(refusal)  # answered: the run is failed below
                elif refusal is not None:
                    raise refusal
                else:
                    observer.run_completed(ctx.action_name, report.outcome)

        elif report.kind == "fail":

            async def send() -> None:
                try:
                    after = await worker.fail(
                        wid,
                        ctx.action_name,
                        ctx.task_id,
                        report.message,
                        WorkerFailOptions(
                            retry=report.retry, token=ctx.token, traceback=report.traceback or None
                        ),
                    )
                except PermissionDeniedError as exc:
                    self._refuse(exc)
                    raise
                observer.run_failed(ctx.action_name, after == RunStatus.PENDING)

        else:

            def send() -> Awaitable[object]:
                return self._release(ctx)

        what = f"{report.kind} of {ctx.task_id}"
        await send_report(
            what,
            send,
            self._stop.is_set,
            log,
            sent=sent,
            report=report.kind,
            observer=observer,
            lease_end=lambda: ctx._lease_end,
        )
        if oversized:
            await self._deliver(ctx, _oversized_report(oversized[0]))

    async def _complete_batch(
        self, action: str, items: Sequence[CompleteItem]
    ) -> Sequence[ServerError | None]:
        answers = await self.client.worker.complete_many(
            self.config.worker_id, action, items, tally=False
        )
        applied = sum(1 for a in answers if a is None)
        self._load_delta -= applied
        self._completed_delta += applied
        return answers

    async def _watchdog(self) -> None:
        """Cancel inline handlers running past ``action_timeout`` (one timer for all)."""
        loop = asyncio.get_running_loop()
        every = min(1.0, max(0.01, self.config.action_timeout / 10))
        while True:
            await asyncio.sleep(every)
            now = loop.time()
            for task_id, ctx in list(self._inline.items()):
                if ctx._deadline and now >= ctx._deadline and not ctx._timed_out:
                    ctx._timed_out = True
                    ctx._cancel_event.set()
                    task = self._running.get(task_id)
                    if task is not None:
                        task.cancel()

    def _revoke(self, run_id: str, token: int) -> None:
        """A cancel notice (:mod:`flo_redis.notices`): the run's lease was revoked, so
        its handler is cancelled as for a lost lease (a sync handler sees
        ``ctx.cancelled``) and reports nothing."""
        ctx = self._contexts.get(run_id)
        if ctx is None or ctx.token != token or ctx._revoked:
            return
        log.info("run %s was cancelled; cancelling its handler", run_id)
        ctx._revoked = True
        ctx._cancel_event.set()
        target = self._running.get(run_id) if run_id in self._inline else ctx._work
        if target is not None:
            target.cancel()

    async def _flush_counts(self) -> None:
        """Send the load and completed counters gathered since the last flush."""
        load, completed = self._load_delta, self._completed_delta
        if load or completed:
            self._load_delta -= load
            self._completed_delta -= completed
            try:
                await self.client.worker.tally(self.config.worker_id, load, completed)
            except Exception:
                self._load_delta += load
                self._completed_delta += completed
                raise

    async def _counts_loop(self) -> None:
        while not await sleep_unless_stopped(self._stop, _COUNTS_INTERVAL_S):
            try:
                await self._flush_counts()
            except Exception as exc:
                log.debug("counter update failed (%s); retrying later", exc)

    async def _release(self, ctx: ActionContext) -> None:
        try:
            await self.client.worker.release(
                self.config.worker_id, ctx.action_name, ctx.task_id, ctx.token
            )
        except ServerError as exc:
            self.observer.report_refused("release")
            log.info("release of %s refused (%s)", ctx.task_id, exc)
        else:
            self.observer.run_released(ctx.action_name)


def _oversized_report(refusal: ServerError) -> _Report:
    """A result the store will never accept fails its run at once, for good: running
    the handler again would most likely produce the same result."""
    return _Report("fail", message=f"result refused: {refusal}", retry=False)


def _in_namespace(opts: ActionRegisterOptions, namespace: str | None) -> ActionRegisterOptions:
    return ActionRegisterOptions(**{**opts.__dict__, "namespace": namespace})


async def _wait_any(*events: asyncio.Event) -> None:
    waits = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


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
