"""Enums, limits, option and result classes of the action, worker, stream and queue API.

Every class here has the public shape of its namesake in flo-python 0.1.2: the
same field names, order, types and defaults, and the same mutability (all plain,
mutable dataclasses). flo_redis adds a few fields of its own; each is a trailing
keyword field with a default, so code written against flo builds these classes
the same way and gets flo's behaviour.

All option classes take ``namespace: str | None = None``; None means the
client's namespace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, ClassVar

from . import _queue_types
from ._queue_types import *  # noqa: F403  (flo defines the queue's types in flo.types too)

__all__ = [
    "DEFAULT_WORKER_BLOCK_MS",
    "MAX_BLOCK_MS",
    "MAX_KEY_SIZE",
    "MAX_NAMESPACE_SIZE",
    "MAX_VALUE_SIZE",
    "ActionDeleteOptions",
    "ActionInfo",
    "ActionInvokeOptions",
    "ActionInvokeResult",
    "ActionListOptions",
    "ActionListResult",
    "ActionRegisterOptions",
    "ActionRunStatus",
    "ActionStatusOptions",
    "ActionType",
    "PendingEntry",
    "Ran",
    "RateLimit",
    "Reason",
    "RunStatus",
    "StatusCode",
    "StorageTier",
    "StreamAppendOptions",
    "StreamAppendResult",
    "StreamClaimResult",
    "StreamGroupAckOptions",
    "StreamGroupJoinOptions",
    "StreamGroupNackOptions",
    "StreamGroupReadOptions",
    "StreamID",
    "StreamInfo",
    "StreamInfoOptions",
    "StreamReadOptions",
    "StreamReadResult",
    "StreamRecord",
    "StreamTrimOptions",
    "StreamTrimResult",
    "TaskAssignment",
    "WorkerAwaitOptions",
    "WorkerAwaitResult",
    "WorkerCompleteOptions",
    "WorkerFailOptions",
    "WorkerInfo",
    "WorkerListOptions",
    "WorkerListResult",
    "WorkerRegisterOptions",
    "WorkerStatus",
    "WorkerTouchOptions",
    "WorkerType",
]
__all__ += _queue_types.__all__

# =============================================================================
# Limits
# =============================================================================

#: The longest blocking wait (``block_ms``) a call accepts: 5 minutes. A longer
#: one is refused with BlockTooLongError before anything is sent.
MAX_BLOCK_MS: int = 300_000
#: The longest namespace, in UTF-8 bytes.
MAX_NAMESPACE_SIZE: int = 255
#: The longest key (action name, stream name, id), in UTF-8 bytes: 64 KiB.
MAX_KEY_SIZE: int = 64 * 1024
#: The largest value (payload), in bytes: 16 MiB.
MAX_VALUE_SIZE: int = 16 * 1024 * 1024
#: What the workers wait per poll when given ``block_ms`` of 0 or None, so their
#: poll loops never spin. (Redis reads ``BLOCK 0`` as "forever": never pass 0 on.)
DEFAULT_WORKER_BLOCK_MS: int = 30_000

_U32 = 2**32
_U64 = 2**64


def _check_int(owner: str, name: str, value: object, low: int, high: int | None) -> None:
    """Raise ValueError unless value is an int (not a bool) in [low, high)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{owner}.{name} must be an int, not {value!r}")
    if value < low or (high is not None and value >= high):
        bound = f"[{low}, {high})" if high is not None else f">= {low}"
        raise ValueError(f"{owner}.{name} must be in {bound}, not {value}")


def _check_optional_int(owner: str, name: str, value: object, low: int, high: int | None) -> None:
    if value is not None:
        _check_int(owner, name, value, low, high)


# =============================================================================
# Enums
# =============================================================================


