"""What a durability level promises across a failover: a write answered at
``replicated`` is on the replica that takes over, while a write answered at ``PRIMARY``
(or one that raised NotDurableError) may be gone when the primary dies before its
replica received it.
"""

from __future__ import annotations

import signal

import pytest
import redis
from replicas import ReplicaSet, stopped

from flo_redis import Durability, FloClient, NotDurableError, NotFoundError


async def test_a_replicated_write_survives_the_failover_a_primary_one_may_not(
    namespace: str,
) -> None:
    servers = ReplicaSet(replicas=1).start()
    try:
        level = Durability.replicated(1, timeout_ms=300)
        async with FloClient(servers.url, namespace=namespace, durability=level) as client:
            await client.action.register("charge")
            kept = await client.action.invoke("charge", b"kept")
            with stopped(servers.replica):
                # Cut the replica off too: what the primary writes from now on never
                # reaches it (a stopped process would still read its socket's buffer).
                with redis.Redis(port=servers.primary.port) as raw:
                    raw.client_kill_filter(_type="replica")
                answered = await client.action.invoke("charge", b"p", durability="primary")
                with pytest.raises(NotDurableError):
                    await client.action.invoke("charge", b"not durable")
                not_durable = (await client.action.runs("charge")).runs[-1]
                assert not_durable.run_id not in (kept.run_id, answered.run_id)
                # The primary dies before its replica received the last two writes.
                servers.primary.stop(signal.SIGKILL)
        new_primary = servers.promote()
        async with FloClient(new_primary.url, namespace=namespace) as client:
            assert (await client.action.status(kept.run_id)).run_id == kept.run_id
            for lost in (answered, not_durable):
                with pytest.raises(NotFoundError):
                    await client.action.status(lost.run_id)
    finally:
        servers.stop()
