"""``client.action.wait`` under load: hundreds of runs of one action, each waited on at a
random point (as soon as its invoke returns, when a worker may have taken and even ended
it already; while it runs; after it ended). Every wait returns the run's end, woken by
it, well before its 30 s timeout: on one Redis, on Valkey (``FLO_REDIS_TEST_SERVER=valkey``)
and on the 3-master cluster, with the scripts as Functions or by SHA
(``FLO_REDIS_SCRIPTS=evalsha``). The time from a run's end to its wait's return is
printed (p50/p99, run pytest with ``-s``), never asserted."""

from __future__ import annotations

import asyncio
import random
import statistics
import time
import uuid
from dataclasses import dataclass

import pytest
from polling import eventually

from flo_redis import ActionContext, FloClient, RunStatus

pytestmark = pytest.mark.slow  # hundreds of waits

RUNS = 300
WAIT_MS = 30_000
WHEN = ("as soon as invoked", "while running", "after the end")


@dataclass(frozen=True)
class Waited:
    when: str
    after_end_ms: float | None  # from the run's end to the return, when the wait began first


async def wait_on_one(client: FloClient, rng: random.Random) -> Waited:
    run_ms = rng.choice((0, 0, 5, 20, 50, 150))
    when = rng.choice(WHEN)
    await asyncio.sleep(rng.random() * 2)  # invokes spread over two seconds
    run_id = (await client.action.invoke("job", str(run_ms).encode())).run_id
    if when == "while running":
        await asyncio.sleep(rng.random() * run_ms / 1000)
    elif when == "after the end":
        await eventually(
            lambda: client.action.status(run_id),
            lambda s: s.status == RunStatus.COMPLETED,
            timeout=60,
            interval=0.05,
        )
    began_ms = time.time() * 1000
    # Woken by its run's end, not run on to its deadline: done within half of it.
    status = await asyncio.wait_for(client.action.wait(run_id, timeout_ms=WAIT_MS), WAIT_MS / 2000)
    returned_ms = time.time() * 1000
    assert (status.run_id, status.status, status.output) == (
        run_id,
        RunStatus.COMPLETED,
        str(run_ms).encode(),
    )
    ended = status.completed_at_ms
    assert ended is not None
    # Server TIME and this clock are the same host's: a wait begun before the end
    # measures how long the end took to reach it.
    return Waited(when, returned_ms - ended if ended > began_ms else None)


async def stress(url: str, label: str) -> None:
    namespace = f"ws-{uuid.uuid4().hex[:10]}"
    rng = random.Random(f"{label}-{namespace}")
    async with (
        FloClient(url, namespace=namespace) as producer,
        FloClient(url, namespace=namespace) as runner,
    ):
        await producer.action.register("job")
        worker = runner.new_action_worker(concurrency=50, block_ms=1000)

        @worker.action("job")
        async def job(ctx: ActionContext) -> bytes:
            await asyncio.sleep(int(ctx.input()) / 1000)
            return ctx.input()

        task = asyncio.create_task(worker.start())
        try:
            waited = await asyncio.gather(*(wait_on_one(producer, rng) for _ in range(RUNS)))
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)
    assert {w.when for w in waited} == set(WHEN)
    delays = sorted(w.after_end_ms for w in waited if w.after_end_ms is not None)
    if len(delays) >= 2:
        p50 = statistics.median(delays)
        p99 = delays[min(len(delays) - 1, round(0.99 * (len(delays) - 1)))]
        print(
            f"\nwait, {label}: from a run's end to its wait's return p50 {p50:.1f} ms, "
            f"p99 {p99:.1f} ms ({len(delays)} of {RUNS} waits began before the end)"
        )


async def test_hundreds_of_waits_on_one_action_each_return_their_runs_end(
    redis_url: str,
) -> None:
    await stress(redis_url, "one server")


@pytest.mark.cluster
async def test_hundreds_of_waits_on_one_action_of_a_cluster_each_return_their_runs_end(
    cluster_url: str,
) -> None:
    await stress(cluster_url, "cluster")
