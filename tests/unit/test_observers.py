"""Observers: several observers as one. Every hook a worker calls reaches each observer,
in the order given; a middleware hook is awaited before the next observer's is called."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from flo_redis.worker.observe import Observers, WorkerObserver

HOOKS = sorted(
    name
    for name, value in vars(WorkerObserver).items()
    if inspect.isfunction(value) and not name.startswith("_")
)


class Everything(WorkerObserver):
    """Records every hook called on it, with its arguments; the middleware hooks are
    ``async`` and yield once, so an observer awaited out of turn would show."""

    def __init__(self, name: str, seen: list[tuple[str, str, tuple[Any, ...]]]) -> None:
        self.name = name
        self.seen = seen

    def __getattribute__(self, attr: str) -> Any:
        if attr not in HOOKS:
            return super().__getattribute__(attr)
        hook = getattr(WorkerObserver, attr)

        if (
            inspect.iscoroutinefunction(hook)
            or attr in ("on_start", "on_stop")
            or attr
            in (
                "before_run",
                "after_run",
                "on_failure",
            )
        ):

            async def awaited(*args: Any) -> None:
                await asyncio.sleep(0)
                self.seen.append((self.name, attr, args))

            return awaited

        def called(*args: Any) -> None:
            self.seen.append((self.name, attr, args))

        return called


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_reaches_each_observer_in_order(hook: str) -> None:
    seen: list[tuple[str, str, tuple[Any, ...]]] = []
    both = Observers(Everything("a", seen), Everything("b", seen))
    arity = len(inspect.signature(getattr(WorkerObserver, hook)).parameters) - 1
    args = tuple(f"arg{i}" for i in range(arity))
    answer = getattr(both, hook)(*args)
    if inspect.isawaitable(answer):
        asyncio.run(_awaited(answer))
    assert seen == [("a", hook, args), ("b", hook, args)]


async def _awaited(answer: Any) -> None:
    await answer
