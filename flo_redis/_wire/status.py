"""Script statuses (mirroring ``lua/lib/status.lua``) and the errors they become."""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import Any

from flo_redis.errors import BadRecordError, ServerError, server_error
from flo_redis.types import Ran, Reason, StatusCode


class Status(IntEnum):
    OK = 0
    NOT_FOUND = 1
    NO_ACTION = 2
    STALE = 3
    TOO_LARGE = 4
    OUT_OF_RANGE = 5
    UNHEALTHY = 6
    DRAINING = 7
    CONFLICT = 8
    NO_GROUP = 9
    WRONG_OWNER = 10
    OWNER_ALIVE = 11
    BAD_ARG = 12
    """A script refused an argument that is not what its header takes: ``{BAD_ARG, i}``
    names ``ARGV[i]``; the gateway raises it (:mod:`flo_redis._wire.gateway`)."""
    BAD_SETTING = 13
    """An action's stored settings do not parse (written by hand, or by another version):
    it takes no new runs and hands out none until it is registered again."""
    BAD_RECORD = 14
    """A stored record does not decode; the script set it aside into its quarantine
    (:mod:`flo_redis.quarantine`)."""


# Each status (but BAD_RECORD) as the error code and reason it is raised with; a status
# not listed is an internal error.
_GROUPS: dict[tuple[StatusCode, Reason], tuple[Status, ...]] = {
    (StatusCode.NOT_FOUND, Reason.NOT_FOUND): (
        Status.NOT_FOUND,
        Status.NO_ACTION,
        Status.NO_GROUP,
        Status.BAD_SETTING,
    ),
    (StatusCode.BAD_REQUEST, Reason.MALFORMED): (Status.BAD_ARG,),
    (StatusCode.CONFLICT, Reason.STALE_REPORT): (Status.STALE,),
    (StatusCode.CONFLICT, Reason.CONDITION_FAILED): (
        Status.CONFLICT,
        Status.WRONG_OWNER,
        Status.OWNER_ALIVE,
    ),
    (StatusCode.BAD_REQUEST, Reason.OUT_OF_RANGE): (Status.OUT_OF_RANGE,),
    (StatusCode.BAD_REQUEST, Reason.FIELD_TOO_LONG): (Status.TOO_LARGE,),
    (StatusCode.BAD_REQUEST, Reason.WORKER_UNHEALTHY): (Status.UNHEALTHY,),
    (StatusCode.BAD_REQUEST, Reason.WORKER_DRAINING): (Status.DRAINING,),
}
_MAPPING = {status: error for error, statuses in _GROUPS.items() for status in statuses}


def refusal(status: int, message: str) -> ServerError:
    """The typed error for a script's refusal; the script changed nothing (``ran`` NO),
    but for BAD_RECORD, where it set the record aside (:class:`BadRecordError`)."""
    if status == Status.BAD_RECORD:
        return BadRecordError(message)
    code, reason = _MAPPING.get(Status(status), (StatusCode.INTERNAL_ERROR, Reason.INTERNAL))
    return server_error(code, reason, message, Ran.NO)


def bad_arg(script: str, argv: Sequence[str], reply: Any, args: Sequence[Any]) -> ServerError:
    """The error for a script's ``{BAD_ARG, i}`` (``argv``: its header's ARGV names),
    naming ``ARGV[i]``: nothing was written."""
    index = int(reply[1]) if len(reply) > 1 else 0
    name = argv[min(index, len(argv)) - 1] if index >= 1 and argv else "?"
    value = args[index - 1] if 1 <= index <= len(args) else None
    shown = repr(value if not isinstance(value, bytes) or len(value) <= 64 else value[:64])
    return refusal(
        Status.BAD_ARG,
        f"{script}: ARGV[{index}] {name} = {shown} is not what the script takes "
        f"(see the header of lua/{script}.lua); nothing was written",
    )
