"""Waiting for a condition in tests: poll with a generous deadline, never sleep a guess."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol, TypeVar

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T]],
    accept: Callable[[T], bool] = bool,
    *,
    timeout: float = 15.0,
    interval: float = 0.02,
) -> T:
    """Call ``probe`` until ``accept`` holds for its value; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await probe()
        if accept(value):
            return value
        if loop.time() >= deadline:
            raise AssertionError(f"condition not met within {timeout} s; last value {value!r}")
        await asyncio.sleep(interval)


class _Worker(Protocol):
    async def start(self) -> None: ...

    def stop(self) -> None: ...


@contextlib.asynccontextmanager
async def running(worker: _Worker) -> AsyncIterator[asyncio.Task[None]]:
    """``worker`` started in a task for the ``async with`` body (the task is yielded);
    stopped on the way out, its ``start()`` awaited for at most 30 s."""
    task = asyncio.create_task(worker.start())
    try:
        yield task
    finally:
        worker.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)
