"""Where a worker's handlers run: ``async def`` handlers on its event loop, plain ones in
its threads or, under a :class:`~flo_redis.worker.ProcessExecutor` (the worker's, or an
action's own), in a pool of handler processes (:mod:`flo_redis.worker.processes`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from flo_redis.errors import ValidationError
from flo_redis.worker.action_options import ProcessExecutor
from flo_redis.worker.child_link import pickled_handlers
from flo_redis.worker.context import ActionContext
from flo_redis.worker.handlers import is_async_handler
from flo_redis.worker.processes import ProcessPool


class InProcess:
    """The handler the worker's runner calls for an action whose runs go to ``pool``:
    an ``async`` callable, so the runner cancels it as any ``async`` handler (the pool
    passes the stop on). ``stops_surely``: a handler it says timed out has stopped, so
    its run is retried as its action says (a thread's cannot be said to have)."""

    stops_surely = True

    def __init__(self, pool: ProcessPool, action: str) -> None:
        self.pool = pool
        self.__name__ = action

    async def __call__(self, ctx: ActionContext) -> Any:
        return await self.pool.run(ctx)


def check_process_handler(what: str, handler: object, executor: object) -> None:
    """Refuse, as it is registered, a handler ``executor`` cannot run in a process
    (``what``: "action 'resize'", "stream 'orders'")."""
    if not isinstance(executor, ProcessExecutor):
        raise ValidationError(f"the executor of {what} must be a ProcessExecutor, got {executor!r}")
    if is_async_handler(handler):
        raise ValidationError(
            f"the handler of {what} is async: it runs on the worker's event loop, where a "
            "cancel already stops it; a ProcessExecutor runs plain def handlers"
        )
    pickled_handlers({what: handler})  # type: ignore[dict-item]


def check_stream_handler(stream: str, handler: object, executor: object) -> None:
    """A stream worker's ``handler`` under ``executor``: a plain ``def`` one must be
    importable by a process (an ``async def`` one stays on the loop, as an action
    worker's)."""
    if executor is not None and not is_async_handler(handler):
        check_process_handler(f"stream {stream!r}", handler, executor)


def placed(
    handlers: dict[str, Callable[..., Any]],
    own: dict[str, ProcessExecutor],
    default: ProcessExecutor | None,
) -> dict[int, tuple[ProcessExecutor, dict[str, Callable[..., Any]]]]:
    """The handlers that run in processes, by executor (its id: the executor and its
    actions' handlers); :class:`ValidationError` for one a process cannot import."""
    groups: dict[int, tuple[ProcessExecutor, dict[str, Callable[..., Any]]]] = {}
    for name, handler in handlers.items():
        settings = own.get(name) or (None if is_async_handler(handler) else default)
        if settings is not None:
            pickled_handlers({name: handler})
            groups.setdefault(id(settings), (settings, {}))[1][name] = handler
    return groups


class WorkerPools:
    """A worker's process pools, one per :class:`~flo_redis.worker.ProcessExecutor`:
    each action's own, else the worker's for its plain ``def`` handlers."""

    def __init__(self) -> None:
        self.pools: list[ProcessPool] = []

    async def start(
        self,
        handlers: dict[str, Callable[..., Any]],
        own: dict[str, ProcessExecutor],
        default: ProcessExecutor | None,
        concurrency: int,
        replaced: Callable[[str], None],
    ) -> dict[str, Callable[..., Any]]:
        """Start the pools; ``handlers`` as the runner calls them (those run in a
        process an :class:`InProcess`); ``replaced(reason)`` told of each child
        replaced."""
        calls = dict(handlers)
        for settings, group in placed(handlers, own, default).values():
            pool = await self._started(settings, group, concurrency, replaced)
            calls.update((name, InProcess(pool, name)) for name in group)
        return calls

    async def start_stream(
        self,
        handler: Callable[..., Any],
        settings: ProcessExecutor | None,
        concurrency: int,
        replaced: Callable[[str], None],
    ) -> Callable[..., Any]:
        """A stream worker's handler as its runner calls it: ``handler``, or (a plain
        ``def`` under a ProcessExecutor) an :class:`InProcess` of a pool started now."""
        if settings is None or is_async_handler(handler):
            return handler
        return InProcess(await self._started(settings, {"": handler}, concurrency, replaced), "")

    async def _started(
        self,
        settings: ProcessExecutor,
        handlers: dict[str, Callable[..., Any]],
        concurrency: int,
        replaced: Callable[[str], None],
    ) -> ProcessPool:
        """A pool of ``handlers`` started (no more children than ``concurrency``, which
        could never all be busy)."""
        pool = ProcessPool(
            settings, handlers, min(settings.size or concurrency, concurrency), replaced
        )
        self.pools.append(pool)
        await pool.start()
        return pool

    async def reload(self) -> int:
        """Reload every pool (:meth:`ProcessPool.reload`); how many there are."""
        for pool in self.pools:
            await pool.reload()
        return len(self.pools)

    async def close(self) -> None:
        pools, self.pools = self.pools, []
        await asyncio.gather(*(pool.close() for pool in pools), return_exceptions=True)


__all__ = ["InProcess", "WorkerPools", "check_process_handler", "check_stream_handler"]
__all__ += ["placed"]
