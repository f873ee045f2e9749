"""Coalescing a worker's completes: many runs finished together go in one script call.

Handlers that finish while a batch is in flight queue up and go out together in the next
call (one per action), so under load a worker sends few large batches and when idle each
complete goes out at once — no timer, no added latency. Each item is still fenced and
answered on its own: its future resolves to ``None`` (accepted) or the refusal, or fails
with the connection error of its batch, which the caller's resend rule handles.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from .errors import ServerError

Item = TypeVar("Item")
Flush = Callable[[str, Sequence[Item]], Awaitable[Sequence[ServerError | None]]]


class Coalescer(Generic[Item]):
    """Queues items per key and flushes each key's queue in one call, one call at a time."""

    def __init__(self, flush: Flush[Item], name: str) -> None:
        self._flush = flush
        self._name = name
        self._pending: dict[str, list[tuple[Item, asyncio.Future[ServerError | None]]]] = {}
        self._task: asyncio.Task[None] | None = None

    def submit(self, key: str, item: Item) -> asyncio.Future[ServerError | None]:
        """Queue ``item`` under ``key``; the future gives its answer."""
        future: asyncio.Future[ServerError | None] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(key, []).append((item, future))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=self._name)
        return future

    async def _run(self) -> None:
        while self._pending:
            batches, self._pending = self._pending, {}
            for key, entries in batches.items():
                try:
                    answers = await self._flush(key, [item for item, _ in entries])
                except BaseException as exc:
                    for _, future in entries:
                        if not future.done():
                            future.set_exception(exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                for (_, future), answer in zip(entries, answers, strict=True):
                    if not future.done():
                        future.set_result(answer)

    async def close(self) -> None:
        """Wait for queued items to be flushed."""
        while self._task is not None and not self._task.done():
            await asyncio.wait({self._task})
