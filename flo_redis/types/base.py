"""What every part of the API shares: the limits, the enums, and the checks the option
classes run on their int fields. Exported from :mod:`flo_redis.types` (flo defines them
in ``flo.types``)."""

from __future__ import annotations

from enum import IntEnum
from typing import Any

__all__ = [
    "DEFAULT_WORKER_BLOCK_MS",
    "MAX_BLOCK_MS",
    "MAX_KEY_SIZE",
    "MAX_NAMESPACE_SIZE",
    "MAX_VALUE_SIZE",
    "ActionType",
    "Ran",
    "Reason",
    "RunStatus",
    "StatusCode",
    "StorageTier",
    "WorkerStatus",
    "WorkerType",
]

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

U32 = 2**32
U64 = 2**64
#: Ints the Lua scripts hold exactly stay below this: they compute in doubles.
LUA_INT = 2**53
#: The last millisecond of the year 9999, the latest time ``datetime`` holds: the
#: latest ``run_at_ms`` and the longest ``delay_ms`` an invoke takes. Far below
#: LUA_INT, so the scripts keep now + such a delay exact.
MAX_TIME_MS = 253_402_300_799_999


def check_int_field(owner: str, name: str, value: object, low: int, high: int | None) -> None:
    """Raise ValueError (naming ``owner.name``) unless ``value`` is an int, not a bool, in
    [low, high); ``high`` None: no upper bound. Worded as the call-time checks
    (:func:`flo_redis._wire.checks.check_count`); a ValueError, as flo's option classes raise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{owner}.{name} must be an int, got {value!r}")
    if value < low or (high is not None and value >= high):
        taken = f"in [{low}, {high - 1}]" if high is not None else f">= {low}"
        raise ValueError(f"{owner}.{name} must be an int {taken}, got {value!r}")


def check_optional_int_field(
    owner: str, name: str, value: object, low: int, high: int | None
) -> None:
    """:func:`check_int_field`, for a field that may be None."""
    if value is not None:
        check_int_field(owner, name, value, low, high)


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
