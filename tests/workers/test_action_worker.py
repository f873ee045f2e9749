"""ActionWorker against real Redis: outcomes, stop, drain, touch, health, concurrency."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from typing import Any

import pytest
from polling import eventually, finished, registered, running

import flo_redis.worker.action_worker as worker_module
from flo_redis import (
    ActionContext,
    ActionRegisterOptions,
    ActionWorker,
    BlockTooLongError,
    FloClient,
    NonRetryableError,
    RunStatus,
    WorkerStatus,
)
from flo_redis.actions.claims import Gate
from flo_redis.worker.context import new_context
from flo_redis.worker.observe import WorkerObserver


def new_worker(client: FloClient, **kwargs: object) -> ActionWorker:
    return client.new_action_worker(block_ms=500, **kwargs)  # type: ignore[arg-type]


async def test_handler_results_become_completes(client: FloClient) -> None:
    worker = new_worker(client)

    @worker.action("bytes")
    async def returns_bytes(ctx: ActionContext) -> bytes:
        return ctx.input().upper()

    @worker.action("dict")
    async def returns_dict(ctx: ActionContext) -> dict[str, int]:
        return {"n": ctx.json()["n"] + 1}

    @worker.action("outcome")
    async def returns_outcome(ctx: ActionContext) -> object:
        return ctx.result("approved", {"ok": True})

    @worker.action("none")
    async def returns_none(ctx: ActionContext) -> None:
        return None

    async with running(worker, ready=registered):
        a = (await client.action.invoke("bytes", b"abc")).run_id
        b = (await client.action.invoke("dict", b'{"n": 1}')).run_id
        c = (await client.action.invoke("outcome", b"")).run_id
        d = (await client.action.invoke("none", b"")).run_id
        sa, sb, sc, sd = [await finished(client, r) for r in (a, b, c, d)]
    assert (sa.status, sa.output, sa.attempt) == (RunStatus.COMPLETED, b"ABC", 1)
    assert sb.output == b'{"n": 2}'
    assert (sc.output, sc.outcome) == (b'{"ok": true}', "approved")
    assert (sd.status, sd.output) == (RunStatus.COMPLETED, b"null")
    assert sa.worker_id == worker.config.worker_id


async def test_non_retryable_error_fails_for_good(client: FloClient) -> None:
    worker = new_worker(client)

    @worker.action("reject", ActionRegisterOptions(max_retries=5))
    async def reject(ctx: ActionContext) -> bytes:
        raise NonRetryableError("malformed order")

    async with running(worker, ready=registered):
        run_id = (await client.action.invoke("reject", b"")).run_id
        status = await finished(client, run_id)
    assert (status.status, status.attempt, status.error_message) == (
        RunStatus.FAILED,
        1,
        "NonRetryableError: malformed order",
    )


async def test_other_errors_are_retried_until_attempts_run_out(client: FloClient) -> None:
    worker = new_worker(client)
    attempts: list[int] = []

    @worker.action("flaky", ActionRegisterOptions(max_retries=3))
    async def flaky(ctx: ActionContext) -> bytes:
        attempts.append(ctx.attempt)
        raise RuntimeError(f"attempt {ctx.attempt} broke")

    async with running(worker, ready=registered):
        run_id = (await client.action.invoke("flaky", b"")).run_id
        status = await finished(client, run_id)
    assert attempts == [1, 2, 3]
    assert (status.status, status.attempt) == (RunStatus.FAILED, 3)
    assert status.error_message == "RuntimeError: attempt 3 broke"


async def test_a_failure_log_says_what_comes_next(
    client: FloClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="flo_redis")
    worker = new_worker(client)

    @worker.action("flaky", ActionRegisterOptions(max_retries=3, retry_backoff_ms=100))
    async def flaky(ctx: ActionContext) -> bytes:
        raise RuntimeError("broke")

    @worker.action("reject", ActionRegisterOptions(max_retries=3))
    async def reject(ctx: ActionContext) -> bytes:
        raise NonRetryableError("malformed")

    async with running(worker, ready=registered):
        for action in ("flaky", "reject"):
            await finished(client, (await client.action.invoke(action, b"")).run_id)
    said = [r.getMessage().rsplit("; ", 1)[1] for r in caplog.records if "failed on" in r.message]
    assert said == [
        "will retry in 0.1 s (attempt 2 of 3)",
        "will retry in 0.2 s (attempt 3 of 3)",
        "final: no attempts left (3 of 3)",
        "final: not retried",
    ]
    assert all(r.exc_info for r in caplog.records if "failed on" in r.message)


async def test_a_retry_that_succeeds_completes(client: FloClient) -> None:
    worker = new_worker(client)

    @worker.action("second-time")
    async def second_time(ctx: ActionContext) -> bytes:
        if ctx.attempt == 1:
            raise TimeoutError("downstream slow")  # an ordinary failure: retried
        return b"done"

    async with running(worker, ready=registered):
        status = await finished(client, (await client.action.invoke("second-time", b"")).run_id)
    assert (status.status, status.attempt, status.output) == (RunStatus.COMPLETED, 2, b"done")
    assert status.error_message is None


@pytest.mark.slow
async def test_local_action_timeout_cancels_and_fails_without_retry(client: FloClient) -> None:
    worker = new_worker(client, action_timeout=0.2)
    cancelled = asyncio.Event()

    @worker.action("slow", ActionRegisterOptions(max_retries=3, timeout_ms=60_000))
    async def slow(ctx: ActionContext) -> bytes:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return b""

    async with running(worker, ready=registered):
        status = await finished(client, (await client.action.invoke("slow", b"")).run_id)
    assert cancelled.is_set()
    assert (status.status, status.attempt, status.error_message) == (
        RunStatus.FAILED,
        1,
        "Action timed out",
    )


@pytest.mark.parametrize("auto_touch", [False, True])
@pytest.mark.slow
async def test_a_handler_that_swallows_its_time_limit_still_fails_timed_out(
    client: FloClient, auto_touch: bool
) -> None:
    """A handler past its time limit that catches the cancellation and returns anyway is
    failed "Action timed out" (not retried), and its slot goes on serving: awaited in
    the slot's own task, or through the handler runner (with auto_touch)."""
    worker = new_worker(client, action_timeout=0.2, auto_touch=auto_touch)

    @worker.action("stubborn", ActionRegisterOptions(max_retries=3, timeout_ms=60_000))
    async def stubborn(ctx: ActionContext) -> bytes:
        if ctx.payload == b"quick":
            return b"quick"
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return b"done anyway"
        return b""

    async with running(worker, ready=registered):
        status = await finished(client, (await client.action.invoke("stubborn", b"")).run_id)
        after = await finished(client, (await client.action.invoke("stubborn", b"quick")).run_id)
    assert (status.status, status.attempt, status.error_message) == (
        RunStatus.FAILED,
        1,
        "Action timed out",
    )
    assert (after.status, after.output) == (RunStatus.COMPLETED, b"quick")


