"""flo's ``client.worker``: the worker registry, polling for runs and reporting them.

Every change of a run is one Lua script (``lua/action_claim.lua``, ``lua/run_*.lua``,
``lua/worker_*.lua``); this module validates its caller's arguments before anything is
sent, and calls the operations that send them (:mod:`flo_redis.actions.claims`,
:mod:`flo_redis.actions.reports`, shared with the ActionWorker) or the scripts.
"""

from __future__ import annotations

import builtins
import itertools
from collections.abc import Awaitable, Callable, Sequence

from flo_redis._session.registry import remember
from flo_redis._session.session import Operations, Session
from flo_redis._wire.checks import (
    MAX_LIST_LIMIT,
    check_count,
    check_cursor,
    check_list,
    check_names,
    check_options,
    check_text,
    validate_block_ms,
)
from flo_redis._wire.codec import check_metadata, pack
from flo_redis._wire.gateway import (
    ACTION_UNPARK,
    WORKER_CONFIGURE,
    WORKER_DEREGISTER,
    WORKER_DRAIN,
    WORKER_HEARTBEAT,
    WORKER_LIST,
    WORKER_REGISTER,
)
from flo_redis._wire.keys import (
    MAX_NAME_SIZE,
    NamespaceKeys,
    action_keys,
    check_name,
    namespace_keys,
)
from flo_redis._wire.replies import Claimed, ClaimReply
from flo_redis._wire.runner import Arg
from flo_redis._wire.status import Status
from flo_redis.actions import reports
from flo_redis.actions.claims import Gate, check_handed, poll, unknown_worker
from flo_redis.actions.reports import CompleteItem
from flo_redis.actions.worker_registry import MAX_CURSOR_BYTES, read_page, worker_record
from flo_redis.durability import DurabilityLike
from flo_redis.errors import ServerError, ValidationError
from flo_redis.types import (
    DEFAULT_WORKER_BLOCK_MS,
    RunStatus,
    WorkerAwaitOptions,
    WorkerAwaitResult,
    WorkerCompleteOptions,
    WorkerFailOptions,
    WorkerListOptions,
    WorkerListResult,
    WorkerRegisterOptions,
    WorkerTouchOptions,
)