class Reason(IntEnum):
    """Why a request was refused. Code should branch on this, not on the message."""

    UNKNOWN_OP = 1
    MALFORMED = 2
    FIELD_TOO_LONG = 3
    OUT_OF_RANGE = 4
    LEADER_UNKNOWN = 5
    SHARD_BUSY = 6
    TABLE_MISMATCH = 7
    UNKNOWN_FLAG = 8
    INTERNAL = 9
    COMMITTED_NOT_APPLIED = 10
    ANSWER_LOST = 11
    #: The refusal carries no finer classification.
    UNCLASSIFIED = 12
    #: What the request names does not exist.
    NOT_FOUND = 13
    RESERVED_KEY = 14
    CAS_MISMATCH = 15
    CONDITION_FAILED = 16
    NO_SUCH_TRANSACTION = 17
    WRONG_ROUTING_KEY = 18
    TXN_TOO_LARGE = 19
    #: Too many blocking reads are parked; the read was answered at once.
    TOO_MANY_WAITERS = 20
    #: Two options were given that exclude each other.
    CONFLICTING_FIELDS = 21
    WRITES_STOPPED = 22
    TOO_MANY_PROPOSALS = 23
    #: The key holds a value of another kind than the op works on.
    WRONG_TYPE = 24
    TOO_MANY_TRANSACTIONS = 25
    #: A complete, fail or touch for a run this worker no longer holds (it was
    #: taken back, or finished). It was dropped; sending it again is refused too.
    STALE_REPORT = 26
    #: An await from a worker that missed its heartbeats; heartbeat (or register
    #: again, once it was removed) to take work again.
    WORKER_UNHEALTHY = 27
    #: An await from a draining worker: it gets no new work.
    WORKER_DRAINING = 28


class Ran(IntEnum):
    """Whether a refused request took effect. Retry logic reads this."""

    #: It did not take effect: resending is safe.
    NO = 0
    #: It took effect: do not resend it.
    YES = 1
    #: It may have taken effect: check before resending.
    UNKNOWN = 2


_STATUS_MESSAGES: dict[int, str] = {
    0: "OK",
    1: "Generic error",
    2: "Not found",
    3: "Bad request",
    4: "Cross-core transaction not supported",
    5: "No active transaction",
    6: "Consumer group is locked",
    7: "Unauthorized",
    8: "Conflict",
    9: "Internal server error",
    10: "Server overloaded",
    11: "Request rate limit exceeded",
    12: "Unavailable: no leader or the shard isn't taking writes; retry",
}


class StatusCode(IntEnum):
    """The status of an answer. Any value 0..255 converts: one without a name
    becomes a pseudo-member named ``UNKNOWN_<n>`` rather than raising."""

    OK = 0
    ERROR_GENERIC = 1
    NOT_FOUND = 2
    BAD_REQUEST = 3
    CROSS_CORE_TRANSACTION = 4
    NO_ACTIVE_TRANSACTION = 5
    GROUP_LOCKED = 6
    UNAUTHORIZED = 7
    CONFLICT = 8
    INTERNAL_ERROR = 9
    OVERLOADED = 10
    RATE_LIMITED = 11
    UNAVAILABLE = 12

    @classmethod
    def _missing_(cls, value: object) -> StatusCode | None:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
            return None
        pseudo = int.__new__(cls, value)
        pseudo._name_ = f"UNKNOWN_{value}"
        pseudo._value_ = value
        return pseudo

    def __reduce_ex__(self, protocol: Any) -> tuple[type[StatusCode], tuple[int]]:
        # Pickle and copy by value: a pseudo-member has no name to look up.
        return type(self), (int(self),)

    def message(self) -> str:
        """A short human-readable text for this status."""
        return _STATUS_MESSAGES.get(int(self), f"Unknown status {int(self)}")


class ActionType(IntEnum):
    """What runs an action."""

    #: Runs on external workers that poll for it.
    USER = 0


class RunStatus(IntEnum):
    """Where an action run is in its life."""

    PENDING = 0
    RUNNING = 1
    COMPLETED = 2
    FAILED = 3
    CANCELLED = 4
    TIMED_OUT = 5


class WorkerType(IntEnum):
    """What a registered worker runs."""

    ACTION = 0
    STREAM = 1


