"""Cancelling runs: waiting, delayed and running runs end CANCELLED, a running holder's
late reports are refused and its handler is cancelled, finished runs refuse a cancel."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
import redis.asyncio as aioredis
from polling import eventually
from processes import cancel_worker

from flo_redis import (
    ActionContext,
    ActionInvokeOptions,
    ActionRegisterOptions,
    ConflictError,
    FloClient,
    NotFoundError,
    RunStatus,
    WorkerAwaitOptions,
    WorkerCompleteOptions,
    WorkerFailOptions,
    WorkerTouchOptions,
)
from flo_redis.types import Reason

pytestmark = pytest.mark.slow  # worker processes

NOW = WorkerAwaitOptions(block_ms=0)


async def setup(client: FloClient, **options: int) -> None:
    await client.action.register("job", options=ActionRegisterOptions(**options))
    await client.worker.register("w1", ["job"])


async def test_a_waiting_run_ends_cancelled_at_once_and_wait_returns(client: FloClient) -> None:
    await setup(client)
    run_id = (await client.action.invoke("job", b"in")).run_id
    waiter = asyncio.create_task(client.action.wait(run_id, timeout_ms=20_000))
    await client.action.cancel(run_id)
    status = await waiter
    assert (status.status, status.attempt) == (RunStatus.CANCELLED, 0)
    assert (await client.worker.await_task("w1", ["job"], NOW)).task is None
    counts = await client.action.counts("job")
    assert (counts.pending, counts.running, counts.failed) == (0, 0, 1)


async def test_a_delayed_run_ends_cancelled_and_is_never_offered(client: FloClient) -> None:
    await setup(client)
    options = ActionInvokeOptions(delay_ms=300)
    run_id = (await client.action.invoke("job", b"in", options)).run_id
    assert (await client.action.counts("job")).delayed == 1
    await client.action.cancel(run_id)
    assert (await client.action.status(run_id)).status == RunStatus.CANCELLED
    counts = await client.action.counts("job")
    assert (counts.delayed, counts.pending, counts.failed) == (0, 0, 1)
    later = WorkerAwaitOptions(block_ms=600)
    assert (await client.worker.await_task("w1", ["job"], later)).task is None


async def test_a_running_run_is_cancelled_and_its_holders_reports_are_refused(
    client: FloClient,
) -> None:
    await setup(client, max_retries=3)
    run_id = (await client.action.invoke("job", b"in")).run_id
    task = (await client.worker.await_task("w1", ["job"], NOW)).task
    assert task is not None
    await client.action.cancel(run_id)
    token = task.token
    reports = [
        client.worker.touch("w1", "job", run_id, WorkerTouchOptions(token=token)),
        client.worker.complete("w1", "job", run_id, b"late", WorkerCompleteOptions(token=token)),
        client.worker.fail("w1", "job", run_id, "late", WorkerFailOptions(token=token)),
        client.worker.complete("w1", "job", run_id, b"late"),  # token-less: by worker id
    ]
    for report in reports:
        with pytest.raises(ConflictError) as refused:
            await report
        assert refused.value.reason == Reason.STALE_REPORT
    status = await client.action.status(run_id)
    # The attempt it was on stays counted; a re-queue gives a fresh set of attempts.
    assert (status.status, status.attempt, status.output) == (RunStatus.CANCELLED, 1, None)
    counts = await client.action.counts("job")
    assert (counts.running, counts.failed, counts.timed_out) == (0, 1, 0)
    assert sum(counts.failed_per_minute) == 0  # a cancel is no failure
    await client.action.requeue(run_id)
    again = (await client.worker.await_task("w1", ["job"], NOW)).task
    assert again is not None and (again.task_id, again.attempt) == (run_id, 1)


async def test_a_finished_run_refuses_a_cancel_and_an_unknown_one_is_not_found(
    client: FloClient,
) -> None:
    await setup(client)
    run_id = (await client.action.invoke("job", b"in")).run_id
    assert (await client.worker.await_task("w1", ["job"], NOW)).task is not None
    await client.worker.complete("w1", "job", run_id, b"out")
    with pytest.raises(ConflictError, match="already ended COMPLETED") as refused:
        await client.action.cancel(run_id)
    assert refused.value.reason == Reason.CONDITION_FAILED
    assert (await client.action.status(run_id)).status == RunStatus.COMPLETED
    with pytest.raises(ConflictError, match="already ended CANCELLED"):
        other = (await client.action.invoke("job", b"in")).run_id
        await client.action.cancel(other)
        await client.action.cancel(other)
    with pytest.raises(NotFoundError):
        await client.action.cancel("job:999999")


async def test_a_worker_process_cancels_the_handler_of_a_cancelled_run(
    client: FloClient, redis_url: str, namespace: str, raw: aioredis.Redis
) -> None:
    await client.action.register("job", options=ActionRegisterOptions(timeout_ms=600))
    run_id = (await client.action.invoke("job", b"hold")).run_id
    with cancel_worker(redis_url, namespace, 600):

        async def running() -> RunStatus:
            return (await client.action.status(run_id)).status

        await eventually(running, lambda s: s == RunStatus.RUNNING, timeout=30)
        waiter = asyncio.create_task(client.action.wait(run_id, timeout_ms=30_000))
        await client.action.cancel(run_id)
        assert (await waiter).status == RunStatus.CANCELLED
        # The worker's next touch is refused: it cancels the handler as for a lost lease.
        saw = await eventually(lambda: raw.get(f"{namespace}:saw:{run_id}"), timeout=30)
        assert saw == b"cancelled=True"
        # It stays CANCELLED (nothing the worker reports lands) and the worker goes on.
        after = (await client.action.invoke("job", b"finish")).run_id
        done = await client.action.wait(after, timeout_ms=30_000)
        assert done.status == RunStatus.COMPLETED
        status = await client.action.status(run_id)
        assert (status.status, status.error_message) == (RunStatus.CANCELLED, "cancelled")


# Auto-touch extends a lease every timeout_ms / 3: with 60 s the first touch comes 20 s
# after the claim, so a handler cancelled well before that was told, not found out.
LONG_LEASE_MS = 60_000
FIRST_TOUCH_S = LONG_LEASE_MS / 3000


@pytest.mark.parametrize("mode", ["touch", "inline", "sync"])
async def test_a_running_handler_is_told_of_its_cancel_before_its_next_touch(
    client: FloClient, redis_url: str, namespace: str, raw: aioredis.Redis, mode: str
) -> None:
    await client.action.register("job", options=ActionRegisterOptions(timeout_ms=LONG_LEASE_MS))
    run_id = (await client.action.invoke("job", b"hold")).run_id
    with cancel_worker(redis_url, namespace, LONG_LEASE_MS, mode):

        async def running() -> RunStatus:
            return (await client.action.status(run_id)).status

        await eventually(running, lambda s: s == RunStatus.RUNNING, timeout=30)
        began = time.time()
        await client.action.cancel(run_id)
        # The handler (an async one cancelled, a sync one seeing ctx.cancelled) ends long
        # before the worker's first touch could have told it.
        saw = await eventually(
            lambda: raw.get(f"{namespace}:saw:{run_id}"), timeout=FIRST_TOUCH_S / 2
        )
        assert saw == b"cancelled=True"
        at = float(await raw.get(f"{namespace}:saw-at:{run_id}") or 0)
        print(f"cancel -> handler cancelled ({mode}): {(at - began) * 1000:.1f} ms")
        # Whatever the handler does after its cancel, the run stays CANCELLED, and the
        # worker goes on.
        after = (await client.action.invoke("job", b"finish")).run_id
        done = await client.action.wait(after, timeout_ms=30_000)
        assert done.status == RunStatus.COMPLETED
        status = await client.action.status(run_id)
        assert (status.status, status.error_message) == (RunStatus.CANCELLED, "cancelled")


async def test_each_cancel_reaches_its_own_holder_among_three_worker_processes(
    client: FloClient, redis_url: str, namespace: str, raw: aioredis.Redis
) -> None:
    await client.action.register("job", options=ActionRegisterOptions(timeout_ms=LONG_LEASE_MS))
    run_ids = [(await client.action.invoke("job", b"hold")).run_id for _ in range(9)]
    # Each process runs four handlers at most, so all nine running means all three hold.
    with contextlib.ExitStack() as procs:
        for _ in range(3):
            procs.enter_context(cancel_worker(redis_url, namespace, LONG_LEASE_MS))

        async def statuses() -> list[RunStatus]:
            return [(await client.action.status(r)).status for r in run_ids]

        await eventually(statuses, lambda s: set(s) == {RunStatus.RUNNING}, timeout=30)
        holders = {(await client.action.status(r)).worker_id for r in run_ids}

        async def saw(ids: list[str]) -> list[bytes | None]:
            return [await raw.get(f"{namespace}:saw:{r}") for r in ids]

        first, rest = run_ids[::2], run_ids[1::2]
        for run_id in first:
            await client.action.cancel(run_id)
        heard = await eventually(lambda: saw(first), all, timeout=FIRST_TOUCH_S / 2)
        assert heard == [b"cancelled=True"] * len(first)
        # Nobody else's handler was touched by those notices.
        assert await saw(rest) == [None] * len(rest)
        assert {(await client.action.status(r)).status for r in rest} == {RunStatus.RUNNING}
        for run_id in rest:
            await client.action.cancel(run_id)
        heard = await eventually(lambda: saw(rest), all, timeout=FIRST_TOUCH_S / 2)
        assert heard == [b"cancelled=True"] * len(rest)
    assert len(holders) == 3  # nine runs, four per process: every process held some


async def test_a_run_cancelled_while_its_worker_stops_is_told_too(client: FloClient) -> None:
    # A ten-minute lease and no touches: only the notice can end this handler.
    options = ActionRegisterOptions(timeout_ms=600_000)
    worker = client.new_action_worker(block_ms=500)
    started = asyncio.Event()
    saw: list[bool] = []

    @worker.action("job", options)
    async def hold(ctx: ActionContext) -> bytes:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            saw.append(ctx.cancelled)
        return b""

    await client.action.register("job", options=options)
    task = asyncio.create_task(worker.start())
    run_id = (await client.action.invoke("job", b"")).run_id
    await asyncio.wait_for(started.wait(), 30)
    worker.stop()  # start() now waits for the running handler to end
    await client.action.cancel(run_id)
    await asyncio.wait_for(task, 30)
    assert saw == [True]
    assert (await client.action.status(run_id)).status == RunStatus.CANCELLED
