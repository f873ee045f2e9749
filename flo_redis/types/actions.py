"""The action and worker types of flo-python 0.1.2 (``flo.types``): what
``client.action`` and ``client.worker`` take and return, with flo-redis's trailing
fields. Exported from :mod:`flo_redis.types` like the rest."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from flo_redis.types.base import (
    LUA_INT,
    MAX_TIME_MS,
    MAX_VALUE_SIZE,
    U32,
    ActionType,
    RunStatus,
    WorkerStatus,
    WorkerType,
    check_int_field,
    check_optional_int_field,
)
from flo_redis.types.graph import Dependency

__all__ = [
    "ActionDeleteOptions",
    "ActionInfo",
    "ActionInvokeOptions",
    "ActionInvokeResult",
    "ActionListOptions",
    "ActionListResult",
    "ActionRegisterOptions",
    "ActionRunStatus",
    "ActionStatusOptions",
    "FlowControl",
    "RateLimit",
    "TaskAssignment",
    "WorkerAwaitOptions",
    "WorkerAwaitResult",
    "WorkerCompleteOptions",
    "WorkerFailOptions",
    "WorkerInfo",
    "WorkerListOptions",
    "WorkerListResult",
    "WorkerRegisterOptions",
    "WorkerTouchOptions",
]

# =============================================================================
# Actions
# =============================================================================


@dataclass
class ActionInfo:
    """A registered action's settings."""

    name: str
    action_type: ActionType
    timeout_ms: int
    max_retries: int
    description: str | None = None


@dataclass
class ActionRunStatus:
    """One action run. Times are ms since the epoch.

    ``attempt`` counts from 1 once a worker has taken the run; ``output`` is a
    completed run's result and ``error_message`` the last failure's message;
    ``worker_id`` is the worker holding (or that last held) the run.

    flo_redis adds ``max_retries`` (attempts in all the run may get),
    ``outcome`` (the outcome a completed run reported), ``token`` (the
    fencing token of the latest hand-out), ``error_traceback`` (the
    traceback of the handler's last failure, its last 8 KiB; the message,
    ``"KeyError: 'image'"``, is in ``error_message``) and ``due_at_ms``: for a
    PENDING run that waits for its time (a delay, or the backoff before a
    retry), when it becomes ready; None for a run that is ready or not
    waiting; ``priority``: the priority it was invoked with (0 .. 255, lower
    first). ``progress`` is the last value its handler reported with
    ``ctx.progress`` (bytes as stored, JSON unless the value was bytes),
    ``progress_at_ms`` when; None before any. ``flow_key``: the flow key it was
    invoked with (:class:`FlowControl`), None for none. ``parents``: how many runs
    it was invoked to wait for (``depends_on``), ``waiting_on`` how many of those
    have not ended yet, as it was told (docs/flows.md); ``has_dependents``: runs
    wait for this one (``client.action.dependents`` lists them); ``batch``: the batch it
    was invoked into (``ActionInvokeOptions(batch=...)``), None for none. The run's
    input is not part of its status (a wait reads the status at every wake-up):
    ``client.action.details(run_id)`` reads it with the status."""

    run_id: str
    status: RunStatus
    created_at_ms: int
    attempt: int
    started_at_ms: int | None = None
    completed_at_ms: int | None = None
    output: bytes | None = None
    error_message: str | None = None
    worker_id: str | None = None
    max_retries: int = 0
    outcome: str | None = None
    token: int = 0
    error_traceback: str | None = None
    due_at_ms: int | None = None
    priority: int = 0
    progress: bytes | None = None
    progress_at_ms: int | None = None
    flow_key: str | None = None
    parents: int = 0
    waiting_on: int = 0
    has_dependents: bool = False
    batch: str | None = None


@dataclass
class ActionInvokeResult:
    """The id of the run an invoke created (or found, for a repeated
    idempotency key)."""

    run_id: str


@dataclass
class ActionListResult:
    """A page of actions; ``cursor`` gives the next page, None on the last."""

    actions: list[ActionInfo]
    cursor: bytes | None = None