class WorkerOperations(Operations):
    """``client.worker``: the worker registry, polling for runs and reporting them."""

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self._gate = Gate()  # the health gate's recent answers
        self._rotation = itertools.count(1)  # a rotating first queue: none starves

    def _ns(self, namespace: str | None) -> NamespaceKeys:
        return namespace_keys(self._session.get_namespace(namespace))

    async def register(
        self,
        worker_id: str,
        task_types: builtins.list[str],
        options: WorkerRegisterOptions | None = None,
    ) -> None:
        """Register a worker (ACTIVE), or replace its record: counters start at zero.
        ``options.metadata`` is a JSON object whose keys are the worker's labels. The
        record names this client's owner id, and the client holds its liveness channel
        in the registry's slot from now on, so :meth:`list` tells when it is gone."""
        opts = check_options(options, WorkerRegisterOptions)
        check_name("worker id", worker_id)
        task_types = check_names("task types", task_types)
        check_count("concurrency", opts.concurrency, 0, 2**32 - 1)
        check_metadata(opts.metadata)
        check_text("machine_id", opts.machine_id, optional=True, limit=MAX_NAME_SIZE)
        ns = self._ns(opts.namespace)
        record = worker_record(task_types, opts, self._session.owner_id)
        await remember(self._session.redis, ns.namespace)
        await WORKER_REGISTER(self._session, ns, [worker_id, pack(record)])

    async def heartbeat(
        self, worker_id: str, current_load: int = 0, namespace: str | None = None
    ) -> None:
        """Record a heartbeat; :class:`NotFoundError` once the worker has been removed
        (silent past the namespace's removal delay) — register again then."""
        check_name("worker id", worker_id)
        check_count("current_load", current_load, 0, 2**32 - 1)
        ns = self._ns(namespace)
        reply = await WORKER_HEARTBEAT(self._session, ns, [worker_id, current_load])
        if reply.status != Status.OK:
            raise unknown_worker(worker_id, ns, reply.status)

    async def await_task(
        self,
        worker_id: str,
        task_types: builtins.list[str],
        options: WorkerAwaitOptions | None = None,
    ) -> WorkerAwaitResult:
        """Take one run of any of ``task_types``, waiting up to ``block_ms`` (None: 30000,
        0: answer now, at most 300000) for one to arrive. Refused with reason
        ``WORKER_UNHEALTHY`` / ``WORKER_DRAINING`` for a silent or draining worker."""
        opts = check_options(options, WorkerAwaitOptions)
        runs = await self.await_tasks(worker_id, task_types, 1, opts)
        return WorkerAwaitResult(task=runs[0].assignment() if runs else None)

    async def await_tasks(
        self,
        worker_id: str,
        task_types: Sequence[str],
        max_tasks: int,
        options: WorkerAwaitOptions | None = None,
        *,
        tally: bool = True,
        health_ttl_s: float = 0.0,
        on_unregistered: Callable[[str], Awaitable[None]] | None = None,
    ) -> builtins.list[Claimed]:
        """Like :meth:`await_task`, but takes up to ``max_tasks`` runs in one go (one
        script call per action queue): how a busy worker fills its free capacity.

        ``tally=False`` leaves the worker's load counter to the caller (a worker that
        batches its counter updates); ``health_ttl_s`` reuses a health check that passed
        that recently instead of asking again (so a drain is seen within that time);
        ``on_unregistered(action)`` is awaited for each action found not registered
        (gone with a flushed or restarted Redis) before the poll goes on."""
        since = self._session.waker.generation  # an interrupt from here on ends this poll
        opts = check_options(options, WorkerAwaitOptions)
        block_ms = DEFAULT_WORKER_BLOCK_MS if opts.block_ms is None else opts.block_ms
        validate_block_ms(block_ms)
        check_count("max_tasks", max_tasks, 1, 10_000)
        check_name("worker id", worker_id)
        task_types = check_names("task types", task_types)
        if not task_types:
            raise ValidationError("task_types must name at least one action")
        ns_name = self._session.get_namespace(opts.namespace)
        all_keys = [action_keys(ns_name, t) for t in task_types]
        labels = await self._gate.check(
            self._session, worker_id, namespace_keys(ns_name), health_ttl_s
        )
        # Without a poll id the caller cannot retry this poll, so no replay memo is kept.
        poll_id = "" if opts.poll_id is None else check_name("poll id", opts.poll_id)

        claimed = await poll(
            self._session,
            all_keys,
            worker_id,
            labels,
            max_tasks,
            poll_id,
            block_ms,
            since=since,
            rotation=self._rotation,
            on_unregistered=on_unregistered,
        )
        if claimed and tally:
            await reports.tally(self._session, worker_id, ns_name, len(claimed), 0, 0)
        return claimed

    async def list(self, options: WorkerListOptions | None = None) -> WorkerListResult:
        """Registered workers in id order, ``limit`` (1..1024) a page after ``cursor``.
        Each says whether its process is alive now (``WorkerInfo.alive``; a gone one
        reads UNHEALTHY, not ACTIVE): asked of Redis once per page, after it is read."""
        opts = check_options(options, WorkerListOptions)
        check_count("limit", opts.limit, 1, MAX_LIST_LIMIT)
        cursor = check_cursor(opts.cursor, MAX_CURSOR_BYTES)
        ns = self._ns(opts.namespace)
        page = await WORKER_LIST(self._session, ns, [cursor, opts.limit])
        workers = await read_page(self._session, ns, page.rows)
        return WorkerListResult(workers=workers, cursor=page.last_id if page.more else None)

    async def accept(
        self,
        worker_id: str,
        action_name: str,
        handed: Sequence[tuple[str, int]],
        namespace: str | None = None,
    ) -> builtins.list[ServerError | None]:
        """Accept runs offered to the caller's poller by a hand-off (a claim that parked
        with ``offer_ms``; ``lua/README.md``, "Hand-off"), each ``(run id, token)`` as
        its message named it, one call per 1000, each answered on its own: ``None``
        where the run is the caller's (accepted now, or already by a report, a touch
        or a claim), else the refusal -- :class:`ConflictError` (``STALE_REPORT``) when
        the offer was not accepted in time and the run went back to its queue or on to
        another holder: stop its handler and report nothing. ``worker_id`` only names
        the caller in a refusal's message (the token decides)."""
        check_name("worker id", worker_id)
        keys = self._action_keys(action_name, namespace)
        packed = check_handed(self._session, action_name, handed, namespace)
        return await reports.accept(self._session, worker_id, keys, packed)

    async def touch(
        self,
        worker_id: str,
        action_name: str,
        task_id: str,
        options: WorkerTouchOptions | None = None,
    ) -> None:
        """Extend the run's lease to ``extend_ms`` from now (at most one hour). Refused
        with :class:`ConflictError` (``STALE_REPORT``) if the caller no longer holds it."""
        opts = check_options(options, WorkerTouchOptions)
        await reports.touch(
            self._session,
            worker_id,
            action_name,
            task_id,
            opts.token,
            opts.extend_ms,
            opts.namespace,
        )

    async def complete(
        self,
        worker_id: str,
        action_name: str,
        task_id: str,
        result: bytes,
        options: WorkerCompleteOptions | None = None,
        *,
        durability: DurabilityLike | None = None,
    ) -> None:
        """Complete the run with ``result``, for its current holder only. Resending an
        identical complete that already succeeded answers success and changes nothing;
        a complete from a holder whose lease was taken back is refused
        (:class:`ConflictError`, ``STALE_REPORT``) and changes nothing."""
        opts = check_options(options, WorkerCompleteOptions)
        run = (task_id, result, opts.token, opts.outcome, opts.namespace)
        await reports.complete(self._session, worker_id, action_name, *run, durability=durability)

    async def complete_many(
        self,
        worker_id: str,
        action_name: str,
        items: Sequence[CompleteItem],
        namespace: str | None = None,
        *,
        tally: bool = True,
        durability: DurabilityLike | None = None,
    ) -> builtins.list[ServerError | None]:
        """Complete several runs of one action in one call per 1000, each under exactly
        :meth:`complete`'s rules and answered on its own: ``None`` where the complete took
        effect (or was an identical resend), else the refusal it would have raised."""
        check_name("worker id", worker_id)
        items = check_list("items", items)
        answers, applied = await reports.complete_many(
            self._session, worker_id, action_name, items, namespace, durability=durability
        )
        if tally and applied:
            ns = self._session.get_namespace(namespace)
            await reports.tally(self._session, worker_id, ns, -applied, applied, 0)
        return answers

    async def fail(
        self,
        worker_id: str,
        action_name: str,
        task_id: str,
        error_message: str,
        options: WorkerFailOptions | None = None,
        *,
        durability: DurabilityLike | None = None,
    ) -> RunStatus:
        """Fail the run. With ``retry`` and attempts left it runs again (after the
        action's backoff); otherwise it ends FAILED, kept with its error. Same holder
        and resend rules as :meth:`complete`. Returns the run's status after: PENDING
        when it waits for another attempt, FAILED when it ended."""
        opts = check_options(options, WorkerFailOptions)
        after = await reports.fail(
            self._session,
            worker_id,
            action_name,
            task_id,
            error_message,
            retry=opts.retry,
            traceback=opts.traceback,
            token=opts.token,
            namespace=opts.namespace,
            durability=durability,
        )
        return RunStatus(after.run_status)

    async def release(
        self,
        worker_id: str,
        action_name: str,
        task_id: str,
        token: int | None,
        namespace: str | None = None,
    ) -> None:
        """Give a held run back to its queue as it was, not counted as an attempt (a
        worker that stops before running it). Refused with :class:`ConflictError`
        (``STALE_REPORT``) if the caller no longer holds it; changes nothing then."""
        await reports.release(self._session, worker_id, action_name, task_id, token, namespace)

    async def tally(
        self,
        worker_id: str,
        load: int = 0,
        completed: int = 0,
        failed: int = 0,
        namespace: str | None = None,
    ) -> None:
        """Add to a worker's counters (load never below zero); for workers that batch
        their counter updates (``tally=False`` on :meth:`await_tasks`/:meth:`complete_many`)."""
        check_name("worker id", worker_id)
        reports.check_tally(load, completed, failed)
        ns = self._ns(namespace).namespace
        await reports.tally(self._session, worker_id, ns, load, completed, failed)

    # --- beyond flo ----------------------------------------------------------------

    async def drain(self, worker_id: str, namespace: str | None = None) -> None:
        """Tell a worker to drain: its polls are refused (``WORKER_DRAINING``) while its
        running runs may still report; an ActionWorker then stops by itself."""
        check_name("worker id", worker_id)
        ns = self._ns(namespace)
        reply = await WORKER_DRAIN(self._session, ns, [worker_id])
        if reply.status != Status.OK:
            raise unknown_worker(worker_id, ns, reply.status)
        # A poller parked for a hand-off would be handed a run before its next health
        # check: end its parks, and it looks again (lua/README.md, "Hand-off").
        for action in reply.names:
            await ACTION_UNPARK(self._session, action_keys(ns.namespace, action), [worker_id])

    async def deregister(self, worker_id: str, namespace: str | None = None) -> None:
        """Remove a worker's record; :class:`NotFoundError` if it is not registered."""
        check_name("worker id", worker_id)
        ns = self._ns(namespace)
        reply = await WORKER_DEREGISTER(self._session, ns, [worker_id])
        if reply.status != Status.OK:
            raise unknown_worker(worker_id, ns)

    async def configure(
        self,
        *,
        heartbeat_timeout_ms: int | None = None,
        remove_after_ms: int | None = None,
        namespace: str | None = None,
    ) -> None:
        """Set the namespace's worker health settings, shared by every client, in one
        atomic step (``lua/worker_configure.lua``): a worker silent past
        ``heartbeat_timeout_ms`` (default 90000) is UNHEALTHY and refused work; past
        ``remove_after_ms`` (default 300000) it is removed from the registry. A setting
        not given keeps its stored value. :class:`ValidationError`, with nothing written,
        when the removal would come before the heartbeat timeout."""
        ns = self._ns(namespace)
        args: list[Arg] = ["", ""]  # '': keep the stored setting
        if heartbeat_timeout_ms is not None:
            args[0] = check_count("heartbeat_timeout_ms", heartbeat_timeout_ms, 100, 2**32 - 1)
        if remove_after_ms is not None:
            args[1] = check_count("remove_after_ms", remove_after_ms, 100, 2**32 - 1)
        reply = await WORKER_CONFIGURE(self._session, ns, args)
        if reply.status == Status.OUT_OF_RANGE:
            rm, hb = reply.remove_after_ms, reply.heartbeat_timeout_ms
            raise ValidationError(
                f"remove_after_ms ({rm}) must not be shorter than heartbeat_timeout_ms "
                f"({hb}): a worker is first marked unhealthy, then removed"
            )


__all__ = ["ClaimReply", "Claimed", "CompleteItem", "WorkerOperations"]
