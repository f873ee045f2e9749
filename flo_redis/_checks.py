"""Argument checks and refusals shared by ``client.action`` and ``client.worker``."""

from __future__ import annotations

from ._status import Status, refusal
from .errors import ValidationError, ValueTooLargeError
from .keys import ActionKeys

MAX_LIST_LIMIT = 1024


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
