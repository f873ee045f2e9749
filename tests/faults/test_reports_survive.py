"""A finished run's report outlives an outage; one bad result never strands its neighbours.

A complete/fail is fenced by its token, so the worker resends it until Redis answers,
refuses it, or its lease has surely ended: a 1.5 s blackout or a Redis restart costs no
run a second execution. A result the store will never accept fails that run at once.
"""

from __future__ import annotations

import asyncio
import collections

import pytest
from polling import eventually
from proxy import Proxy
from redis_server import RedisServer

from flo_redis import (
    ActionContext,
    ActionRegisterOptions,
    FloClient,
    FloError,
    NonRetryableError,
    RunStatus,
    is_connection_error,
)
from flo_redis._wire.runner import SCRIPTS
from flo_redis.types import ActionRunStatus

LONG_LEASE = ActionRegisterOptions(timeout_ms=300_000)
_ENDED = (RunStatus.COMPLETED, RunStatus.FAILED)


async def _statuses(client: FloClient, ids: list[str]) -> list[ActionRunStatus] | None:
    try:
        return [await client.action.status(run_id) for run_id in ids]
    except FloError as exc:
        assert is_connection_error(exc), exc
        return None  # this client's own connection dropped (a restart)


def _all(status: RunStatus) -> collections.abc.Callable[[list[ActionRunStatus] | None], bool]:
    return lambda runs: runs is not None and all(r.status == status for r in runs)


async def test_reports_outlive_a_blackout_longer_than_a_few_resends(
    client: FloClient, proxy: Proxy, namespace: str
) -> None:
    async with FloClient(proxy.url, namespace=namespace) as via_proxy:
        worker = via_proxy.new_action_worker(concurrency=40, block_ms=500)
        handled: collections.Counter[str] = collections.Counter()
        release = asyncio.Event()

        @worker.action("job", LONG_LEASE)
        async def job(ctx: ActionContext) -> bytes:
            handled[ctx.task_id] += 1
            await release.wait()
            if int(ctx.payload) % 2:
                raise NonRetryableError("odd")
            return ctx.payload

        await client.action.register("job", options=LONG_LEASE)
        ids = [(await client.action.invoke("job", str(i).encode())).run_id for i in range(40)]
        task = asyncio.create_task(worker.start())
        await eventually(lambda: asyncio.sleep(0, len(handled)), lambda n: n == 40)

        proxy.blackout()  # Redis unreachable: every send fails at once
        release.set()  # the handlers finish and report into the outage
        await asyncio.sleep(1.5)  # the outage's length
        proxy.restore()

        # Completes land, and so do fails.
        runs = await eventually(
            lambda: _statuses(client, ids[0::2]), _all(RunStatus.COMPLETED), timeout=30
        )
        failed = await eventually(
            lambda: _statuses(client, ids[1::2]),
            _all(RunStatus.FAILED),
            timeout=30,
        )
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert [r.output for r in runs] == [str(i).encode() for i in range(0, 40, 2)]
    assert all(r.attempt == 1 for r in runs)  # never handed out again
    assert failed is not None and all(
        r.attempt == 1 and "odd" in (r.error_message or "") for r in failed
    )
    assert set(handled[i] for i in ids[0::2]) == {1}


async def test_reports_outlive_a_redis_restart_that_takes_seconds() -> None:
    server = RedisServer(appendonly=True, extra=("--appendfsync", "always")).start()
    try:
        async with FloClient(server.url, namespace="restart") as client:
            worker = client.new_action_worker(concurrency=30, block_ms=500)
            handled: collections.Counter[str] = collections.Counter()
            release = asyncio.Event()

            @worker.action("job", LONG_LEASE)
            async def job(ctx: ActionContext) -> bytes:
                handled[ctx.task_id] += 1
                await release.wait()
                return ctx.payload

            await client.action.register("job", options=LONG_LEASE)
            ids = [(await client.action.invoke("job", b"%d" % i)).run_id for i in range(30)]
            task = asyncio.create_task(worker.start())
            await eventually(lambda: asyncio.sleep(0, len(handled)), lambda n: n == 30)

            server.stop()
            release.set()
            await asyncio.sleep(1.5)  # the outage's length
            server.start()

            runs = await eventually(
                lambda: _statuses(client, ids), _all(RunStatus.COMPLETED), timeout=30
            )
            worker.stop()
            await asyncio.wait_for(task, 30)
        assert runs is not None and all(r.attempt == 1 for r in runs)
        assert set(handled.values()) == {1}
    finally:
        server.discard()


