"""Batches of runs, step by step (docs/flows.md): counts, callbacks made exactly once
when their moment comes, nested batches, and a retried member turning a failed batch
into a successful one."""

from __future__ import annotations

import pytest

from flo_redis import (
    ActionInvokeOptions,
    ActionRegisterOptions,
    ConflictError,
    FloClient,
    NotFoundError,
    RunStatus,
    TaskAssignment,
    WorkerAwaitOptions,
    WorkerFailOptions,
)
from flo_redis.types import BatchOptions, Callback

NOW = WorkerAwaitOptions(block_ms=0)


async def setup(client: FloClient) -> None:
    for action in ("job", "done", "good", "dead"):
        await client.action.register(action, options=ActionRegisterOptions(max_retries=1))
    await client.worker.register("w", ["job", "done", "good", "dead"])


async def take(client: FloClient, action: str = "job") -> TaskAssignment | None:
    return (await client.worker.await_task("w", [action], NOW)).task


async def finish(client: FloClient, ok: bool = True) -> str:
    task = await take(client)
    assert task is not None
    if ok:
        await client.worker.complete("w", "job", task.task_id, b"ok")
    else:
        await client.worker.fail("w", "job", task.task_id, "no", WorkerFailOptions(retry=False))
    await client.action.forward("job")
    return task.task_id


async def callbacks_made(client: FloClient) -> dict[str, list[bytes]]:
    made: dict[str, list[bytes]] = {}
    for action in ("done", "good", "dead"):
        made[action] = []
        while (task := await take(client, action)) is not None:
            made[action].append(task.payload)
    return made


def options(**extra: object) -> BatchOptions:
    return BatchOptions(
        on_complete=Callback("done", b"complete"),
        on_success=Callback("good", b"success"),
        on_death=Callback("dead", b"death"),
        **extra,  # type: ignore[arg-type]
    )


async def test_a_batch_counts_its_runs_and_calls_back_once_when_all_completed(
    client: FloClient,
) -> None:
    await setup(client)
    batch = await client.action.open_batch(options())
    in_batch = ActionInvokeOptions(batch=batch)
    await client.action.invoke("job", b"", in_batch)
    await client.action.invoke_many("job", [b""] * 3, in_batch)
    status = await client.action.batch_status(batch)
    assert (status.total, status.completed, status.pending, status.sealed) == (4, 0, 4, False)
    for _ in range(4):
        await finish(client)
    assert (await client.action.batch_status(batch)).status is None  # not sealed yet
    assert await callbacks_made(client) == {"done": [], "good": [], "dead": []}
    await client.action.seal_batch(batch)
    await client.action.seal_batch(batch)  # twice: nothing more
    status = await client.action.batch_status(batch)
    assert (status.completed, status.status, status.callbacks) == (
        4,
        RunStatus.COMPLETED,
        ["complete", "success"],
    )
    assert await callbacks_made(client) == {"done": [b"complete"], "good": [b"success"], "dead": []}


async def test_a_death_calls_back_at_once_and_a_retried_member_makes_it_a_success(
    client: FloClient,
) -> None:
    await setup(client)
    batch = await client.action.open_batch(options())
    runs = await client.action.invoke_many("job", [b""] * 2, ActionInvokeOptions(batch=batch))
    await client.action.seal_batch(batch)
    failed = await finish(client, ok=False)
    assert await callbacks_made(client) == {"done": [], "good": [], "dead": [b"death"]}
    await finish(client)
    status = await client.action.batch_status(batch)
    assert (status.failed, status.status) == (1, RunStatus.FAILED)
    assert await callbacks_made(client) == {"done": [b"complete"], "good": [], "dead": []}
    assert failed in {r.run_id for r in runs}
    await client.action.requeue(failed)
    await finish(client)
    status = await client.action.batch_status(batch)
    assert (status.completed, status.failed, status.status) == (2, 0, RunStatus.COMPLETED)
    # success now; complete and death were made once and are not made again
    assert await callbacks_made(client) == {"done": [], "good": [b"success"], "dead": []}


async def test_a_nested_batch_is_one_member_of_its_parent(client: FloClient) -> None:
    await setup(client)
    outer = await client.action.open_batch(options())
    inner = await client.action.open_batch(BatchOptions(parent=outer))
    await client.action.invoke("job", b"", ActionInvokeOptions(batch=outer))
    await client.action.invoke_many("job", [b""] * 2, ActionInvokeOptions(batch=inner))
    await client.action.seal_batch(outer)
    assert (await client.action.batch_status(outer)).total == 2  # a run and a batch
    for _ in range(3):
        await finish(client)
    assert (await client.action.batch_status(outer)).status is None  # inner not sealed
    await client.action.seal_batch(inner)
    status = await client.action.batch_status(outer)
    assert (status.completed, status.status) == (2, RunStatus.COMPLETED)
    assert await callbacks_made(client) == {"done": [b"complete"], "good": [b"success"], "dead": []}


async def test_an_unknown_batch_is_refused(client: FloClient) -> None:
    await setup(client)
    with pytest.raises(NotFoundError):
        await client.action.seal_batch("no-such-batch")
    with pytest.raises(NotFoundError):
        await client.action.batch_status("no-such-batch")


async def test_a_run_for_a_sealed_or_unknown_batch_is_refused_before_it_is_made(
    client: FloClient,
) -> None:
    await setup(client)
    batch = await client.action.open_batch(options())
    await client.action.seal_batch(batch)
    with pytest.raises(ConflictError, match="sealed"):
        await client.action.invoke("job", b"", ActionInvokeOptions(batch=batch))
    with pytest.raises(NotFoundError):
        await client.action.invoke_many("job", [b""], ActionInvokeOptions(batch="nope"))
    assert await take(client) is None


async def test_a_batch_of_runs_waiting_as_one_group_counts_each_run(client: FloClient) -> None:
    # Runs invoked together with a parent wait as one group (lua/lib/graph.lua); as
    # members of a batch each is still counted alone: the parent's failure is a death
    # for each, and its retry brings each back to run and complete.
    await setup(client)
    await client.action.register("root")
    await client.worker.register("w", ["job", "done", "good", "dead", "root"])
    parent = (await client.action.invoke("root", b"")).run_id
    batch = await client.action.open_batch(options())
    waiting = ActionInvokeOptions(batch=batch, depends_on=[parent])
    runs = [r.run_id for r in await client.action.invoke_many("job", [b""] * 3, waiting)]
    await client.action.seal_batch(batch)

    async def forward() -> None:
        while sum([await client.action.forward(a) for a in ("root", "job")]):
            pass

    task = await take(client, "root")
    assert task is not None
    await client.worker.fail("w", "root", task.task_id, "no", WorkerFailOptions(retry=False))
    await forward()
    status = await client.action.batch_status(batch)
    assert (status.failed, status.status) == (3, RunStatus.FAILED)
    assert await callbacks_made(client) == {"done": [b"complete"], "good": [], "dead": [b"death"]}
    await client.action.requeue(parent)
    task = await take(client, "root")
    assert task is not None
    await client.worker.complete("w", "root", task.task_id, b"ok")
    await forward()
    assert {await finish(client) for _ in runs} == set(runs)  # each back, and ready once
    await forward()
    status = await client.action.batch_status(batch)
    assert (status.completed, status.failed, status.status) == (3, 0, RunStatus.COMPLETED)
    assert await callbacks_made(client) == {"done": [], "good": [b"success"], "dead": []}