async def test_registration_rules(client: FloClient) -> None:
    worker = new_worker(client)
    with pytest.raises(ValueError, match="No action handlers"):
        await worker.start()

    async def handler(ctx: ActionContext) -> bytes:
        return b""

    worker.register_action("once", handler)
    with pytest.raises(ValueError, match="already registered"):
        worker.register_action("once", handler)
    with pytest.raises(BlockTooLongError):
        client.new_action_worker(block_ms=300_001)
    assert client.new_action_worker(block_ms=0).config.block_ms == 30_000


async def test_a_stopped_worker_starts_again_and_takes_work(client: FloClient) -> None:
    """start() after a stop() (or an abort()) of the same worker serves again."""
    worker = new_worker(client)
    worker.register_action("again", lambda ctx: ctx.payload)
    await client.action.register("again")
    first = (await client.action.invoke("again", b"first")).run_id
    async with running(worker, ready=registered):
        assert (await finished(client, first)).output == b"first"
    second = (await client.action.invoke("again", b"second")).run_id
    task = asyncio.create_task(worker.start())
    assert (await finished(client, second)).output == b"second"
    worker.abort()
    await asyncio.wait_for(task, 30)
    third = (await client.action.invoke("again", b"third")).run_id
    async with running(worker, ready=registered):
        assert (await finished(client, third)).output == b"third"


