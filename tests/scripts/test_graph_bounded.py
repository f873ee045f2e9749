"""A parent of 10,000 children and a run of 10,000 parents: every script call stays under
50 ms (SLOWLOG), and once the runs are forgotten, no key of their graph is left.

A root run; 10,000 children invoked to wait for it (invoke_many); a join invoked to wait
for all of them (one invoke of 10,000 parents). A worker of concurrency 100 runs them
all; then they are purged, their graph entries after them, a page at a time. The server
is private to this module, with ``slowlog-log-slower-than`` at 50 ms."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from polling import eventually, registered, running
from slowlog import slow_script_work, watched_clients

from flo_redis import (
    ActionContext,
    ActionInvokeOptions,
    FloClient,
    RunStatus,
)
from flo_redis._wire.keys import action_keys

pytestmark = pytest.mark.slow

CHILDREN = 10_000
ACTIONS = ("root", "leaf", "join")


@pytest.fixture
async def pair(slowlog_url: str) -> AsyncIterator[tuple[FloClient, aioredis.Redis]]:
    async with watched_clients(slowlog_url, "graph") as both:
        yield both


async def test_a_10k_fan_out_and_fan_in_keep_every_call_short_and_leave_nothing(
    pair: tuple[FloClient, aioredis.Redis],
) -> None:
    client, conn = pair
    await conn.slowlog_reset()
    worker = client.new_action_worker(block_ms=500, concurrency=100)
    seen: dict[str, int] = {}

    async def handle(ctx: ActionContext) -> bytes:
        if ctx.action_name == "join":
            page, count = await ctx.parents(count=1000), 0
            while True:
                count += len(page.items)
                if page.after is None:
                    break
                page = await ctx.parents(after=page.after, count=1000)
            seen["parents"] = count
        return b"ok"

    for name in ACTIONS:
        worker.register_action(name, handle)
    async with running(worker, ready=registered):
        root = (await client.action.invoke("root", b"")).run_id
        opts = ActionInvokeOptions(depends_on=[root])
        leaves = [r.run_id for r in await client.action.invoke_many("leaf", [b""] * CHILDREN, opts)]
        join = (
            await client.action.invoke("join", b"", ActionInvokeOptions(depends_on=leaves))
        ).run_id
        status = await client.action.wait(join, 120_000)
        assert status.status == RunStatus.COMPLETED
        assert seen["parents"] == CHILDREN
        # Forgotten in bulk (retention forgets 100 a call; purge 500), their graph after.
        for name in ACTIONS:
            await client.action.purge(name, "completed")

        async def graph_keys() -> list[str]:
            left = []
            for name in ACTIONS:
                k = action_keys(client.namespace, name)
                for key in (k.graph, k.graph_idx, k.outbox, k.waiting):
                    if await conn.exists(key):
                        left.append(key)
            return left

        await eventually(graph_keys, lambda left: left == [], timeout=60, what="no graph key")
    assert await slow_script_work(conn) == []
