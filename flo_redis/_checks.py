"""Argument checks and refusals shared by ``client.action`` and ``client.worker``."""

from __future__ import annotations

from typing import Any, TypeVar

from ._status import Status, refusal
from .errors import ValidationError, ValueTooLargeError
from .keys import ActionKeys, check_name

MAX_LIST_LIMIT = 1024

Options = TypeVar("Options")


def check_options(value: object, cls: type[Options]) -> Options:
    """``value`` if it is a ``cls`` (flo's option dataclass for the call), ``cls()`` for
    None; anything else is refused before anything is sent."""
    if value is None:
        return cls()
    if not isinstance(value, cls):
        raise ValidationError(
            f"options must be a {cls.__name__} or None, got {type(value).__name__}"
        )
    return value


def check_bytes(what: str, value: object, limit: int) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise ValidationError(f"{what} must be bytes, got {type(value).__name__}")
    data = bytes(value)
    if len(data) > limit:
        raise ValueTooLargeError(
            f"{what} is {len(data)} bytes; the limit is {limit} (raise the client's "
            "max_payload_bytes or store large data elsewhere and pass a reference)"
        )
    return data


def check_count(what: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(f"{what} must be an int in [{low}, {high}], got {value!r}")
    return value


MAX_PRIORITY = 255
"""Priorities run 0 (taken first) to 255, for queue messages and action runs alike."""


def check_priority(value: object) -> int:
    """A priority: an int 0 .. MAX_PRIORITY, lower taken first."""
    return check_count("priority", value, 0, MAX_PRIORITY)


def check_text(what: str, value: object, *, optional: bool = False, limit: int = 65536) -> str:
    """A str of at most ``limit`` UTF-8 bytes (None passes when ``optional``)."""
    if value is None and optional:
        return ""
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be a str, got {type(value).__name__}")
    try:
        size = len(value.encode())
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{what} is not valid Unicode ({exc.reason})") from exc
    if size > limit:
        raise ValidationError(f"{what} is longer than {limit} bytes")
    return value


def check_list(what: str, values: object) -> list[Any]:
    """A list or tuple (of anything), as a list; anything else is refused."""
    if isinstance(values, str | bytes) or not isinstance(values, list | tuple):
        raise ValidationError(f"{what} must be a list, got {type(values).__name__}")
    return list(values)


def check_names(what: str, values: object) -> list[str]:
    """A list (or tuple) of names, each checked as :func:`keys.check_name` does; a bare
    str is refused rather than read as a list of its characters."""
    if isinstance(values, str | bytes) or not isinstance(values, list | tuple):
        raise ValidationError(f"{what} must be a list of str, got {type(values).__name__}")
    return [check_name(what.rstrip("s"), v) for v in values]


def check_seconds(what: str, value: object, high: float = 86_400.0 * 365) -> float:
    """A duration in seconds: an int or float, finite, above 0 and at most ``high``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= high  # NaN fails this too
    ):
        raise ValidationError(f"{what} must be a number of seconds in (0, {high:g}], got {value!r}")
    return float(value)


def check_optional_name(kind: str, value: object) -> str:
    """A name that may be absent: '' for None or '', else checked as a name."""
    if value is None or value == "":
        return ""
    return check_name(kind, value)  # type: ignore[arg-type]


def check_cursor(value: object, limit: int = 1024) -> str:
    """A page cursor (the bytes a listing returned) as the str the scripts take; ''
    for None."""
    if value is None:
        return ""
    if not isinstance(value, bytes | bytearray):
        raise ValidationError(
            f"cursor must be the bytes a previous page returned, got {type(value).__name__}"
        )
    if len(value) > limit:
        raise ValidationError(f"cursor is longer than {limit} bytes")
    try:
        return bytes(value).decode()
    except UnicodeDecodeError as exc:
        raise ValidationError("cursor is not one a previous page returned") from exc


def token_arg(token: int | None) -> str:
    if token is None:
        return ""
    check_count("token", token, 1, 2**53)
    return str(token)


def not_registered(keys: ActionKeys) -> Exception:
    """The refusal for an action that is not registered."""
    return refusal(
        Status.NO_ACTION,
        f"action {keys.action!r} is not registered in namespace {keys.namespace!r}; "
        "register it first",
    )


def raise_run_refusal(status: int, keys: ActionKeys, run_id: str) -> None:
    """Raise the typed error for a run script's refusal (nothing for OK)."""
    if status == Status.OK:
        return
    if status == Status.NO_ACTION:
        raise not_registered(keys)
    if status == Status.NOT_FOUND:
        raise refusal(
            status,
            f"run {run_id!r} of action {keys.action!r} not found in namespace {keys.namespace!r}",
        )
    raise refusal(status, f"run {run_id!r}: refused ({Status(status).name})")