class WorkerStatus(IntEnum):
    """A registered worker's health as the registry sees it."""

    ACTIVE = 0
    IDLE = 1
    DRAINING = 2
    UNHEALTHY = 3


class StorageTier(IntEnum):
    """Where a stream record was read from."""

    HOT = 0
    WARM = 1


# =============================================================================
# Stream ids
# =============================================================================

_REDIS_ID = re.compile(r"^(\d+)(?:-(\d+))?$")


@dataclass(order=True)
class StreamID:
    """A position in a stream: ``timestamp_ms`` then ``sequence``, both u64.

    Ids order as (timestamp_ms, sequence) tuples. ``to_bytes`` gives 16
    big-endian bytes, so byte order equals id order; ``to_redis`` gives Redis's
    ``"<ms>-<seq>"`` text. ``StreamID.MIN`` and ``StreamID.MAX`` are the lowest
    and highest ids; they are shared instances, so don't mutate them.

    Like flo's, a StreamID is a mutable dataclass and so is not hashable; use
    ``to_redis()`` or a tuple as a dict key.
    """

    MIN: ClassVar[StreamID]
    MAX: ClassVar[StreamID]

    timestamp_ms: int = 0
    sequence: int = 0

    def __post_init__(self) -> None:
        _check_int("StreamID", "timestamp_ms", self.timestamp_ms, 0, _U64)
        _check_int("StreamID", "sequence", self.sequence, 0, _U64)

    def to_bytes(self) -> bytes:
        """The id as 16 bytes: timestamp_ms then sequence, each u64 big-endian."""
        return self.timestamp_ms.to_bytes(8, "big") + self.sequence.to_bytes(8, "big")

    @classmethod
    def from_bytes(cls, data: bytes) -> StreamID:
        """Read an id from the first 16 bytes of data; ValueError if shorter."""
        if len(data) < 16:
            raise ValueError(f"a StreamID needs 16 bytes, got {len(data)}")
        return cls(int.from_bytes(data[:8], "big"), int.from_bytes(data[8:16], "big"))

    def to_redis(self) -> str:
        """The id as Redis writes stream ids: ``"<timestamp_ms>-<sequence>"``."""
        return f"{self.timestamp_ms}-{self.sequence}"

    @classmethod
    def from_redis(cls, value: bytes | str) -> StreamID:
        """Parse a Redis stream id (``"ms-seq"``, or ``"ms"`` meaning sequence 0;
        ``"-"`` and ``"+"`` mean MIN and MAX). ValueError if malformed."""
        text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
        if text == "-":
            return cls(0, 0)
        if text == "+":
            return cls(_U64 - 1, _U64 - 1)
        match = _REDIS_ID.match(text)
        if match is None:
            raise ValueError(f"not a Redis stream id: {text!r}")
        return cls(int(match.group(1)), int(match.group(2) or 0))

    def as_tuple(self) -> tuple[int, int]:
        """The id as a hashable ``(timestamp_ms, sequence)`` tuple."""
        return (self.timestamp_ms, self.sequence)

    def __repr__(self) -> str:
        # What the generated one writes, without its recursion guard (two ints cannot
        # recurse): ``str(record.id)`` is common in handlers and logs.
        return f"StreamID(timestamp_ms={self.timestamp_ms!r}, sequence={self.sequence!r})"


StreamID.MIN = StreamID(0, 0)
StreamID.MAX = StreamID(_U64 - 1, _U64 - 1)


# =============================================================================
# Stream results
# =============================================================================


@dataclass
class StreamRecord:
    """One stream record. ``id`` is never None after construction (a None
    becomes StreamID.MIN); ``stream`` is the stream's name when the call knows it.

    flo_redis adds ``delivery_count``: on a record from group_read / group_claim,
    how many times the group delivered it, this delivery included (0 for plain
    reads). It is the delivery's fencing token: pass it as ``token`` to
    group_ack / group_nack and a report from a superseded delivery is refused.

    ``partition`` (flo_redis) is the partition the record lives in (0 for a stream
    without partitions); ids are per partition, so acks and nacks name it."""

    id: StreamID = None  # type: ignore[assignment]
    tier: StorageTier = StorageTier.HOT
    stream: str = ""
    payload: bytes = b""
    headers: dict[str, str] | None = None
    delivery_count: int = 0
    partition: int = 0

    def __post_init__(self) -> None:
        if self.id is None:
            self.id = StreamID()


