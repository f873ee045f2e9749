"""Middleware: an observer's hooks around a worker's start and stop and each run are
awaited in order (plain and async alike), see the handler's failures, and a failing
``before_run`` fails the attempt as the handler would."""

from __future__ import annotations

import asyncio
from typing import Any

from polling import eventually

from flo_redis import ActionContext, ActionRegisterOptions, FloClient, RunStatus
from flo_redis.observe import Observers, WorkerObserver


class Recorder(WorkerObserver):
    """Writes each hook it hears to a shared list; its run hooks are async."""

    def __init__(self, tag: str, seen: list[str]) -> None:
        self.tag = tag
        self.seen = seen

    def on_start(self, worker: Any) -> None:
        self.seen.append(f"{self.tag}:start")

    def on_stop(self, worker: Any) -> None:
        self.seen.append(f"{self.tag}:stop")

    async def before_run(self, ctx: ActionContext) -> None:
        await asyncio.sleep(0)
        self.seen.append(f"{self.tag}:before:{ctx.input().decode()}:{ctx.attempt}")

    async def after_run(self, ctx: ActionContext, output: bytes) -> None:
        await asyncio.sleep(0)
        self.seen.append(f"{self.tag}:after:{output.decode()}")

    async def on_failure(self, ctx: ActionContext, error: BaseException) -> None:
        self.seen.append(f"{self.tag}:failure:{type(error).__name__}:{error}")


class Gate(WorkerObserver):
    """Refuses to run inputs starting with 'deny'."""

    def before_run(self, ctx: ActionContext) -> None:
        if ctx.input().startswith(b"deny"):
            raise PermissionError("denied by the gate")


async def test_hooks_run_in_order_around_start_stop_and_each_run_and_see_failures(
    client: FloClient,
) -> None:
    seen: list[str] = []
    worker = client.new_action_worker(worker_id="hooked", concurrency=1, block_ms=200)
    worker.observer = Observers(Recorder("a", seen), Gate(), Recorder("b", seen))
    once = ActionRegisterOptions(max_retries=0)

    @worker.action("echo", once)
    async def echo(ctx: ActionContext) -> str:
        text = ctx.input().decode()
        if text == "boom":
            raise ValueError("no boom today")
        return text

    await client.action.register("echo", options=once)
    task = asyncio.create_task(worker.start())
    try:
        for text in ("hi", "boom", "deny-me"):
            run = await client.action.invoke("echo", text.encode())
            status = await client.action.wait(run.run_id, timeout_ms=30_000)
            expected = RunStatus.COMPLETED if text == "hi" else RunStatus.FAILED
            assert status.status == expected
        await eventually(lambda: asyncio.sleep(0, len(seen)), lambda n: n >= 11, timeout=30)
    finally:
        worker.stop()
        await task

    assert seen == [
        "a:start",
        "b:start",
        "a:before:hi:1",
        "b:before:hi:1",
        'a:after:"hi"',
        'b:after:"hi"',
        "a:before:boom:1",
        "b:before:boom:1",
        "a:failure:ValueError:no boom today",
        "b:failure:ValueError:no boom today",
        "a:before:deny-me:1",  # the gate refuses: b's before_run never runs
        "a:failure:PermissionError:denied by the gate",
        "b:failure:PermissionError:denied by the gate",
        "a:stop",
        "b:stop",
    ]


async def test_a_failing_after_hook_is_logged_and_the_run_still_completes(
    client: FloClient,
) -> None:
    class Broken(WorkerObserver):
        async def after_run(self, ctx: ActionContext, output: bytes) -> None:
            raise RuntimeError("sink down")

    worker = client.new_action_worker(worker_id="broken-hook", block_ms=200)
    worker.observer = Broken()
    worker.register_action("ok", lambda ctx: "fine")
    await client.action.register("ok")
    task = asyncio.create_task(worker.start())
    try:
        run = await client.action.invoke("ok", b"")
        status = await client.action.wait(run.run_id, timeout_ms=30_000)
        assert status.status == RunStatus.COMPLETED and status.output == b'"fine"'
    finally:
        worker.stop()
        await task
