"""flo's ``client.action`` and ``client.worker``: actions, runs and the worker registry.

Every change of a run is one Lua script (``lua/action_*.lua``, ``lua/run_*.lua``); this
module validates arguments before anything is sent, calls the scripts and turns their
replies into flo's result classes and typed errors.
"""

from __future__ import annotations

import asyncio
import builtins
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import _scripts
from ._status import Status, refusal
from .codec import (
    check_metadata,
    decoded,
    pack,
    tag_labels,
    text,
    unpack_record,
    worker_labels,
)
from .errors import (
    BadRequestError,
    ServerError,
    ValidationError,
    ValueTooLargeError,
    validate_block_ms,
)
from .keys import (
    ActionKeys,
    NamespaceKeys,
    action_keys,
    action_of_run,
    check_name,
    namespace_keys,
    run_id_prefix,
)
from .types import (
    DEFAULT_WORKER_BLOCK_MS,
    ActionDeleteOptions,
    ActionInfo,
    ActionInvokeOptions,
    ActionInvokeResult,
    ActionListOptions,
    ActionListResult,
    ActionRegisterOptions,
    ActionRunStatus,
    ActionStatusOptions,
    ActionType,
    Reason,
    RunStatus,
    TaskAssignment,
    WorkerAwaitOptions,
    WorkerAwaitResult,
    WorkerCompleteOptions,
    WorkerFailOptions,
    WorkerInfo,
    WorkerListOptions,
    WorkerListResult,
    WorkerRegisterOptions,
    WorkerStatus,
    WorkerTouchOptions,
    WorkerType,
)

if TYPE_CHECKING:
    from .client import FloClient

DEFAULT_RETENTION_MS = 24 * 3600 * 1000
DEFAULT_RETENTION_COUNT = 10_000
MAX_TOUCH_EXTEND_MS = 3_600_000
MAX_LIST_LIMIT = 1024
MAX_CURSOR_BYTES = 4096
LABEL_SCAN = 200  # pending runs a claim inspects at most when routing by labels
REAP_BATCH = 100
INVOKE_BATCH = 1000  # runs per action_invoke_many call
COMPLETE_BATCH = 1000  # runs per run_complete_many call


def _check_bytes(what: str, value: object, limit: int) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise ValidationError(f"{what} must be bytes, got {type(value).__name__}")
    data = bytes(value)
    if len(data) > limit:
        raise ValueTooLargeError(
            f"{what} is {len(data)} bytes; the limit is {limit} (raise the client's "
            "max_payload_bytes or store large data elsewhere and pass a reference)"
        )
    return data