async def test_a_stop_while_the_poll_prepares_ends_that_poll(
    client: FloClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # stop() lands while a poll asks the health gate, before it starts waiting: the poll
    # must not wait out its 30 s block for a wake-up that was already given.
    worker = client.new_action_worker(block_ms=30_000)
    worker.register_action("idle", lambda ctx: b"")
    check = Gate.check
    stopped = False

    async def gate_then_stop(self: Gate, *args: Any, **kwargs: Any) -> bytes:
        nonlocal stopped
        if not stopped:
            stopped = True
            worker.stop()
        return await check(self, *args, **kwargs)

    monkeypatch.setattr(Gate, "check", gate_then_stop)
    await asyncio.wait_for(worker.start(), 10)
    assert stopped


async def test_stop_lets_running_handlers_finish_and_report(client: FloClient) -> None:
    worker = new_worker(client)
    started = asyncio.Event()
    release = asyncio.Event()

    @worker.action("careful")
    async def careful(ctx: ActionContext) -> bytes:
        started.set()
        await release.wait()
        return b"finished"

    task = asyncio.create_task(worker.start())
    await registered(worker)
    run_id = (await client.action.invoke("careful", b"")).run_id
    await asyncio.wait_for(started.wait(), 15)
    worker.stop()
    await asyncio.sleep(0.1)  # a moment in which a stop that did not wait would end
    assert not task.done()  # still waiting for the handler
    release.set()
    await asyncio.wait_for(task, 15)
    status = await client.action.status(run_id)
    assert (status.status, status.output) == (RunStatus.COMPLETED, b"finished")


async def test_cancelling_the_worker_gives_runs_back_without_spending_attempts(
    client: FloClient,
) -> None:
    worker = new_worker(client)
    started = asyncio.Event()

    @worker.action("long")
    async def long(ctx: ActionContext) -> bytes:
        started.set()
        await asyncio.sleep(60)
        return b""

    task = asyncio.create_task(worker.start())
    await registered(worker)
    run_id = (await client.action.invoke("long", b"")).run_id
    await asyncio.wait_for(started.wait(), 15)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    status = await client.action.status(run_id)
    assert (status.status, status.attempt) == (RunStatus.PENDING, 0)


async def test_drain_makes_start_return_after_handlers_finish(
    client: FloClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="flo_redis.worker")
    worker = new_worker(client)
    started = asyncio.Event()
    release = asyncio.Event()

    @worker.action("drainable")
    async def drainable(ctx: ActionContext) -> bytes:
        started.set()
        await release.wait()
        return b"ok"

    task = asyncio.create_task(worker.start())
    await registered(worker)
    run_id = (await client.action.invoke("drainable", b"")).run_id
    await asyncio.wait_for(started.wait(), 15)
    await client.worker.drain(worker.config.worker_id)
    # The worker has seen it is draining while its handler still runs.
    await eventually(lambda: "is draining" in caplog.text, what="the drain seen")
    release.set()
    await asyncio.wait_for(task, 15)  # start() returned by itself
    assert (await client.action.status(run_id)).status == RunStatus.COMPLETED


@pytest.mark.slow
async def test_auto_touch_keeps_a_long_handlers_lease(client: FloClient) -> None:
    worker = new_worker(client, auto_touch=True)

    # A lease of a second, touched every third of it: a loaded machine may stall the
    # loop for a few hundred milliseconds and the lease still holds.
    @worker.action("patient", ActionRegisterOptions(timeout_ms=1000, max_retries=1))
    async def patient(ctx: ActionContext) -> bytes:
        await asyncio.sleep(3.5)  # three and a half lease lengths
        return b"kept"

    async with running(worker, ready=registered):
        status = await finished(client, (await client.action.invoke("patient", b"")).run_id)
    assert (status.status, status.attempt, status.output) == (RunStatus.COMPLETED, 1, b"kept")


async def test_a_lost_lease_cancels_the_handler_and_sends_no_fail(client: FloClient) -> None:
    worker = new_worker(client, auto_touch=True)
    started = asyncio.Event()
    seen: list[bool] = []

    @worker.action("doomed", ActionRegisterOptions(timeout_ms=300))
    async def doomed(ctx: ActionContext) -> bytes:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append(ctx.cancelled)
            raise
        return b""

    async with running(worker, ready=registered):
        run_id = (await client.action.invoke("doomed", b"")).run_id
        await asyncio.wait_for(started.wait(), 15)
        # Another worker's report ends the run: this worker's next touch is refused.
        status = await client.action.status(run_id)
        await client.worker.register("other", ["doomed"])
        from flo_redis import WorkerFailOptions

        await client.worker.fail(
            status.worker_id or "", "doomed", run_id, "operator", WorkerFailOptions(retry=False)
        )
        await eventually(lambda: asyncio.sleep(0, seen), bool)
    assert seen == [True]
    final = await client.action.status(run_id)
    assert (final.status, final.error_message) == (RunStatus.FAILED, "operator")


@pytest.mark.slow
async def test_a_late_complete_after_the_lease_was_taken_back_is_dropped(
    client: FloClient,
) -> None:
    worker = new_worker(client)
    started = asyncio.Event()
    refused: list[str] = []

    class Refusals(WorkerObserver):
        def report_refused(self, report: str) -> None:
            refused.append(report)

    worker.observer = Refusals()

    @worker.action("late", ActionRegisterOptions(timeout_ms=200, max_retries=2))
    async def late(ctx: ActionContext) -> bytes:
        if ctx.attempt == 1:
            started.set()
            await asyncio.sleep(1.0)  # the lease expires meanwhile
            return b"first"
        return b"second"

    async with running(worker, ready=registered):
        run_id = (await client.action.invoke("late", b"")).run_id
        status = await eventually(
            lambda: client.action.status(run_id), lambda s: s.status == RunStatus.COMPLETED
        )
        # The first attempt's complete has been sent and refused.
        await eventually(lambda: "complete" in refused, what="the late complete refused")
        after = await client.action.status(run_id)
    assert (status.output, status.attempt) == (b"second", 2)
    assert (after.output, after.attempt) == (b"second", 2)


async def test_concurrency_is_filled_in_one_go(client: FloClient) -> None:
    worker = new_worker(client, concurrency=50)
    running_now = 0
    peak = 0
    gate = asyncio.Event()

    @worker.action("wide")
    async def wide(ctx: ActionContext) -> bytes:
        nonlocal running_now, peak
        running_now += 1
        peak = max(peak, running_now)
        if running_now == 50:
            gate.set()
        await gate.wait()
        running_now -= 1
        return b""

    await client.action.register("wide")
    ids = [(await client.action.invoke("wide", b"")).run_id for _ in range(120)]
    async with running(worker, ready=registered):
        for run_id in ids:
            await finished(client, run_id)
    assert peak == 50


_BOUND: contextvars.ContextVar[bytes | None] = contextvars.ContextVar("bound", default=None)


@pytest.mark.parametrize("waits", [True, False], ids=["handler-waits", "handler-never-waits"])
async def test_each_run_sees_its_own_context_and_a_slot_goes_on_to_the_next(
    client: FloClient, waits: bool
) -> None:
    """Runs share a few handler slots (concurrency 2 for 30 runs), yet what a handler
    sets in a context variable is not seen by the runs after it, as if each had a task
    of its own, whether it gives the loop a turn or runs straight through; a handler
    that fails does not stop its slot."""
    seen: list[bytes | None] = []
    worker = new_worker(client, concurrency=2)

    @worker.action("ctx")
    async def handle(ctx: ActionContext) -> bytes:
        seen.append(_BOUND.get())
        _BOUND.set(ctx.payload)
        if waits:
            await asyncio.sleep(0)
        if ctx.payload == b"3":
            raise NonRetryableError("fails for good")
        return ctx.payload

    await client.action.register("ctx")
    ids = [(await client.action.invoke("ctx", str(i).encode())).run_id for i in range(30)]
    async with running(worker, ready=registered):
        ends = [await finished(client, run_id) for run_id in ids]
    assert seen == [None] * 30
    assert [e.status for e in ends].count(RunStatus.COMPLETED) == 29
    assert ends[3].status == RunStatus.FAILED
    assert ends[29].output == b"29"


async def test_context_carries_token_and_attempt(client: FloClient) -> None:
    worker = new_worker(client)
    seen: list[tuple[int, int]] = []

    @worker.action("fenced")
    async def fenced(ctx: ActionContext) -> bytes:
        seen.append((ctx.token, ctx.attempt))
        return b""

    async with running(worker, ready=registered):
        status = await finished(client, (await client.action.invoke("fenced", b"")).run_id)
    assert seen == [(status.token, 1)]
    assert status.token > 0


async def test_heartbeats_report_running_handlers(
    client: FloClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_module, "_HEARTBEAT_INTERVAL_S", 0.1)
    worker = new_worker(client)
    release = asyncio.Event()

    @worker.action("busy")
    async def busy(ctx: ActionContext) -> bytes:
        await release.wait()
        return b""

    async with running(worker, ready=registered):
        for _ in range(3):
            await client.action.invoke("busy", b"")
        info = await eventually(
            lambda: client.worker.list(),
            lambda r: any(w.current_load == 3 for w in r.workers),
        )
        release.set()
    assert info.workers[0].worker_id == worker.config.worker_id


async def test_a_removed_worker_registers_again(
    client: FloClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_module, "_HEARTBEAT_INTERVAL_S", 0.1)
    worker = new_worker(client, concurrency=7)

    @worker.action("any")
    async def anything(ctx: ActionContext) -> bytes:
        return b""

    async with running(worker, ready=registered):
        await eventually(lambda: client.worker.list(), lambda r: len(r.workers) == 1)
        await client.worker.deregister(worker.config.worker_id)
        again = await eventually(lambda: client.worker.list(), lambda r: len(r.workers) == 1)
        assert again.workers[0].max_concurrency == 7
        status = await finished(client, (await client.action.invoke("any", b"")).run_id)
    assert status.status == RunStatus.COMPLETED


@pytest.mark.slow
async def test_an_unhealthy_worker_heartbeats_and_works_again(
    client: FloClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await client.worker.configure(heartbeat_timeout_ms=300, remove_after_ms=60_000)
    worker = new_worker(client)

    @worker.action("steady")
    async def steady(ctx: ActionContext) -> bytes:
        return b"ok"

    async with running(worker, ready=registered):
        await eventually(
            lambda: client.worker.list(),
            lambda r: bool(r.workers) and r.workers[0].status == WorkerStatus.UNHEALTHY,
        )
        status = await finished(client, (await client.action.invoke("steady", b"")).run_id)
    assert status.status == RunStatus.COMPLETED


def test_a_workers_context_carries_each_field_of_its_run() -> None:
    """The worker makes each run's context with its fields in order (new_context): each
    lands where ActionContext names it."""
    holder: Any = object()
    made = new_context("r1", "resize", b"in", 2, 1700, "shop", holder, 7, b"tr")
    named = ActionContext(
        task_id="r1",
        action_name="resize",
        payload=b"in",
        attempt=2,
        created_at=1700,
        namespace="shop",
        _worker=holder,
        token=7,
        _trace=b"tr",
    )
    assert made == named
    assert (made.task_id, made.action_name, made.payload, made.token) == ("r1", "resize", b"in", 7)
    assert not made.cancelled


class _NoText(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


async def test_a_handler_raising_an_exception_without_text_fails_its_run_saying_so(
    client: FloClient,
) -> None:
    worker = client.new_action_worker(block_ms=500)

    async def handler(ctx: Any) -> None:
        raise _NoText()

    def plain(ctx: Any) -> None:
        raise _NoText()

    options = ActionRegisterOptions(max_retries=1)
    worker.register_action("loud", handler, options)
    worker.register_action("plain", plain, options)
    async with running(worker, ready=registered):
        runs = [await client.action.invoke(name, b"") for name in ("loud", "plain")]
        ended = [await finished(client, run.run_id) for run in runs]
    for status in ended:  # failed at once, not left to its lease
        assert status.status == RunStatus.FAILED
        assert status.error_message == "_NoText: (its text could not be had: RuntimeError)"
