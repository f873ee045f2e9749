"""Coalescing a worker's completes: many runs finished together go in one script call.

Handlers that finish while a batch is in flight queue up and go out together in the next
call (one per action), so under load a worker sends few large batches and when idle each
complete goes out at once — no timer, no added latency. Each item is still fenced and
answered on its own: ``None`` (accepted) or the refusal, or the connection error of its
batch, which the caller's resend rule handles — through a future (:meth:`Coalescer.submit`)
or, with no future or task per item, the coalescer's ``answered`` callback
(:meth:`Coalescer.post`), which need not be called for the items accepted: a batch whose
every posted item was accepted is then answered without a step per item.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from flo_redis.errors import ServerError

Item = TypeVar("Item")
Flush = Callable[[str, Sequence[Item]], Awaitable[Sequence[ServerError | None]]]
# Called with a posted item and its answer (None: accepted, else the refusal), or with
# the error its batch failed with (then the answer is None).
Answered = Callable[[Item, ServerError | None, BaseException | None], None]


class _Queued(Generic[Item]):
    """One key's items waiting for the next flush, and the futures of those submitted
    (by index; the others were posted)."""

    __slots__ = ("items", "waiting")

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.waiting: dict[int, asyncio.Future[ServerError | None]] = {}


class Coalescer(Generic[Item]):
    """Queues items per key and flushes each key's queue in one call, one call at a time.
    ``track`` is told of each task it starts (whoever owns it waits for it); ``answered``
    of each posted item's answer (it must not raise), of an accepted one only with
    ``tell_accepted``."""

    def __init__(
        self,
        flush: Flush[Item],
        name: str,
        track: Callable[[asyncio.Task[None]], None] | None = None,
        answered: Answered[Item] | None = None,
        *,
        tell_accepted: bool = True,
    ) -> None:
        self._flush = flush
        self._name = name
        self._track = track
        self._answered = answered
        self._tell_accepted = tell_accepted
        self._pending: dict[str, _Queued[Item]] = {}
        self._task: asyncio.Task[None] | None = None

    def submit(self, key: str, item: Item) -> asyncio.Future[ServerError | None]:
        """Queue ``item`` under ``key``; the future gives its answer."""
        future: asyncio.Future[ServerError | None] = asyncio.get_running_loop().create_future()
        queued = self._queued(key)
        queued.waiting[len(queued.items)] = future
        queued.items.append(item)
        return future

    def post(self, key: str, item: Item) -> None:
        """Queue ``item`` under ``key``; its answer goes to ``answered``."""
        queued = self._pending.get(key)
        if queued is None or self._task is None or self._task.done():
            queued = self._queued(key)
        queued.items.append(item)

    def _queued(self, key: str) -> _Queued[Item]:
        """``key``'s queue, a flush on its way."""
        queued = self._pending.get(key)
        if queued is None:
            queued = self._pending[key] = _Queued()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=self._name)
            if self._track is not None:
                self._track(self._task)
        return queued

    async def _run(self) -> None:
        while self._pending:
            batches, self._pending = self._pending, {}
            for key, queued in batches.items():
                items = queued.items
                try:
                    answers = await self._flush(key, items)
                    if len(answers) != len(items):
                        raise ValueError(f"{len(answers)} answers to {len(items)} items")
                except BaseException as exc:
                    self._failed(queued, exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                waiting = queued.waiting
                if not waiting and not self._tell_accepted and answers.count(None) == len(items):
                    continue  # every item accepted, and nobody to tell
                self._answer(queued, answers)

    def _answer(self, queued: _Queued[Item], answers: Sequence[ServerError | None]) -> None:
        waiting, answered, tell = queued.waiting, self._answered, self._tell_accepted
        for index, (item, answer) in enumerate(zip(queued.items, answers, strict=True)):
            future = waiting.get(index) if waiting else None
            if future is not None:
                if not future.done():
                    future.set_result(answer)
            elif answered is not None and (answer is not None or tell):
                answered(item, answer, None)

    def _failed(self, queued: _Queued[Item], exc: BaseException) -> None:
        waiting, answered = queued.waiting, self._answered
        for index, item in enumerate(queued.items):
            future = waiting.get(index)
            if future is not None:
                if not future.done():
                    future.set_exception(exc)
            elif answered is not None:
                answered(item, None, exc)

    async def close(self) -> None:
        """Wait for queued items to be flushed."""
        while self._task is not None and not self._task.done():
            await asyncio.wait({self._task})
