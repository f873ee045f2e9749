"""Argument checks: every refusal of a bad argument before anything is sent, each a
typed error (:mod:`flo_redis.errors`) that says what is wrong and what is taken. Names
(namespace, action, stream, group ...), ints and their ranges, bytes, text, lists,
option objects, cursors, tokens. The refusals an action script's status maps to are
:mod:`flo_redis._wire.refusals`."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard, TypeVar

from flo_redis.errors import (
    BlockTooLongError,
    NamespaceTooLargeError,
    ValidationError,
    ValueTooLargeError,
)
from flo_redis.types import (
    MAX_BLOCK_MS,
    MAX_NAMESPACE_SIZE,
    MAX_VALUE_SIZE,
    ActionInvokeOptions,
    ActionRegisterOptions,
    StreamGroupJoinOptions,
    StreamReadOptions,
    StreamTrimOptions,
    WorkerFailOptions,
)
from flo_redis.types.base import LUA_INT, MAX_TIME_MS, U32

MAX_LIST_LIMIT = 1024


MAX_NAME_SIZE = 255

# Braces would break the hash tag; control characters (C0, DEL and C1, U+0080-U+009F,
# which some terminals obey as escapes) have no place in a name shown to people.
FORBIDDEN_IN_NAMES = re.compile(r"[{}\x00-\x1f\x7f-\x9f]")


def _check(kind: str, name: object, *, allow_colon: bool = True) -> str:
    if not isinstance(name, str):
        raise ValidationError(f"{kind} must be a str, got {type(name).__name__}")
    if not name:
        raise ValidationError(f"{kind} must not be empty")
    limit = MAX_NAMESPACE_SIZE if kind == "namespace" else MAX_NAME_SIZE
    try:
        name.encode()
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{kind} {name[:40]!r} is not valid Unicode ({exc.reason})") from exc
    if len(name.encode()) > limit:
        error = NamespaceTooLargeError if kind == "namespace" else ValidationError
        raise error(f"{kind} {name[:40]!r}... is {len(name.encode())} bytes; the limit is {limit}")
    bad = FORBIDDEN_IN_NAMES.search(name)
    if bad is not None:
        raise ValidationError(
            f"{kind} {name!r} contains {bad.group()!r}; braces and control characters "
            "(U+0000-U+001F, U+007F-U+009F) are not allowed in names"
        )
    if not allow_colon and ":" in name:
        raise ValidationError(f"{kind} {name!r} contains ':'; use another separator such as '.'")
    return name


def check_namespace(namespace: str) -> str:
    """Validate a namespace (1..255 bytes; no braces, colons or control characters)."""
    return _check("namespace", namespace, allow_colon=False)


def check_name(kind: str, name: str) -> str:
    """Validate an action, stream, group, consumer or worker name."""
    return _check(kind, name)


Options = TypeVar("Options")


def check_options(value: object, cls: type[Options]) -> Options:
    """``value`` if it is a ``cls`` (flo's option dataclass for the call), ``cls()`` for
    None; anything else is refused before anything is sent. Its fields are checked here,
    where it is used, whatever they were set to after it was made (:data:`_FIELDS`;
    the call checks the others it takes): :class:`ValidationError` naming the field and
    what it takes."""
    if value is None:
        return cls()
    if not isinstance(value, cls):
        raise ValidationError(
            f"options must be a {cls.__name__} or None, got {type(value).__name__}"
        )
    check_namespace_field(cls.__name__, getattr(value, "namespace", None))
    for field, check in _FIELDS.get(cls, ()):
        check(f"{cls.__name__}.{field}", getattr(value, field))
    whole = _WHOLE.get(cls)
    if whole is not None:
        whole(cls.__name__, value)
    return value


def check_namespace_field(owner: str, value: object) -> None:
    """An option's ``namespace``: None (the client's) or a valid namespace."""
    if value is not None:
        try:
            check_namespace(value)  # type: ignore[arg-type]
        except ValidationError as exc:
            raise type(exc)(f"{owner}.namespace: {exc}") from None


FieldCheck = Callable[[str, object], object]


def _int_in(low: int, high: int, *, optional: bool = False) -> FieldCheck:
    """A field that is an int in [low, high] (or None when ``optional``)."""

    def check(what: str, value: object) -> object:
        return value if optional and value is None else check_count(what, value, low, high)

    return check


def _bool(what: str, value: object) -> object:
    if not isinstance(value, bool):
        raise ValidationError(f"{what} must be a bool (True or False), got {value!r}")
    return value


def _register_fields(what: str, opts: object) -> None:
    """ActionRegisterOptions: the backoff's maximum is not below its base."""
    assert isinstance(opts, ActionRegisterOptions)
    if opts.retry_backoff_max_ms < opts.retry_backoff_ms:
        raise ValidationError(
            f"{what}: retry_backoff_max_ms ({opts.retry_backoff_max_ms}) must not be below "
            f"retry_backoff_ms ({opts.retry_backoff_ms})"
        )


def _invoke_times(what: str, opts: object) -> None:
    """ActionInvokeOptions: delay_ms or run_at_ms, not both."""
    assert isinstance(opts, ActionInvokeOptions)
    if opts.run_at_ms is not None and opts.delay_ms:
        raise ValidationError(f"{what}: give delay_ms or run_at_ms, not both")


