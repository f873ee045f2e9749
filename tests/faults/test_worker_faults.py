"""Workers across faults: Redis restarted while handlers run, nothing lost or doubled."""

from __future__ import annotations

import asyncio
import collections

import pytest
from polling import eventually
from redis_server import RedisServer

from flo_redis import (
    ActionContext,
    ActionRegisterOptions,
    FloClient,
    FloError,
    RunStatus,
    is_connection_error,
)
from flo_redis.types import ActionRunStatus
from flo_redis.worker.observe import WorkerObserver


async def test_redis_restart_while_handlers_run_loses_and_doubles_nothing() -> None:
    server = RedisServer(appendonly=True, extra=("--appendfsync", "always")).start()
    try:
        async with FloClient(server.url, namespace="faults") as client:
            worker = client.new_action_worker(concurrency=20, block_ms=500)
            calls: collections.Counter[str] = collections.Counter()
            release = asyncio.Event()
            started = 0

            @worker.action("job", ActionRegisterOptions(timeout_ms=60_000))
            async def job(ctx: ActionContext) -> bytes:
                nonlocal started
                calls[ctx.task_id] += 1
                started += 1
                await release.wait()
                return ctx.payload

            await client.action.register("job", options=ActionRegisterOptions(timeout_ms=60_000))
            ids = [(await client.action.invoke("job", str(i).encode())).run_id for i in range(10)]
            task = asyncio.create_task(worker.start())
            await eventually(lambda: asyncio.sleep(0, started), lambda n: n == 10)

            server.restart()  # every connection drops; the data survives (AOF)
            release.set()  # the handlers finish while the worker reconnects

            async def status(run_id: str) -> ActionRunStatus | None:
                try:
                    return await client.action.status(run_id)
                except FloError as exc:
                    assert is_connection_error(exc), exc
                    return None  # the test's own connection dropped with the restart

            statuses = [
                await eventually(
                    lambda r=run_id: status(r),
                    lambda s: s is not None and s.status == RunStatus.COMPLETED,
                    timeout=30,
                )
                for run_id in ids
            ]
            worker.stop()
            await asyncio.wait_for(task, 30)
        assert [s.output for s in statuses if s] == [str(i).encode() for i in range(10)]
        assert all(s is not None and s.attempt == 1 for s in statuses)
        assert set(calls.values()) == {1}  # every run handled exactly once
    finally:
        server.stop()


async def test_a_complete_whose_reply_is_cut_is_resent_and_applied_once(
    redis_url: str, namespace: str
) -> None:
    from proxy import Proxy

    from flo_redis._wire.runner import SCRIPTS

    proxy = await Proxy.to(redis_url)
    try:
        async with FloClient(proxy.url, namespace=namespace) as client:
            worker = client.new_action_worker(block_ms=500)
            worker.observer = heard = Heard()
            handled: collections.Counter[str] = collections.Counter()

            @worker.action("charge")
            async def charge(ctx: ActionContext) -> bytes:
                handled[ctx.task_id] += 1
                return b"charged " + ctx.payload

            await client.action.register("charge")
            # The worker's first complete reaches Redis and runs; its answer is lost.
            proxy.drop_reply_after(SCRIPTS["run_complete_many"].sha.encode())
            run_id = (await client.action.invoke("charge", b"42")).run_id
            task = asyncio.create_task(worker.start())

            async def status() -> ActionRunStatus | None:
                try:
                    return await client.action.status(run_id)
                except FloError as exc:
                    assert is_connection_error(exc), exc
                    return None

            final = await eventually(
                status, lambda s: s is not None and s.status == RunStatus.COMPLETED
            )
            await eventually(lambda: asyncio.sleep(0, proxy.dropped_replies), lambda n: n == 1)
            worker.stop()
            await asyncio.wait_for(task, 30)
            infos = (await client.worker.list()).workers
        assert final is not None
        assert (final.output, final.attempt) == (b"charged 42", 1)
        assert handled == {run_id: 1}  # never run twice, never turned into a fail
        assert infos[0].tasks_completed == 1 and infos[0].tasks_failed == 0
        # Observed as it happened: one resend, one completion (the duplicate answer to
        # the resend is not a second one).
        assert heard == {"resent complete": 1, "completed charge": 1}
    finally:
        await proxy.stop()


class Heard(WorkerObserver, collections.Counter[str]):
    """Counts the reports a worker's observer hears."""

    def report_resent(self, report: str) -> None:
        self[f"resent {report}"] += 1

    def report_refused(self, report: str) -> None:
        self[f"refused {report}"] += 1

    def run_completed(self, action: str, outcome: str) -> None:
        self[f"completed {action}"] += 1


async def test_failed_polls_are_paced_while_redis_is_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flo_redis.worker.poller import ActionPoller

    server = RedisServer(appendonly=True, extra=("--appendfsync", "always")).start()
    polls = 0
    original = ActionPoller.poll

    async def counting(self: ActionPoller, *args: object, **kwargs: object) -> object:
        nonlocal polls
        polls += 1
        return await original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ActionPoller, "poll", counting)
    try:
        async with FloClient(server.url, namespace="pacing") as client:
            worker = client.new_action_worker(block_ms=500)

            @worker.action("job")
            async def job(ctx: ActionContext) -> bytes:
                return b""

            task = asyncio.create_task(worker.start())
            await eventually(lambda: asyncio.sleep(0, polls), lambda n: n >= 1)
            server.stop()  # every poll now fails at once
            before = polls
            await asyncio.sleep(3.0)  # the outage's length: how often polls fail in it
            failed = polls - before
            server.start()
            await client.reconnect(timeout=10)
            status = await eventually(
                lambda: client.action.invoke("job", b""), lambda r: bool(r.run_id), timeout=30
            )
            await eventually(
                lambda: client.action.status(status.run_id),
                lambda s: s.status == RunStatus.COMPLETED,
                timeout=30,
            )
            worker.stop()
            await asyncio.wait_for(task, 30)
        # 100 ms doubling to 5 s, jittered: a handful of tries in 3 s, never a hot loop.
        assert 1 <= failed <= 30, failed
    finally:
        server.stop()
