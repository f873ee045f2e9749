"""Known histories to hold counts, tables and metrics against: runs in every state of
one action, and a stream group with a handed-out and a dead-lettered record."""

from __future__ import annotations

from typing import Any

from polling import eventually

from flo_redis import (
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    StreamGroupJoinOptions,
    StreamGroupReadOptions,
    WorkerAwaitOptions,
    WorkerFailOptions,
)
from flo_redis.actions.inspect import ActionCounts

NOW = WorkerAwaitOptions(block_ms=0)


async def claim(client: FloClient, n: int, action: str = "job") -> list[str]:
    runs = await client.worker.await_tasks("w1", [action], n, NOW)
    assert len(runs) == n, f"claimed {len(runs)} of {n}"
    return [r.run_id for r in runs]


async def history(client: FloClient) -> dict[str, Any]:
    """A known history: 10 ready and 2 delayed invokes; one run times out, three complete,
    two fail for good, one is running; the rest wait."""
    await client.action.register(
        "job", options=ActionRegisterOptions(timeout_ms=300, max_retries=1)
    )
    await client.worker.register("w1", ["job"])
    ready = [(await client.action.invoke("job", f"r{i}".encode())).run_id for i in range(10)]
    delayed = [
        (await client.action.invoke("job", b"d", ActionInvokeOptions(delay_ms=600_000))).run_id
        for _ in range(2)
    ]
    [expired] = await claim(client, 1)

    async def timed_out() -> ActionCounts:
        await client.action.reap("job")
        return await client.action.counts("job")

    await eventually(timed_out, lambda c: c.timed_out == 1)
    taken = await claim(client, 5)
    for run_id in taken[:3]:
        await client.worker.complete("w1", "job", run_id, b"ok")
    for run_id in taken[3:]:
        await client.worker.fail("w1", "job", run_id, "boom", WorkerFailOptions(retry=False))
    [running] = await claim(client, 1)
    return {
        "ready": ready,
        "delayed": delayed,
        "expired": expired,
        "completed": taken[:3],
        "failed": taken[3:],
        "running": running,
        "waiting": ready[7:],
    }


async def streams_history(client: FloClient) -> None:
    """Stream 'events', group 'billing': 3 records, one handed out, one dead-lettered."""
    await client.stream.group_join(
        "events", "billing", "c1", StreamGroupJoinOptions(ack_timeout_ms=0, max_deliver=1)
    )
    for i in range(4):
        await client.stream.append("events", f"e{i}".encode())
    read = await client.stream.group_read(
        "events", "billing", "c1", StreamGroupReadOptions(count=2)
    )
    await client.stream.group_nack("events", "billing", [read.records[0].id])
