"""The worker ``flo-redis worker benchmarks._scale_app:build`` runs for the scale-out curve.

Environment: ``BENCH_SCALE_KIND`` (``actions``: an ActionWorker for the actions named in
``BENCH_SCALE_ACTIONS``, comma-separated; ``stream``: a StreamWorker of stream ``events``,
group ``bench``, batch 100), ``BENCH_SCALE_URL`` (the Redis the handler counts on). The
first handler call of a process counts it ready and holds every call until the benchmark
sets the go key, so all processes start together, each holding work. Each
handler call makes one pipelined round trip: ``INCR bench:hits:{NAMESPACE:TAG}``, TAG the
action or the stream partition, so the counters spread over a cluster's nodes as the work does.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from flo_redis import ActionRegisterOptions, FloClient, StreamWorker
from flo_redis.worker import ActionWorker

from ._handler import make_handler, redis_client


def hit_key(tag: str) -> str:
    return f"bench:hits:{{{tag}}}"


def ready_key(namespace: str) -> str:
    return f"bench:ready:{{{namespace}}}"


def go_key(namespace: str) -> str:
    return f"bench:go:{{{namespace}}}"


class Gate:
    """Holds this process's handlers until the benchmark says go: the first handler call
    counts the process as ready (it holds work), then all wait for the go key."""

    def __init__(self, url: str, namespace: str) -> None:
        self.url = url
        self.namespace = namespace
        self.open = False
        self._waiting: asyncio.Task[None] | None = None

    async def wait(self) -> None:
        if self._waiting is None:
            self._waiting = asyncio.create_task(self._until_go())
        await asyncio.shield(self._waiting)

    async def _until_go(self) -> None:
        redis = redis_client(self.url)
        try:
            await redis.incr(ready_key(self.namespace))
            while not await redis.exists(go_key(self.namespace)):  # noqa: ASYNC110 - a Redis key
                await asyncio.sleep(0.005)
        finally:
            await redis.aclose()
        self.open = True


def build(client: FloClient) -> ActionWorker | StreamWorker:
    url = os.environ["BENCH_SCALE_URL"]
    gate = Gate(url, client.namespace)
    concurrency = int(os.environ.get("BENCH_SCALE_CONCURRENCY", "100"))
    if os.environ["BENCH_SCALE_KIND"] == "stream":
        partitions: dict[int, Any] = {}

        async def on_record(ctx: Any) -> None:
            if not gate.open:
                await gate.wait()
            part = ctx.record.partition
            if part not in partitions:
                key = hit_key(f"{client.namespace}:p{part}")
                partitions[part] = make_handler("roundtrip", url, key)[0]
            await partitions[part]()

        return client.new_stream_worker(
            stream="events",
            group="bench",
            handler=on_record,
            concurrency=concurrency,
            batch_size=100,
        )
    worker = client.new_action_worker(concurrency=concurrency)
    for name in os.environ["BENCH_SCALE_ACTIONS"].split(","):
        counting = _counting(url, hit_key(f"{client.namespace}:{name}"), gate)
        worker.register_action(name, counting, ActionRegisterOptions())
    return worker


def _counting(url: str, key: str, gate: Gate) -> Any:
    work = make_handler("roundtrip", url, key)[0]

    async def on_run(ctx: Any) -> bytes:
        if not gate.open:
            await gate.wait()
        await work()
        return b""

    return on_run
