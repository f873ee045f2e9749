"""Running a coroutine in a context of its own, inside the task that awaits it.

A task runs its coroutine in a copy of the context it was made in, so whatever a handler
sets in a ``contextvars.ContextVar`` (a tracing span, a logging binding) ends with it.
:func:`start_in` gives a coroutine that isolation without a task of its own: each of its
steps runs in the given context, while the calling task stays the current task (so
``asyncio.timeout`` and cancellation inside the coroutine work as usual).

The first step is taken at once, by a plain call: a coroutine that ends without waiting
(a fast handler) costs no awaitable and no generator. Only one that waits is wrapped
(:class:`InContext`), and the caller awaits the rest of it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Coroutine, Generator
from typing import Any


class InContext:
    """``await InContext(coro, context, step)``: the rest of ``coro``, whose first step
    ran in ``context`` and waits for ``step`` (what it yielded); every later step runs
    in ``context`` too (which must not be entered elsewhere meanwhile). Its result is
    ``coro``'s."""

    __slots__ = ("_context", "_coro", "_step")

    def __init__(
        self, coro: Coroutine[Any, Any, Any], context: contextvars.Context, step: Any
    ) -> None:
        self._coro = coro
        self._context = context
        self._step = step

    def __await__(self) -> Generator[Any, Any, Any]:
        run, send, throw = self._context.run, self._coro.send, self._coro.throw
        step = self._step
        while True:
            try:
                value, error = (yield step), None
            except BaseException as exc:  # a cancellation (or any error) thrown in
                value, error = None, exc
            try:
                step = run(send, value) if error is None else run(throw, error)
            except StopIteration as stop:
                return stop.value


def start_in(context: contextvars.Context, coro: Coroutine[Any, Any, Any]) -> InContext | None:
    """Take ``coro``'s first step in ``context``: None when it ended there without
    waiting (its result is dropped), or the rest of it to await (:class:`InContext`).
    An error the first step raises is raised here."""
    try:
        step = context.run(coro.send, None)
    except StopIteration:
        return None
    return InContext(coro, context, step)


__all__ = ["InContext", "start_in"]