@dataclass(frozen=True)
class RateLimit:
    """At most ``max`` runs of an action start in any ``per_ms`` window, across all its
    workers (flo_redis). ``max`` 1 .. 10000, ``per_ms`` 1 .. 86400000 (a day); checked
    by ``register``, which raises ValidationError."""

    max: int
    per_ms: int


@dataclass(frozen=True)
class FlowControl:
    """Flow control by key (flo_redis): what an action does with the ``flow_key`` its
    invokes name (a tenant, a customer, a resource).

      * ``concurrency``: at most this many runs of one key running at once, across
        every worker (0: no limit). A run held back by its key's limit waits apart,
        so other keys' runs behind it are claimed meanwhile.
      * ``fair``: claims take the keys' ready runs in turn, so a key with many runs
        waiting does not delay a key with one; priorities still go first, and a key's
        own runs keep their order.
      * ``weights``: with ``fair``, a key's share of turns (1 .. 1000; default 1): a
        key of weight 3 gets three runs for another key's one. At most 1000 keys.
      * ``rate``: a :class:`RateLimit` for each key: at most ``max`` runs of one key
        start in any window of ``per_ms``, across every worker; a run past it waits.
      * at most one of (each ms 1 .. 86,400,000, dedup's 0 .. that):
        ``dedup``: an invoke of a key whose last run still waits or runs (or ended
        less than ``dedup_ttl_ms`` ago) returns that run instead of a new one;
        ``throttle_ms``: at most one run per key per window; the invokes in it
        return the window's run; ``debounce_ms``: a run waits that long, and each
        invoke of its key meanwhile replaces its input and starts the wait again, so
        only the last input runs.

    Checked by ``register``, which raises ValidationError."""

    concurrency: int = 0
    fair: bool = False
    weights: dict[str, int] = field(default_factory=dict)
    rate: RateLimit | None = None
    dedup: bool = False
    dedup_ttl_ms: int = 0
    throttle_ms: int = 0
    debounce_ms: int = 0


@dataclass
class ActionRegisterOptions:
    """Options for registering an action. Registering replaces the action's
    settings: the last registration wins.

    flo's fields:
      * ``timeout_ms``: how long a run may go without its worker completing,
        failing or touching it before it is taken back; 0 means never.
      * ``max_retries``: attempts in all, the first included.

    flo_redis's fields:
      * ``retry_backoff_ms``: base wait before a failed run is offered again,
        doubling per attempt; 0 re-queues at once (flo's behaviour).
      * ``retry_backoff_max_ms``: the longest such wait; not below
        ``retry_backoff_ms``.
      * ``max_concurrency``: most runs of this action running at once across
        all workers; 0 means unlimited.
      * ``max_payload_bytes``: largest invoke input accepted; None: no limit
        beyond MAX_VALUE_SIZE.
      * ``retention_ms`` / ``retention_count``: how long / how many finished
        runs are kept (at most 2**53 - 1, what the scripts hold exactly); None:
        the library default.
      * ``description``: free text shown by action.list.
      * ``rate_limit``: a :class:`RateLimit`, so many starts per window across
        all workers; None: no limit.
      * ``keep_inputs``: True keeps a completed run's input for as long as the run
        is kept (its retention), for ``client.action.details`` and ``runs show``;
        False (the default) deletes it when the run completes.
      * ``flow``: a :class:`FlowControl`, for the runs invoked with a ``flow_key``:
        a limit per key, fair turns between keys; None: keys change nothing.

    Raises ValueError for an int out of range (each fits a u32, counts > 0
    where noted) or a backoff maximum below its base.
    """

    namespace: str | None = None
    timeout_ms: int = 30000
    max_retries: int = 3
    owner: str | None = None
    retry_backoff_ms: int = 0
    retry_backoff_max_ms: int = 60_000
    max_concurrency: int = 0
    max_payload_bytes: int | None = None
    retention_ms: int | None = None
    retention_count: int | None = None
    description: str | None = None
    rate_limit: RateLimit | None = None
    keep_inputs: bool = False
    flow: FlowControl | None = None

    def __post_init__(self) -> None:
        name = "ActionRegisterOptions"
        if not isinstance(self.keep_inputs, bool):
            raise ValueError(f"{name}.keep_inputs must be a bool, got {self.keep_inputs!r}")
        for field_name in (
            "timeout_ms",
            "max_retries",
            "retry_backoff_ms",
            "retry_backoff_max_ms",
            "max_concurrency",
        ):
            check_int_field(name, field_name, getattr(self, field_name), 0, U32)
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise ValueError(
                f"{name}.retry_backoff_max_ms ({self.retry_backoff_max_ms}) must not be below "
                f"retry_backoff_ms ({self.retry_backoff_ms})"
            )
        max_payload = self.max_payload_bytes
        check_optional_int_field(name, "max_payload_bytes", max_payload, 1, MAX_VALUE_SIZE + 1)
        check_optional_int_field(name, "retention_ms", self.retention_ms, 1, LUA_INT)
        check_optional_int_field(name, "retention_count", self.retention_count, 1, LUA_INT)


