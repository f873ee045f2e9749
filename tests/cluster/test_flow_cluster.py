"""Flow control by key on a real 3-master Redis Cluster: a key's state lives in its
action's hash slot, so the claim, hand-off, complete and reap scripts enforce per-key
concurrency and fair turns there, and an idle key leaves nothing on any node."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from polling import eventually

from flo_redis import (
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    FlowControl,
    WorkerAwaitOptions,
)
from flo_redis._wire.gateway import ACTION_REAP
from flo_redis._wire.keys import ActionKeys, action_keys

pytestmark = pytest.mark.cluster
NOW = WorkerAwaitOptions(block_ms=0)


@pytest.fixture
async def cclient(cluster_url: str) -> AsyncIterator[FloClient]:
    async with FloClient(cluster_url, namespace=f"c-{uuid.uuid4().hex[:10]}") as c:
        yield c


async def test_per_key_limits_and_fair_turns_hold_in_every_slot(cclient: FloClient) -> None:
    names = [f"job{i}" for i in range(4)]  # spread over the cluster's slots
    flow = FlowControl(concurrency=2, fair=True)
    for name in names:
        await cclient.action.register(name, options=ActionRegisterOptions(flow=flow))
        for key, n in (("flood", 30), ("a", 1), ("b", 1)):
            for _ in range(n):
                await cclient.action.invoke(name, b"", ActionInvokeOptions(flow_key=key))
    await cclient.worker.register("w1", names)
    conn = cclient.session.redis
    for name in names:
        taken = await cclient.worker.await_tasks("w1", [name], 10, NOW)
        # The flood at its limit of two, and each other key's run in its turn.
        assert len(taken) == 4
        busiest = (await cclient.action.flow_keys(name)).keys[0]
        assert (busiest.key, busiest.running, busiest.held) == ("flood", 2, 28)
        done = 0
        while taken:
            for run in taken:
                await cclient.worker.complete("w1", name, run.run_id, b"ok")
                done += 1
            taken = await cclient.worker.await_tasks("w1", [name], 10, NOW)
            assert len(taken) <= 2  # the flood alone now: two at a time
        assert done == 32
        keys = action_keys(cclient.namespace, name)

        async def left(keys: ActionKeys = keys) -> int:
            await ACTION_REAP(cclient.session, keys, [100])
            found = 0
            for key in (keys.flows, keys.flow_held, keys.flow_vt):
                found += await conn.exists(key)
            return found

        await eventually(left, lambda n: n == 0)
