"""Waiting for a condition in tests: poll with a generous deadline, never sleep a guess."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

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
