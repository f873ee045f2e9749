"""Coalescing a worker's completes: many runs finished together go in one script call.

Handlers that finish while a batch is in flight queue up and go out together in the next
call (one per action), so under load a worker sends few large batches and when idle each
complete goes out at once — no timer, no added latency. Each item is still fenced and
answered on its own: ``None`` (accepted) or the refusal, or the connection error of its
batch, which the caller's resend rule handles — through a future (:meth:`Coalescer.submit`)
or, with no future or task per item, a callback (:meth:`Coalescer.post`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from .errors import ServerError

Item = TypeVar("Item")
Flush = Callable[[str, Sequence[Item]], Awaitable[Sequence[ServerError | None]]]
# Called with an item's answer (None: accepted, else the refusal), or with the error its
# batch failed with (then the answer is None).
Answered = Callable[[ServerError | None, BaseException | None], None]
_Sink = asyncio.Future[ServerError | None] | Answered


class Coalescer(Generic[Item]):
    """Queues items per key and flushes each key's queue in one call, one call at a time.
    ``track`` is told of each task it starts (whoever owns it waits for it)."""

    def __init__(
        self,
        flush: Flush[Item],
        name: str,
        track: Callable[[asyncio.Task[None]], None] | None = None,
    ) -> None:
        self._flush = flush
        self._name = name
        self._track = track
        self._pending: dict[str, list[tuple[Item, _Sink]]] = {}
        self._task: asyncio.Task[None] | None = None

    def submit(self, key: str, item: Item) -> asyncio.Future[ServerError | None]:
        """Queue ``item`` under ``key``; the future gives its answer."""
        future: asyncio.Future[ServerError | None] = asyncio.get_running_loop().create_future()
        self._queue(key, item, future)
        return future

    def post(self, key: str, item: Item, answered: Answered) -> None:
        """Queue ``item`` under ``key``; ``answered`` is called with its answer (it must
        not raise)."""
        self._queue(key, item, answered)

    def _queue(self, key: str, item: Item, sink: _Sink) -> None:
        queued = self._pending.get(key)
        if queued is None:
            self._pending[key] = [(item, sink)]
        else:
            queued.append((item, sink))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=self._name)
            if self._track is not None:
                self._track(self._task)

    async def _run(self) -> None:
        while self._pending:
            batches, self._pending = self._pending, {}
            for key, entries in batches.items():
                try:
                    answers = await self._flush(key, [item for item, _ in entries])
                except BaseException as exc:
                    for _, sink in entries:
                        if not isinstance(sink, asyncio.Future):
                            sink(None, exc)
                        elif not sink.done():
                            sink.set_exception(exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                for (_, sink), answer in zip(entries, answers, strict=True):
                    if not isinstance(sink, asyncio.Future):
                        sink(answer, None)
                    elif not sink.done():
                        sink.set_result(answer)

    async def close(self) -> None:
        """Wait for queued items to be flushed."""
        while self._task is not None and not self._task.done():
            await asyncio.wait({self._task})
