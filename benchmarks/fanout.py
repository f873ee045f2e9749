"""The fan-out workload: one run, 10,000 children of it, and one run that waits for them.

Graph: a ``root`` run; 10,000 ``leaf`` runs invoked (``invoke_many``) to depend on it; a
``join`` run invoked to depend on all 10,000 leaves. Plain: the same 10,002 runs invoked
with no dependencies. Two worker processes (concurrency 50 each, handlers that do nothing:
benchmarks/_fanout_worker.py) work through them; the figure is runs/s from the first
invoke to the last run completed (the join in the graph; every run, plain). The bound
(benchmarks/checks.py): the graph at least 0.7x plain. Each mode runs five times,
alternated (each first in turn), and each figure is the median.
``--quick``: 2,000 leaves.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from typing import Any

from flo_redis import ActionInvokeOptions, FloClient, RunStatus

from ._common import progress
from ._fanout_worker import ACTIONS
from ._procs import Child

TITLE = "fan-out of 10,000 children and fan-in back to one run, beside the same runs plain"
WORKERS = 2
ROUNDS = 5
TIMEOUT_S = 600.0


async def _completed(client: FloClient) -> int:
    counts = [await client.action.counts(name) for name in ACTIONS]
    return sum(c.completed for c in counts)


async def _pass(url: str, graph: bool, leaves: int) -> float:
    ns = f"bench-{uuid.uuid4().hex[:10]}"
    async with FloClient(url, namespace=ns) as client:
        for name in ACTIONS:
            await client.action.register(name)
        workers = [
            await Child.start(
                "benchmarks._fanout_worker", "--url", url, "--namespace", ns, label="worker"
            )
            for _ in range(WORKERS)
        ]
        try:
            for w in workers:
                await w.event(60)  # ready
            started = time.monotonic()
            deadline = started + TIMEOUT_S
            root = (await client.action.invoke("root", b"")).run_id
            after_root = ActionInvokeOptions(depends_on=[root] if graph else ())
            leaf_ids = [r.run_id for r in await client.action.invoke_many(
                "leaf", [b""] * leaves, after_root
            )]  # fmt: skip
            after_leaves = ActionInvokeOptions(depends_on=leaf_ids if graph else ())
            join = (await client.action.invoke("join", b"", after_leaves)).run_id
            if graph:
                status = await client.action.wait(join, int(TIMEOUT_S * 1000))
                if status.status != RunStatus.COMPLETED:
                    raise RuntimeError(f"fanout: the join ended {status.status.name}")
            while graph is False and await _completed(client) < leaves + 2:
                if time.monotonic() > deadline:
                    raise RuntimeError("fanout: plain runs not done in time")
                await asyncio.sleep(0.01)
            elapsed = time.monotonic() - started
        finally:
            for w in workers:
                w.kill()
                await w.close()
        for name in ACTIONS:
            await client.action.delete(name)
    return (leaves + 2) / elapsed


async def run_fanout(s: Any) -> dict[str, Any]:
    """Graph and plain, alternated ROUNDS times on the benchmark's Redis; medians."""
    leaves = 2_000 if s.quick else 10_000
    passes: dict[str, list[float]] = {"plain": [], "graph": []}
    for round_no in range(ROUNDS):
        for graph in (False, True) if round_no % 2 == 0 else (True, False):
            label = "graph" if graph else "plain"
            progress(f"fanout: {leaves:,} leaves, {label} ({round_no + 1}/{ROUNDS})")
            passes[label].append(await _pass(s.url, graph, leaves))
    plain = statistics.median(passes["plain"])
    graph_rate = statistics.median(passes["graph"])
    return {
        "plain_runs_per_s": plain,
        "graph_runs_per_s": graph_rate,
        "graph_over_plain": graph_rate / plain,
    }
