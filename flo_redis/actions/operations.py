"""flo's ``client.action``: actions and their runs (``client.worker``,
:mod:`flo_redis.actions.workers`, is importable from here too, as in flo).

Every change of a run is one Lua script (``lua/action_*.lua``, ``lua/run_*.lua``); this
module validates arguments before anything is sent, calls the scripts and turns their
replies into flo's result classes and typed errors.
"""

from __future__ import annotations

import asyncio
import builtins
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeAlias

from flo_redis._session.liveness_stats import LivenessStats, liveness_stats
from flo_redis._session.notices import tell
from flo_redis._session.reclaim import reap_queue
from flo_redis._session.registry import remember
from flo_redis._session.tracer import traced
from flo_redis._wire import runner
from flo_redis._wire.checks import (
    MAX_LIST_LIMIT,
    check_bytes,
    check_callback,
    check_count,
    check_cursor,
    check_flow_key,
    check_labels,
    check_list,
    check_name,
    check_options,
    check_priority,
    check_text,
)
from flo_redis._wire.codec import pack, tag_labels
from flo_redis._wire.gateway import (
    ACTION_DELETE,
    ACTION_INVOKE,
    ACTION_INVOKE_MANY,
    ACTION_REGISTER,
    RUN_CANCEL,
    RUN_REQUEUE,
)
from flo_redis._wire.keys import (
    MAX_NAME_SIZE,
    ActionKeys,
    action_of_run,
    namespace_keys,
    run_id_prefix,
)
from flo_redis._wire.refusals import not_registered, raise_refusal, raise_run_refusal
from flo_redis._wire.status import Status, refusal
from flo_redis.actions import batches, graph
from flo_redis.actions.action_settings import check_inputs_fit, list_page, settings_record
from flo_redis.actions.graph_steering import GraphOperations
from flo_redis.actions.inspect import ActionInspection, failed_runs
from flo_redis.actions.runs import (
    DEFAULT_WAIT_MS,
    FINAL,
    NO_PROGRESS,
    cancel_reply,
    cancel_request,
    check_wait_ms,
    group_field,
    invoke_reply,
    invoke_request,
    progress_mark,
    status_reply,
    wait_timed_out,
    with_group,
)
from flo_redis.actions.schedule_steering import ScheduleOperations

# flo's ``flo.actions`` holds client.worker's classes as well: importable from here.
from flo_redis.actions.workers import Claimed, CompleteItem, WorkerOperations
from flo_redis.durability import DurabilityLike
from flo_redis.errors import ServerError, ValidationError, ValueTooLargeError
from flo_redis.retry import Backoff, is_refused_unrun, retry_refused
from flo_redis.types import (
    ActionDeleteOptions,
    ActionInvokeOptions,
    ActionInvokeResult,
    ActionListOptions,
    ActionListResult,
    ActionRegisterOptions,
    ActionRunStatus,
    ActionStatusOptions,
    ActionType,
    RunStatus,
)

INVOKE_BATCH = 1000  # runs per action_invoke_many call


# The options of an invoke given none (never changed: an invoke only reads them).
_NO_OPTIONS = ActionInvokeOptions()
# A wait's status read refused unsent past the retry policy: the pauses before it reads again.
_BUSY_FIRST_S, _BUSY_MAX_S = 0.01, 0.5

# What ``wait(..., on_progress=...)`` calls with the run's status: sync or async.
ProgressCallback: TypeAlias = Callable[[ActionRunStatus], Awaitable[None] | None]


