"""flo's ``client.worker``: the worker registry and polling for runs; reporting them is
:mod:`flo_redis.actions.reports`.

Every change of a run is one Lua script (``lua/action_claim.lua``, ``lua/run_*.lua``,
``lua/worker_*.lua``); this module validates arguments before anything is sent, calls the
scripts and turns their replies into flo's result classes and typed errors.
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from flo_redis._session.registry import remember
from flo_redis._session.session import Session
from flo_redis._session.wake import Attempt, long_poll
from flo_redis._wire.aside import SetAside, scope_of, warn_set_aside, warn_unreadable
from flo_redis._wire.checks import (
    MAX_LIST_LIMIT,
    check_count,
    check_cursor,
    check_names,
    check_options,
    check_text,
)
from flo_redis._wire.codec import (
    BadRecord,
    check_metadata,
    pack,
    text,
    unpack_record,
    worker_labels,
)
from flo_redis._wire.gateway import (
    ACTION_CLAIM,
    ACTION_UNPARK,
    WORKER_CONFIGURE,
    WORKER_DEREGISTER,
    WORKER_DRAIN,
    WORKER_HEARTBEAT,
    WORKER_LIST,
    WORKER_POLL,
    WORKER_PRESENCE,
    WORKER_REGISTER,
)
from flo_redis._wire.keys import (
    MAX_NAME_SIZE,
    ActionKeys,
    HandoffChannel,
    NamespaceKeys,
    action_keys,
    check_name,
    is_name,
    namespace_keys,
    owner_channel,
)
from flo_redis._wire.lru import Lru
from flo_redis._wire.replies import Claimed, ClaimReply
from flo_redis._wire.runner import Arg
from flo_redis._wire.status import Status, refusal
from flo_redis._wire.worker_replies import WorkerRow
from flo_redis.actions.reports import CompleteItem, RunReports
from flo_redis.errors import ValidationError, validate_block_ms
from flo_redis.types import (
    DEFAULT_WORKER_BLOCK_MS,
    WorkerAwaitOptions,
    WorkerAwaitResult,
    WorkerInfo,
    WorkerListOptions,
    WorkerListResult,
    WorkerRegisterOptions,
    WorkerStatus,
    WorkerType,
)

MAX_CURSOR_BYTES = 4096
SET_ASIDE = -2  # a worker_list row of a worker whose record was set aside (lib/workers.lua)
LABEL_SCAN = 200  # pending runs a claim inspects at most when routing by labels


def earliest_due(next_due: int, reply: ClaimReply) -> int:
    """The earlier of ``next_due`` and what ``reply`` says falls due next (a delayed run,
    a lease deadline, a start the rate limit allows); -1: nothing."""
    for due in (reply.next_due_ms, reply.rate_next_ms):
        if due >= 0 and (next_due < 0 or due < next_due):
            next_due = due
    return next_due


class WorkerOperations(RunReports):
    """``client.worker``: the worker registry, polling for runs and reporting them."""

    def __init__(self, session: Session) -> None:
        self._session = session
        # Bounded (flo_redis/_wire/lru.py): a client may poll for thousands of workers.
        self._labels_cache: Lru[str, bytes] = Lru()
        self._gate_ok: Lru[tuple[str, str], tuple[float, bytes]] = Lru()
        self._rotation = 0

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
        record: dict[str, Any] = {
            "wt": int(WorkerType.ACTION),
            "mc": opts.concurrency,
            "tt": builtins.list(task_types),
            "ow": self._session.owner_id,
        }
        if opts.machine_id is not None:
            record["mid"] = opts.machine_id
        if opts.metadata is not None:
            record["md"] = opts.metadata
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
            raise self._unknown_worker(worker_id, ns, reply.status)

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
        labels = await self._gate(worker_id, namespace_keys(ns_name), health_ttl_s)
        # Without a poll id the caller cannot retry this poll, so no replay memo is kept.
        poll_id = "" if opts.poll_id is None else check_name("poll id", opts.poll_id)

        async def attempt() -> Attempt[Claimed]:
            return await self._claim_round(
                all_keys, worker_id, labels, max_tasks, poll_id, on_unregistered
            )

        claimed = await long_poll(
            self._session.waker,
            (k.wake for k in all_keys),
            block_ms,
            attempt,
            server_clock_ms=self._session.server_time_ms,
            since=since,
        )
        if claimed and tally:
            await self._tally(worker_id, ns_name, len(claimed), 0, 0)
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
        workers: builtins.list[WorkerInfo] = []
        owners: builtins.list[str | None] = []
        for row in page.rows:
            if row.worker_status == SET_ASIDE:
                why = row.record.decode(errors="replace")
                warn_set_aside(scope_of(ns), [SetAside("worker", row.worker_id, why)])
                continue
            try:
                info = worker_info(row)
                owner = text(unpack_record(row.record).get("ow"))
            except (BadRecord, KeyError, ValueError, TypeError, AttributeError) as exc:
                warn_unreadable(
                    ("worker", ns.namespace, row.worker_id),
                    f"worker {row.worker_id!r} of namespace {ns.namespace!r}: its record "
                    f"cannot be read ({type(exc).__name__}: {exc}); left out of the list",
                )
                continue
            workers.append(info)
            owners.append(owner)
        workers = await self._with_presence(ns, workers, owners)
        return WorkerListResult(workers=workers, cursor=page.last_id if page.more else None)

    async def _with_presence(
        self,
        ns: NamespaceKeys,
        workers: builtins.list[WorkerInfo],
        owners: builtins.list[str | None],
    ) -> builtins.list[WorkerInfo]:
        """``workers`` with ``alive`` set from their owners' liveness channels in the
        registry's slot (``owners[i]`` registered ``workers[i]``; None: not recorded),
        one ``worker_presence`` call for the page; a gone worker is never ACTIVE (it
        reads UNHEALTHY instead)."""
        asked = sorted({o for o in owners if o is not None and is_name(o)})
        if not asked:
            return workers
        reply = await WORKER_PRESENCE(
            self._session, ns, tail=[owner_channel(ns.tag, o) for o in asked]
        )
        if reply.status != Status.OK:  # more owners than one page can name
            raise refusal(reply.status, f"worker presence: {len(asked)} owners in one call")
        present = dict(zip(asked, reply.counts, strict=True))
        out: builtins.list[WorkerInfo] = []
        for info, owner in zip(workers, owners, strict=True):
            if owner in present:
                alive = present[owner] > 0
                status = info.status
                if not alive and status == WorkerStatus.ACTIVE:
                    status = WorkerStatus.UNHEALTHY  # a DRAINING one stays so
                info = dataclasses.replace(info, alive=alive, status=status)
            out.append(info)
        return out

    # --- beyond flo ----------------------------------------------------------------

    async def drain(self, worker_id: str, namespace: str | None = None) -> None:
        """Tell a worker to drain: its polls are refused (``WORKER_DRAINING``) while its
        running runs may still report; an ActionWorker then stops by itself."""
        check_name("worker id", worker_id)
        ns = self._ns(namespace)
        reply = await WORKER_DRAIN(self._session, ns, [worker_id])
        if reply.status != Status.OK:
            raise self._unknown_worker(worker_id, ns, reply.status)
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
            raise self._unknown_worker(worker_id, ns)

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

    # --- internals -----------------------------------------------------------------

    @staticmethod
    def _unknown_worker(
        worker_id: str, ns: NamespaceKeys, status: int = Status.NOT_FOUND
    ) -> Exception:
        """The error for a worker a script did not find. BAD_RECORD (its record did not
        decode, and was set aside) is logged once and answered the same way: the
        worker registers again."""
        if status == Status.BAD_RECORD:
            reason = "its stored record does not decode"
            warn_set_aside(scope_of(ns), [SetAside("worker", worker_id, reason)])
        return refusal(
            Status.NOT_FOUND,
            f"worker {worker_id!r} is not registered in namespace {ns.namespace!r} (or was "
            "removed after missing its heartbeats); register it again",
        )

    async def _gate(self, worker_id: str, ns: NamespaceKeys, ttl_s: float = 0.0) -> bytes:
        """Check the worker may take work now; its labels, packed for the claim."""
        loop = asyncio.get_running_loop()
        cached = self._gate_ok.get((ns.namespace, worker_id))
        if ttl_s > 0 and cached is not None and loop.time() - cached[0] < ttl_s:
            return cached[1]
        reply = await WORKER_POLL(self._session, ns, [worker_id])
        status = reply.status
        if status in (Status.NOT_FOUND, Status.BAD_RECORD):
            raise self._unknown_worker(worker_id, ns, status)
        if status == Status.UNHEALTHY:
            raise refusal(
                status,
                f"worker {worker_id!r} missed its heartbeats and is UNHEALTHY; send a "
                "heartbeat, then poll again",
            )
        if status == Status.DRAINING:
            raise refusal(
                status,
                f"worker {worker_id!r} is DRAINING: it takes no new work; finish running "
                "runs and stop",
            )
        metadata = reply.metadata
        packed = self._labels_cache.get(metadata)
        if packed is None:
            labels = worker_labels(metadata)
            packed = pack(labels) if labels else b""
            self._labels_cache.put(metadata, packed)
        self._gate_ok.put((ns.namespace, worker_id), (loop.time(), packed))
        return packed

    async def _claim_round(
        self,
        all_keys: Sequence[ActionKeys],
        worker_id: str,
        labels: bytes,
        max_tasks: int,
        poll_id: str,
        on_unregistered: Callable[[str], Awaitable[None]] | None = None,
    ) -> Attempt[Claimed]:
        """One claim per action queue, starting at a rotating queue so no action starves,
        until ``max_tasks`` runs are held: them, when something is next due (server ms:
        a delayed run, a lease deadline, a start a rate limit allows), and whether every
        queue answered that only its rate limit holds its runs back."""
        claimed: builtins.list[Claimed] = []
        next_due = -1
        held_queues = 0
        self._rotation = (self._rotation + 1) % len(all_keys)
        order = [*all_keys[self._rotation :], *all_keys[: self._rotation]]
        for keys in order:
            if len(claimed) >= max_tasks:
                break
            reply = await self.claim(keys, worker_id, labels, max_tasks - len(claimed), poll_id)
            if not reply.registered and on_unregistered is not None:
                await on_unregistered(keys.action)
            claimed.extend(reply.runs)
            next_due = earliest_due(next_due, reply)
            if reply.rate_next_ms >= 0:
                held_queues += 1
        return Attempt(claimed, next_due, held=held_queues == len(order))

    async def claim(
        self,
        keys: ActionKeys,
        worker_id: str,
        labels: bytes,
        max_n: int,
        poll_id: str,
        park_ms: int = 0,
        received: str = "",
        offer_ms: int = 0,
    ) -> ClaimReply:
        """One claim script call on one action queue (no health gate, no waiting). With
        ``park_ms`` a poll that finds nothing parks its poller for a hand-off, offered
        (``offer_ms`` > 0: to be accepted within that long, :meth:`accept`, or it goes
        back to its place in the queue) or, with 0, handed outright; ``received`` names
        the run handed to the poller's previous poll here that it got, as
        ``"<run id> <token>"`` (accepted, if it was offered)."""
        owner = self._session.owner_id
        reply = await ACTION_CLAIM(
            self._session,
            (keys, HandoffChannel.of(keys.tag, owner)),
            [worker_id, owner, labels, max_n, poll_id, LABEL_SCAN, park_ms, received, offer_ms],
        )
        if reply.aside:
            warn_set_aside(scope_of(keys), reply.aside)
        return reply


def worker_info(row: WorkerRow) -> WorkerInfo:
    """A row of ``worker_list`` as flo's ``WorkerInfo``; :class:`BadRecord` (or the
    error of a field) when its record does not hold one."""
    rec = unpack_record(row.record)
    return WorkerInfo(
        worker_id=row.worker_id,
        worker_type=WorkerType(int(rec.get("wt", 0))),
        status=WorkerStatus(row.worker_status),
        current_load=int(rec.get("cl", 0)),
        max_concurrency=int(rec.get("mc", 0)),
        tasks_completed=int(rec.get("tc", 0)),
        tasks_failed=int(rec.get("tf", 0)),
        registered_at_ms=int(rec["ra"]),
        last_heartbeat_ms=int(rec["hb"]),
        machine_id=text(rec.get("mid")),
        metadata=text(rec.get("md")),
        task_types=[text(t) or "" for t in rec.get("tt", [])],
    )


__all__ = ["ClaimReply", "Claimed", "CompleteItem", "WorkerOperations"]
