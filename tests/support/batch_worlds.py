"""A known batch to show (``flo-redis batches show``, the dashboard's batch page): an
outer batch with a completed run, a failed run, a run not taken yet and a nested batch,
sealed, its death callback made; a batch settled COMPLETED; and a batch with more runs
than a page lists."""

from __future__ import annotations

from typing import Any

from flo_redis import ActionInvokeOptions, FloClient, WorkerAwaitOptions, WorkerFailOptions
from flo_redis.types import BatchOptions, Callback

NOW = WorkerAwaitOptions(block_ms=0)
MANY = 60  # more than a page lists (flo_redis.ops.batch_view.SHOWN)


async def _end(client: FloClient, run: str, fail: bool = False) -> None:
    """``run`` (of 'job', the only one ready) taken and completed or failed for good, its
    end carried to its batch."""
    task = (await client.worker.await_task("w", ["job"], NOW)).task
    assert task is not None and task.task_id == run
    if fail:
        await client.worker.fail("w", "job", run, "boom", WorkerFailOptions(retry=False))
    else:
        await client.worker.complete("w", "job", run, b"ok")
    await client.action.forward("job")


async def batch_world(client: FloClient) -> dict[str, Any]:
    """Actions 'job' and 'dead'. ``settled`` (sealed, with an on_success callback of
    'dead') holds one run, completed: it ended COMPLETED. ``outer`` (sealed, with an
    on_death callback of 'dead') holds ``done`` (completed), ``failed`` (failed for
    good), ``waiting`` (not taken) and ``inner``, a nested batch holding ``inner_run``
    (not taken). ``big`` holds :data:`MANY` runs (``big_runs``), none taken. ``plain``
    is a run in no batch."""
    for action in ("job", "dead"):
        await client.action.register(action)
    await client.worker.register("w", ["job", "dead"])
    settled = await client.action.open_batch(BatchOptions(on_success=Callback("dead", b"")))
    alone = (await client.action.invoke("job", b"", ActionInvokeOptions(batch=settled))).run_id
    await _end(client, alone)
    await client.action.seal_batch(settled)
    outer = await client.action.open_batch(BatchOptions(on_death=Callback("dead", b"")))
    inner = await client.action.open_batch(BatchOptions(parent=outer))
    in_outer = ActionInvokeOptions(batch=outer)
    done = (await client.action.invoke("job", b"", in_outer)).run_id
    await _end(client, done)
    failed = (await client.action.invoke("job", b"", in_outer)).run_id
    await _end(client, failed, fail=True)
    waiting = (await client.action.invoke("job", b"", in_outer)).run_id
    inner_run = (await client.action.invoke("job", b"", ActionInvokeOptions(batch=inner))).run_id
    await client.action.seal_batch(outer)
    big = await client.action.open_batch(BatchOptions())
    many = [b""] * MANY
    big_runs = await client.action.invoke_many("job", many, ActionInvokeOptions(batch=big))
    plain = (await client.action.invoke("job", b"")).run_id
    return {
        "settled": settled,
        "outer": outer,
        "inner": inner,
        "done": done,
        "failed": failed,
        "waiting": waiting,
        "inner_run": inner_run,
        "big": big,
        "big_runs": [r.run_id for r in big_runs],
        "plain": plain,
    }
