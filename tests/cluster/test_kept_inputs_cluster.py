"""Completed runs' inputs kept with ``keep_inputs=True`` on a real 3-master Redis
Cluster: actions in several slots, each completing script reading its action's setting
on its own node; retention and a purge take the inputs with their runs."""

from __future__ import annotations

import uuid

import pytest
from redis.crc import key_slot

from flo_redis import ActionRegisterOptions, FloClient, RunStatus, WorkerAwaitOptions
from flo_redis._wire.keys import action_keys
from flo_redis.actions import CompleteItem
from flo_redis.actions.finding import NOT_KEPT

pytestmark = pytest.mark.cluster
NOW = WorkerAwaitOptions(block_ms=0)


async def test_inputs_are_kept_and_trimmed_in_every_slot(cluster_url: str) -> None:
    async with FloClient(cluster_url, namespace=f"c-{uuid.uuid4().hex[:10]}") as cclient:
        await kept_and_trimmed(cclient)


async def kept_and_trimmed(cclient: FloClient) -> None:
    names = [f"job{i}" for i in range(6)]
    slots = {key_slot(action_keys(cclient.namespace, n).runs.encode()) for n in names}
    assert len(slots) > 1  # the actions live in several slots
    opts = ActionRegisterOptions(keep_inputs=True, retention_count=4)
    for name in names:
        await cclient.action.register(name, options=opts)
    await cclient.worker.register("w", names)
    raw = cclient.session.redis
    for name in names:
        ids = [r.run_id for r in await cclient.action.invoke_many(name, [b"a", b"b", b"c"])]
        claimed = await cclient.worker.await_tasks("w", [name], 3, NOW)
        await cclient.worker.complete("w", name, claimed[0].run_id, b"one")
        await cclient.worker.complete_many(
            "w", name, [CompleteItem(c.run_id, b"many", token=c.token) for c in claimed[1:]]
        )
        for run_id, data in zip(ids, [b"a", b"b", b"c"], strict=True):
            details = await cclient.action.details(run_id)
            assert (details.status.status, details.input) == (RunStatus.COMPLETED, data)
        # Past the count of 4 kept runs, the oldest go with their inputs.
        more = [r.run_id for r in await cclient.action.invoke_many(name, [b"d", b"e"])]
        for c in await cclient.worker.await_tasks("w", [name], 2, NOW):
            await cclient.worker.complete("w", name, c.run_id, b"")
        keys = action_keys(cclient.namespace, name)
        kept = {m.decode() for m in await raw.zrange(keys.done, 0, -1)}
        assert kept == {*ids[1:], *more}
        assert {k.decode() for k in await raw.hkeys(keys.inputs)} == kept

    # A purge takes them; an action without the setting keeps none.
    await cclient.action.purge("job0", "completed")
    assert await raw.hlen(action_keys(cclient.namespace, "job0").inputs) == 0
    await cclient.action.register("job1")
    run = await cclient.action.invoke("job1", b"x")
    await cclient.worker.await_tasks("w", ["job1"], 1, NOW)
    await cclient.worker.complete("w", "job1", run.run_id, b"")
    assert (await cclient.action.details(run.run_id)).input_missing == NOT_KEPT
