"""Run priorities: ActionInvokeOptions(priority=0..255), lower first, FIFO within one, kept
through delays, retries and re-queues, and held by three busy worker processes; bad
priorities refused before anything is written."""

from __future__ import annotations

import asyncio
import contextlib
import random

import pytest
import redis.asyncio as aioredis
from polling import eventually
from processes import script_process

from flo_redis import (
    ActionContext,
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    RunStatus,
    ValidationError,
    WorkerAwaitOptions,
    WorkerFailOptions,
)

NOW = WorkerAwaitOptions(block_ms=0)


def seq_of(run_id: str) -> int:
    """Run ids are ``<action>:<n>``, n in creation order."""
    return int(run_id.rsplit(":", 1)[1])


async def take_id(client: FloClient, action: str) -> str | None:
    await client.worker.register("w1", [action])
    task = (await client.worker.await_task("w1", [action], NOW)).task
    return task.task_id if task else None


@pytest.mark.slow
async def test_one_worker_takes_runs_strictly_by_priority_then_fifo(client: FloClient) -> None:
    await client.action.register("job")
    rng = random.Random(16)
    levels = [0, 1, 7, 128, 255]
    priority_of: dict[str, int] = {}

    async def one() -> None:
        p = rng.choice(levels)
        run = await client.action.invoke("job", b"x", ActionInvokeOptions(priority=p))
        priority_of[run.run_id] = p

    # Invokes race each other (queue order is the order Redis ran them, as are run ids),
    # with batches of invoke_many in between.
    for round_ in range(4):
        await asyncio.gather(*(one() for _ in range(60)))
        p = levels[round_ % len(levels)]
        batch = await client.action.invoke_many("job", [b"b"] * 40, ActionInvokeOptions(priority=p))
        priority_of.update((r.run_id, p) for r in batch)
    expected = sorted(priority_of, key=lambda r: (priority_of[r], seq_of(r)))

    page = await client.action.runs("job", "pending", limit=1000)
    assert [r.run_id for r in page.runs] == expected  # listed in queue order
    assert {r.run_id: r.priority for r in page.runs} == priority_of
    assert (await client.action.counts("job")).pending == len(expected)

    order: list[str] = []
    worker = client.new_action_worker(block_ms=500, concurrency=1)

    @worker.action("job")
    async def handle(ctx: ActionContext) -> None:
        order.append(ctx.task_id)

    async def handled() -> int:
        return len(order)

    task = asyncio.create_task(worker.start())
    try:
        await eventually(handled, lambda n: n == len(expected), timeout=60)
    finally:
        worker.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)
    assert order == expected


@pytest.mark.slow
async def test_priorities_hold_under_load_across_three_worker_processes(
    client: FloClient, redis_url: str, namespace: str
) -> None:
    await client.action.register("job")
    low = await client.action.invoke_many("job", [b""] * 900, ActionInvokeOptions(priority=200))
    priority_of = {r.run_id: 200 for r in low}

    async def completed() -> int:
        return (await client.action.counts("job")).completed

    with contextlib.ExitStack() as procs:
        for _ in range(3):  # each runs two 20 ms handlers at a time: a backlog of seconds
            args = (redis_url, namespace, "job", "busy", "2", "30000")
            procs.enter_context(script_process("worker_proc.py", *args))
        await eventually(completed, lambda n: n >= 20, timeout=60)
        # Urgent and middling runs arrive while the workers are busy with the backlog.
        for i in range(40):
            p = 0 if i % 4 else 100
            run = await client.action.invoke("job", b"", ActionInvokeOptions(priority=p))
            priority_of[run.run_id] = p
            await asyncio.sleep(0.02)  # arrivals spread over the busy time, as in use
        await eventually(completed, lambda n: n == len(priority_of), timeout=120)
    page = await client.action.runs("job", "completed", limit=1000)
    runs = {r.run_id: r for r in page.runs}
    assert set(runs) == set(priority_of)
    started = {r: s.started_at_ms or 0 for r, s in runs.items()}
    # Between priorities: a claim made after a run was queued (a later Redis ms) hands
    # it out before any run of a higher number, so none of those starts before it.
    overtaken = 0
    for urgent, p in priority_of.items():
        queued_at = runs[urgent].created_at_ms
        for other, q in priority_of.items():
            if q > p and started[other] > queued_at:
                assert started[other] >= started[urgent], (urgent, other)
                overtaken += 1
    assert overtaken >= 1000  # the urgent runs did arrive while the backlog waited
    # Within one priority: first queued, first started, whichever process claimed it.
    for level in (0, 100, 200):
        ids = sorted((r for r, p in priority_of.items() if p == level), key=seq_of)
        assert [started[r] for r in ids] == sorted(started[r] for r in ids), level
    assert len({s.output for s in runs.values()}) == 3  # all three processes took runs


