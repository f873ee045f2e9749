"""flo_redis.sync: the blocking client invokes, reads and waits with the same scripts."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis
from polling import watched

from flo_redis import (
    ActionContext,
    ActionInvokeOptions,
    ActionRegisterOptions,
    ActionRunStatus,
    ConflictError,
    FloClient,
    NotFoundError,
    RunStatus,
    ValidationError,
    WaitTimeoutError,
    WorkerFailOptions,
)
from flo_redis._wire.keys import action_keys
from flo_redis.sync import SyncFloClient


@pytest.fixture
def flo(redis_url: str, namespace: str) -> Iterator[SyncFloClient]:
    with SyncFloClient(redis_url, namespace=namespace) as flo:
        yield flo


async def test_invoke_and_wait_from_blocking_code(client: FloClient, flo: SyncFloClient) -> None:
    worker = client.new_action_worker(block_ms=500)

    @worker.action("resize")
    async def resize(ctx: ActionContext) -> dict[str, object]:
        return {"image": ctx.json()["image"], "done": True}

    task = asyncio.create_task(worker.start())
    try:
        await client.action.register("resize")

        def view() -> tuple[str, RunStatus, bytes | None]:
            # What a Django or Flask view does, in its own thread.
            run = flo.action.invoke("resize", b'{"image": "a.jpg"}')
            status = flo.action.wait(run.run_id, timeout_ms=30_000)
            return run.run_id, status.status, status.output

        run_id, state, output = await asyncio.to_thread(view)
        assert (state, output) == (RunStatus.COMPLETED, b'{"image": "a.jpg", "done": true}')
        # The blocking client reads exactly what the asyncio one reads.
        assert await asyncio.to_thread(flo.action.status, run_id) == await client.action.status(
            run_id
        )
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)


async def test_a_blocking_status_shows_when_a_delayed_run_falls_due(
    client: FloClient, flo: SyncFloClient
) -> None:
    await client.action.register("remind")
    run = await asyncio.to_thread(
        flo.action.invoke, "remind", b"{}", ActionInvokeOptions(delay_ms=60_000)
    )
    status = await asyncio.to_thread(flo.action.status, run.run_id)
    assert status.status == RunStatus.PENDING
    assert status.due_at_ms is not None and status.due_at_ms >= status.created_at_ms + 59_000
    # Exactly what the asyncio client reads.
    assert status == await client.action.status(run.run_id)


async def test_a_blocking_wait_is_woken_by_the_end(
    client: FloClient, flo: SyncFloClient, raw: aioredis.Redis
) -> None:
    await client.action.register("job")
    run_id = (await client.action.invoke("job", b"")).run_id
    waiting = threading.Event()

    def wait() -> RunStatus:
        waiting.set()
        return flo.action.wait(run_id, timeout_ms=60_000).status

    waiter = asyncio.ensure_future(asyncio.to_thread(wait))
    await asyncio.to_thread(waiting.wait, 10)
    await watched(raw, action_keys(client.namespace, "job").ended)
    await client.worker.register("w1", ["job"])
    [run] = await client.worker.await_tasks("w1", ["job"], 1)
    await client.worker.fail("w1", "job", run.run_id, "no", WorkerFailOptions(retry=False))
    assert await asyncio.wait_for(waiter, 30) == RunStatus.FAILED


def test_a_blocking_wait_times_out_with_a_typed_error(redis_url: str, namespace: str) -> None:
    with SyncFloClient(redis_url, namespace=namespace) as flo:
        asyncio.run(_register(redis_url, namespace, "job"))
        run_id = flo.action.invoke("job", b"", ActionInvokeOptions(delay_ms=60_000)).run_id
        with pytest.raises(WaitTimeoutError) as info:
            flo.action.wait(run_id, timeout_ms=200)
        assert info.value.status.status == RunStatus.PENDING


def test_the_blocking_client_refuses_like_the_asyncio_one(redis_url: str, namespace: str) -> None:
    with SyncFloClient(redis_url, namespace=namespace) as flo:
        with pytest.raises(NotFoundError, match="action 'nope' is not registered"):
            flo.action.invoke("nope", b"")
        with pytest.raises(NotFoundError):
            flo.action.status("nope:1")
        with pytest.raises(ValidationError, match="input_data must be bytes"):
            flo.action.invoke("nope", "text")  # type: ignore[arg-type]


async def test_a_blocking_cancel_ends_waiting_and_running_runs(
    client: FloClient, flo: SyncFloClient
) -> None:
    # A ten-minute lease and no touches: only the cancel's notice tells the handler.
    await client.action.register("job", options=ActionRegisterOptions(timeout_ms=600_000))
    worker = client.new_action_worker(block_ms=500)
    started, seen = asyncio.Event(), asyncio.Event()
    saw: list[bool] = []

    @worker.action("job", ActionRegisterOptions(timeout_ms=600_000))
    async def hold(ctx: ActionContext) -> bytes:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            saw.append(ctx.cancelled)
            seen.set()
        return b""

    delayed = flo.action.invoke("job", b"", ActionInvokeOptions(delay_ms=60_000)).run_id
    await asyncio.to_thread(flo.action.cancel, delayed)
    assert (await client.action.status(delayed)).status == RunStatus.CANCELLED
    task = asyncio.create_task(worker.start())
    try:
        running = flo.action.invoke("job", b"").run_id
        await asyncio.wait_for(started.wait(), 30)
        await asyncio.to_thread(flo.action.cancel, running)
        await asyncio.wait_for(seen.wait(), 30)
        assert saw == [True]
        status = await asyncio.to_thread(flo.action.wait, running, 10_000)
        assert (status.status, status.error_message) == (RunStatus.CANCELLED, "cancelled")
        with pytest.raises(ConflictError, match="already ended CANCELLED"):
            flo.action.cancel(running)
        with pytest.raises(NotFoundError):
            flo.action.cancel("job:999999")
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)


async def test_a_blocking_wait_hears_progress(client: FloClient, flo: SyncFloClient) -> None:
    worker = client.new_action_worker(block_ms=500)
    go_on = asyncio.Event()
    loop = asyncio.get_running_loop()

    @worker.action("import")
    async def import_rows(ctx: ActionContext) -> str:
        await ctx.progress({"rows": 500})
        await go_on.wait()
        await ctx.progress({"rows": 1000})
        return "imported"

    heard: list[bytes | None] = []

    def on_progress(status: ActionRunStatus) -> None:  # in the waiting thread
        heard.append(status.progress)
        if status.progress is not None:
            loop.call_soon_threadsafe(go_on.set)

    task = asyncio.create_task(worker.start())
    try:
        await client.action.register("import")
        run_id = flo.action.invoke("import", b"").run_id
        status = await asyncio.to_thread(
            lambda: flo.action.wait(run_id, timeout_ms=30_000, on_progress=on_progress)
        )
        assert (status.status, status.progress) == (RunStatus.COMPLETED, b'{"rows": 1000}')
        assert b'{"rows": 500}' in heard and heard[-1] == b'{"rows": 1000}'
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)


async def _register(url: str, namespace: str, name: str) -> None:
    async with FloClient(url, namespace=namespace) as client:
        await client.action.register(name)


async def test_the_blocking_client_on_a_cluster(cluster_url: str) -> None:
    namespace = f"c-{uuid.uuid4().hex[:10]}"
    names = [f"job-{i}" for i in range(4)]  # queues spread over the nodes
    async with FloClient(cluster_url, namespace=namespace) as client:
        for name in names:
            await client.action.register(name)
        with SyncFloClient(cluster_url, namespace=namespace) as flo:
            runs = [await asyncio.to_thread(flo.action.invoke, n, b"x") for n in names]
            waiters = [
                asyncio.ensure_future(asyncio.to_thread(flo.action.wait, r.run_id, 60_000))
                for r in runs
            ]
            await asyncio.sleep(0.5)
            await client.worker.register("w1", names)
            for run in await client.worker.await_tasks("w1", names, len(names)):
                await client.worker.complete("w1", run.action, run.run_id, run.action.encode())
            done = await asyncio.wait_for(asyncio.gather(*waiters), 30)
    assert [(s.status, s.output) for s in done] == [
        (RunStatus.COMPLETED, n.encode()) for n in names
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (ActionInvokeOptions(idempotency_key=5), "idempotency_key must be a str, got int"),  # type: ignore[arg-type]
        (ActionInvokeOptions(idempotency_key="k" * 256), "idempotency_key is longer than 255"),
        (ActionInvokeOptions(labels={"zone": b"eu"}), "label 'zone' is a bytes"),
    ],
)
async def test_the_blocking_client_refuses_what_the_asyncio_one_refuses(
    client: FloClient, flo: SyncFloClient, options: ActionInvokeOptions, message: str
) -> None:
    await client.action.register("job")
    with pytest.raises(ValidationError, match=message):
        flo.action.invoke("job", b"{}", options)
    with pytest.raises(ValidationError, match=message):
        await client.action.invoke("job", b"{}", options)
    assert (await client.action.counts("job")).pending == 0  # nothing written
    with pytest.raises(ValidationError, match="on_progress must be a function"):
        flo.action.wait("job:1", 1000, on_progress=5)  # type: ignore[arg-type]
