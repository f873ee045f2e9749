"""The exception tree, shaped like flo-python 0.1.2's.

Every error flo_redis raises on purpose is a ``FloError``. The classes, their
bases and their constructors match flo's, so ``except flo-style-Error`` code
ports unchanged. Two additions: ``server_error`` builds the right
``ServerError`` subclass for a refusal, and ``RedisVersionError`` reports a
Redis server too old to run flo_redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import redis.exceptions

from flo_redis.types import ActionRunStatus, Ran, Reason, StatusCode

__all__ = [
    "BadRecordError",
    "BadRequestError",
    "BlockTooLongError",
    "ConflictError",
    "ConnectionFailedError",
    "DequeueReplyLostError",
    "DurabilityUnsupportedError",
    "FloError",
    "GenericServerError",
    "IncompleteResponseError",
    "InternalServerError",
    "InvalidChecksumError",
    "InvalidEndpointError",
    "InvalidMagicError",
    "KeyTooLargeError",
    "MissingExtraError",
    "NamespaceTooLargeError",
    "NonRetryableError",
    "NotConnectedError",
    "NotDurableError",
    "NotFoundError",
    "OverloadedError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "ProtocolError",
    "RateLimitedError",
    "RedisVersionError",
    "RequestTimeoutError",
    "ServerError",
    "TableMismatchError",
    "UnauthorizedError",
    "UnavailableError",
    "UnexpectedEofError",
    "ValidationError",
    "ValueTooLargeError",
    "WaitTimeoutError",
    "is_connection_error",
]


class FloError(Exception):
    """The base of every error flo_redis raises on purpose. Catch it to catch them all."""


class NonRetryableError(FloError):
    """Raise from an action handler to fail the run for good.

    The worker reports the failure with ``retry=False``: the run becomes FAILED
    and is not offered again, however many attempts it has left. Raise it for
    input that can never succeed; any other exception is retried.
    """


# --- Connection ---
class NotConnectedError(FloError):
    """A call was made on a client that is not connected (never connected,
    closed, or dropped after a timeout). Call ``connect()`` or ``reconnect()``."""


class DequeueReplyLostError(NotConnectedError):
    """A queue dequeue whose reply may have been lost went unanswered while its
    deliveries could still be handed over: Redis may have handed messages to
    ``poll_id`` that never arrived. Those stay delivered to this client until their
    visibility timeout (``visibility_timeout_ms``), then come back (their delivery
    counted). Until then, and within two minutes of the lost call, ``dequeue`` with
    ``DequeueOptions(poll_id=err.poll_id)`` gets them now. It is a
    :class:`NotConnectedError`: the connection was lost."""

    def __init__(self, message: str, poll_id: str, visibility_timeout_ms: int) -> None:
        super().__init__(message)
        self.poll_id = poll_id
        self.visibility_timeout_ms = visibility_timeout_ms


class ConnectionFailedError(FloError):
    """The client could not reach or set up its Redis server. Check the
    endpoint, the network and the server; ``reconnect()`` retries with backoff."""


class InvalidEndpointError(FloError):
    """The endpoint string cannot be parsed. Fix the endpoint; retrying won't help."""


class UnexpectedEofError(FloError):
    """The connection closed while an answer was expected. Reconnect; whether
    the request ran is unknown."""


class RequestTimeoutError(FloError, asyncio.TimeoutError):
    """No answer came in time and the connection was dropped, so a late answer
    can't be read as the next one. Reconnect; whether the request ran is unknown.
    It is also an ``asyncio.TimeoutError``."""


class WaitTimeoutError(FloError, TimeoutError):
    """``action.wait`` reached its ``timeout_ms`` before the run ended. The run goes on;
    ``status`` is what it was at the deadline. Wait again or read it later. It is also
    a ``TimeoutError`` (and so an ``asyncio.TimeoutError`` on Python 3.11+)."""

    def __init__(self, message: str, status: ActionRunStatus) -> None:
        super().__init__(message)
        self.status = status


class RedisVersionError(ConnectionFailedError):
    """The Redis server is older than 7.0, which flo_redis needs (for Lua
    functions' semantics, XAUTOCLAIM and stream ids it relies on). Upgrade
    Redis; retrying won't help."""

    def __init__(self, server_version: str, required: str = "7.0") -> None:
        self.server_version = server_version
        self.required = required
        super().__init__(
            f"Redis {server_version} is too old: flo_redis needs Redis {required} or newer"
        )