@dataclass
class StreamAppendResult:
    """The id the appended record got; ``partition`` (flo_redis): the partition it
    went to (0 for a stream without partitions)."""

    id: StreamID = None  # type: ignore[assignment]
    partition: int = 0

    def __post_init__(self) -> None:
        if self.id is None:
            self.id = StreamID()


@dataclass
class StreamReadResult:
    """Records in id order; empty when nothing came before the wait ran out."""

    records: list[StreamRecord]


@dataclass
class PendingEntry:
    """A delivered but not yet acked entry of a consumer group.

    ``delivery_count`` is how often it was delivered, ``consumer`` who holds
    it. flo_redis adds ``idle_ms``: time since its last delivery, and
    ``partition``: the partition the entry lives in."""

    id: StreamID = None  # type: ignore[assignment]
    consumer: str = ""
    delivery_count: int = 0
    idle_ms: int = 0
    partition: int = 0

    def __post_init__(self) -> None:
        if self.id is None:
            self.id = StreamID()


@dataclass
class StreamClaimResult:
    """One page of group_claim: the claimed records, the ``start_id`` for the
    next page, and ``done`` once the pending list has been scanned to the end."""

    records: list[StreamRecord]
    next_cursor: StreamID = None  # type: ignore[assignment]
    done: bool = False

    def __post_init__(self) -> None:
        if self.next_cursor is None:
            self.next_cursor = StreamID()


@dataclass
class StreamInfo:
    """A stream's size and bounds. For an empty stream both ids are MIN."""

    count: int
    bytes_size: int
    first_id: StreamID = None  # type: ignore[assignment]
    last_id: StreamID = None  # type: ignore[assignment]
    partition_count: int = 1

    def __post_init__(self) -> None:
        if self.first_id is None:
            self.first_id = StreamID()
        if self.last_id is None:
            self.last_id = StreamID()


@dataclass
class StreamTrimResult:
    """How many records a trim removed (or with dry_run would remove), and the
    sequence of the first record left (meaningful only if any remain)."""

    removed: int
    first_seq: int


# =============================================================================
# Stream options
# =============================================================================


@dataclass
class StreamAppendOptions:
    """Options for stream.append.

    ``partition_key`` (flo_redis) routes the record to a partition by key."""

    namespace: str | None = None
    headers: dict[str, str] | None = None
    partition_key: str | None = None


@dataclass
class StreamReadOptions:
    """Options for stream.read. ``start`` and ``end`` are inclusive; ``tail``
    reads from the end (not with ``start``); ``block_ms`` None or 0 means don't
    wait, at most MAX_BLOCK_MS."""

    namespace: str | None = None
    start: StreamID | None = None
    end: StreamID | None = None
    tail: bool = False
    partition: int | None = None
    count: int | None = None
    block_ms: int | None = None


@dataclass
class StreamTrimOptions:
    """Options for stream.trim; exactly one of ``before`` (inclusive),
    ``max_len`` or ``max_age_seconds`` must be set. ``dry_run`` removes nothing."""

    namespace: str | None = None
    before: StreamID | None = None
    max_len: int | None = None
    max_age_seconds: int | None = None
    dry_run: bool = False


@dataclass
class StreamInfoOptions:
    """Options for stream.info."""

    namespace: str | None = None


@dataclass
class StreamGroupJoinOptions:
    """Options for group_join and group_leave.

    flo_redis adds the group's settings, applied when given (None keeps the
    current ones, or the defaults for a new group: 30 s and 10):
    ``ack_timeout_ms`` is how long a delivered entry may stay unacked before it
    is delivered again (0 turns that off); ``max_deliver`` is how many
    deliveries an entry gets before it is dead-lettered."""

    namespace: str | None = None
    ack_timeout_ms: int | None = None
    max_deliver: int | None = None

    def __post_init__(self) -> None:
        name = "StreamGroupJoinOptions"
        _check_optional_int(name, "ack_timeout_ms", self.ack_timeout_ms, 0, _U32)
        _check_optional_int(name, "max_deliver", self.max_deliver, 1, _U32)


