"""The per-minute history on a real 3-master Redis Cluster: each action's ring lives in
its queue's slot, counted by the scripts that end and retry runs there."""

from __future__ import annotations

import pytest

from flo_redis import (
    ActionRegisterOptions,
    FloClient,
    WorkerAwaitOptions,
    WorkerFailOptions,
)
from flo_redis._wire.keys import action_keys
from flo_redis.actions import CompleteItem

pytestmark = pytest.mark.cluster
NOW = WorkerAwaitOptions(block_ms=0)


async def test_each_actions_history_is_counted_in_its_own_slot(cclient: FloClient) -> None:
    names = [f"job{i}" for i in range(4)]  # spread over the cluster's slots
    assert len({action_keys(cclient.namespace, n).tag for n in names}) == 4
    for name in names:
        await cclient.action.register(name, options=ActionRegisterOptions(max_retries=2))
        await cclient.action.invoke_many(name, [b"x"] * 6)
    await cclient.worker.register("w1", names)
    for i, name in enumerate(names):
        runs = await cclient.worker.await_tasks("w1", [name], 6, NOW)
        items = [CompleteItem(r.run_id, b"ok", token=r.token) for r in runs[: i + 1]]
        assert await cclient.worker.complete_many("w1", name, items) == [None] * (i + 1)
        await cclient.worker.fail("w1", name, runs[-1].run_id, "again")
        final = WorkerFailOptions(retry=False)
        await cclient.worker.fail("w1", name, runs[-2].run_id, "boom", final)
    for i, name in enumerate(names):
        h = await cclient.action.history(name, since="15m")
        assert (h.completed, h.failed, h.retried) == (i + 1, 1, 1)
        assert h.duration.count == h.pickup.count == i + 3
        counts = await cclient.action.counts(name)
        assert (counts.completed_last_hour, counts.failed_last_hour) == (i + 1, 1)
