"""What a handler's return value and a handler's failure become in the run.

Results: ``bytes`` are kept as they are; anything else goes through the worker's
serializer (JSON by default, so ``"hello"``, ``[1, 2]``, ``42``, ``None`` and dicts all
work — a superset of flo's rule, which encoded dicts only). A value the serializer cannot
encode fails the run for good with a message naming its type: never a silent ``b""``.

Failures: the run keeps ``"<ExceptionType>: <message>"`` and a bounded traceback
(``ActionRunStatus.error_type`` / ``error_traceback``).

Handlers: coroutine functions run on the event loop; plain callables run in a bounded
thread pool owned by the worker (:class:`HandlerPool`). Anything else is refused when it
is registered.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import traceback
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

from .errors import NonRetryableError, ValidationError

# The tail of a traceback kept with a failed run (the innermost frames say the most).
MAX_TRACEBACK_CHARS = 8192
# Threads for plain ``def`` handlers: at most the worker's concurrency, and at most this.
MAX_HANDLER_THREADS = 32


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


def encode_result(value: Any, serializer: ResultSerializer) -> bytes:
    """The result bytes for ``value``; :class:`ResultEncodingError` if it has none."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    try:
        return serializer.dumps(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ResultEncodingError(
            f"the handler returned a {type(value).__module__}.{type(value).__qualname__}, "
            f"which the {serializer.name} serializer cannot encode ({exc}); return bytes or "
            "an encodable value, or give the worker a serializer that handles it"
        ) from exc


def error_text(exc: BaseException) -> str:
    """``"KeyError: 'image'"``: the exception's type and message, as the run keeps them."""
    message = str(exc)
    name = type(exc).__name__
    return f"{name}: {message}" if message else name


def error_traceback(exc: BaseException) -> str:
    """The exception's traceback, its last :data:`MAX_TRACEBACK_CHARS` characters."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if len(text) > MAX_TRACEBACK_CHARS:
        text = "...\n" + text[-(MAX_TRACEBACK_CHARS - 4) :]
    return text


Handler = Callable[[Any], Awaitable[Any]]


def is_async_handler(fn: object) -> bool:
    """Whether calling ``fn`` gives a coroutine (also through partials and ``__call__``)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - the bound method is what is called
    return call is not None and not inspect.isroutine(fn) and inspect.iscoroutinefunction(call)


def check_handler(what: str, fn: object) -> None:
    """Refuse a handler that can never be called, before it is registered."""
    if not callable(fn):
        raise ValidationError(
            f"the handler of {what} must be an async function or a plain function taking "
            f"the context, got {type(fn).__name__} {fn!r}"
        )


class HandlerPool:
    """Runs handlers: ``async def`` ones on the loop, plain ones in a bounded thread pool
    (made on first use, shut down by :meth:`close` without waiting for threads)."""

    def __init__(self, concurrency: int, prefix: str) -> None:
        self._threads = max(1, min(concurrency, MAX_HANDLER_THREADS))
        self._prefix = prefix
        self._executor: ThreadPoolExecutor | None = None
        self._async: dict[int, bool] = {}

    def call(self, fn: Callable[[Any], Any], ctx: Any) -> Awaitable[Any]:
        """An awaitable of ``fn(ctx)``'s result; a plain function runs in a thread, and a
        coroutine it returns is awaited on the loop."""
        key = id(fn)
        is_async = self._async.get(key)
        if is_async is None:
            is_async = self._async[key] = is_async_handler(fn)
        if is_async:
            return fn(ctx)  # type: ignore[no-any-return]
        return self._in_thread(fn, ctx)

    async def _in_thread(self, fn: Callable[[Any], Any], ctx: Any) -> Any:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._threads, thread_name_prefix=self._prefix)
        # In a copy of this task's context, as asyncio.to_thread does: the handler sees
        # what the worker set around it (a tracing span).
        run = contextvars.copy_context().run
        result = await asyncio.get_running_loop().run_in_executor(self._executor, run, fn, ctx)
        if inspect.isawaitable(result):
            return await result
        return result

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


__all__ = [
    "JSON",
    "MAX_HANDLER_THREADS",
    "MAX_TRACEBACK_CHARS",
    "HandlerPool",
    "JsonSerializer",
    "ResultEncodingError",
    "ResultSerializer",
    "check_handler",
    "encode_result",
    "error_text",
    "error_traceback",
]