_U32_FIELD = _int_in(0, U32 - 1)
# The fields checked where an option object is used (check_options), by class: those a
# call would otherwise send as they are (it checks the others itself); _WHOLE checks the
# object as a whole, after them.
_FIELDS: dict[type, tuple[tuple[str, FieldCheck], ...]] = {
    ActionRegisterOptions: (
        ("timeout_ms", _U32_FIELD),
        ("max_retries", _U32_FIELD),
        ("retry_backoff_ms", _U32_FIELD),
        ("retry_backoff_max_ms", _U32_FIELD),
        ("max_concurrency", _U32_FIELD),
        ("max_payload_bytes", _int_in(1, MAX_VALUE_SIZE, optional=True)),
        ("retention_ms", _int_in(1, LUA_INT - 1, optional=True)),
        ("retention_count", _int_in(1, LUA_INT - 1, optional=True)),
        ("keep_inputs", _bool),
    ),
    ActionInvokeOptions: (
        ("delay_ms", _int_in(0, MAX_TIME_MS)),
        ("run_at_ms", _int_in(0, MAX_TIME_MS, optional=True)),
    ),
    StreamGroupJoinOptions: (
        ("ack_timeout_ms", _int_in(0, U32 - 1, optional=True)),
        ("max_deliver", _int_in(1, U32 - 1, optional=True)),
    ),
    WorkerFailOptions: (("retry", _bool),),
    StreamReadOptions: (("tail", _bool),),
    StreamTrimOptions: (("dry_run", _bool),),
}
_WHOLE: dict[type, Callable[[str, object], None]] = {
    ActionRegisterOptions: _register_fields,
    ActionInvokeOptions: _invoke_times,
}


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


def is_int(value: object) -> TypeGuard[int]:
    """An int, and not a bool (``True`` is an int to Python, never a count to us)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(what: str, value: object) -> int:
    """An int (not a bool), of any value."""
    if not is_int(value):
        raise ValidationError(f"{what} must be an int, got {value!r}")
    return value


def check_count(
    what: str,
    value: object,
    low: int,
    high: int | None = None,
    *,
    fix: str = "",
    error: Callable[[str], Exception] = ValidationError,
) -> int:
    """An int (not a bool) in [``low``, ``high``] (no upper bound for None); else
    ``error`` (ValidationError unless given) naming the range taken, then ``fix``."""
    if not is_int(value) or value < low or (high is not None and value > high):
        taken = f">= {low}" if high is None else f"in [{low}, {high}]"
        then = f"; {fix}" if fix else ""
        raise error(f"{what} must be an int {taken}, got {value!r}{then}")
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


MAX_FLOW_KEY_SIZE = 255


def check_flow_key(value: object, *, optional: bool = False) -> str:
    """A flow key (``lua/lib/flow.lua``): a str of 1 .. 255 UTF-8 bytes without NUL
    (None passes as "" when ``optional``)."""
    if value is None and optional:
        return ""
    key = check_text("flow_key", value, limit=MAX_FLOW_KEY_SIZE)
    if not key or "\0" in key:
        raise ValidationError("flow_key must be 1 .. 255 bytes without NUL, e.g. a tenant id")
    return key


LABEL_TYPES = (str, int, float, bool, type(None), list, dict)
"""What a label value may be: JSON's types (a list or dict is taken, and never matches)."""


def check_labels(labels: object) -> None:
    """Invoke labels: None, or a dict whose values are JSON's types (:data:`LABEL_TYPES`);
    any other value would be stored with a tag no worker's labels ever match."""
    if labels is None:
        return
    if not isinstance(labels, Mapping):
        raise ValidationError(f"labels must be a dict, got {type(labels).__name__}")
    for key, value in labels.items():
        if not isinstance(value, LABEL_TYPES):
            raise ValidationError(
                f"label {key!r} is a {type(value).__name__}; label values must be str, int, "
                "float, bool, None, list or dict (only the first five can match a worker's)"
            )


def check_idempotency_key(value: object) -> str:
    """An invoke's idempotency key: None ('': none), or a str of at most MAX_NAME_SIZE
    UTF-8 bytes; an int, bytes or other type is refused rather than turned into text."""
    return check_text("idempotency_key", value, optional=True, limit=MAX_NAME_SIZE)


def check_callback(what: str, value: object) -> None:
    """None, or something callable (a function or coroutine function)."""
    if value is not None and not callable(value):
        raise ValidationError(
            f"{what} must be a function or coroutine function, or None; got {type(value).__name__}"
        )


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


def stored_int(raw: object, low: int, high: int) -> int | None:
    """A number read back from a settings hash, as the scripts read it (``arg_int`` in
    ``lua/lib/checked.lua``: a number, whole, in [``low``, ``high``]); None for anything
    else (absent, text, NaN, a fraction, out of range), which the scripts read as not set."""
    if raw is None:
        return None
    try:
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        value = float(text) if "_" not in text else math.nan
    except (ValueError, UnicodeDecodeError):
        return None
    if not (math.isfinite(value) and value.is_integer() and low <= value <= high):
        return None
    return int(value)


def stored_or(raw: object, low: int, high: int, default: int) -> int:
    """:func:`stored_int`, or ``default`` where the scripts read their default."""
    value = stored_int(raw, low, high)
    return default if value is None else value


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


def validate_block_ms(block_ms: object) -> None:
    """Refuse a ``block_ms`` that is not an int in [0, MAX_BLOCK_MS].

    Raises BlockTooLongError above the maximum and ValidationError for a
    negative value, a bool or a non-int.
    """
    if isinstance(block_ms, bool) or not isinstance(block_ms, int):
        raise ValidationError(f"block_ms must be an int, not {block_ms!r}")
    if block_ms < 0:
        raise ValidationError(f"block_ms must not be negative, got {block_ms}")
    if block_ms > MAX_BLOCK_MS:
        raise BlockTooLongError(
            f"block_ms may be at most {MAX_BLOCK_MS} (5 minutes), got {block_ms}"
        )
