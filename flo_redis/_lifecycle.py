"""What both workers share: their own connections, stop, close and ``async with``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from .observe import NO_OBSERVER, WorkerObserver

if TYPE_CHECKING:
    from .client import FloClient

W = TypeVar("W", bound="WorkerLifecycle")

# After abort(), how often handlers that are still running are cancelled again.
_RECANCEL_S = 0.2


class WorkerLifecycle:
    """A worker opens its own client (same endpoint, namespace and settings as the
    parent's) when it starts and closes it when ``start()`` returns. ``observer`` is told
    how the work goes (:mod:`flo_redis.observe`); set it before ``start()``."""

    def __init__(self, parent_client: FloClient) -> None:
        self.observer: WorkerObserver = NO_OBSERVER
        self._parent = parent_client
        self._client: FloClient | None = None
        self._stop = asyncio.Event()
        self._abort = asyncio.Event()
        self._finished = asyncio.Event()
        self._started = False

    @property
    def client(self) -> FloClient:
        """The worker's own client; only while it runs."""
        if self._client is None:
            raise RuntimeError("the worker is not started")
        return self._client

    def _open_client(self) -> FloClient:
        self._client = self._parent.sibling()
        self._started = True
        self._finished.clear()
        return self._client

    def use_client(self, client: FloClient) -> None:
        """Work on ``client``'s endpoint, namespace and settings instead of those of the
        client it was made with; before :meth:`start`."""
        if self._started:
            raise RuntimeError("the worker is already started")
        self._parent = client

    def stop(self) -> None:
        """Stop taking work; running handlers finish and their reports are sent."""
        self._stop.set()
        if self._client is not None:
            self._client.interrupt()

    def abort(self) -> None:
        """Stop now: running handlers are cancelled and their work is given back without
        spending an attempt; ``start()`` returns once that is sent. For the end of a
        bounded shutdown: call :meth:`stop` first and this when the time is up."""
        self._abort.set()
        self.stop()

    async def _wait_tasks(
        self,
        tasks: set[asyncio.Task[None]],
        handlers: Callable[[], Iterable[asyncio.Task[None]]],
    ) -> None:
        """Wait until ``tasks`` (each one handler, then its report) is empty; once
        :meth:`abort` is called, cancel those ``handlers()`` names as still in their
        handler (each gives its work back) and wait for the rest."""
        while tasks:
            if self._abort.is_set():
                # Again and again: a handler can swallow a cancellation and run on (some
                # client libraries do, in a command that was under way).
                for task in handlers():
                    task.cancel()
                await asyncio.wait(set(tasks), timeout=_RECANCEL_S)
                continue
            abort = asyncio.ensure_future(self._abort.wait())
            try:
                await asyncio.wait({*tasks, abort}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                abort.cancel()

    async def close(self) -> None:
        """Stop, wait for running handlers and their reports, close the connections."""
        self.stop()
        if self._started:
            await self._finished.wait()

    async def __aenter__(self: W) -> W:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.close()
