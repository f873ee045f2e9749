"""A worker fires each schedule occurrence when it comes, not at its next upkeep: the
reaper learns from each firing when the action's next occurrence is due (on Redis's
clock) and wakes then, and fires what fell due while no worker was up at its first
pass. The occurrences fired are anchor + k * interval, exactly."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import redis.asyncio as aioredis
from polling import eventually, running
from schedule_runs import fired_occurrences

from flo_redis import ActionContext, FloClient
from flo_redis._wire.keys import action_keys
from flo_redis.worker.reaper import Reaper

pytestmark = pytest.mark.slow  # waits out several one-second occurrences


@contextlib.asynccontextmanager
async def reaping(reaper: Reaper) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(reaper.run(stop), name="test reaper")
    try:
        yield
    finally:
        stop.set()
        await task


async def test_the_reaper_fires_each_occurrence_without_waiting_for_its_upkeep(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    await client.action.register("tick")
    await client.action.schedule("tick", timedelta(seconds=1), missed="all")
    # An upkeep once an hour: every firing below is the reaper's timer at an occurrence.
    reaper = Reaper(client.session, ["tick"], upkeep_every_s=3600)
    async with reaping(reaper):
        fired = await eventually(
            lambda: fired_occurrences(raw, namespace, "tick"), lambda o: len(o) >= 4, timeout=30
        )
    assert fired[:4] == [fired[0] + 1000 * k for k in range(4)]


async def test_a_cron_worker_keeps_its_interval_s_phase(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    worker = client.new_action_worker(worker_id="cadence", block_ms=200)

    @worker.cron(timedelta(seconds=1))
    async def beat(ctx: ActionContext) -> None:
        pass

    async with running(worker):
        await eventually(
            lambda: fired_occurrences(raw, namespace, "beat"), lambda o: len(o) >= 4, timeout=30
        )
    fired = await fired_occurrences(raw, namespace, "beat")
    schedule = await client.action.get_schedule("beat")
    # One grid, never shifted by how late each was fired, none skipped.
    assert fired == [fired[0] + 1000 * k for k in range(len(fired))]
    assert schedule.next_due_ms == fired[-1] + 1000
    keys = action_keys(namespace, "beat")
    last_run = await raw.hget(keys.idempotency, f"schedule:beat:{fired[-1]}")
    assert schedule.last_due_ms == fired[-1] and schedule.last_run_id == last_run.decode()
