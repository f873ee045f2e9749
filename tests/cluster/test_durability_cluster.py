"""Durability on a Redis Cluster whose masters each have a replica: a write's WAIT goes
to the node that ran its script (the master owning the key's slot), so a write in a
slot whose master's replica is stopped is not durable, and one in another master's slot
is, at the same moment.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.crc import key_slot
from redis_server import RedisCluster
from replicas import stopped

from flo_redis import Durability, FloClient, NotDurableError, RunStatus
from flo_redis._wire.keys import action_keys, stream_keys
from flo_redis.sync import SyncFloClient

QUICK = Durability.replicated(1, timeout_ms=300)
PATIENT = Durability.replicated(1, timeout_ms=5000)


@pytest.fixture(scope="module")
def replicated_cluster() -> Iterator[RedisCluster]:
    cluster = RedisCluster(masters=3, replicas=1).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def owner(cluster: RedisCluster, key: str) -> int:
    return cluster.owner_port(key_slot(key.encode()))


def two_actions_on_two_masters(cluster: RedisCluster, namespace: str) -> tuple[str, str]:
    """Two action names whose queues live on different masters."""
    first = "a0"
    home = owner(cluster, action_keys(namespace, first).runs)
    for n in range(1, 200):
        other = f"a{n}"
        if owner(cluster, action_keys(namespace, other).runs) != home:
            return first, other
    raise AssertionError("200 action names all hashed to one master")


async def test_the_wait_goes_to_the_master_that_ran_the_write(
    replicated_cluster: RedisCluster, namespace: str
) -> None:
    cluster = replicated_cluster
    frozen_action, live_action = two_actions_on_two_masters(cluster, namespace)
    async with FloClient(cluster.url, namespace=namespace, durability=QUICK) as client:
        for name in (frozen_action, live_action):
            await client.action.register(name)
            # every master answered durably (given time: a loaded machine's replica may
            # take longer than QUICK's 300 ms to acknowledge)
            await client.action.invoke(name, b"warm", durability=PATIENT)
        master = owner(cluster, action_keys(namespace, frozen_action).runs)
        with stopped(cluster.replica_of(master)):
            with pytest.raises(NotDurableError) as caught:
                await client.action.invoke(frozen_action, b"x")
            run = await client.action.invoke(live_action, b"y", durability=PATIENT)
        assert caught.value.reached == 0 and caught.value.operation == "invoke"
        assert (await client.action.status(run.run_id)).status == RunStatus.PENDING
        assert len((await client.action.runs(frozen_action)).runs) == 2  # it was applied


async def test_appends_and_blocking_invokes_wait_on_the_slots_master(
    replicated_cluster: RedisCluster, namespace: str
) -> None:
    cluster = replicated_cluster
    async with FloClient(cluster.url, namespace=namespace) as client:
        await client.action.register("resize")
        appended = await client.stream.append("events", b"e", durability=QUICK)
        master = owner(cluster, stream_keys(namespace, "events").log)
        with stopped(cluster.replica_of(master)), pytest.raises(NotDurableError):
            await client.stream.append("events", b"f", durability=QUICK)
        assert appended.id is not None
    with SyncFloClient(cluster.url, namespace=namespace, durability=QUICK) as flo:
        flo.action.invoke("resize", b"a")
        master = owner(cluster, action_keys(namespace, "resize").runs)
        with stopped(cluster.replica_of(master)), pytest.raises(NotDurableError):
            flo.action.invoke("resize", b"b")
