"""Claiming ahead: a worker with short handlers holds claimed runs in hand while its
handlers run, never starts more handlers than its concurrency, and gives back unspent
what it holds in hand when it stops, when a run's lease is half gone before a slot frees,
or when a run in hand is cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest
from polling import eventually

from flo_redis import ActionContext, ActionRegisterOptions, ActionWorker, FloClient, RunStatus
from flo_redis.worker.observe import WorkerObserver


class Held(WorkerObserver):
    """Counts runs handed to the worker and handlers ended: the difference is what the
    worker holds (running, or in hand)."""

    def __init__(self) -> None:
        self.claimed = 0
        self.ended = 0
        self.most_held = 0
        self.released = 0

    def run_claimed(self, action: str, pickup_s: float) -> None:
        self.claimed += 1
        self.most_held = max(self.most_held, self.claimed - self.ended)

    def run_handled(self, action: str, result: str, duration_s: float) -> None:
        self.ended += 1

    def run_released(self, action: str) -> None:
        self.released += 1


def new_worker(client: FloClient, concurrency: int) -> tuple[ActionWorker, Held]:
    worker = client.new_action_worker(block_ms=500, concurrency=concurrency)
    held = worker.observer = Held()
    return worker, held


async def counts_of(client: FloClient, action: str) -> tuple[int, int]:
    counts = await client.action.counts(action)
    return counts.pending, counts.completed


async def work_through(client: FloClient, worker: ActionWorker, action: str, n: int) -> None:
    """Run ``worker`` until all ``n`` runs of ``action`` completed, then stop it."""
    task = asyncio.create_task(worker.start())
    try:
        await eventually(lambda: counts_of(client, action), lambda c: c == (0, n), timeout=60)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)


@pytest.mark.slow
async def test_runs_in_hand_never_start_beyond_the_concurrency(client: FloClient) -> None:
    worker, held = new_worker(client, concurrency=4)
    running_now = peak = 0
    calls: list[str] = []

    @worker.action("short")
    async def short(ctx: ActionContext) -> bytes:
        nonlocal running_now, peak
        running_now += 1
        peak = max(peak, running_now)
        calls.append(ctx.task_id)
        await asyncio.sleep(0.001 * (len(calls) % 3))
        running_now -= 1
        return b""

    await client.action.register("short")
    runs = await client.action.invoke_many("short", [b""] * 600)
    await work_through(client, worker, "short", 600)
    assert peak <= 4
    assert held.most_held > 4  # it did claim ahead of its handlers
    assert sorted(calls) == sorted(r.run_id for r in runs)  # each run once


async def test_runs_in_hand_are_given_back_unspent_when_the_worker_stops(
    client: FloClient,
) -> None:
    worker, held = new_worker(client, concurrency=2)
    gate = asyncio.Event()
    calls: list[str] = []

    @worker.action("backlog")
    async def backlog(ctx: ActionContext) -> bytes:
        calls.append(ctx.task_id)
        if len(calls) > 60:
            await gate.wait()  # the worker is busy: what it claims ahead stays in hand
        return b""

    await client.action.register("backlog")
    runs = await client.action.invoke_many("backlog", [b""] * 200)
    task = asyncio.create_task(worker.start())
    try:
        await eventually(lambda: asyncio.sleep(0, len(calls)), lambda n: n >= 62)
        await eventually(lambda: asyncio.sleep(0, held.claimed - held.ended), lambda n: n > 2)
    finally:
        worker.stop()
        gate.set()
        await asyncio.wait_for(task, 30)
    assert len(calls) == 62  # the two running handlers finished; nothing in hand began
    assert held.released >= 1
    for run in runs:
        status = await client.action.status(run.run_id)
        if run.run_id in calls:
            assert (status.status, status.attempt) == (RunStatus.COMPLETED, 1)
        else:
            assert (status.status, status.attempt) == (RunStatus.PENDING, 0)


@pytest.mark.slow
async def test_a_run_in_hand_whose_lease_is_half_gone_is_given_back(client: FloClient) -> None:
    worker, held = new_worker(client, concurrency=1)
    calls: list[str] = []

    @worker.action("leased", ActionRegisterOptions(timeout_ms=1000))
    async def leased(ctx: ActionContext) -> bytes:
        calls.append(ctx.task_id)
        if len(calls) == 30:
            await asyncio.sleep(0.8)  # past half the lease of the run in hand
        return b""

    await client.action.register("leased", options=ActionRegisterOptions(timeout_ms=1000))
    runs = await client.action.invoke_many("leased", [b""] * 60)
    await work_through(client, worker, "leased", 60)
    assert held.released >= 1  # given back, then claimed again
    assert len(calls) == 60  # no run began twice
    for run in runs:
        status = await client.action.status(run.run_id)
        assert (status.status, status.attempt) == (RunStatus.COMPLETED, 1)


async def test_a_cancelled_run_in_hand_is_not_started(
    client: FloClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="flo_redis.worker")
    worker, held = new_worker(client, concurrency=1)
    gate = asyncio.Event()
    calls: list[str] = []

    @worker.action("doomed")
    async def doomed(ctx: ActionContext) -> bytes:
        calls.append(ctx.task_id)
        if len(calls) == 20:
            await gate.wait()
        return b""

    await client.action.register("doomed")
    await client.action.invoke_many("doomed", [b""] * 100)
    task = asyncio.create_task(worker.start())
    try:
        await eventually(lambda: asyncio.sleep(0, len(calls)), lambda n: n == 20)
        await eventually(lambda: asyncio.sleep(0, held.claimed - held.ended), lambda n: n > 1)
        # Everything the worker holds but the run in its handler: the run in hand.
        page = await client.action.runs("doomed", "running", limit=100)
        in_hand = [r.run_id for r in page.runs if r.run_id != calls[-1]]
        assert in_hand
        for run_id in in_hand:
            await client.action.cancel(run_id)
        await eventually(
            lambda: asyncio.sleep(0, caplog.text),
            lambda text: all(f"run {r} was cancelled before" in text for r in in_hand),
        )
    finally:
        gate.set()
        with contextlib.suppress(Exception):
            await eventually(lambda: counts_of(client, "doomed"), lambda c: c[0] == 0, timeout=60)
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert not set(in_hand) & set(calls)
    for run_id in in_hand:
        assert (await client.action.status(run_id)).status == RunStatus.CANCELLED
