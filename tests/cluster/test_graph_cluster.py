"""Runs that depend on runs on a real 3-master Redis Cluster: parents and children live in
different hash slots, so every step between them is a message carried by the workers'
forwarders; a graph of three levels runs each run once, after all its parents, and
leaves nothing behind once its runs are forgotten."""

from __future__ import annotations

import random

import pytest
from polling import eventually, registered, running
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from flo_redis import (
    ActionContext,
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    RunStatus,
)
from flo_redis._wire.keys import action_keys
from flo_redis.types import Dependency

pytestmark = pytest.mark.cluster
LEVELS = ("plan", "build", "ship")


async def test_a_three_level_graph_across_slots_runs_each_run_once_after_its_parents(
    cclient: FloClient, cluster_nodes: object
) -> None:
    slots = {key_slot(action_keys(cclient.namespace, n).runs.encode()) for n in LEVELS}
    assert len(slots) == 3  # each level in a slot of its own
    rng = random.Random(7)
    worker = cclient.new_action_worker(block_ms=500, concurrency=16)
    ran: list[str] = []
    ended: dict[str, int] = {}
    clock = iter(range(1_000_000))

    async def handle(ctx: ActionContext) -> bytes:
        page = await ctx.parents(count=1000)
        for parent in page.items:
            assert parent.status == RunStatus.COMPLETED
            assert ended[parent.run_id] >= 0  # every parent ended before this started
        ran.append(ctx.task_id)
        if ctx.input() == b"fail":
            raise RuntimeError("planned")
        ended[ctx.task_id] = next(clock)
        return str(len(page.items)).encode()

    for name in LEVELS:
        worker.register_action(name, handle, ActionRegisterOptions(max_retries=1))
    async with running(worker, ready=registered):
        plans = [(await cclient.action.invoke("plan", b"")).run_id for _ in range(20)]
        doomed = (await cclient.action.invoke("plan", b"fail")).run_id
        builds, ships = [], []
        for _ in range(40):
            parents = rng.sample(plans, rng.choice((1, 1, 3)))
            opts = ActionInvokeOptions(depends_on=parents)
            builds.append((await cclient.action.invoke("build", b"", opts)).run_id)
        for _ in range(20):
            opts = ActionInvokeOptions(depends_on=rng.sample(builds, 4))
            ships.append((await cclient.action.invoke("ship", b"", opts)).run_id)
        follows = (
            await cclient.action.invoke(
                "ship", b"", ActionInvokeOptions(depends_on=[plans[0], doomed])
            )
        ).run_id
        ignores = (
            await cclient.action.invoke(
                "ship",
                b"",
                ActionInvokeOptions(depends_on=[plans[0], Dependency(doomed, "ignore")]),
            )
        ).run_id
        for run_id in [*ships, follows, ignores]:
            await cclient.action.wait(run_id, 30_000)
    everything = [*plans, *builds, *ships]
    assert sorted(ran) == sorted([*everything, doomed, ignores])  # each once
    for run_id in [*everything, ignores]:
        assert (await cclient.action.status(run_id)).status == RunStatus.COMPLETED
    assert (await cclient.action.status(follows)).error_message == f"parent {doomed} ended FAILED"
    for ship in ships:
        assert (await cclient.action.status(ship)).output == b"4"


async def test_a_finished_graph_leaves_no_key_once_its_runs_are_forgotten(
    cclient: FloClient, craw: RedisCluster
) -> None:
    worker = cclient.new_action_worker(block_ms=500, concurrency=8)

    async def handle(ctx: ActionContext) -> bytes:
        return b"ok"

    for name in LEVELS:
        worker.register_action(name, handle)
    async with running(worker, ready=registered):
        top = (await cclient.action.invoke("plan", b"")).run_id
        mids = [
            (
                await cclient.action.invoke("build", b"", ActionInvokeOptions(depends_on=[top]))
            ).run_id
            for _ in range(5)
        ]
        last = (
            await cclient.action.invoke("ship", b"", ActionInvokeOptions(depends_on=mids))
        ).run_id
        assert (await cclient.action.wait(last, 30_000)).status == RunStatus.COMPLETED
        # Kept for one run only from now on: later runs push the graph's runs out, and
        # their graph entries go after them.
        for name in LEVELS:
            await cclient.action.register(name, options=ActionRegisterOptions(retention_count=1))
        for name in LEVELS:
            for _ in range(2):
                await cclient.action.wait((await cclient.action.invoke(name, b"")).run_id, 30_000)

        async def graph_keys() -> list[str]:
            left = []
            for name in LEVELS:
                k = action_keys(cclient.namespace, name)
                for key in (k.graph, k.graph_idx, k.outbox, k.waiting):
                    if await craw.exists(key):
                        left.append(key)
            return left

        await eventually(graph_keys, lambda left: left == [], timeout=30, what="no graph key")