class NotDurableError(FloError):
    """A write WAS applied on the primary but not at its durability level in time:
    ``reached`` of ``wanted`` replicas within ``timeout_ms`` (``fsynced``: whether the
    primary's fsync was seen, for an fsynced level). It may not survive a failover."""

    def __init__(
        self,
        message: str,
        *,
        operation: str,
        wanted: int,
        reached: int,
        timeout_ms: int,
        fsynced: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.wanted = wanted
        self.reached = reached
        self.timeout_ms = timeout_ms
        self.fsynced = fsynced


# --- Protocol ---
class ProtocolError(FloError):
    """An answer could not be understood: a bug or a version mismatch, not a
    transient fault. Don't retry; report it."""


class InvalidMagicError(ProtocolError):
    """An answer did not start as the protocol requires."""


class TableMismatchError(ProtocolError):
    """The other side speaks another protocol version or op table, so neither
    can read the other. Upgrade the client and the server (or the Lua library
    loaded into Redis) together."""

    def __init__(self, server_version: int, server_table: int) -> None:
        self.server_version = server_version
        self.server_table = server_table
        super().__init__(
            f"the server speaks protocol {server_version} with op table "
            f"0x{server_table:016x}, which this client can't read: upgrade them together"
        )


class InvalidChecksumError(ProtocolError):
    """An answer failed its checksum."""


class PayloadTooLargeError(ProtocolError):
    """An answer or request body is larger than allowed."""


class IncompleteResponseError(ProtocolError):
    """An answer was shorter than its format requires."""


# --- Validation (raised before anything is sent) ---
class ValidationError(FloError):
    """An argument is invalid; nothing was sent. Fix the call; retrying won't help."""


class MissingExtraError(FloError, ImportError):
    """A feature needs an optional dependency that is not installed; the message names
    the extra to install (``pip install 'flo-redis[...]'``)."""


class DurabilityUnsupportedError(ValidationError):
    """The server lacks the command a durability level needs (``WAITAOF`` before Redis
    7.2); the message names the server's version. Nothing was sent."""


class NamespaceTooLargeError(ValidationError):
    """The namespace is longer than 255 bytes."""


class KeyTooLargeError(ValidationError):
    """A key (name or id) is longer than 64 KiB."""


class ValueTooLargeError(ValidationError):
    """A value (payload) is larger than 16 MiB."""


class BlockTooLongError(ValidationError):
    """A blocking wait (``block_ms``) is longer than 300000 ms (5 minutes)."""


# --- Refusals ---
class ServerError(FloError):
    """A request was refused.

    ``status_code`` is the kind of refusal, ``reason`` why (UNCLASSIFIED when
    unsaid), and ``ran`` whether it took effect: NO means resending is safe,
    YES that it must not be resent, UNKNOWN (the default) that you must check.
    """

    status_code: StatusCode
    reason: Reason = Reason.UNCLASSIFIED
    ran: Ran = Ran.UNKNOWN

    def __init__(self, message: str, status_code: StatusCode) -> None:
        super().__init__(message)
        self.status_code = status_code


class NotFoundError(ServerError):
    """What the request names does not exist (run, action, worker, group)."""

    def __init__(self, message: str = "Not found") -> None:
        super().__init__(message, StatusCode.NOT_FOUND)


class BadRecordError(NotFoundError):
    """A stored record the call needed does not decode (written by something else, or
    damaged): a run, a message, a worker or a schedule. Where a script met it, it was
    set aside into its queue's, group's or namespace's quarantine with its bytes and why
    (``client.quarantine``, ``flo-redis quarantine``), and everything else went on; it
    is a :class:`NotFoundError`, as the thing is no longer where it was. ``reason`` is
    MALFORMED."""

    def __init__(self, message: str = "Stored record does not decode") -> None:
        super().__init__(message)
        self.reason = Reason.MALFORMED
        self.ran = Ran.NO


class BadRequestError(ServerError):
    """The request was refused as invalid in the current state; see ``reason``."""

    def __init__(self, message: str = "Bad request") -> None:
        super().__init__(message, StatusCode.BAD_REQUEST)


class ConflictError(ServerError):
    """The request lost a race: for example a report for a run another worker
    now holds (``reason`` STALE_REPORT). Don't resend it."""

    def __init__(self, message: str = "Conflict") -> None:
        super().__init__(message, StatusCode.CONFLICT)


class UnauthorizedError(ServerError):
    """Authentication is required or failed. Fix the credentials."""

    def __init__(self, message: str = "Unauthorized") -> None:
        super().__init__(message, StatusCode.UNAUTHORIZED)


class PermissionDeniedError(UnauthorizedError):
    """Redis's ACL refused a command, a key or a channel to this user (``NOPERM``).
    ``right`` names what to grant (``+evalsha``, ``channel access &flo:*`` ...); the
    rights a worker and a producer need are in the README, section "Redis ACL"."""

    def __init__(self, message: str, right: str = "") -> None:
        super().__init__(message)
        self.right = right
        self.ran = Ran.NO


class OverloadedError(ServerError):
    """Too busy to take the request. With ``ran`` NO it is safe to retry later."""

    def __init__(self, message: str = "Server overloaded") -> None:
        super().__init__(message, StatusCode.OVERLOADED)


class RateLimitedError(ServerError):
    """Too many requests; slow down."""

    def __init__(self, message: str = "Request rate limit exceeded") -> None:
        super().__init__(message, StatusCode.RATE_LIMITED)


class UnavailableError(ServerError):
    """The store can't take the request now (for example Redis is loading or
    read-only). With ``ran`` NO it is safe to retry later."""

    def __init__(self, message: str = StatusCode.UNAVAILABLE.message()) -> None:
        super().__init__(message, StatusCode.UNAVAILABLE)


class InternalServerError(ServerError):
    """Something failed inside the store or a script. Not retried automatically:
    the request may have partly taken effect."""

    def __init__(self, message: str = "Internal server error") -> None:
        super().__init__(message, StatusCode.INTERNAL_ERROR)


class GenericServerError(ServerError):
    """A refusal with no dedicated class, or of a status this library doesn't name."""

    def __init__(
        self, message: str = "Generic error", status_code: StatusCode = StatusCode.ERROR_GENERIC
    ) -> None:
        super().__init__(message, status_code)


_BY_STATUS: dict[StatusCode, Callable[[str], ServerError]] = {
    StatusCode.NOT_FOUND: NotFoundError,
    StatusCode.BAD_REQUEST: BadRequestError,
    StatusCode.CONFLICT: ConflictError,
    StatusCode.UNAUTHORIZED: UnauthorizedError,
    StatusCode.OVERLOADED: OverloadedError,
    StatusCode.RATE_LIMITED: RateLimitedError,
    StatusCode.UNAVAILABLE: UnavailableError,
    StatusCode.INTERNAL_ERROR: InternalServerError,
}


def server_error(
    status_code: StatusCode, reason: Reason, message: str, ran: Ran = Ran.NO
) -> ServerError:
    """Build the ServerError subclass for ``status_code``, with ``reason`` and ``ran`` set.

    A status with no dedicated class (including ERROR_GENERIC and unnamed
    pseudo-members) gives a GenericServerError carrying that status. An empty
    message becomes the status's standard text.
    """
    text = message or status_code.message()
    cls = _BY_STATUS.get(status_code)
    error = GenericServerError(text, status_code) if cls is None else cls(text)
    error.reason = reason
    error.ran = ran
    return error


_NOT_HEALED_BY_RECONNECT = (
    redis.exceptions.AuthenticationError,
    redis.exceptions.AuthorizationError,
)


def is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection is broken, so reconnecting may help.

    True for UnexpectedEofError, NotConnectedError, RequestTimeoutError, any
    OSError, and redis-py's ConnectionError and TimeoutError. A timed-out
    request counts: its connection is dropped rather than risk reading the late
    answer as the next one. redis-py's AuthenticationError and
    AuthorizationError are ConnectionErrors too but are not counted: bad
    credentials don't heal by reconnecting.
    """
    if isinstance(exc, _NOT_HEALED_BY_RECONNECT):
        return False
    return isinstance(
        exc,
        (
            UnexpectedEofError,
            NotConnectedError,
            RequestTimeoutError,
            OSError,
            redis.exceptions.ConnectionError,
            redis.exceptions.TimeoutError,
        ),
    )
