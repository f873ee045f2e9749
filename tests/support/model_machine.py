"""What the model tests (``test_model_*.py``) share: a state machine that drives a client
of its own namespace on its own event loop, and the Hypothesis settings they run under.

``FLO_MODEL_EXAMPLES`` sets how many histories to try (default 25; e.g. 500 for a long
run), ``FLO_MODEL_STEPS`` how many steps each (default 50).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import redis.asyncio as aioredis
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test
from redis.asyncio.cluster import RedisCluster as ClusterClient
from redis_server import cluster_client

from flo_redis import FloClient

T = TypeVar("T")
EXAMPLES = int(os.environ.get("FLO_MODEL_EXAMPLES", "25"))
STEPS = int(os.environ.get("FLO_MODEL_STEPS", "50"))


class ClientMachine(RuleBasedStateMachine):
    """A connected ``client`` in a fresh namespace named ``<prefix>-<random>`` (of a
    server, or of a cluster for a ``redis+cluster://`` URL), a raw client ``raw`` for
    looking under the hood, and ``run`` to await on the machine's loop. Teardown closes
    ``close_first()``'s work, then the client, removes the namespace's keys and closes
    the loop."""

    def __init__(self, redis_url: str, prefix: str) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.url = redis_url
        self.namespace = f"{prefix}-{os.urandom(5).hex()}"
        self.raw = raw_client(redis_url)
        self._nodes: dict[tuple[str, int], aioredis.Redis] = {}
        self.client = FloClient(redis_url, namespace=self.namespace)
        self.run(self.client.connect())

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    async def node(self, key: str) -> Any:
        """A client of the server that holds ``key``, for what a cluster client does not
        route (a sharded subscription, ``PUBSUB SHARDNUMSUB``): ``raw`` on one server, a
        plain client of the master of ``key``'s slot on a cluster (closed at teardown)."""
        if not isinstance(self.raw, ClusterClient):
            return self.raw
        await self.raw.initialize()
        node = self.raw.get_node_from_key(key)
        where = (node.host, node.port)
        if where not in self._nodes:
            self._nodes[where] = aioredis.Redis(host=node.host, port=node.port)
        return self._nodes[where]

    async def close_first(self) -> None:
        """What a machine closes before its client (other clients it opened)."""

    def teardown(self) -> None:
        async def close() -> None:
            await self.close_first()
            await self.client.close()
            for node in self._nodes.values():
                await node.aclose()
            keys = [k async for k in self.raw.scan_iter(match=f"*{self.namespace}*", count=1000)]
            if keys:
                await self.raw.delete(*keys)
            await self.raw.aclose()

        self.run(close())
        self.loop.close()


def raw_client(url: str) -> Any:
    """A plain client of ``url``'s server, or of its cluster for a ``redis+cluster://``
    URL (keys routed by slot; a scan walks every master)."""
    if url.startswith("redis+cluster://"):
        return cluster_client(url)
    return aioredis.Redis.from_url(url)


def run_model(machine: Callable[[], ClientMachine], share: float = 1.0) -> None:
    """Run ``machine`` as a Hypothesis state machine test: ``share`` of EXAMPLES
    histories (at least one) of STEPS steps, no deadline (Redis calls on a loaded
    machine), no example database."""
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=max(1, round(EXAMPLES * share)),
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        ),
    )
