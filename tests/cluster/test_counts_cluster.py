"""Counts, pages, bulk steering, stream groups and discovery on a real 3-master Redis
Cluster: every script is single-slot, the registries live in their own slots."""

from __future__ import annotations

import pytest

from flo_redis import (
    ActionInvokeOptions,
    FloClient,
    StreamGroupReadOptions,
    WorkerAwaitOptions,
    WorkerFailOptions,
)
from flo_redis.ops.discovery import overview

pytestmark = pytest.mark.cluster


async def test_counts_and_steering_on_a_cluster(cclient: FloClient) -> None:
    names = [f"job{i}" for i in range(4)]  # spread over the cluster's slots
    for name in names:
        await cclient.action.register(name)
        await cclient.action.invoke_many(name, [b"x"] * 5)
    await cclient.worker.register("w1", names)
    for name in names:
        [run] = await cclient.worker.await_tasks("w1", [name], 1, WorkerAwaitOptions(block_ms=0))
        await cclient.worker.fail("w1", name, run.run_id, "boom", WorkerFailOptions(retry=False))
    ov = await overview(cclient)
    assert [(c.action, c.pending, c.failed) for c in ov.actions] == [(n, 4, 1) for n in names]
    for name in names:
        assert (await cclient.action.requeue_failed(name)).count == 1
        page = await cclient.action.runs(name, "pending", limit=2)
        assert len(page.runs) == 2 and page.cursor is not None
        assert (await cclient.action.purge(name, "pending")).count == 5
    assert cclient.namespace in await cclient.namespaces()


async def test_finding_runs_and_reading_their_input_on_a_cluster(cclient: FloClient) -> None:
    names = [f"job{i}" for i in range(4)]
    await cclient.worker.register("w1", names)
    for name in names:
        await cclient.action.register(name)
        run = await cclient.action.invoke(
            name, f"input of {name}".encode(), ActionInvokeOptions(idempotency_key=f"k-{name}")
        )
        await cclient.worker.await_tasks("w1", [name], 1, WorkerAwaitOptions(block_ms=0))
        await cclient.worker.fail(
            "w1", name, run.run_id, f"{name} broke", WorkerFailOptions(retry=False)
        )
        details = await cclient.action.details(run.run_id)
        assert (details.input, details.idempotency_key) == (
            f"input of {name}".encode(),
            f"k-{name}",
        )
        for query, by in ((f"{name.upper()} BROKE", "error"), (f"k-{name}", "idempotency key"),
                          (run.run_id, "run id")):  # fmt: skip
            found = await cclient.action.find(name, query)
            assert [(f.run.run_id, f.by) for f in found.runs] == [(run.run_id, by)]


async def test_stream_groups_on_a_cluster(cclient: FloClient) -> None:
    await cclient.stream.create("orders", partitions=3)
    await cclient.stream.group_join("orders", "billing", "c1")
    for i in range(6):
        await cclient.stream.append("orders", f"o{i}".encode())
    read = await cclient.stream.group_read(
        "orders", "billing", "c1", StreamGroupReadOptions(count=2)
    )
    assert len(read.records) == 2
    [group] = await cclient.stream.groups("orders")
    assert (group.partitions, group.lag, group.pending) == (3, 4, 2)
    assert await cclient.stream.list() == ("orders",)