class ActionOperations(ActionInspection, ScheduleOperations, GraphOperations):
    """``client.action``: register actions, invoke them, read runs; counts, runs by state
    and bulk steering come from :class:`ActionInspection`, schedules from
    :class:`~flo_redis.actions.schedule_steering.ScheduleOperations`, the graph between
    runs and batches from :class:`~flo_redis.actions.graph_steering.GraphOperations`."""

    async def register(
        self,
        name: str,
        action_type: ActionType = ActionType.USER,
        options: ActionRegisterOptions | None = None,
    ) -> None:
        """Register ``name`` or replace its settings; the last registration wins."""
        opts = check_options(options, ActionRegisterOptions)
        keys = self._action_keys(name, opts.namespace)
        if isinstance(action_type, bool) or action_type not in tuple(ActionType):
            raise ValidationError(
                f"action_type must be an ActionType ({', '.join(t.name for t in ActionType)}), "
                f"got {action_type!r}"
            )
        check_text("owner", opts.owner, optional=True, limit=MAX_NAME_SIZE)
        check_text("description", opts.description, optional=True)
        settings = settings_record(action_type, opts, self._session.max_payload_bytes)
        # Listed first: a user refused the registry is refused before anything is written.
        index = namespace_keys(keys.namespace).actions
        await remember(self._session.redis, keys.namespace, index, name)
        await ACTION_REGISTER(self._session, keys, [pack(settings)])

    async def invoke(
        self,
        name: str,
        input_data: bytes,
        options: ActionInvokeOptions | None = None,
        *,
        durability: DurabilityLike | None = None,
    ) -> ActionInvokeResult:
        """Create a run of ``name`` with ``input_data``; :class:`NotFoundError` if the action
        is not registered, :class:`ValueTooLargeError` for an oversized input,
        :class:`ValidationError` for a bad label or idempotency key (nothing is written).
        ``durability``: this write's level, else the client's (:class:`NotDurableError`)."""
        opts = _NO_OPTIONS if options is None else check_options(options, ActionInvokeOptions)
        keys = self._action_keys(name, opts.namespace)
        if opts.batch is not None:
            await batches.check_open(self._session, keys.namespace, opts.batch)
        deps = graph.deps_request(opts.depends_on, opts.flow_key)
        deps = await graph.whole_groups(self._session, keys.namespace, deps)
        with traced(self._session.tracer).invoking(keys.namespace, name, 1) as span:
            args, size = invoke_request(
                keys, input_data, opts, self._session.max_payload_bytes, span.context, deps
            )
            reply = await ACTION_INVOKE(self._session, keys, args, durability=durability)
            result = invoke_reply(reply, keys, size)
            span.sent((result.run_id,))
        if opts.depends_on or opts.batch:
            # Registered on its parents, counted by its batch, now (else at the upkeep).
            await graph.forward_after(self._session, keys)
        return result

    async def invoke_many(
        self,
        name: str,
        inputs: Sequence[bytes],
        options: ActionInvokeOptions | None = None,
        *,
        durability: DurabilityLike | None = None,
    ) -> builtins.list[ActionInvokeResult]:
        """Create one run per input in as few calls as possible (1000 runs a call), all
        ready now and in the order given; each call is atomic. Labels and priority apply to
        every run, and so does a ``flow_key``; ``delay_ms``, ``run_at_ms`` and
        ``idempotency_key`` are refused here (use :meth:`invoke`). Every input is checked
        before anything is sent; each call waits for ``durability`` as :meth:`invoke`
        does."""
        opts = check_options(options, ActionInvokeOptions)
        if opts.delay_ms or opts.run_at_ms is not None or opts.idempotency_key is not None:
            raise ValidationError(
                "invoke_many takes no delay_ms, run_at_ms, idempotency_key or flow_key; use invoke"
            )
        keys = self._action_keys(name, opts.namespace)
        priority = check_priority(opts.priority)
        check_labels(opts.labels)
        flow_key = check_flow_key(opts.flow_key, optional=True)
        deps = graph.deps_request(opts.depends_on, opts.flow_key)
        limit = self._session.max_payload_bytes
        items = check_list("inputs", inputs)
        data = [check_bytes(f"inputs[{i}]", x, limit) for i, x in enumerate(items)]
        labels = pack(tag_labels(opts.labels)) if opts.labels else b""
        prefix = run_id_prefix(name)
        if len(data) > INVOKE_BATCH:
            await check_inputs_fit(self._session, keys, data)
        with traced(self._session.tracer).invoking(keys.namespace, name, len(data)) as span:
            batch = "" if opts.batch is None else check_name("batch", opts.batch)
            if batch:
                await batches.check_open(self._session, keys.namespace, batch)
            deps = await graph.whole_groups(self._session, keys.namespace, deps)
            shared = (labels, priority, span.context, flow_key, deps, batch)
            results = await self._invoke_chunks(keys, prefix, shared, data, durability)
            span.sent([r.run_id for r in results])
        if deps or opts.batch:  # registered on their parents, counted by the batch, now
            await graph.forward_after(self._session, keys)
        return results

    async def _invoke_chunks(
        self,
        keys: ActionKeys,
        prefix: str,
        shared: tuple[bytes, int, bytes, str, bytes, str],
        data: Sequence[bytes],
        durability: DurabilityLike | None,
    ) -> builtins.list[ActionInvokeResult]:
        """Create runs of ``data``, INVOKE_BATCH a call (fewer with many parents: at most
        MAX_PARENTS dependencies a call), each call atomic; ``shared``: every run's labels,
        priority, trace context, flow key, packed parents and batch."""
        name = keys.action
        results: builtins.list[ActionInvokeResult] = []
        per_call = graph.runs_per_call(shared[4], INVOKE_BATCH)
        for start in range(0, len(data), per_call):
            chunk = data[start : start + per_call]
            args: list[runner.Arg] = [prefix, *shared, *chunk]
            reply = await ACTION_INVOKE_MANY(self._session, keys, args, durability=durability)
            if reply.status in (Status.NO_ACTION, Status.BAD_SETTING):
                raise_refusal(reply.status, keys, "invoke_many")
            if reply.status == Status.OUT_OF_RANGE:
                raise ValidationError(f"invoke_many: {len(chunk)} inputs refused in one call")
            if reply.status == Status.CONFLICT:
                raise ValidationError(
                    f"action {name!r} dedups, throttles or debounces by flow key: each invoke "
                    "is answered on its own, so invoke its keyed runs one at a time (invoke)"
                )
            if reply.status == Status.TOO_LARGE:
                index = start + reply.index
                raise ValueTooLargeError(
                    f"inputs[{index}] is {len(data[index])} bytes; action {name!r} accepts at "
                    f"most {reply.first_seq} (its max_payload_bytes); runs before it were created "
                    "(the action's limit changed during the call)"
                )
            first = reply.first_seq
            results.extend(ActionInvokeResult(f"{prefix}{first + i}") for i in range(len(chunk)))
        return results

    async def status(
        self, run_id: str, options: ActionStatusOptions | None = None
    ) -> ActionRunStatus:
        """The run's current state; :class:`NotFoundError` for an unknown (or expired) run."""
        opts = check_options(options, ActionStatusOptions)
        keys = self._action_keys(action_of_run(run_id), opts.namespace)

        async def read() -> list[Any]:
            with runner.redis_errors("status"):
                async with self._session.redis.pipeline(transaction=False) as pipe:
                    pipe.hget(keys.runs, run_id)
                    pipe.zscore(keys.delayed, run_id)
                    return list(await pipe.execute())

        # A read refused unsent (loading, a cluster node's connections all busy under a
        # burst of waits) is sent again as the client's retry policy says.
        raw, due = await retry_refused(read, self._session.runner.policy)
        status = status_reply(run_id, keys, raw, due)
        field = group_field(raw)
        if field is None:
            return status
        with runner.redis_errors("status"):
            return with_group(status, await self._session.redis.hget(keys.graph, field))

    async def wait(
        self,
        run_id: str,
        timeout_ms: int = DEFAULT_WAIT_MS,
        namespace: str | None = None,
        *,
        on_progress: ProgressCallback | None = None,
    ) -> ActionRunStatus:
        """The run's status as soon as it ends (COMPLETED, FAILED, TIMED_OUT or
        CANCELLED), woken by the script that ends it, not by polling.
        :class:`WaitTimeoutError` (with the run's status read at the deadline) once
        ``timeout_ms`` has passed first; :class:`NotFoundError` for an unknown run.
        ``on_progress`` (a function or coroutine function) is called with the run's
        status each time its handler reported a new progress value, woken by that
        report too; it sees the latest value each time it looks (quick successive values
        may coalesce), and the last one before the end; one that is not callable is
        refused up front (:class:`ValidationError`)."""
        timeout_ms = check_wait_ms(timeout_ms)
        check_callback("on_progress", on_progress)
        keys = self._action_keys(action_of_run(run_id), namespace)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000.0
        options = ActionStatusOptions(namespace=namespace)
        # The channel is held only while someone waits on it (release=True): the scripts
        # publish ends only then.
        seen = NO_PROGRESS
        busy = Backoff(_BUSY_FIRST_S, _BUSY_MAX_S)
        async with self._session.waker.listening([keys.ended], release=True) as listener:
            while True:
                # Subscribed before the read: an end published after it is never missed.
                await listener.arm()
                try:
                    status = await self.status(run_id, options)
                except ServerError as exc:
                    # A read refused unsent (every connection busy) past the retry
                    # policy's tries: the wait reads again while its time lasts.
                    pause = busy.next()
                    if not is_refused_unrun(exc) or loop.time() + pause >= deadline:
                        raise
                    await asyncio.sleep(pause)
                    continue
                busy.reset()
                if on_progress is not None and progress_mark(status) != seen:
                    seen = progress_mark(status)
                    heard = on_progress(status)
                    if inspect.isawaitable(heard):
                        await heard
                if status.status in FINAL:
                    return status
                remaining = deadline - loop.time()
                if remaining <= 0:  # the status just read: what the run is now
                    raise wait_timed_out(status, timeout_ms)
                await listener.wait(remaining)

    async def list(self, options: ActionListOptions | None = None) -> ActionListResult:
        """Registered actions in name order, ``limit`` a page, filtered by ``prefix``;
        pass the result's ``cursor`` back in ``options.cursor`` for the next page."""
        opts = check_options(options, ActionListOptions)
        limit = check_count("limit", opts.limit, 1, MAX_LIST_LIMIT)
        ns = self._session.get_namespace(opts.namespace)
        prefix = check_text("prefix", opts.prefix, optional=True, limit=MAX_NAME_SIZE)
        return await list_page(self._session, ns, prefix, check_cursor(opts.cursor), limit)

    async def delete(self, name: str, options: ActionDeleteOptions | None = None) -> None:
        """Delete the action with all its runs; :class:`NotFoundError` if not registered."""
        opts = check_options(options, ActionDeleteOptions)
        keys = self._action_keys(name, opts.namespace)
        # meta stays (run ids are never reused); the data keys go, then the name from the
        # registry: a user refused the delete is refused before anything is written.
        reply = await ACTION_DELETE(self._session, keys, tail=keys.all_data_keys())
        with runner.redis_errors("delete"):
            await self._session.redis.zrem(namespace_keys(keys.namespace).actions, name)
        if not reply.flag:
            raise not_registered(keys)

    # --- beyond flo ----------------------------------------------------------------

    async def requeue(self, run_id: str, namespace: str | None = None) -> None:
        """Give a FAILED / TIMED_OUT run a fresh set of attempts. :class:`ConflictError`
        if the run is not failed, :class:`NotFoundError` if unknown."""
        keys = self._action_keys(action_of_run(run_id), namespace)
        reply = await RUN_REQUEUE(self._session, keys, [run_id])
        status = reply.status
        if status == Status.CONFLICT:
            raise refusal(
                status,
                f"run {run_id!r} is {RunStatus(reply.value).name}, not failed; only "
                "FAILED, TIMED_OUT or CANCELLED runs can be re-queued",
            )
        raise_run_refusal(status, keys, run_id)

    async def cancel(self, run_id: str, namespace: str | None = None) -> None:
        """Cancel a run that has not finished: a waiting or delayed run ends CANCELLED at
        once; a running run's lease is revoked, so its handler's reports are refused, its
        worker is told at once and cancels the handler (as for a lost lease; a notice
        missed is caught at its next touch), and it ends CANCELLED.
        :class:`ConflictError` if the run already finished, :class:`NotFoundError` if
        unknown."""
        keys = self._action_keys(action_of_run(run_id), namespace)
        with runner.redis_errors("cancel"):
            raw = await self._session.redis.hget(keys.runs, run_id)
        args, tail = cancel_request(run_id, keys, raw)
        notice = cancel_reply(await RUN_CANCEL(self._session, keys, args, tail=tail), keys, run_id)
        if notice is not None:
            await tell(self._session.redis, notice)
        if isinstance(raw, bytes) and graph.told_of_end(raw):
            await graph.forward_after(self._session, keys)  # told now, not at the upkeep

    async def failed(
        self, name: str, limit: int = 100, namespace: str | None = None
    ) -> builtins.list[ActionRunStatus]:
        """The oldest ``limit`` failed (FAILED / TIMED_OUT) runs of ``name``."""
        check_count("limit", limit, 1, MAX_LIST_LIMIT)
        return await failed_runs(self._session, self._action_keys(name, namespace), limit)

    async def stats(self, name: str, namespace: str | None = None) -> LivenessStats:
        """The queue's liveness counters (reclaims by cause, stale reports refused) and
        what is held now (owners, suspects, concurrency slots). Read only."""
        return await liveness_stats(self._session, name, namespace)

    async def reap(self, name: str, namespace: str | None = None) -> int:
        """Upkeep of one queue (expired leases, due delayed runs, retention), bounded;
        returns how many runs became ready. Workers call this periodically."""
        return await reap_queue(self._session, name, namespace)


__all__ = ["ActionOperations", "Claimed", "CompleteItem", "WorkerOperations"]