@dataclass
class StreamGroupReadOptions:
    """Options for group_read, group_pending and group_claim. ``block_ms`` None
    or 0 means don't wait, at most MAX_BLOCK_MS.

    ``poll_id`` (flo_redis) names this blocking read so it can be woken early,
    for example by a stopping worker. ``partition`` (flo_redis) limits the call to
    one partition of a partitioned stream (None: all of them)."""

    namespace: str | None = None
    count: int | None = None
    block_ms: int | None = None
    poll_id: str | None = None
    partition: int | None = None


@dataclass
class _GroupSettleOptions:
    """What group_ack and group_nack take. ``consumer`` is informational: any consumer
    may settle an entry.

    ``token`` (flo_redis) is the delivery count of the caller's delivery; when
    given, the call is refused if the entry was delivered again since.
    ``partition`` (flo_redis) is the partition the ids live in (a record's
    ``partition``); 0 for a stream without partitions."""

    namespace: str | None = None
    consumer: str = ""
    token: int | None = None
    partition: int = 0


@dataclass
class StreamGroupAckOptions(_GroupSettleOptions):
    """Options for group_ack: the fields of :class:`_GroupSettleOptions`."""


@dataclass
class StreamGroupNackOptions(_GroupSettleOptions):
    """Options for group_nack: the fields of :class:`_GroupSettleOptions`."""


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
    ``progress_at_ms`` when; None before any."""

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
        runs are kept; None: the library default.
      * ``description``: free text shown by action.list.
      * ``rate_limit``: a :class:`RateLimit`, so many starts per window across
        all workers; None: no limit.

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

    def __post_init__(self) -> None:
        name = "ActionRegisterOptions"
        for field_name in (
            "timeout_ms",
            "max_retries",
            "retry_backoff_ms",
            "retry_backoff_max_ms",
            "max_concurrency",
        ):
            _check_int(name, field_name, getattr(self, field_name), 0, _U32)
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise ValueError(
                f"{name}.retry_backoff_max_ms ({self.retry_backoff_max_ms}) must not be below "
                f"retry_backoff_ms ({self.retry_backoff_ms})"
            )
        max_payload = self.max_payload_bytes
        _check_optional_int(name, "max_payload_bytes", max_payload, 1, MAX_VALUE_SIZE + 1)
        _check_optional_int(name, "retention_ms", self.retention_ms, 1, None)
        _check_optional_int(name, "retention_count", self.retention_count, 1, None)


@dataclass
class ActionInvokeOptions:
    """Options for invoking an action.

    ``labels``: only workers registered with every key/value here receive the run.

    flo_redis's fields:
      * ``delay_ms``: offer the run only after this many ms (0: at once).
      * ``run_at_ms``: offer the run at this epoch-ms time; not with ``delay_ms``.
      * ``idempotency_key``: an invoke repeating a key the action has seen
        returns the first run's id instead of creating a run.
      * ``priority``: 0 (the default) to 255; ready runs of a lower value are
        claimed first, FIFO within one. A run keeps it through delays, retries
        and re-queues. Out of range: ValidationError at invoke.

    Raises ValueError for a negative time, both times set, or an empty key.
    """

    namespace: str | None = None
    labels: dict[str, Any] | None = None
    delay_ms: int = 0
    run_at_ms: int | None = None
    idempotency_key: str | None = None
    priority: int = 0

    def __post_init__(self) -> None:
        name = "ActionInvokeOptions"
        _check_int(name, "delay_ms", self.delay_ms, 0, None)
        _check_optional_int(name, "run_at_ms", self.run_at_ms, 0, None)
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
    """A registered worker, as worker.list reports it. Times are ms since the epoch."""

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