def _check_count(what: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(f"{what} must be an int in [{low}, {high}], got {value!r}")
    return value


def _token_arg(token: int | None) -> str:
    if token is None:
        return ""
    _check_count("token", token, 1, 2**53)
    return str(token)


@dataclass(frozen=True, slots=True)
class Claimed:
    """A run handed to a worker by one claim."""

    action: str
    run_id: str
    token: int
    attempt: int
    created_at_ms: int
    payload: bytes

    def assignment(self) -> TaskAssignment:
        return TaskAssignment(
            task_id=self.run_id,
            task_type=self.action,
            payload=self.payload,
            created_at=self.created_at_ms,
            attempt=self.attempt,
            token=self.token,
        )


@dataclass(frozen=True, slots=True)
class CompleteItem:
    """One complete in a :meth:`WorkerOperations.complete_many` batch."""

    task_id: str
    result: bytes
    outcome: str = "success"
    token: int | None = None


@dataclass(frozen=True, slots=True)
class ClaimReply:
    """What one claim script call answered: runs, and when to look again."""

    runs: tuple[Claimed, ...]
    next_due_ms: int  # when a delayed run is due or a lease expires; -1 if never
    registered: bool


def _run_status(run_id: str, rec: dict[str, Any]) -> ActionRunStatus:
    return ActionRunStatus(
        run_id=run_id,
        status=RunStatus(int(rec["s"])),
        created_at_ms=int(rec["c"]),
        attempt=int(rec.get("a", 0)),
        started_at_ms=int(rec["st"]) if rec.get("st") is not None else None,
        completed_at_ms=int(rec["ct"]) if rec.get("ct") is not None else None,
        output=bytes(rec["out"]) if rec.get("out") is not None else None,
        error_message=text(rec.get("err")),
        worker_id=text(rec.get("w")),
        max_retries=int(rec.get("mr", 0)),
        outcome=text(rec.get("oc")),
        token=int(rec.get("t", 0)),
    )


class ActionOperations:
    """``client.action``: register actions, invoke them, read runs."""

    def __init__(self, client: FloClient) -> None:
        self._client = client

    def _keys(self, name: str, namespace: str | None) -> ActionKeys:
        return action_keys(self._client.get_namespace(namespace), name)

    async def register(
        self,
        name: str,
        action_type: ActionType = ActionType.USER,
        options: ActionRegisterOptions | None = None,
    ) -> None:
        """Register ``name`` or replace its settings; the last registration wins."""
        opts = options or ActionRegisterOptions()
        keys = self._keys(name, opts.namespace)
        max_payload = self._client.max_payload_bytes
        if opts.max_payload_bytes is not None:
            max_payload = min(max_payload, opts.max_payload_bytes)
        settings: dict[str, int | str] = {
            "action_type": int(action_type),
            "timeout_ms": opts.timeout_ms,
            "max_retries": opts.max_retries,
            "backoff_ms": opts.retry_backoff_ms,
            "backoff_max_ms": max(opts.retry_backoff_max_ms, opts.retry_backoff_ms),
            "max_concurrency": opts.max_concurrency,
            "max_payload": max_payload,
            "retention_ms": opts.retention_ms or DEFAULT_RETENTION_MS,
            "retention_count": opts.retention_count or DEFAULT_RETENTION_COUNT,
        }
        if opts.owner is not None:
            settings["owner"] = opts.owner
        if opts.description is not None:
            settings["description"] = opts.description
        conn = self._client.redis
        await _scripts.call(conn, "action_register", [keys.definition], [pack(settings)])
        with _scripts.redis_errors("register"):
            await conn.zadd(namespace_keys(keys.namespace).actions, {name: 0})

    async def invoke(
        self, name: str, input_data: bytes, options: ActionInvokeOptions | None = None
    ) -> ActionInvokeResult:
        """Create a run of ``name`` with ``input_data``; :class:`NotFoundError` if the action
        is not registered, :class:`ValueTooLargeError` for an oversized input."""
        opts = options or ActionInvokeOptions()
        keys = self._keys(name, opts.namespace)
        data = _check_bytes("input_data", input_data, self._client.max_payload_bytes)
        labels = pack(tag_labels(opts.labels)) if opts.labels else b""
        reply = await _scripts.call(
            self._client.redis,
            "action_invoke",
            [
                keys.definition,
                keys.meta,
                keys.runs,
                keys.inputs,
                keys.pending,
                keys.delayed,
                keys.idempotency,
                keys.wake,
            ],
            [
                run_id_prefix(name),
                data,
                labels,
                opts.delay_ms,
                opts.run_at_ms or 0,
                opts.idempotency_key or "",
            ],
        )
        status = int(reply[0])
        if status == Status.NO_ACTION:
            raise self._not_registered(keys)
        if status == Status.TOO_LARGE:
            raise ValueTooLargeError(
                f"input_data is {len(data)} bytes; action {name!r} accepts at most "
                f"{int(reply[1])} (its max_payload_bytes)"
            )
        return ActionInvokeResult(run_id=text(reply[1]) or "")

    async def invoke_many(
        self,
        name: str,
        inputs: Sequence[bytes],
        options: ActionInvokeOptions | None = None,
    ) -> builtins.list[ActionInvokeResult]:
        """Create one run per input in as few calls as possible (1000 runs a call), all
        ready now and in the order given; each call is atomic. Labels apply to every run;
        ``delay_ms``, ``run_at_ms`` and ``idempotency_key`` are refused here (use
        :meth:`invoke`). Every input is checked before anything is sent."""
        opts = options or ActionInvokeOptions()
        if opts.delay_ms or opts.run_at_ms is not None or opts.idempotency_key is not None:
            raise ValidationError(
                "invoke_many takes no delay_ms, run_at_ms or idempotency_key; use invoke"
            )
        keys = self._keys(name, opts.namespace)
        limit = self._client.max_payload_bytes
        data = [_check_bytes(f"inputs[{i}]", x, limit) for i, x in enumerate(inputs)]
        labels = pack(tag_labels(opts.labels)) if opts.labels else b""
        prefix = run_id_prefix(name)
        results: builtins.list[ActionInvokeResult] = []
        for start in range(0, len(data), INVOKE_BATCH):
            chunk = data[start : start + INVOKE_BATCH]
            reply = await _scripts.call(
                self._client.redis,
                "action_invoke_many",
                [keys.definition, keys.meta, keys.runs, keys.inputs, keys.pending, keys.wake],
                [prefix, labels, *chunk],
            )
            status = int(reply[0])
            if status == Status.NO_ACTION:
                raise self._not_registered(keys)
            if status == Status.TOO_LARGE:
                index = start + int(reply[2])
                raise ValueTooLargeError(
                    f"inputs[{index}] is {len(data[index])} bytes; action {name!r} accepts at "
                    f"most {int(reply[1])} (its max_payload_bytes); runs before it were created"
                )
            first = int(reply[1])
            results.extend(ActionInvokeResult(f"{prefix}{first + i}") for i in range(len(chunk)))
        return results

    async def status(
        self, run_id: str, options: ActionStatusOptions | None = None
    ) -> ActionRunStatus:
        """The run's current state; :class:`NotFoundError` for an unknown (or expired) run."""
        opts = options or ActionStatusOptions()
        keys = self._keys(action_of_run(run_id), opts.namespace)
        with _scripts.redis_errors("status"):
            raw = await self._client.redis.hget(keys.runs, run_id)
        if raw is None:
            raise refusal(
                Status.NOT_FOUND,
                f"run {run_id!r} not found in namespace {keys.namespace!r} (never created, "
                "deleted with its action, or past its retention)",
            )
        return _run_status(run_id, unpack_record(raw))

    async def list(self, options: ActionListOptions | None = None) -> ActionListResult:
        """Registered actions in name order, ``limit`` a page, filtered by ``prefix``;
        pass the result's ``cursor`` back in ``options.cursor`` for the next page."""
        opts = options or ActionListOptions()
        limit = _check_count("limit", opts.limit, 1, MAX_LIST_LIMIT)
        ns = self._client.get_namespace(opts.namespace)
        index = namespace_keys(ns).actions
        prefix = opts.prefix or ""
        low = f"[{prefix}" if prefix else "-"
        if opts.cursor:
            cursor = opts.cursor.decode()
            if not prefix or cursor >= prefix:
                low = f"({cursor}"
        high = f"[{prefix}\U0010ffff" if prefix else "+"
        conn = self._client.redis
        with _scripts.redis_errors("list"):
            names = [
                decoded(n)
                for n in await conn.zrange(index, low, high, bylex=True, offset=0, num=limit + 1)
            ]
        more = len(names) > limit
        names = names[:limit]
        infos: builtins.list[ActionInfo] = []
        with _scripts.redis_errors("list"):
            async with conn.pipeline(transaction=False) as pipe:
                for n in names:
                    pipe.hgetall(action_keys(ns, n).definition)
                defs = await pipe.execute()
        for n, d in zip(names, defs, strict=True):
            if not d:
                continue  # deleted between the two reads
            infos.append(
                ActionInfo(
                    name=n,
                    action_type=ActionType(int(d.get(b"action_type", 0))),
                    timeout_ms=int(d[b"timeout_ms"]),
                    max_retries=int(d[b"max_retries"]),
                    description=text(d.get(b"description")),
                )
            )
        return ActionListResult(actions=infos, cursor=names[-1].encode() if more else None)

    async def delete(self, name: str, options: ActionDeleteOptions | None = None) -> None:
        """Delete the action with all its runs; :class:`NotFoundError` if not registered."""
        opts = options or ActionDeleteOptions()
        keys = self._keys(name, opts.namespace)
        conn = self._client.redis
        with _scripts.redis_errors("delete"):
            await conn.zrem(namespace_keys(keys.namespace).actions, name)
        reply = await _scripts.call(conn, "action_delete", list(keys.all_data_keys()), [])
        if not int(reply[1]):
            raise self._not_registered(keys)

    # --- beyond flo ----------------------------------------------------------------

    async def requeue(self, run_id: str, namespace: str | None = None) -> None:
        """Give a FAILED / TIMED_OUT run a fresh set of attempts. :class:`ConflictError`
        if the run is not failed, :class:`NotFoundError` if unknown."""
        keys = self._keys(action_of_run(run_id), namespace)
        reply = await _scripts.call(
            self._client.redis,
            "run_requeue",
            [keys.definition, keys.meta, keys.runs, keys.pending, keys.failed, keys.wake],
            [run_id],
        )
        status = int(reply[0])
        if status == Status.CONFLICT:
            raise refusal(
                status,
                f"run {run_id!r} is {RunStatus(int(reply[1])).name}, not failed; only "
                "FAILED, TIMED_OUT or CANCELLED runs can be re-queued",
            )
        self._raise_run_refusal(status, keys, run_id)

    async def failed(
        self, name: str, limit: int = 100, namespace: str | None = None
    ) -> builtins.list[ActionRunStatus]:
        """The oldest ``limit`` failed (FAILED / TIMED_OUT) runs of ``name``."""
        _check_count("limit", limit, 1, MAX_LIST_LIMIT)
        keys = self._keys(name, namespace)
        conn = self._client.redis
        with _scripts.redis_errors("failed"):
            ids = [decoded(i) for i in await conn.zrange(keys.failed, 0, limit - 1)]
            raws = await conn.hmget(keys.runs, ids) if ids else []
        return [
            _run_status(run_id, unpack_record(raw))
            for run_id, raw in zip(ids, raws, strict=True)
            if raw is not None
        ]

    async def reap(self, name: str, namespace: str | None = None) -> int:
        """Upkeep of one queue (expired leases, due delayed runs, retention), bounded;
        returns how many runs became ready. Workers call this periodically."""
        keys = self._keys(name, namespace)
        reply = await _scripts.call(
            self._client.redis,
            "action_reap",
            [
                keys.definition,
                keys.meta,
                keys.runs,
                keys.inputs,
                keys.pending,
                keys.delayed,
                keys.leases,
                keys.failed,
                keys.done,
                keys.idempotency,
                keys.wake,
                keys.owned,
            ],
            [REAP_BATCH],
        )
        if int(reply[0]) != Status.OK:
            raise self._not_registered(keys)
        return int(reply[1])

    # --- shared with WorkerOperations ----------------------------------------------

    @staticmethod
    def _not_registered(keys: ActionKeys) -> Exception:
        return refusal(
            Status.NO_ACTION,
            f"action {keys.action!r} is not registered in namespace {keys.namespace!r}; "
            "register it first",
        )

    @classmethod
    def _raise_run_refusal(cls, status: int, keys: ActionKeys, run_id: str) -> None:
        if status == Status.OK:
            return
        if status == Status.NO_ACTION:
            raise cls._not_registered(keys)
        if status == Status.NOT_FOUND:
            raise refusal(
                status,
                f"run {run_id!r} of action {keys.action!r} not found in namespace "
                f"{keys.namespace!r}",
            )
        raise refusal(status, f"run {run_id!r}: refused ({Status(status).name})")


class WorkerOperations:
    """``client.worker``: the worker registry, polling for runs and reporting them."""

    def __init__(self, client: FloClient) -> None:
        self._client = client
        self._labels_cache: dict[str, bytes] = {}
        self._gate_ok: dict[tuple[str, str], tuple[float, bytes]] = {}
        self._rotation = 0

    def _ns(self, namespace: str | None) -> NamespaceKeys:
        return namespace_keys(self._client.get_namespace(namespace))

    async def register(
        self,
        worker_id: str,
        task_types: builtins.list[str],
        options: WorkerRegisterOptions | None = None,
    ) -> None:
        """Register a worker (ACTIVE), or replace its record: counters start at zero.
        ``options.metadata`` is a JSON object whose keys are the worker's labels."""
        opts = options or WorkerRegisterOptions()
        check_name("worker id", worker_id)
        for task_type in task_types:
            check_name("task type", task_type)
        _check_count("concurrency", opts.concurrency, 0, 2**32 - 1)
        check_metadata(opts.metadata)
        ns = self._ns(opts.namespace)
        record: dict[str, Any] = {
            "wt": int(WorkerType.ACTION),
            "mc": opts.concurrency,
            "tt": builtins.list(task_types),
        }
        if opts.machine_id is not None:
            record["mid"] = opts.machine_id
        if opts.metadata is not None:
            record["md"] = opts.metadata
        await _scripts.call(
            self._client.redis,
            "worker_register",
            [ns.workers, ns.worker_ids],
            [worker_id, pack(record)],
        )

    async def heartbeat(
        self, worker_id: str, current_load: int = 0, namespace: str | None = None
    ) -> None:
        """Record a heartbeat; :class:`NotFoundError` once the worker has been removed
        (silent past the namespace's removal delay) — register again then."""
        check_name("worker id", worker_id)
        _check_count("current_load", current_load, 0, 2**32 - 1)
        ns = self._ns(namespace)
        reply = await _scripts.call(
            self._client.redis,
            "worker_heartbeat",
            [ns.config, ns.workers, ns.worker_ids],
            [worker_id, current_load],
        )
        if int(reply[0]) != Status.OK:
            raise self._unknown_worker(worker_id, ns)

    async def await_task(
        self,
        worker_id: str,
        task_types: builtins.list[str],
        options: WorkerAwaitOptions | None = None,
    ) -> WorkerAwaitResult:
        """Take one run of any of ``task_types``, waiting up to ``block_ms`` (None: 30000,
        0: answer now, at most 300000) for one to arrive. Refused with reason
        ``WORKER_UNHEALTHY`` / ``WORKER_DRAINING`` for a silent or draining worker."""
        opts = options or WorkerAwaitOptions()
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
    ) -> builtins.list[Claimed]:
        """Like :meth:`await_task`, but takes up to ``max_tasks`` runs in one go (one
        script call per action queue): how a busy worker fills its free capacity.

        ``tally=False`` leaves the worker's load counter to the caller (a worker that
        batches its counter updates); ``health_ttl_s`` reuses a health check that passed
        that recently instead of asking again (so a drain is seen within that time)."""
        opts = options or WorkerAwaitOptions()
        block_ms = DEFAULT_WORKER_BLOCK_MS if opts.block_ms is None else opts.block_ms
        validate_block_ms(block_ms)
        _check_count("max_tasks", max_tasks, 1, 10_000)
        check_name("worker id", worker_id)
        if not task_types:
            raise ValidationError("task_types must name at least one action")
        ns_name = self._client.get_namespace(opts.namespace)
        all_keys = [action_keys(ns_name, t) for t in task_types]
        labels = await self._gate(worker_id, namespace_keys(ns_name), health_ttl_s)
        poll_id = opts.poll_id or uuid.uuid4().hex
        if block_ms == 0:
            claimed, _ = await self._claim_round(all_keys, worker_id, labels, max_tasks, poll_id)
            return await self._tally_claimed(worker_id, ns_name, claimed, tally)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + block_ms / 1000.0
        async with self._client.waker.watching(k.wake for k in all_keys) as watch:
            while True:
                await watch.arm()
                claimed, next_due = await self._claim_round(
                    all_keys, worker_id, labels, max_tasks, poll_id
                )
                if claimed:
                    return await self._tally_claimed(worker_id, ns_name, claimed, tally)
                remaining = deadline - loop.time()
                if remaining <= 0 or watch.interrupted:
                    return []
                if next_due >= 0:
                    now_ms = await self._client.server_time_ms()
                    remaining = min(remaining, max(next_due - now_ms, 1) / 1000.0)
                await watch.wait(remaining)
                if watch.interrupted:
                    return []  # client.interrupt(): stop waiting, take nothing more
                if loop.time() >= deadline:
                    # One last look: work may have arrived with the deadline.
                    claimed, _ = await self._claim_round(
                        all_keys, worker_id, labels, max_tasks, poll_id
                    )
                    return await self._tally_claimed(worker_id, ns_name, claimed, tally)

    async def touch(
        self,
        worker_id: str,
        action_name: str,
        task_id: str,
        options: WorkerTouchOptions | None = None,
    ) -> None:
        """Extend the run's lease to ``extend_ms`` from now (at most one hour). Refused
        with :class:`ConflictError` (``STALE_REPORT``) if the caller no longer holds it."""
        opts = options or WorkerTouchOptions()
        if (
            isinstance(opts.extend_ms, bool)
            or not isinstance(opts.extend_ms, int)
            or not 1 <= opts.extend_ms <= MAX_TOUCH_EXTEND_MS
        ):
            err = BadRequestError(
                f"extend_ms must be an int in [1, {MAX_TOUCH_EXTEND_MS}] (one hour), got "
                f"{opts.extend_ms!r}; touch again later to hold a run longer"
            )
            err.reason = Reason.OUT_OF_RANGE
            raise err
        keys = self._run_keys(action_name, task_id, opts.namespace)
        reply = await _scripts.call(
            self._client.redis,
            "run_touch",
            [keys.runs, keys.leases, keys.meta],
            [task_id, _token_arg(opts.token), worker_id, opts.extend_ms],
        )
        self._check_report(int(reply[0]), reply, keys, task_id, worker_id, "touch")

    async def complete(
        self,
        worker_id: str,
        action_name: str,
        task_id: str,
        result: bytes,
        options: WorkerCompleteOptions | None = None,
    ) -> None:
        """Complete the run with ``result``, for its current holder only. Resending an
        identical complete that already succeeded answers success and changes nothing;
        a complete from a holder whose lease was taken back is refused
        (:class:`ConflictError`, ``STALE_REPORT``) and changes nothing."""
        opts = options or WorkerCompleteOptions()
        data = _check_bytes("result", result, self._client.max_payload_bytes)
        keys = self._run_keys(action_name, task_id, opts.namespace)
        reply = await _scripts.call(
            self._client.redis,
            "run_complete",
            [
                keys.definition,
                keys.meta,
                keys.runs,
                keys.inputs,
                keys.leases,
                keys.done,
                keys.idempotency,
                keys.owned,
            ],
            [task_id, _token_arg(opts.token), worker_id, data, opts.outcome],
        )
        status = int(reply[0])
        if status == Status.TOO_LARGE:
            raise ValueTooLargeError(
                f"result is {len(data)} bytes; action {action_name!r} accepts at most "
                f"{int(reply[1])}"
            )
        self._check_report(status, reply, keys, task_id, worker_id, "complete")
        if not int(reply[1]):
            await self._tally(worker_id, keys.namespace, -1, 1, 0)

    async def complete_many(
        self,
        worker_id: str,
        action_name: str,
        items: Sequence[CompleteItem],
        namespace: str | None = None,
        *,
        tally: bool = True,
    ) -> builtins.list[ServerError | None]:
        """Complete several runs of one action in one call per 1000, each under exactly
        :meth:`complete`'s rules and answered on its own: ``None`` where the complete took
        effect (or was an identical resend), else the refusal it would have raised."""
        keys = action_keys(self._client.get_namespace(namespace), action_name)
        limit = self._client.max_payload_bytes
        packed = []
        for item in items:
            self._run_keys(action_name, item.task_id, namespace)
            data = _check_bytes("result", item.result, limit)
            packed.append([item.task_id, _token_arg(item.token), data, item.outcome])
        answers: builtins.list[ServerError | None] = []
        applied = 0
        for start in range(0, len(packed), COMPLETE_BATCH):
            chunk = packed[start : start + COMPLETE_BATCH]
            reply = await _scripts.call(
                self._client.redis,
                "run_complete_many",
                [
                    keys.definition,
                    keys.meta,
                    keys.runs,
                    keys.inputs,
                    keys.leases,
                    keys.done,
                    keys.idempotency,
                    keys.owned,
                ],
                [worker_id, pack(chunk)],
            )
            if int(reply[0]) == Status.NO_ACTION:
                raise ActionOperations._not_registered(keys)
            for i in range(len(chunk)):
                run_id = str(chunk[i][0])
                status, duplicate, detail = (int(v) for v in reply[1 + 3 * i : 4 + 3 * i])
                if status == Status.OK:
                    applied += 0 if duplicate else 1
                    answers.append(None)
                elif status == Status.TOO_LARGE:
                    answers.append(
                        refusal(status, f"result of {run_id!r} exceeds the action's {detail} bytes")
                    )
                else:
                    try:
                        self._check_report(
                            status, [status, 0, detail], keys, run_id, worker_id, "complete"
                        )
                    except ServerError as exc:
                        answers.append(exc)
        if tally and applied:
            await self._tally(worker_id, keys.namespace, -applied, applied, 0)
        return answers

    async def fail(
        self,
        worker_id: str,
        action_name: str,
        task_id: str,
        error_message: str,
        options: WorkerFailOptions | None = None,
    ) -> None:
        """Fail the run. With ``retry`` and attempts left it runs again (after the
        action's backoff); otherwise it ends FAILED, kept with its error. Same holder
        and resend rules as :meth:`complete`."""
        opts = options or WorkerFailOptions()
        if not isinstance(error_message, str):
            raise ValidationError("error_message must be a str")
        _check_bytes("error_message", error_message.encode(), self._client.max_payload_bytes)
        keys = self._run_keys(action_name, task_id, opts.namespace)
        reply = await _scripts.call(
            self._client.redis,
            "run_fail",
            [
                keys.definition,
                keys.meta,
                keys.runs,
                keys.inputs,
                keys.pending,
                keys.delayed,
                keys.leases,
                keys.failed,
                keys.wake,
                keys.owned,
            ],
            [task_id, _token_arg(opts.token), worker_id, error_message, 1 if opts.retry else 0],
        )
        self._check_report(int(reply[0]), reply, keys, task_id, worker_id, "fail")
        if not int(reply[1]):
            await self._tally(worker_id, keys.namespace, -1, 0, 1)

    async def list(self, options: WorkerListOptions | None = None) -> WorkerListResult:
        """Registered workers in id order, ``limit`` (1..1024) a page after ``cursor``."""
        opts = options or WorkerListOptions()
        _check_count("limit", opts.limit, 1, MAX_LIST_LIMIT)
        if opts.cursor is not None and len(opts.cursor) > MAX_CURSOR_BYTES:
            raise ValidationError(f"cursor is longer than {MAX_CURSOR_BYTES} bytes")
        ns = self._ns(opts.namespace)
        reply = await _scripts.call(
            self._client.redis,
            "worker_list",
            [ns.config, ns.workers, ns.worker_ids],
            [opts.cursor.decode() if opts.cursor else "", opts.limit],
        )
        more, last = int(reply[1]), bytes(reply[2])
        workers: builtins.list[WorkerInfo] = []
        for i in range(3, len(reply), 3):
            rec = unpack_record(reply[i + 1])
            workers.append(
                WorkerInfo(
                    worker_id=reply[i].decode(),
                    worker_type=WorkerType(int(rec.get("wt", 0))),
                    status=WorkerStatus(int(reply[i + 2])),
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
            )
        return WorkerListResult(workers=workers, cursor=last if more else None)

    # --- beyond flo ----------------------------------------------------------------

    async def drain(self, worker_id: str, namespace: str | None = None) -> None:
        """Tell a worker to drain: its polls are refused (``WORKER_DRAINING``) while its
        running runs may still report; an ActionWorker then stops by itself."""
        ns = self._ns(namespace)
        reply = await _scripts.call(self._client.redis, "worker_drain", [ns.workers], [worker_id])
        if int(reply[0]) != Status.OK:
            raise self._unknown_worker(worker_id, ns)

    async def deregister(self, worker_id: str, namespace: str | None = None) -> None:
        """Remove a worker's record; :class:`NotFoundError` if it is not registered."""
        ns = self._ns(namespace)
        reply = await _scripts.call(
            self._client.redis, "worker_deregister", [ns.workers, ns.worker_ids], [worker_id]
        )
        if int(reply[0]) != Status.OK:
            raise self._unknown_worker(worker_id, ns)

    async def configure(
        self,
        *,
        heartbeat_timeout_ms: int | None = None,
        remove_after_ms: int | None = None,
        namespace: str | None = None,
    ) -> None:
        """Set the namespace's worker health settings, shared by every client: a worker
        silent past ``heartbeat_timeout_ms`` (default 90000) is UNHEALTHY and refused work;
        past ``remove_after_ms`` (default 300000) it is removed from the registry."""
        ns = self._ns(namespace)
        fields: dict[str, int] = {}
        if heartbeat_timeout_ms is not None:
            fields["heartbeat_timeout_ms"] = _check_count(
                "heartbeat_timeout_ms", heartbeat_timeout_ms, 100, 2**32 - 1
            )
        if remove_after_ms is not None:
            fields["remove_after_ms"] = _check_count(
                "remove_after_ms", remove_after_ms, 100, 2**32 - 1
            )
        conn = self._client.redis
        with _scripts.redis_errors("configure"):
            current = await conn.hmget(ns.config, ["heartbeat_timeout_ms", "remove_after_ms"])
            hb = fields.get("heartbeat_timeout_ms", int(current[0] or 90_000))
            rm = fields.get("remove_after_ms", int(current[1] or 300_000))
            if rm < hb:
                raise ValidationError(
                    f"remove_after_ms ({rm}) must not be shorter than heartbeat_timeout_ms "
                    f"({hb}): a worker is first marked unhealthy, then removed"
                )
            if fields:
                await conn.hset(ns.config, mapping=fields)  # type: ignore[arg-type]

    # --- internals -----------------------------------------------------------------

    def _run_keys(self, action_name: str, task_id: str, namespace: str | None) -> ActionKeys:
        keys = action_keys(self._client.get_namespace(namespace), action_name)
        if action_of_run(task_id) != action_name:
            raise refusal(
                Status.NOT_FOUND,
                f"run {task_id!r} does not belong to action {action_name!r}",
            )
        return keys

    @staticmethod
    def _unknown_worker(worker_id: str, ns: NamespaceKeys) -> Exception:
        return refusal(
            Status.NOT_FOUND,
            f"worker {worker_id!r} is not registered in namespace {ns.namespace!r} (or was "
            "removed after missing its heartbeats); register it again",
        )

    def _check_report(
        self,
        status: int,
        reply: Any,
        keys: ActionKeys,
        run_id: str,
        worker_id: str,
        what: str,
    ) -> None:
        if status == Status.STALE:
            state = RunStatus(int(reply[-1])).name
            raise refusal(
                status,
                f"{what} of run {run_id!r} by worker {worker_id!r} refused: the run is "
                f"{state} and this worker's lease is no longer current (taken back, or "
                "finished); drop the report",
            )
        if status == Status.OUT_OF_RANGE:
            raise refusal(status, f"{what}: extend_ms must be at most {int(reply[1])}")
        ActionOperations._raise_run_refusal(status, keys, run_id)

    async def _gate(self, worker_id: str, ns: NamespaceKeys, ttl_s: float = 0.0) -> bytes:
        """Check the worker may take work now; its labels, packed for the claim."""
        loop = asyncio.get_running_loop()
        cached = self._gate_ok.get((ns.namespace, worker_id))
        if ttl_s > 0 and cached is not None and loop.time() - cached[0] < ttl_s:
            return cached[1]
        reply = await _scripts.call(
            self._client.redis,
            "worker_poll",
            [ns.config, ns.workers, ns.worker_ids],
            [worker_id],
        )
        status = int(reply[0])
        if status == Status.NOT_FOUND:
            raise self._unknown_worker(worker_id, ns)
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
        metadata = text(reply[1]) or ""
        packed = self._labels_cache.get(metadata)
        if packed is None:
            labels = worker_labels(metadata)
            packed = pack(labels) if labels else b""
            self._labels_cache[metadata] = packed
        self._gate_ok[(ns.namespace, worker_id)] = (loop.time(), packed)
        return packed

    async def _claim_round(
        self,
        all_keys: Sequence[ActionKeys],
        worker_id: str,
        labels: bytes,
        max_tasks: int,
        poll_id: str,
    ) -> tuple[builtins.list[Claimed], int]:
        """One claim per action queue, starting at a rotating queue so no action starves,
        until ``max_tasks`` runs are held. Returns them and the earliest delayed run."""
        claimed: builtins.list[Claimed] = []
        next_due = -1
        self._rotation = (self._rotation + 1) % len(all_keys)
        order = [*all_keys[self._rotation :], *all_keys[: self._rotation]]
        for keys in order:
            if len(claimed) >= max_tasks:
                break
            reply = await self.claim(keys, worker_id, labels, max_tasks - len(claimed), poll_id)
            claimed.extend(reply.runs)
            if reply.next_due_ms >= 0 and (next_due < 0 or reply.next_due_ms < next_due):
                next_due = reply.next_due_ms
        return claimed, next_due

    async def claim(
        self, keys: ActionKeys, worker_id: str, labels: bytes, max_n: int, poll_id: str
    ) -> ClaimReply:
        """One claim script call on one action queue (no health gate, no waiting)."""
        # Subscribed before the first claim in this slot: runs taken here never look
        # like a gone owner's.
        await self._client.liveness.hold(keys.tag)
        reply = await _scripts.call(
            self._client.redis,
            "action_claim",
            [
                keys.definition,
                keys.meta,
                keys.runs,
                keys.inputs,
                keys.pending,
                keys.delayed,
                keys.leases,
                keys.failed,
                keys.polls,
                keys.poll_times,
                keys.owners,
                keys.owned,
            ],
            [worker_id, self._client.owner_id, labels, max_n, poll_id, LABEL_SCAN],
        )
        if int(reply[0]) == Status.NO_ACTION:
            return ClaimReply((), -1, False)
        runs = tuple(
            Claimed(
                action=keys.action,
                run_id=reply[i].decode(),
                token=int(reply[i + 1]),
                attempt=int(reply[i + 2]),
                created_at_ms=int(reply[i + 3]),
                payload=bytes(reply[i + 4]),
            )
            for i in range(3, 3 + 5 * int(reply[2]), 5)
        )
        return ClaimReply(runs, int(reply[1]), True)

    async def _tally_claimed(
        self, worker_id: str, namespace: str, claimed: builtins.list[Claimed], tally: bool
    ) -> builtins.list[Claimed]:
        if claimed and tally:
            await self._tally(worker_id, namespace, len(claimed), 0, 0)
        return claimed

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
        await self._tally(worker_id, self._client.get_namespace(namespace), load, completed, failed)

    async def _tally(
        self, worker_id: str, namespace: str, load: int, completed: int, failed: int
    ) -> None:
        ns = namespace_keys(namespace)
        await _scripts.call(
            self._client.redis,
            "worker_tally",
            [ns.workers],
            [worker_id, load, completed, failed],
        )


__all__ = ["ActionOperations", "Claimed", "WorkerOperations"]
