"""Steps of the dependency tests that drive the scripts by hand: actions and a worker
registered, a run taken without blocking, and every outbox forwarded until none moves
(tests/scripts/test_dependencies.py, test_whole_groups.py)."""

from __future__ import annotations

from typing import Any

from flo_redis import ActionRegisterOptions, FloClient, TaskAssignment, WorkerAwaitOptions

NOW = WorkerAwaitOptions(block_ms=0)


async def setup(client: FloClient, *actions: str, **options: Any) -> None:
    """Register ``actions`` (with ``options``: ActionRegisterOptions) and the worker "w"
    for them."""
    for action in actions:
        await client.action.register(action, options=ActionRegisterOptions(**options))
    await client.worker.register("w", list(actions))


async def take(client: FloClient, action: str) -> TaskAssignment | None:
    """The next ready run of ``action``, handed to "w" (None: none is ready)."""
    return (await client.worker.await_task("w", [action], NOW)).task


async def settle(client: FloClient, *actions: str) -> None:
    """Forward every outbox named until none moves."""
    while sum([await client.action.forward(a) for a in actions]):
        pass