@dataclass
class ActionInvokeOptions:
    """Options for invoking an action.

    ``labels``: only workers registered with every key/value here receive the run.
    Values are JSON's: str, int, float, bool, None (a list or dict never matches);
    any other: ValidationError at invoke.

    flo_redis's fields:
      * ``delay_ms``: offer the run only after this many ms (0: at once).
      * ``run_at_ms``: offer the run at this epoch-ms time; not with ``delay_ms``.
        Both at most MAX_TIME_MS (the end of the year 9999).
      * ``idempotency_key``: an invoke repeating a key the action has seen
        returns the first run's id instead of creating a run. A str of at most
        255 UTF-8 bytes; any other: ValidationError at invoke.
      * ``priority``: 0 (the default) to 255; ready runs of a lower value are
        claimed first, FIFO within one. A run keeps it through delays, retries
        and re-queues. Out of range: ValidationError at invoke.
      * ``flow_key``: the run's key for the action's :class:`FlowControl` (a tenant,
        a customer): a str of 1 .. 255 UTF-8 bytes without NUL; any other:
        ValidationError at invoke.
      * ``depends_on``: runs (of any action) this run waits for: run ids, or
        :class:`Dependency` to say what a parent's failure does (default: the
        child fails too). The run stays PENDING until every parent has ended, then
        becomes ready once (after ``delay_ms`` / ``run_at_ms`` if those are later).
        At most 10,000 parents, none twice; not with ``flow_key`` (docs/flows.md).
      * ``batch``: the id of an open batch (``client.action.open_batch``) the run is a
        member of; its end counts toward the batch's callbacks.

    Raises ValueError for a time out of range, both times set, or an empty key.
    """

    namespace: str | None = None
    labels: dict[str, Any] | None = None
    delay_ms: int = 0
    run_at_ms: int | None = None
    idempotency_key: str | None = None
    priority: int = 0
    flow_key: str | None = None
    depends_on: Sequence[str | Dependency] = ()
    batch: str | None = None

    def __post_init__(self) -> None:
        name = "ActionInvokeOptions"
        check_int_field(name, "delay_ms", self.delay_ms, 0, MAX_TIME_MS + 1)
        check_optional_int_field(name, "run_at_ms", self.run_at_ms, 0, MAX_TIME_MS + 1)
        if self.run_at_ms is not None and self.delay_ms:
            raise ValueError(f"{name}: give delay_ms or run_at_ms, not both")
        if self.idempotency_key is not None and not self.idempotency_key:
            raise ValueError(f"{name}.idempotency_key must not be empty")


@dataclass
class ActionStatusOptions:
    """Options for action.status."""

    namespace: str | None = None


@dataclass
class ActionListOptions:
    """Options for action.list: at most ``limit`` actions whose name starts
    with ``prefix``.

    flo_redis adds ``cursor``: the previous page's ``ActionListResult.cursor``,
    to read the next page."""

    namespace: str | None = None
    limit: int = 100
    prefix: str | None = None
    cursor: bytes | None = None


@dataclass
class ActionDeleteOptions:
    """Options for action.delete."""

    namespace: str | None = None


# =============================================================================
# Workers
# =============================================================================


