"""Running a coroutine in a context of its own, inside the task that awaits it.

A task runs its coroutine in a copy of the context it was made in, so whatever a handler
sets in a ``contextvars.ContextVar`` (a tracing span, a logging binding) ends with it.
:class:`InContext` gives a coroutine that isolation without a task of its own: each of
its steps runs in the given context, while the awaiting task stays the current task
(so ``asyncio.timeout`` and cancellation inside the coroutine work as usual).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class InContext(Generic[T]):
    """``await InContext(coro, context)``: ``coro``'s result, each step run in
    ``context`` (which must not be entered elsewhere meanwhile). ``on_wait`` is called
    the first time ``coro`` waits (gives the loop a turn), if it ever does; :attr:`waited`
    says whether it did."""

    __slots__ = ("_context", "_coro", "_on_wait", "waited")

    def __init__(
        self,
        coro: Coroutine[Any, Any, T],
        context: contextvars.Context,
        on_wait: Callable[[], None] | None = None,
    ) -> None:
        self._coro = coro
        self._context = context
        self._on_wait = on_wait
        self.waited = False

    def __await__(self) -> Generator[Any, Any, T]:
        run, send, throw = self._context.run, self._coro.send, self._coro.throw
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = run(send, value) if error is None else run(throw, error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            if not self.waited:
                self.waited = True
                if self._on_wait is not None:
                    self._on_wait()
            try:
                value, error = (yield step), None
            except BaseException as exc:  # a cancellation (or any error) thrown in
                value, error = None, exc


__all__ = ["InContext"]