async def test_a_stopping_worker_gives_reports_up_after_a_bounded_time(
    client: FloClient, proxy: Proxy, namespace: str
) -> None:
    async with FloClient(proxy.url, namespace=namespace) as via_proxy:
        worker = via_proxy.new_action_worker(block_ms=500)
        release = asyncio.Event()
        started = asyncio.Event()

        @worker.action("job", LONG_LEASE)
        async def job(ctx: ActionContext) -> bytes:
            started.set()
            await release.wait()
            return b"done"

        await client.action.register("job", options=LONG_LEASE)
        run_id = (await client.action.invoke("job", b"")).run_id
        task = asyncio.create_task(worker.start())
        await asyncio.wait_for(started.wait(), 15)
        proxy.blackout()  # and it never ends
        worker.stop()
        release.set()
        await asyncio.wait_for(task, 30)  # stop does not hang on a Redis that is gone
    # The stopped process's liveness channel emptied: its run comes back to the queue.
    status = await client.action.status(run_id)
    assert status.status in (RunStatus.RUNNING, RunStatus.PENDING)


async def test_an_oversized_result_fails_its_run_at_once_and_no_neighbour(
    client: FloClient, namespace: str, redis_url: str
) -> None:
    async with FloClient(redis_url, namespace=namespace, max_payload_bytes=1000) as small:
        worker = small.new_action_worker(concurrency=30, block_ms=500)
        release = asyncio.Event()
        arrived = 0

        @worker.action("job", LONG_LEASE)
        async def job(ctx: ActionContext) -> bytes:
            nonlocal arrived
            arrived += 1
            await release.wait()  # all finish together: their completes share a batch
            return b"x" * int(ctx.payload)

        tiny = ActionRegisterOptions(timeout_ms=300_000, max_payload_bytes=100)

        @worker.action("tiny", tiny)
        async def tiny_job(ctx: ActionContext) -> bytes:
            nonlocal arrived
            arrived += 1
            await release.wait()
            return b"y" * int(ctx.payload)

        await client.action.register("job", options=LONG_LEASE)
        await client.action.register("tiny", options=tiny)
        sizes = [10] * 10 + [5000] + [10] * 9  # one over the client's limit
        ids = [(await client.action.invoke("job", b"%d" % n)).run_id for n in sizes]
        tiny_ids = [(await client.action.invoke("tiny", b"%d" % n)).run_id for n in (10, 500)]
        task = asyncio.create_task(worker.start())
        await eventually(lambda: asyncio.sleep(0, arrived), lambda n: n == 22)
        release.set()
        done = await eventually(
            lambda: _statuses(client, ids + tiny_ids),
            lambda rs: rs is not None and all(r.status in _ENDED for r in rs),
        )
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert done is not None
    by_id = {r.run_id: r for r in done}
    too_big = {ids[10], tiny_ids[1]}
    for run_id, run in by_id.items():
        if run_id in too_big:
            assert run.status == RunStatus.FAILED and run.attempt == 1
            assert run.error_message is not None and "bytes" in run.error_message
        else:
            assert run.status == RunStatus.COMPLETED
    assert "5000 bytes" in (by_id[ids[10]].error_message or "")
    assert "at most 100" in (by_id[tiny_ids[1]].error_message or "")


@pytest.mark.parametrize(
    ("outcome", "script"), [("complete", "run_complete_many"), ("fail", "run_fail")]
)
async def test_a_report_redis_refuses_unrun_while_loading_is_sent_again(
    client: FloClient, proxy: Proxy, namespace: str, outcome: str, script: str
) -> None:
    # A restarted Redis loading its data answers -LOADING (and runs nothing) for as long
    # as the load takes: longer than a call's own few retries. The report is sent again
    # until it lands, not dropped with the run left RUNNING for its whole lease.
    handled: list[int] = []
    async with FloClient(proxy.url, namespace=namespace) as via_proxy:
        worker = via_proxy.new_action_worker(concurrency=2, block_ms=500)

        @worker.action("job", LONG_LEASE)
        async def job(ctx: ActionContext) -> bytes:
            handled.append(ctx.attempt)
            if outcome == "fail":
                raise NonRetryableError("boom")
            return b"done"

        await client.action.register("job", options=LONG_LEASE)
        proxy.answer_loading(SCRIPTS[script].sha.encode(), times=10)  # about a second
        run_id = (await client.action.invoke("job", b"x")).run_id
        task = asyncio.create_task(worker.start())
        try:
            ended = await eventually(
                lambda: client.action.status(run_id), lambda s: s.status in _ENDED, timeout=20
            )
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)
    expected = RunStatus.COMPLETED if outcome == "complete" else RunStatus.FAILED
    assert (ended.status, ended.attempt, handled) == (expected, 1, [1])
    assert proxy.loading_answers == 10  # every refusal was answered by a send again
