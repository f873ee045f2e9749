"""What handlers' results and failures become: encoded results, kept errors, sync handlers."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest
from polling import eventually, finished, registered, running

from flo_redis import (
    ActionContext,
    ActionRegisterOptions,
    ActionWorker,
    FloClient,
    RunStatus,
    StreamContext,
    StreamGroupJoinOptions,
    ValidationError,
)
from flo_redis.types import ActionRunStatus
from flo_redis.worker.observe import WorkerObserver


async def run_once(client: FloClient, worker: ActionWorker, action: str) -> ActionRunStatus:
    async with running(worker, ready=registered):
        return await finished(client, (await client.action.invoke(action, b"{}")).run_id)


@pytest.mark.parametrize(
    ("value", "output"),
    [("hello", b'"hello"'), ([1, 2], b"[1, 2]"), (42, b"42"), (None, b"null"), (b"\x00", b"\x00")],
)
async def test_any_json_value_is_a_result(client: FloClient, value: object, output: bytes) -> None:
    worker = client.new_action_worker(block_ms=500)

    @worker.action("give")
    async def give(ctx: ActionContext) -> object:
        return value

    status = await run_once(client, worker, "give")
    assert (status.status, status.output) == (RunStatus.COMPLETED, output)


async def test_a_result_json_cannot_encode_fails_the_run_naming_its_type(
    client: FloClient, caplog: pytest.LogCaptureFixture
) -> None:
    worker = client.new_action_worker(block_ms=500)

    @worker.action("odd", ActionRegisterOptions(max_retries=3))
    async def odd(ctx: ActionContext) -> object:
        return {"when": {1, 2}}

    with caplog.at_level(logging.ERROR, logger="flo_redis"):
        status = await run_once(client, worker, "odd")
    # Failed for good at once (the same value would come back), never left RUNNING.
    assert (status.status, status.attempt) == (RunStatus.FAILED, 1)
    assert status.error_message is not None
    assert status.error_message.startswith(
        "ResultEncodingError: the handler returned a builtins.dict"
    )
    assert "set is not JSON serializable" in status.error_message
    logged = [r for r in caplog.records if getattr(r, "run_id", None) == status.run_id]
    assert logged and logged[0].levelno == logging.ERROR


async def test_a_pluggable_serializer_encodes_results(client: FloClient) -> None:
    class Reprs:
        name = "repr"

        def dumps(self, value: Any) -> bytes:
            return repr(value).encode()

    worker = client.new_action_worker(block_ms=500, serializer=Reprs())

    @worker.action("set")
    async def give_set(ctx: ActionContext) -> object:
        return ctx.result("made", {3})

    status = await run_once(client, worker, "set")
    assert (status.status, status.output, status.outcome) == (RunStatus.COMPLETED, b"{3}", "made")


async def test_a_raising_handler_is_logged_with_its_traceback_and_kept_with_its_type(
    client: FloClient, caplog: pytest.LogCaptureFixture
) -> None:
    worker = client.new_action_worker(block_ms=500)

    @worker.action("resize", ActionRegisterOptions(max_retries=1))
    async def resize(ctx: ActionContext) -> object:
        job: dict[str, str] = {}
        return job["image"]

    with caplog.at_level(logging.ERROR, logger="flo_redis"):
        status = await run_once(client, worker, "resize")
    assert (status.status, status.error_message) == (RunStatus.FAILED, "KeyError: 'image'")
    assert status.error_traceback is not None
    assert 'return job["image"]' in status.error_traceback
    assert status.error_traceback.rstrip().endswith("KeyError: 'image'")
    [record] = [r for r in caplog.records if r.name.startswith("flo_redis")]
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None and record.exc_info[0] is KeyError
    fields = {k: getattr(record, k) for k in ("run_id", "action", "attempt", "worker_id")}
    assert fields == {
        "run_id": status.run_id,
        "action": "resize",
        "attempt": 1,
        "worker_id": worker.config.worker_id,
    }


async def test_a_retry_that_succeeds_forgets_the_traceback(client: FloClient) -> None:
    worker = client.new_action_worker(block_ms=500)

    @worker.action("second", ActionRegisterOptions(max_retries=2))
    async def second(ctx: ActionContext) -> bytes:
        if ctx.attempt == 1:
            raise RuntimeError("first try")
        return b"ok"

    status = await run_once(client, worker, "second")
    assert (status.status, status.error_message, status.error_traceback) == (
        RunStatus.COMPLETED,
        None,
        None,
    )


async def test_a_plain_def_handler_runs_in_a_thread(client: FloClient) -> None:
    worker = client.new_action_worker(block_ms=500)
    threads: list[str] = []

    @worker.action("sync")
    def sync(ctx: ActionContext) -> dict[str, Any]:
        threads.append(threading.current_thread().name)
        time.sleep(0.05)  # blocking is fine here
        return {"got": ctx.json()}

    status = await run_once(client, worker, "sync")
    assert (status.status, status.output) == (RunStatus.COMPLETED, b'{"got": {}}')
    assert threads and threads[0] != threading.main_thread().name


async def test_a_plain_def_handler_failing_keeps_its_error(client: FloClient) -> None:
    worker = client.new_action_worker(block_ms=500)

    @worker.action("sync-fail", ActionRegisterOptions(max_retries=1))
    def sync_fail(ctx: ActionContext) -> bytes:
        raise ValueError("bad size")

    status = await run_once(client, worker, "sync-fail")
    assert (status.status, status.error_message) == (RunStatus.FAILED, "ValueError: bad size")


@pytest.mark.parametrize("auto_touch", [False, True])
@pytest.mark.slow
async def test_a_plain_def_handler_past_its_timeout_fails_and_sees_cancelled(
    client: FloClient, auto_touch: bool
) -> None:
    worker = client.new_action_worker(block_ms=500, action_timeout=0.3, auto_touch=auto_touch)
    saw_cancel = threading.Event()

    @worker.action("slow-sync", ActionRegisterOptions(max_retries=3, timeout_ms=60_000))
    def slow_sync(ctx: ActionContext) -> bytes:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not ctx.cancelled:
            time.sleep(0.01)
        if ctx.cancelled:
            saw_cancel.set()
        return b"late"

    status = await run_once(client, worker, "slow-sync")
    assert (status.status, status.attempt, status.error_message) == (
        RunStatus.FAILED,
        1,
        "Action timed out",
    )
    assert await asyncio.to_thread(saw_cancel.wait, 15)


async def test_stop_lets_a_plain_def_handler_finish_and_sends_its_result(
    client: FloClient,
) -> None:
    worker = client.new_action_worker(block_ms=500)
    started = threading.Event()
    release = threading.Event()

    @worker.action("hold")
    def hold(ctx: ActionContext) -> str:
        started.set()
        release.wait(30)
        return "finished"

    async with running(worker, ready=registered) as task:
        run_id = (await client.action.invoke("hold", b"")).run_id
        assert await asyncio.to_thread(started.wait, 15)
        worker.stop()
        release.set()
        await asyncio.wait_for(task, 30)
    status = await client.action.status(run_id)
    assert (status.status, status.output) == (RunStatus.COMPLETED, b'"finished"')


def test_registration_refuses_what_cannot_be_called(client: FloClient) -> None:
    worker = client.new_action_worker()
    with pytest.raises(ValidationError, match="handler of action 'x' must be an async function"):
        worker.register_action("x", 42)  # type: ignore[arg-type]
    assert not worker._handlers


async def test_load_falls_when_a_run_fails(client: FloClient) -> None:
    worker = client.new_action_worker(block_ms=500)

    @worker.action("boom", ActionRegisterOptions(max_retries=1))
    async def boom(ctx: ActionContext) -> bytes:
        raise RuntimeError("boom")

    async with running(worker, ready=registered):
        for _ in range(3):
            await finished(client, (await client.action.invoke("boom", b"")).run_id)
        wid = worker.config.worker_id

        async def load() -> int:
            workers = (await client.worker.list()).workers
            return next(w.current_load for w in workers if w.worker_id == wid)

        assert await eventually(load, lambda n: n == 0) == 0


async def test_a_stream_worker_runs_plain_def_handlers_and_logs_failures(
    client: FloClient, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[bytes] = []

    def handle(ctx: StreamContext) -> None:
        if ctx.payload == b"bad":
            raise KeyError("sku")
        seen.append(ctx.payload)

    await client.stream.group_join(
        "orders", "bill", "setup", StreamGroupJoinOptions(max_deliver=1, ack_timeout_ms=60_000)
    )
    await client.stream.append("orders", b"bad")
    await client.stream.append("orders", b"good")
    worker = client.new_stream_worker(stream="orders", group="bill", handler=handle, block_ms=500)
    with caplog.at_level(logging.ERROR, logger="flo_redis"):
        task = asyncio.create_task(worker.start())
        try:
            await eventually(lambda: client.stream.dead_letters("orders", "bill"), bool)
            await eventually(lambda: asyncio.sleep(0, seen), bool)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)
    assert seen == [b"good"]
    [record] = [r for r in caplog.records if r.name.startswith("flo_redis")]
    assert record.levelno == logging.ERROR and "KeyError: 'sku'" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is KeyError
    assert (record.stream, record.attempt) == ("orders", 1)  # type: ignore[attr-defined]


def test_a_stream_worker_refuses_a_handler_it_cannot_call(client: FloClient) -> None:
    with pytest.raises(ValidationError, match="handler of stream 'orders'"):
        client.new_stream_worker(stream="orders", group="g", handler="nope")  # type: ignore[arg-type]


async def test_a_result_over_the_actions_limit_fails_its_run_alone_in_a_batch(
    client: FloClient,
) -> None:
    # Completes finished together go in one batch; the store refuses the one result
    # over the action's limit, which fails that run for good, and takes the others,
    # each told to the observer once.
    class Heard(WorkerObserver):
        def __init__(self) -> None:
            self.completed: list[str] = []

        def run_completed(self, action: str, outcome: str) -> None:
            self.completed.append(outcome)

    limited = ActionRegisterOptions(max_payload_bytes=64)
    await client.action.register("sized", options=limited)
    invoked = await client.action.invoke_many("sized", [b"small"] * 7 + [b"large"])
    worker = client.new_action_worker(block_ms=500, concurrency=8)
    worker.observer = heard = Heard()

    @worker.action("sized", limited)
    async def sized(ctx: ActionContext) -> bytes:
        return b"x" * 100 if ctx.payload == b"large" else b"ok"

    async with running(worker, ready=registered):
        ends = [await finished(client, run.run_id) for run in invoked]
    assert [s.status for s in ends] == [RunStatus.COMPLETED] * 7 + [RunStatus.FAILED]
    assert [s.output for s in ends[:7]] == [b"ok"] * 7
    assert ends[7].attempt == 1  # not retried
    assert "result refused" in (ends[7].error_message or "")
    assert heard.completed == ["success"] * 7


def test_registration_refuses_a_handler_that_cannot_take_the_context(client: FloClient) -> None:
    worker = client.new_action_worker()
    with pytest.raises(ValidationError, match="must take the context as its one positional"):
        worker.register_action("none", lambda: b"")  # type: ignore[arg-type,misc]
    with pytest.raises(ValidationError, match="must take the context as its one positional"):
        worker.register_action("two", lambda ctx, extra: b"")  # type: ignore[arg-type,misc]
    with pytest.raises(ValidationError, match=r"handler of stream 'orders'.*positional"):
        client.new_stream_worker(stream="orders", group="g", handler=lambda: None)  # type: ignore[arg-type,misc]
    assert not worker._handlers

    # What can take it is taken: one argument, extras with defaults, *args.
    worker.register_action("one", lambda ctx: b"")
    worker.register_action("defaults", lambda ctx, extra=1: b"")
    worker.register_action("star", lambda *args: b"")
    assert sorted(worker._handlers) == ["defaults", "one", "star"]


def test_registration_refuses_options_that_are_not_register_options(client: FloClient) -> None:
    worker = client.new_action_worker()
    with pytest.raises(ValidationError, match="options of action 'a' must be an ActionRegister"):
        worker.action("a", {"timeout_ms": 5})(lambda ctx: b"")  # type: ignore[arg-type]
    assert not worker._handlers


@pytest.mark.parametrize("serializer", [None, 5, "json", object()])
def test_a_worker_refuses_a_serializer_without_dumps(client: FloClient, serializer: object) -> None:
    with pytest.raises(ValidationError, match=r"serializer must have a dumps\(value\) -> bytes"):
        client.new_action_worker(serializer=serializer)  # type: ignore[arg-type]


async def test_a_serializer_that_raises_or_returns_no_bytes_fails_the_run_not_strands_it(
    client: FloClient,
) -> None:
    class Broken:
        name = "broken"

        def dumps(self, value: Any) -> bytes:
            if value == "raise":
                raise RuntimeError("encoder down")
            return "not bytes"  # type: ignore[return-value]

    worker = client.new_action_worker(block_ms=500, serializer=Broken())

    @worker.action("give", ActionRegisterOptions(max_retries=1, timeout_ms=60_000))
    async def give(ctx: ActionContext) -> object:
        return ctx.json()

    async with running(worker, ready=registered):
        raised = await finished(client, (await client.action.invoke("give", b'"raise"')).run_id)
        wrong = await finished(client, (await client.action.invoke("give", b'"str"')).run_id)
    # Each fails on its first attempt with the reason, instead of staying RUNNING until
    # its lease (60 s) ran out.
    assert (raised.status, raised.attempt) == (RunStatus.FAILED, 1)
    assert raised.error_message == "RuntimeError: encoder down"
    assert (wrong.status, wrong.attempt) == (RunStatus.FAILED, 1)
    assert wrong.error_message is not None
    assert "serializer's dumps returned a str, not bytes" in wrong.error_message


async def test_a_bad_outcome_fails_its_run_and_leaves_the_rest_of_its_batch_completed(
    client: FloClient,
) -> None:
    from flo_redis.worker.context import ActionResult

    worker = client.new_action_worker(block_ms=500, concurrency=8)
    gate = asyncio.Event()

    @worker.action("name", ActionRegisterOptions(max_retries=1, timeout_ms=60_000))
    async def name(ctx: ActionContext) -> object:
        await gate.wait()  # finish together, so their completes share a batch
        kind = ctx.json()
        if kind == "long":
            return ctx.result("o" * 300, 1)
        if kind == "not-str":
            return ActionResult(5, b"")  # type: ignore[arg-type]
        if kind == "not-bytes":
            return ActionResult("made", "text")  # type: ignore[arg-type]
        return ctx.result("made", kind)

    async with running(worker, ready=registered):
        ids = [
            (await client.action.invoke("name", f'"{kind}"'.encode())).run_id
            for kind in ("long", "not-str", "not-bytes", "fine")
        ]
        await eventually(lambda: client.action.counts("name"), lambda c: c.running == 4)
        gate.set()
        long, not_str, not_bytes, fine = [await finished(client, i) for i in ids]
    assert (long.status, long.attempt) == (RunStatus.FAILED, 1)
    assert long.error_message == "ValidationError: outcome is longer than 255 bytes"
    assert (not_str.status, not_str.error_message) == (
        RunStatus.FAILED,
        "ValidationError: outcome must be a str, got int",
    )
    assert not_bytes.status == RunStatus.FAILED
    assert not_bytes.error_message is not None
    assert "an ActionResult's data must be bytes, got str" in not_bytes.error_message
    assert (fine.status, fine.output, fine.outcome) == (RunStatus.COMPLETED, b'"fine"', "made")


def test_ctx_result_refuses_a_bad_outcome_where_it_is_called(client: FloClient) -> None:
    from flo_redis.worker.context import new_context

    worker = client.new_action_worker()
    ctx = new_context("r:1", "a", b"", 1, 0, "ns", worker, 1, b"")
    with pytest.raises(ValidationError, match="outcome is longer than 255 bytes"):
        ctx.result("o" * 256)
    with pytest.raises(ValidationError, match="outcome must be a str, got int"):
        ctx.result(5, b"")  # type: ignore[arg-type]
    assert ctx.result("é" * 127, b"x").outcome == "é" * 127  # 254 bytes: taken