async def test_a_retried_run_keeps_its_priority(client: FloClient) -> None:
    await client.action.register("job", options=ActionRegisterOptions(max_retries=3))
    first = (await client.action.invoke("job", b"", ActionInvokeOptions(priority=9))).run_id
    second = (await client.action.invoke("job", b"", ActionInvokeOptions(priority=9))).run_id
    later = (await client.action.invoke("job", b"", ActionInvokeOptions(priority=10))).run_id
    assert await take_id(client, "job") == first
    status = await client.worker.fail("w1", "job", first, "try again")
    assert status == RunStatus.PENDING
    # Back at priority 9, behind the run of 9 that waited, ahead of the 10.
    assert [await take_id(client, "job") for _ in range(3)] == [second, first, later]
    assert (await client.action.status(first)).priority == 9


async def test_a_requeued_failed_run_keeps_its_priority(client: FloClient) -> None:
    await client.action.register("job", options=ActionRegisterOptions(max_retries=1))
    failing = (await client.action.invoke("job", b"", ActionInvokeOptions(priority=3))).run_id
    assert await take_id(client, "job") == failing
    opts = WorkerFailOptions(retry=False)
    assert await client.worker.fail("w1", "job", failing, "no", opts) == RunStatus.FAILED
    low = (await client.action.invoke("job", b"", ActionInvokeOptions(priority=4))).run_id
    high = (await client.action.invoke("job", b"", ActionInvokeOptions(priority=2))).run_id
    await client.action.requeue_failed("job")
    assert [await take_id(client, "job") for _ in range(3)] == [high, failing, low]


async def test_a_delayed_run_keeps_its_priority(client: FloClient) -> None:
    await client.action.register("job")
    delayed = await client.action.invoke("job", b"", ActionInvokeOptions(delay_ms=150, priority=3))
    ahead = (await client.action.invoke("job", b"", ActionInvokeOptions(priority=2))).run_id
    behind = (await client.action.invoke("job", b"", ActionInvokeOptions(priority=4))).run_id
    due = (await client.action.status(delayed.run_id)).due_at_ms
    assert due is not None
    await eventually(client.server_time_ms, lambda now: now >= due)
    # Queued when it became due, after the others, yet taken between them.
    order = [await take_id(client, "job") for _ in range(3)]
    assert order == [ahead, delayed.run_id, behind]


async def test_priority_defaults_to_zero_ahead_of_any_other(client: FloClient) -> None:
    await client.action.register("job")
    later = (await client.action.invoke("job", b"", ActionInvokeOptions(priority=1))).run_id
    plain = (await client.action.invoke("job", b"")).run_id
    assert [await take_id(client, "job") for _ in range(2)] == [plain, later]
    assert (await client.action.status(plain)).priority == 0


@pytest.mark.parametrize("bad", [-1, 256, 1.5, "1", True, None])
async def test_a_bad_priority_is_refused_before_anything_is_written(
    client: FloClient, raw: aioredis.Redis, namespace: str, bad: object
) -> None:
    await client.action.register("job")
    before = sorted(await raw.keys(f"*{namespace}*"))
    opts = ActionInvokeOptions(priority=bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="priority"):
        await client.action.invoke("job", b"", opts)
    with pytest.raises(ValidationError, match="priority"):
        await client.action.invoke_many("job", [b""], opts)
    assert sorted(await raw.keys(f"*{namespace}*")) == before
    assert (await client.action.counts("job")).pending == 0
