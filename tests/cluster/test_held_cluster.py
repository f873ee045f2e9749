"""What each worker holds, on a real 3-master Redis Cluster: one action_held call per
action, each on the node of that action's slot, and the worker's record in the
registry's slot naming its process."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.crc import key_slot

from flo_redis import FloClient, WorkerAwaitOptions, WorkerRegisterOptions
from flo_redis._wire.keys import action_keys
from flo_redis.actions.held import held_runs
from flo_redis.ops.discovery import all_workers

pytestmark = pytest.mark.cluster
NOW = WorkerAwaitOptions(block_ms=0)


@pytest.fixture
async def cclient(cluster_url: str) -> AsyncIterator[FloClient]:
    async with FloClient(cluster_url, namespace=f"c-{uuid.uuid4().hex[:10]}") as c:
        yield c


async def test_a_worker_holding_runs_in_several_slots_is_answered_whole(
    cclient: FloClient,
) -> None:
    names = [f"job{i}" for i in range(6)]
    slots = {key_slot(action_keys(cclient.namespace, n).runs.encode()) for n in names}
    assert len(slots) > 1  # the actions live in several slots
    for name in names:
        await cclient.action.register(name)
        await cclient.action.invoke(name, b"x")
    await cclient.worker.register("w1", names, WorkerRegisterOptions(concurrency=10))
    claimed = await cclient.worker.await_tasks("w1", names, len(names), NOW)
    assert len(claimed) == len(names)

    (info,) = await all_workers(cclient)
    runs = (await held_runs(cclient.session, [info]))["w1"]

    assert info.pid == os.getpid()
    assert (runs.held, runs.complete) == (len(names), True)
    assert sorted(r.run_id for r in runs.runs) == sorted(c.run_id for c in claimed)
    assert {r.action for r in runs.runs} == set(names)
