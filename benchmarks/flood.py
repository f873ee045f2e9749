"""The flood workload: one flow key floods an action, then many small keys arrive.

One key invokes 100,000 runs, then 1,000 other keys invoke 10 runs each (one
``invoke_many`` per key, 20 keys at a time); two worker processes (concurrency 50 each,
a handler of one Redis round trip: benchmarks/_flood_worker.py) work through them.
Measured twice, with ``FlowControl(fair=False)`` and ``fair=True``: how long after its
invoke each small key's first run starts (p50, p99; client and worker clocks are the
same machine's), and the workers' throughput over the whole run. The bounds
(benchmarks/checks.py): with fairness on, p99 within 250 ms, and throughput at least
0.9x that without. Each mode runs three times, alternated (each first in turn), and
each figure is the median.
``--quick``: 20,000 flood runs and 200 keys.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from typing import Any

import redis.asyncio as aioredis

from flo_redis import ActionInvokeOptions, ActionRegisterOptions, FloClient, FlowControl

from ._common import percentile, progress
from ._procs import Child

TITLE = "one key floods 100,000 runs, 1,000 keys arrive: first-run latency, fair or not"
NAME = "flood"
WORKERS = 2
KEYS_AT_ONCE = 20
RUNS_PER_KEY = 10
ROUNDS = 3  # passes of each mode, alternated


async def _invoke_small_keys(client: FloClient, keys: int) -> None:
    async def one(key: str) -> None:
        sent = time.time()
        inputs = [f"{key}|{i}|{sent:.6f}".encode() for i in range(RUNS_PER_KEY)]
        await client.action.invoke_many(NAME, inputs, ActionInvokeOptions(flow_key=key))

    for start in range(0, keys, KEYS_AT_ONCE):
        await asyncio.gather(*(one(f"k{i}") for i in range(start, min(keys, start + KEYS_AT_ONCE))))


async def _pass(url: str, fair: bool, flood: int, keys: int) -> dict[str, float]:
    ns = f"bench-{uuid.uuid4().hex[:10]}"
    ledger = f"bench:flood:{ns}"
    total = flood + keys * RUNS_PER_KEY
    raw = aioredis.Redis.from_url(url)
    async with FloClient(url, namespace=ns) as client:
        options = ActionRegisterOptions(flow=FlowControl(fair=fair))
        await client.action.register(NAME, options=options)
        args = ["--url", url, "--namespace", ns, "--name", NAME, "--ledger", ledger]
        workers = [
            await Child.start(
                "benchmarks._flood_worker", *args, *(["--fair"] if fair else []), label="worker"
            )
            for _ in range(WORKERS)
        ]
        try:
            for w in workers:
                await w.event(60)  # ready
            sent = time.time()
            payload = f"flood|0|{sent:.6f}".encode()
            flood_key = ActionInvokeOptions(flow_key="flood")
            for start in range(0, flood, 1000):
                batch = [payload] * min(1000, flood - start)
                await client.action.invoke_many(NAME, batch, flood_key)
            await _invoke_small_keys(client, keys)
            deadline = time.monotonic() + 600
            while await raw.llen(ledger) < total:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"flood: {await raw.llen(ledger)} of {total} runs in 600 s")
                await asyncio.sleep(0.2)
        finally:
            for w in workers:
                w.kill()
                await w.close()
        entries = await raw.lrange(ledger, 0, -1)
        await raw.delete(ledger)
        await client.action.delete(NAME)
    await raw.aclose()
    first: list[float] = []
    starts: list[float] = []
    for entry in entries:
        key, index, invoked, started = entry.decode().split("|")
        starts.append(float(started))
        if key != "flood" and index == "0":
            first.append((float(started) - float(invoked)) * 1000.0)
    return {
        "first_p50_ms": percentile(first, 50),
        "first_p99_ms": percentile(first, 99),
        "runs_per_s": len(starts) / (max(starts) - min(starts)),
    }


async def run_flood(s: Any) -> dict[str, Any]:
    """Fairness off and on, alternated ROUNDS times on the benchmark's Redis; each figure
    is the median of its passes (a shared machine's load moves throughput by 2x from one
    pass to the next, so one pass of each would compare the load, not the modes)."""
    flood, keys = (20_000, 200) if s.quick else (100_000, 1_000)
    passes: dict[str, list[dict[str, float]]] = {"unfair": [], "fair": []}
    for round_no in range(ROUNDS):
        for fair in (False, True) if round_no % 2 == 0 else (True, False):
            label = "fair" if fair else "unfair"
            progress(
                f"flood: {flood:,} runs of one key, then {keys:,} keys of 10, {label} "
                f"({round_no + 1}/{ROUNDS})"
            )
            passes[label].append(await _pass(s.url, fair, flood, keys))
    metrics: dict[str, Any] = {}
    for label, figures in passes.items():
        for name in figures[0]:
            metrics[f"{label}_{name}"] = statistics.median(f[name] for f in figures)
    metrics["fair_throughput_ratio"] = metrics["fair_runs_per_s"] / metrics["unfair_runs_per_s"]
    return metrics
