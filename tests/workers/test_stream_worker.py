"""StreamWorker against real Redis: acks, nacks and redelivery, dead letters, stop."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import sys
from typing import Any

import pytest
from polling import eventually, running

from flo_redis import (
    FloClient,
    StreamContext,
    StreamGroupJoinOptions,
    StreamGroupReadOptions,
)
from flo_redis.streams import groups
from flo_redis.streams.acks import Nacked
from flo_redis.streams.partitions import StreamState
from flo_redis.worker.stream_reports import next_delivery


async def test_records_are_handled_and_acked(client: FloClient) -> None:
    seen: list[bytes] = []

    async def handle(ctx: StreamContext) -> None:
        assert ctx.stream == "orders" and ctx.group == "billing"
        seen.append(ctx.payload)

    for i in range(25):
        await client.stream.append("orders", f"order-{i}".encode())
    worker = client.new_stream_worker(
        stream="orders", group="billing", handler=handle, batch_size=10, block_ms=500
    )
    async with running(worker):
        await eventually(lambda: asyncio.sleep(0, len(seen)), lambda n: n == 25)
        pending = await eventually(
            lambda: client.stream.group_pending("orders", "billing"), lambda p: p == []
        )
    assert sorted(seen) == sorted(f"order-{i}".encode() for i in range(25))
    assert pending == []


async def test_a_failing_record_is_redelivered_then_dead_lettered(client: FloClient) -> None:
    counts: list[int] = []

    async def handle(ctx: StreamContext) -> None:
        if ctx.payload == b"poison":
            counts.append(ctx.delivery_count)
            raise ValueError("cannot parse")

    await client.stream.group_join(
        "events", "etl", "setup", StreamGroupJoinOptions(max_deliver=3, ack_timeout_ms=60_000)
    )
    await client.stream.append("events", b"poison")
    await client.stream.append("events", b"fine")
    worker = client.new_stream_worker(stream="events", group="etl", handler=handle, block_ms=500)
    async with running(worker):
        letters = await eventually(lambda: client.stream.dead_letters("events", "etl"), bool)
    assert counts == [1, 2, 3]
    assert [(d.payload, d.delivery_count) for d in letters] == [(b"poison", 3)]
    assert await client.stream.group_pending("events", "etl") == []


async def test_a_failure_log_says_what_comes_next(
    client: FloClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="flo_redis")

    async def handle(ctx: StreamContext) -> None:
        raise ValueError("cannot parse")

    await client.stream.group_join(
        "events", "etl", "setup", StreamGroupJoinOptions(max_deliver=3, ack_timeout_ms=60_000)
    )
    await client.stream.append("events", b"poison")
    worker = client.new_stream_worker(stream="events", group="etl", handler=handle, block_ms=500)

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if "cannot parse" in r.getMessage()]

    async with running(worker):
        await eventually(said, lambda lines: len(lines) == 3)
    entry = (await client.stream.dead_letters("events", "etl"))[0].original_id.to_redis()
    consumer = worker.config.consumer
    assert [line.split(" failed: ")[0] for line in said()] == [
        f"handler for events/{entry} (delivery {n}, consumer {consumer})" for n in (1, 2, 3)
    ]
    assert [line.rsplit("; ", 1)[1] for line in said()] == [
        "redelivered now, before new records (delivery 2 of 3)",
        "redelivered now, before new records (delivery 3 of 3)",
        "final: moved to the dead letters (delivery 3 of 3)",
    ]
    failed = [r for r in caplog.records if "cannot parse" in r.getMessage()]
    assert all(r.exc_info and r.exc_info[0] is ValueError for r in failed)
    assert [getattr(r, "attempt", None) for r in failed] == [1, 2, 3]


def test_a_nack_not_accepted_says_how_the_record_comes_back() -> None:
    said = next_delivery(None, 2, 5)
    assert said.startswith("its nack was not accepted")
    assert "ack timeout" in said and "consumer is gone" in said
    assert next_delivery(Nacked(), 2, 5).startswith("no longer pending")


@pytest.mark.slow
async def test_a_handler_timeout_nacks(client: FloClient) -> None:
    attempts = 0

    async def handle(ctx: StreamContext) -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            await asyncio.sleep(10)

    await client.stream.append("slow", b"x")
    worker = client.new_stream_worker(
        stream="slow", group="g", handler=handle, message_timeout=0.2, block_ms=500
    )
    async with running(worker):
        await eventually(lambda: asyncio.sleep(0, attempts), lambda n: n >= 2)
        await eventually(lambda: client.stream.group_pending("slow", "g"), lambda p: p == [])


async def test_pending_entries_are_processed_first_on_start(client: FloClient) -> None:
    for i in range(5):
        await client.stream.append("jobs", f"job-{i}".encode())
    # A previous incarnation of consumer "c1" took the entries and died before acking.
    taken = await client.stream.group_read("jobs", "workers", "c1", StreamGroupReadOptions(count=5))
    assert len(taken.records) == 5
    seen: list[bytes] = []

    async def handle(ctx: StreamContext) -> None:
        seen.append(ctx.payload)

    worker = client.new_stream_worker(
        stream="jobs", group="workers", consumer="c1", handler=handle, block_ms=500
    )
    async with running(worker):
        await eventually(lambda: asyncio.sleep(0, len(seen)), lambda n: n == 5)
        await eventually(lambda: client.stream.group_pending("jobs", "workers"), lambda p: p == [])
    assert sorted(seen) == [f"job-{i}".encode() for i in range(5)]


async def test_stop_finishes_running_handlers_and_acks(client: FloClient) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def handle(ctx: StreamContext) -> None:
        started.set()
        await release.wait()

    await client.stream.append("s", b"one")
    worker = client.new_stream_worker(stream="s", group="g", handler=handle, block_ms=500)
    task = asyncio.create_task(worker.start())
    await asyncio.wait_for(started.wait(), 15)
    worker.stop()
    await asyncio.sleep(0.1)  # a moment in which a stop that did not wait would end
    assert not task.done()
    release.set()
    await asyncio.wait_for(task, 15)
    assert await client.stream.group_pending("s", "g") == []


async def test_a_stopped_worker_starts_again_and_reads_on(client: FloClient) -> None:
    """start() after a stop() of the same worker reads and acks again."""
    seen: list[bytes] = []
    worker = client.new_stream_worker(
        stream="again", group="g", handler=lambda ctx: seen.append(ctx.payload), block_ms=500
    )
    await client.stream.append("again", b"first")
    async with running(worker):
        await eventually(lambda: asyncio.sleep(0, list(seen)), lambda got: got == [b"first"])
    await client.stream.append("again", b"second")
    async with running(worker):
        await eventually(
            lambda: asyncio.sleep(0, list(seen)), lambda got: got == [b"first", b"second"]
        )
        await eventually(lambda: client.stream.group_pending("again", "g"), lambda p: p == [])


async def test_a_stop_while_a_read_prepares_ends_that_read(
    client: FloClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # stop() lands while a read looks up the stream's partitions, before it starts
    # waiting: the read must not wait out its 30 s block for a wake-up already given.
    worker = client.new_stream_worker(
        stream="quiet", group="g", handler=lambda ctx: None, block_ms=30_000
    )
    group_read, partitions = groups.read, StreamState.parts
    reading = stopped = False

    async def read(*args: Any, **kwargs: Any) -> Any:
        nonlocal reading
        reading = True
        return await group_read(*args, **kwargs)

    async def stop_then_look_up(self: StreamState, *args: Any) -> Any:
        nonlocal stopped
        if reading and not stopped:
            stopped = True
            worker.stop()
            await asyncio.sleep(0)  # as a lookup that goes to Redis would
        return await partitions(self, *args)

    monkeypatch.setattr(groups, "read", read)
    monkeypatch.setattr(StreamState, "parts", stop_then_look_up)
    await asyncio.wait_for(worker.start(), 10)
    assert stopped


@pytest.mark.slow
async def test_handlers_that_wait_run_side_by_side_up_to_concurrency(client: FloClient) -> None:
    release = asyncio.Event()
    running_now = peak = 0
    done: list[bytes] = []

    async def handle(ctx: StreamContext) -> None:
        nonlocal running_now, peak
        running_now += 1
        peak = max(peak, running_now)
        try:
            if ctx.payload.startswith(b"wait"):
                await release.wait()
        finally:
            running_now -= 1
        done.append(ctx.payload)

    for i in range(12):
        await client.stream.append("mix", (b"wait-" if i % 2 else b"quick-") + b"%d" % i)
    worker = client.new_stream_worker(
        stream="mix", group="g", handler=handle, concurrency=3, batch_size=10, block_ms=500
    )
    async with running(worker):
        # Three waiting handlers hold all three slots; the quick ones before them ran.
        await eventually(lambda: asyncio.sleep(0, running_now), lambda n: n == 3)
        await asyncio.sleep(0.2)  # a moment in which a fourth handler would start
        assert running_now == 3
        # A record behind a waiting one was not held up by it.
        assert sorted(done) == [b"quick-0", b"quick-2", b"quick-4"]
        release.set()
        await eventually(lambda: asyncio.sleep(0, len(done)), lambda n: n == 12)
        await eventually(lambda: client.stream.group_pending("mix", "g"), lambda p: p == [])
    assert peak == 3


@pytest.mark.slow
async def test_a_worker_reads_at_most_one_batch_ahead_of_its_handlers(client: FloClient) -> None:
    release = asyncio.Event()
    handled: list[bytes] = []

    async def handle(ctx: StreamContext) -> None:
        await release.wait()
        handled.append(ctx.payload)

    for i in range(30):
        await client.stream.append("ahead", b"%d" % i)
    worker = client.new_stream_worker(
        stream="ahead", group="g", consumer="c1", handler=handle, concurrency=2, batch_size=3,
        block_ms=500,
    )  # fmt: skip
    async with running(worker):
        pending = await eventually(
            lambda: client.stream.group_pending("ahead", "g", "c1"), lambda p: len(p) >= 5
        )
        await asyncio.sleep(0.3)  # a moment in which more would be read ahead
        pending = await client.stream.group_pending("ahead", "g", "c1")
        # Two handlers running, at most two batches read behind them, the rest unread.
        assert 5 <= len(pending) <= 2 + 2 * 3
        release.set()
        await eventually(lambda: asyncio.sleep(0, len(handled)), lambda n: n == 30)
        await eventually(lambda: client.stream.group_pending("ahead", "g"), lambda p: p == [])
    assert sorted(handled) == sorted(b"%d" % i for i in range(30))


@pytest.mark.parametrize("swallows", [False, True])
async def test_abort_leaves_records_not_yet_handled_pending(
    client: FloClient, swallows: bool
) -> None:
    """Also when the running handler swallows the abort's cancellation and returns (some
    client libraries do): its slot takes none of the records read behind it."""
    started: list[bytes] = []

    async def handle(ctx: StreamContext) -> None:
        started.append(ctx.payload)
        if swallows:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(30)
        else:
            await asyncio.sleep(30)

    ids = [(await client.stream.append("halt", b"%d" % i)).id for i in range(5)]
    worker = client.new_stream_worker(
        stream="halt", group="g", consumer="c1", handler=handle, concurrency=1, block_ms=500
    )
    task = asyncio.create_task(worker.start())
    await eventually(lambda: asyncio.sleep(0, len(started)), lambda n: n == 1)
    worker.abort()
    await asyncio.wait_for(task, 15)
    assert started == [b"0"]
    # Neither acked nor nacked: the four not started (and the first, unless its handler
    # returned) stay with c1, first deliveries, for a redelivery.
    pending = await client.stream.group_pending("halt", "g")
    kept = [(p.id, p.consumer, p.delivery_count) for p in pending]
    assert kept[-4:] == [(id, "c1", 1) for id in ids[1:]]
    if not swallows:
        assert len(kept) == 5


async def test_cancelling_a_stream_worker_ends_it_with_its_records_pending(
    client: FloClient,
) -> None:
    started = asyncio.Event()

    async def handle(ctx: StreamContext) -> None:
        started.set()
        await asyncio.sleep(30)

    for i in range(4):
        await client.stream.append("cut", b"%d" % i)
    worker = client.new_stream_worker(
        stream="cut", group="g", handler=handle, concurrency=2, block_ms=500
    )
    task = asyncio.create_task(worker.start())
    await asyncio.wait_for(started.wait(), 15)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, 15)
    assert len(await client.stream.group_pending("cut", "g")) == 4


_BOUND: contextvars.ContextVar[list[bytes] | None] = contextvars.ContextVar("bound", default=None)


async def test_each_record_runs_in_a_context_of_its_own(client: FloClient) -> None:
    """What a handler sets in a context variable (a logging binding, a span) is not
    seen by the records after it, as if each had a task of its own; a timeout inside a
    handler that waits still stops only that handler."""
    seen: list[list[bytes] | None] = []

    async def handle(ctx: StreamContext) -> None:
        seen.append(_BOUND.get())
        _BOUND.set([ctx.payload])
        if ctx.payload == b"wait":
            with contextlib.suppress(asyncio.TimeoutError):  # builtin TimeoutError from 3.11
                if sys.version_info >= (3, 11):  # asyncio.timeout cancels the current task
                    async with asyncio.timeout(0.05):
                        await asyncio.sleep(5)
                else:
                    await asyncio.wait_for(asyncio.sleep(5), 0.05)
            assert _BOUND.get() == [b"wait"]

    for payload in (b"a", b"wait", b"b", b"c"):
        await client.stream.append("ctx", payload)
    worker = client.new_stream_worker(
        stream="ctx", group="g", handler=handle, concurrency=1, block_ms=500
    )
    async with running(worker):
        await eventually(lambda: asyncio.sleep(0, len(seen)), lambda n: n == 4)
        await eventually(lambda: client.stream.group_pending("ctx", "g"), lambda p: p == [])
    assert seen == [None] * 4


async def test_an_observer_with_record_settled_hears_each_ack(client: FloClient) -> None:
    from flo_redis.worker.observe import WorkerObserver

    class Settled(WorkerObserver):
        def __init__(self) -> None:
            self.acked = 0

        def record_settled(self, stream: str, group: str, acked: bool) -> None:
            assert (stream, group) == ("orders", "billing")
            self.acked += acked

    for i in range(30):
        await client.stream.append("orders", f"order-{i}".encode())

    async def handle(ctx: StreamContext) -> None:
        pass

    worker = client.new_stream_worker(
        stream="orders", group="billing", handler=handle, batch_size=10, block_ms=500
    )
    observer = Settled()
    worker.observer = observer
    async with running(worker):
        await eventually(lambda: asyncio.sleep(0, observer.acked), lambda n: n == 30)
    assert await client.stream.group_pending("orders", "billing") == []
