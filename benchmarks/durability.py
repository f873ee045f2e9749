"""What a durability level costs (``python -m benchmarks --only durability``).

On a primary with one replica of its own (two private servers on this machine, the
replica started with ``--replicaof``; the shared benchmark server is not used), each
level in :data:`LEVELS` is measured the same way, one after the other:

* ``invoke_p50_ms`` / ``invoke_p99_ms``: single invokes one at a time from one client at
  that level (each one round trip: the script, and at ``replicated`` its WAIT in the same
  write);
* ``runs_per_s``: a no-op ActionWorker process (concurrency 100, the action workload's
  worker) whose completes are sent at that level, from its first handler call to its
  last report, on N runs invoked beforehand.

A replica on the same machine acknowledges in well under a millisecond: across a network
the WAIT adds that network's round trip to each write, which this does not show.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import redis.asyncio as aioredis

from flo_redis import ActionRegisterOptions, Durability, FloClient
from flo_redis.testing import RedisServer

from ._common import percentile, progress
from ._procs import Child
from .workloads import WORKER, Metrics, Settings, invoke_all, worker_args

LEVELS = {"primary": Durability.PRIMARY, "replicated": Durability.replicated(1, 1000)}
TITLE = "durability: invoke latency and worker throughput at primary vs replicated(1)"


async def run_durability(s: Settings) -> Metrics:
    """Invoke latency and worker throughput at each level, on a primary and a replica."""
    primary = RedisServer().start()
    replica = RedisServer(extra=("--replicaof", "127.0.0.1", str(primary.port))).start()
    try:
        await _synced(primary.url)
        out: Metrics = {}
        for name, level in LEVELS.items():
            out |= await _invoke_latency(primary.url, name, level, 500 if s.quick else 3000)
            out |= await _worker_rate(primary.url, name, s.action_n)
        return out
    finally:
        replica.discard()
        primary.discard()


async def _synced(url: str, timeout: float = 30.0) -> None:
    """Wait until the primary counts its replica as online."""
    deadline = time.monotonic() + timeout
    async with aioredis.Redis.from_url(url) as raw:
        while time.monotonic() < deadline:
            info: dict[str, Any] = await raw.info("replication")
            if info.get("connected_slaves") == 1 and "online" in str(info.get("slave0", "")):
                return
            await asyncio.sleep(0.05)
    raise RuntimeError("the replica did not come online")


async def _invoke_latency(url: str, name: str, level: Durability, n: int) -> Metrics:
    ns = f"bench-{uuid.uuid4().hex[:10]}"
    async with FloClient(url, namespace=ns, durability=level) as client:
        await client.action.register("noop", options=ActionRegisterOptions())
        for _ in range(200):  # warm the scripts and the connection
            await client.action.invoke("noop", b"{}")
        times: list[float] = []
        for _ in range(n):
            began = time.perf_counter()
            await client.action.invoke("noop", b"{}")
            times.append((time.perf_counter() - began) * 1000.0)
        await client.action.delete("noop")
    progress(f"durability: {name}: invoke p50 {percentile(times, 50):.3f} ms")
    return {
        f"{name}_invoke_p50_ms": percentile(times, 50),
        f"{name}_invoke_p99_ms": percentile(times, 99),
    }


async def _worker_rate(url: str, name: str, n: int) -> Metrics:
    ns = f"bench-{uuid.uuid4().hex[:10]}"
    async with FloClient(url, namespace=ns) as client:
        await client.action.register("noop", options=ActionRegisterOptions())
        await invoke_all(client, "noop", n)
        args = worker_args("action", url, ns, "noop", n, durability=name)
        child = await Child.start(WORKER, *args, label=f"worker at {name}")
        try:
            await child.event(30)  # ready
            while (res := await child.event(180)).get("event") != "result":
                pass
        finally:
            await child.close()
        await client.action.delete("noop")
    elapsed = res["end"] - res["first"]
    return {f"{name}_runs_per_s": n / elapsed if elapsed > 0 else float("nan")}