@dataclass
class TaskAssignment:
    """A run handed to a worker: ``task_id`` is the run id, ``task_type`` the
    action name, ``attempt`` counts from 1.

    flo_redis adds ``token``: the fencing token of this hand-out. Passing it
    back on touch, complete and fail makes a report from an older hand-out
    be refused."""

    task_id: str
    task_type: str
    payload: bytes
    created_at: int
    attempt: int
    caller_run_id: str = ""
    caller_workflow_name: str = ""
    token: int = 0


@dataclass
class WorkerAwaitResult:
    """The answer to await_task: a task, or None when the wait ran out."""

    task: TaskAssignment | None = None


@dataclass
class WorkerInfo:
    """A registered worker, as worker.list reports it. Times are ms since the epoch.

    Beyond flo, ``alive`` says whether the process that registered the worker still
    holds its liveness subscription (Redis drops it when the process dies): True, it
    does; False, none does, so the process is gone (or its connection dropped a moment
    ago), and ``status`` reads UNHEALTHY where the heartbeats say ACTIVE; None, not
    known (the record names no process: written by an older flo-redis). A frozen
    process (SIGSTOP, a paused VM) keeps its subscription: it is alive, and only its
    heartbeat, growing older, tells.

    Also beyond flo, what the registering process recorded of itself: ``owner_id``
    (every lease it takes names it), the flo-redis ``version`` it runs, its ``host``
    and ``pid`` (None: written by an older flo-redis)."""

    worker_id: str
    worker_type: WorkerType
    status: WorkerStatus
    current_load: int
    max_concurrency: int
    tasks_completed: int
    tasks_failed: int
    registered_at_ms: int
    last_heartbeat_ms: int
    machine_id: str | None = None
    metadata: str | None = None
    task_types: list[str] = field(default_factory=list)
    alive: bool | None = None
    owner_id: str | None = None
    version: str | None = None
    host: str | None = None
    pid: int | None = None


@dataclass
class WorkerListResult:
    """A page of workers in byte order of their ids; ``cursor`` gives the
    next page, None on the last."""

    workers: list[WorkerInfo]
    cursor: bytes | None = None


@dataclass
class WorkerRegisterOptions:
    """Options for worker.register. ``metadata`` is a JSON object text; it
    holds the worker's labels."""

    namespace: str | None = None
    concurrency: int = 10
    machine_id: str | None = None
    metadata: str | None = None


@dataclass
class WorkerAwaitOptions:
    """Options for await_task. ``block_ms``: None waits 30000 ms, 0 doesn't
    wait, at most MAX_BLOCK_MS.

    ``poll_id`` (flo_redis) names this blocking await so it can be woken early,
    for example by a stopping worker."""

    namespace: str | None = None
    block_ms: int | None = None
    poll_id: str | None = None


@dataclass
class WorkerTouchOptions:
    """Options for touch: extend the run's lease to ``extend_ms`` from now.

    ``token`` (flo_redis): the hand-out's fencing token; None is flo's
    token-less touch, checked by worker id only."""

    namespace: str | None = None
    extend_ms: int = 30000
    token: int | None = None


@dataclass
class WorkerCompleteOptions:
    """Options for complete; ``outcome`` is the named outcome stored on the run.

    ``token`` (flo_redis): the hand-out's fencing token; None is flo's
    token-less complete, checked by worker id only."""

    namespace: str | None = None
    outcome: str = "success"
    token: int | None = None


@dataclass
class WorkerFailOptions:
    """Options for fail; ``retry=False`` fails the run for good.

    ``token`` (flo_redis): the hand-out's fencing token; None is flo's
    token-less fail, checked by worker id only. ``traceback`` (flo_redis):
    kept with the run as its ``error_traceback``."""

    namespace: str | None = None
    retry: bool = True
    token: int | None = None
    traceback: str | None = None


@dataclass
class WorkerListOptions:
    """Options for worker.list: at most ``limit`` (1..1024) workers after
    ``cursor`` (None starts at the first)."""

    namespace: str | None = None
    limit: int = 100
    cursor: bytes | None = None
