"""A known graph of runs to show (``flo-redis runs show``, the dashboard's run page): a
child with a parent in each state, a parent with more children than a page lists, and a
child with more parents than one."""

from __future__ import annotations

from typing import Any

from flo_redis import ActionInvokeOptions, FloClient, WorkerAwaitOptions, WorkerFailOptions
from flo_redis.types import Dependency

NOW = WorkerAwaitOptions(block_ms=0)
EVIL = "<img src=x onerror=alert(1)>"
MISSING = f"{EVIL}:7"  # a run id no run has, of an action named to be escaped
MANY = 25  # more than a page shows (flo_redis.ops.run_graph.SHOWN)


async def _ended(client: FloClient, fail: bool = False) -> str:
    """A run of 'a' taken and completed (or failed for good), its end carried."""
    run = (await client.action.invoke("a", b"")).run_id
    task = (await client.worker.await_task("w", ["a"], NOW)).task
    assert task is not None and task.task_id == run
    if fail:
        await client.worker.fail("w", "a", run, "boom", WorkerFailOptions(retry=False))
    else:
        await client.worker.complete("w", "a", run, b"ok")
    await client.action.forward("a")
    return run


async def graph_world(client: FloClient) -> dict[str, Any]:
    """Actions 'a' and 'b'. ``child`` (of 'b') waits for four parents (of 'a'):
    ``done`` completed, ``failed`` failed for good (policy "run"), ``waiting`` not taken
    yet, and :data:`MISSING`, which no run has (policy "ignore"). ``wide`` (of 'a') has
    :data:`MANY` children (``children``, of 'b'), and ``crowded`` (of 'b') :data:`MANY`
    parents (``crowd``, of 'a'), none of them ended. ``plain`` (of 'a') has neither
    parents nor dependents."""
    for action in ("a", "b"):
        await client.action.register(action)
    await client.worker.register("w", ["a", "b"])
    done = await _ended(client)
    failed = await _ended(client, fail=True)
    waiting = (await client.action.invoke("a", b"")).run_id
    parents = [done, Dependency(failed, "run"), waiting, Dependency(MISSING, "ignore")]
    child = (await client.action.invoke("b", b"", ActionInvokeOptions(depends_on=parents))).run_id
    wide = (await client.action.invoke("a", b"")).run_id
    after_wide = ActionInvokeOptions(depends_on=[wide])
    children = [(await client.action.invoke("b", b"", after_wide)).run_id for _ in range(MANY)]
    crowd = [(await client.action.invoke("a", b"")).run_id for _ in range(MANY)]
    crowded = (await client.action.invoke("b", b"", ActionInvokeOptions(depends_on=crowd))).run_id
    plain = (await client.action.invoke("a", b"")).run_id
    return {
        "plain": plain,
        "done": done,
        "failed": failed,
        "waiting": waiting,
        "child": child,
        "wide": wide,
        "children": children,
        "crowd": crowd,
        "crowded": crowded,
    }
