"""Middleware: an observer's hooks around a worker's start and stop and each run (or
stream record) are awaited in order (plain and async alike), see the handler's failures,
and a failing ``before_run`` fails the attempt (nacks the record) as the handler would."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from polling import eventually

from flo_redis import (
    ActionContext,
    ActionRegisterOptions,
    FloClient,
    RunStatus,
    StreamContext,
    StreamGroupJoinOptions,
)
from flo_redis.worker.observe import Observers, WorkerObserver


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


async def test_a_run_cancelled_while_it_runs_gets_neither_after_run_nor_on_failure(
    client: FloClient,
) -> None:
    seen: list[str] = []
    started = asyncio.Event()
    worker = client.new_action_worker(worker_id="hooked-cancel", concurrency=1, block_ms=200)
    worker.observer = Recorder("a", seen)

    @worker.action("slow")
    async def slow(ctx: ActionContext) -> str:
        started.set()
        await asyncio.sleep(60)
        return "never"

    await client.action.register("slow")
    task = asyncio.create_task(worker.start())
    try:
        run = await client.action.invoke("slow", b"x")
        await asyncio.wait_for(started.wait(), 30)
        await client.action.cancel(run.run_id)
        status = await client.action.wait(run.run_id, timeout_ms=30_000)
        assert status.status == RunStatus.CANCELLED
        # The handler is cancelled (the cancel's notice tells the worker) and its one slot
        # comes free for the next run, which is cancelled too.
        nxt = await client.action.invoke("slow", b"y")
        await eventually(lambda: asyncio.sleep(0, len(seen)), lambda n: n >= 3, timeout=30)
        await client.action.cancel(nxt.run_id)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)

    assert seen == ["a:start", "a:before:x:1", "a:before:y:1", "a:stop"]


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


class RecordRecorder(WorkerObserver):
    """Writes each hook it hears about stream records to a shared list."""

    def __init__(self, tag: str, seen: list[str]) -> None:
        self.tag = tag
        self.seen = seen

    async def on_start(self, worker: Any) -> None:
        await asyncio.sleep(0)
        self.seen.append(f"{self.tag}:start:{worker.config.group}")

    def on_stop(self, worker: Any) -> None:
        self.seen.append(f"{self.tag}:stop")

    async def before_run(self, ctx: StreamContext) -> None:
        await asyncio.sleep(0)
        self.seen.append(f"{self.tag}:before:{ctx.payload.decode()}:{ctx.delivery_count}")

    def after_run(self, ctx: StreamContext, output: bytes) -> None:
        self.seen.append(f"{self.tag}:after:{ctx.payload.decode()}:{output!r}")

    async def on_failure(self, ctx: StreamContext, error: BaseException) -> None:
        self.seen.append(f"{self.tag}:failure:{type(error).__name__}:{error}")


class RecordGate(WorkerObserver):
    """Refuses to handle records starting with 'deny'."""

    def before_run(self, ctx: StreamContext) -> None:
        if ctx.payload.startswith(b"deny"):
            raise PermissionError("denied by the gate")


async def test_stream_worker_hooks_run_in_order_per_record_and_see_failures(
    client: FloClient,
) -> None:
    seen: list[str] = []
    handled: list[bytes] = []

    async def handle(ctx: StreamContext) -> None:
        handled.append(ctx.payload)
        if ctx.payload == b"boom":
            raise ValueError("no boom today")

    # One delivery per record: a nacked record goes to the dead letters at once.
    await client.stream.group_join("feed", "hooks", "setup", StreamGroupJoinOptions(max_deliver=1))
    for text in ("hi", "boom", "deny-me"):
        await client.stream.append("feed", text.encode())
    worker = client.new_stream_worker(
        stream="feed", group="hooks", handler=handle, concurrency=1, batch_size=1, block_ms=200
    )
    worker.observer = Observers(RecordRecorder("a", seen), RecordGate(), RecordRecorder("b", seen))
    task = asyncio.create_task(worker.start())
    try:
        letters = await eventually(
            lambda: client.stream.dead_letters("feed", "hooks"), lambda d: len(d) == 2, timeout=30
        )
        await eventually(lambda: client.stream.group_pending("feed", "hooks"), lambda p: p == [])
    finally:
        worker.stop()
        await task

    assert sorted(d.payload for d in letters) == [b"boom", b"deny-me"]
    assert handled == [b"hi", b"boom"]  # the gate kept the handler from "deny-me"
    assert seen == [
        "a:start:hooks",
        "b:start:hooks",
        "a:before:hi:1",
        "b:before:hi:1",
        "a:after:hi:b''",
        "b:after:hi:b''",
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


@pytest.mark.slow
async def test_a_stream_handler_timeout_reaches_on_failure_as_a_timeout_error(
    client: FloClient,
) -> None:
    failures: list[BaseException] = []

    class Failures(WorkerObserver):
        def on_failure(self, ctx: StreamContext, error: BaseException) -> None:
            failures.append(error)

    async def handle(ctx: StreamContext) -> None:
        if ctx.delivery_count == 1:
            await asyncio.sleep(10)

    await client.stream.append("slow-feed", b"x")
    worker = client.new_stream_worker(
        stream="slow-feed", group="g", handler=handle, message_timeout=0.2, block_ms=200
    )
    worker.observer = Failures()
    task = asyncio.create_task(worker.start())
    try:
        await eventually(lambda: client.stream.group_pending("slow-feed", "g"), lambda p: p == [])
        await eventually(lambda: asyncio.sleep(0, failures), bool)
    finally:
        worker.stop()
        await task
    assert len(failures) == 1 and isinstance(failures[0], TimeoutError)


async def test_a_stream_observer_with_one_record_hook_hears_it_for_each_record(
    client: FloClient,
) -> None:
    """A worker calls only the record hooks and counts its observer has; those it has are
    called for each record."""
    seen: list[str] = []

    class AfterOnly(WorkerObserver):
        def after_run(self, ctx: StreamContext, output: bytes) -> None:
            seen.append(f"after:{ctx.payload.decode()}")

    class BeforeOnly(WorkerObserver):
        def before_run(self, ctx: StreamContext) -> None:
            seen.append(f"before:{ctx.payload.decode()}")

    class HandledOnly(WorkerObserver):
        def record_handled(self, stream: str, group: str, acked: bool, duration_s: float) -> None:
            seen.append(f"handled:{stream}:{acked}:{duration_s >= 0}")

    async def handle(ctx: StreamContext) -> None:
        pass

    observers = (("a", AfterOnly()), ("b", BeforeOnly()), ("c", HandledOnly()))
    for round_, observer in observers:
        stream = f"one-hook-{round_}"
        for text in ("x", "y"):
            await client.stream.append(stream, f"{round_}{text}".encode())
        worker = client.new_stream_worker(
            stream=stream, group="g", handler=handle, concurrency=1, batch_size=1, block_ms=200
        )
        worker.observer = observer
        want = len(seen) + 2
        task = asyncio.create_task(worker.start())
        try:
            await eventually(lambda: asyncio.sleep(0, len(seen)), lambda n, want=want: n == want)
        finally:
            worker.stop()
            await task
    assert seen == [
        "after:ax",
        "after:ay",
        "before:bx",
        "before:by",
        "handled:one-hook-c:True:True",
        "handled:one-hook-c:True:True",
    ]
