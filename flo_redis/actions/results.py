"""What a handler's return value and a handler's failure become in the run.

Results: ``bytes`` are kept as they are; anything else goes through the worker's
serializer (JSON by default, so ``"hello"``, ``[1, 2]``, ``42``, ``None`` and dicts all
work — a superset of flo's rule, which encoded dicts only). A value the serializer cannot
encode fails the run for good with a message naming its type: never a silent ``b""``.

Failures: the run keeps ``"<ExceptionType>: <message>"`` and a bounded traceback
(``ActionRunStatus.error_type`` / ``error_traceback``).

Handlers: coroutine functions run on the event loop; plain callables run in a bounded
thread pool owned by the worker (:class:`flo_redis.worker.handlers.HandlerRunner`).
Anything else is refused when it is registered.
"""

from __future__ import annotations

import inspect
import json
import traceback
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from flo_redis._wire.checks import MAX_NAME_SIZE, check_text
from flo_redis.errors import NonRetryableError, ValidationError

# The tail of a traceback kept with a failed run (the innermost frames say the most).
MAX_TRACEBACK_CHARS = 8192


@runtime_checkable
class ResultSerializer(Protocol):
    """Turns a handler's return value into the run's result bytes.

    ``dumps`` raises ``TypeError`` or ``ValueError`` for a value it cannot encode; the
    run then fails for good with that message. ``bytes`` never reach it."""

    name: str

    def dumps(self, value: Any) -> bytes: ...


class JsonSerializer:
    """JSON (``json.dumps``, UTF-8): flo's encoding of dict results, for every value."""

    name = "JSON"

    def dumps(self, value: Any) -> bytes:
        return json.dumps(value).encode()


JSON = JsonSerializer()


class ResultEncodingError(NonRetryableError):
    """A handler returned a value the worker's serializer cannot encode. The run fails
    for good (retrying returns the same value); return bytes or an encodable value, or
    give the worker a serializer that handles it."""


def serialized(
    value: Any,
    serializer: ResultSerializer,
    refused: Callable[[Any, ResultSerializer, Exception], Exception],
) -> bytes:
    """``value`` as bytes: bytes as they are (a bytearray or memoryview as bytes),
    anything else by ``serializer``. What it cannot encode (``TypeError``,
    ``ValueError``, ``OverflowError``) raises ``refused(value, serializer, error)``."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    try:
        return serializer.dumps(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise refused(value, serializer, exc) from exc


def _unencodable(value: Any, serializer: ResultSerializer, exc: Exception) -> Exception:
    return ResultEncodingError(
        f"the handler returned a {type(value).__module__}.{type(value).__qualname__}, "
        f"which the {serializer_name(serializer)} serializer cannot encode ({exc}); "
        "return bytes or an encodable value, or give the worker a serializer that "
        "handles it"
    )


def encode_result(value: Any, serializer: ResultSerializer) -> bytes:
    """The result bytes for ``value``; :class:`ResultEncodingError` if it has none."""
    data = serialized(value, serializer, _unencodable)
    if not isinstance(data, bytes):
        raise ResultEncodingError(
            f"the {serializer_name(serializer)} serializer's dumps returned a "
            f"{type(data).__name__}, not bytes; make it return bytes"
        )
    return data


def check_outcome(outcome: object) -> str:
    """A named outcome (``ctx.result``, :class:`ActionResult`): a str of at most
    :data:`MAX_NAME_SIZE` UTF-8 bytes, else :class:`ValidationError`."""
    return check_text("outcome", outcome, limit=MAX_NAME_SIZE)


def check_result_data(data: object) -> bytes:
    """An :class:`ActionResult`'s data: bytes (a bytearray or memoryview as bytes)."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise ValidationError(
        f"an ActionResult's data must be bytes, got {type(data).__name__}; build it with "
        "ctx.result(outcome, value), which encodes the value"
    )


def serializer_name(serializer: object) -> str:
    """What a serializer is called in messages: its ``name``, else its class's."""
    name = getattr(serializer, "name", None)
    return name if isinstance(name, str) and name else type(serializer).__name__


def check_serializer(serializer: object) -> None:
    """Refuse a serializer that cannot encode anything (no callable ``dumps``), when the
    worker is made rather than at its first result."""
    if not callable(getattr(serializer, "dumps", None)):
        raise ValidationError(
            "serializer must have a dumps(value) -> bytes method (see "
            f"flo_redis.actions.results.ResultSerializer), got {type(serializer).__name__} "
            f"{serializer!r}"
        )


def error_text(exc: BaseException) -> str:
    """``"KeyError: 'image'"``: the exception's type and message, as the run keeps them
    (an exception whose ``__str__`` raises still fails its run, saying so)."""
    try:
        message = str(exc)
    except Exception as broken:
        message = f"(its text could not be had: {type(broken).__name__})"
    name = type(exc).__name__
    return f"{name}: {message}" if message else name


def error_traceback(exc: BaseException) -> str:
    """The exception's traceback, its last :data:`MAX_TRACEBACK_CHARS` characters."""
    try:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:  # a __str__ that raises, all the way down
        text = f"{type(exc).__name__} (its traceback could not be printed)"
    if len(text) > MAX_TRACEBACK_CHARS:
        text = "...\n" + text[-(MAX_TRACEBACK_CHARS - 4) :]
    return text


def check_handler(what: str, fn: object) -> None:
    """Refuse a handler that can never be called with its context, before it is
    registered: not callable, or its signature takes no positional argument (or needs
    more than one)."""
    if not callable(fn):
        raise ValidationError(
            f"the handler of {what} must be an async function or a plain function taking "
            f"the context, got {type(fn).__name__} {fn!r}"
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # no signature to read (some builtins): it is tried when called
    try:
        signature.bind(None)
    except TypeError as exc:
        raise ValidationError(
            f"the handler of {what} must take the context as its one positional argument "
            f"({exc}); define it as `def handler(ctx)` or `async def handler(ctx)`"
        ) from None


__all__ = [
    "JSON",
    "MAX_TRACEBACK_CHARS",
    "JsonSerializer",
    "ResultEncodingError",
    "ResultSerializer",
    "check_handler",
    "check_outcome",
    "check_result_data",
    "check_serializer",
    "encode_result",
    "error_text",
    "error_traceback",
    "serialized",
    "serializer_name",
]
