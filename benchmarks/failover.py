"""The failover workload: what a primary SIGKILLed under load costs.

The scenario of ``tests/faults/test_failover_loss.py`` (``tests/support/chaos.py``):
invokes from this process, an ActionWorker and a StreamWorker in a worker process whose
every side effect goes to a ledger outside Redis, stream appends; mid-load the primary
holding the action is SIGKILLed and its replica takes over; then the end state is read
against what each caller was told. Run on one primary and its replica behind an address
moved to the replica after a second (what Sentinel or a managed service does; the killed
primary then comes back as the new primary's replica, as Sentinel makes it), then the
same with the replica trailing its primary by :data:`LAG_S` (its replication stream
delivered that late, as across a slow network: on one machine it trails by well under a
millisecond and nothing is lost), and on a cluster of three primaries with a replica each
(the cluster promotes on its own); at the default durability, and at ``replicated`` on
the lagging pair. Last, what ``replicated`` costs beside the default when nothing fails
(``cost_*``: invoke latency and a worker's throughput, :mod:`benchmarks.durability`), so
this one workload prints both the loss window and the price of closing it.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import flo_redis

from ._common import progress
from .durability import run_durability

TESTS = Path(__file__).resolve().parent.parent / "tests" / "support"
#: The time the pair's watcher takes to judge the primary down before promoting.
DETECT_S = 1.0
#: How late the lagging pair's replica receives its primary's writes.
LAG_S = 0.25


def _figures(prefix: str, figures: Any) -> dict[str, Any]:
    lost = figures.invokes_lost + figures.completions_lost
    lost += figures.appends_lost + figures.acks_lost
    return {
        f"{prefix}_invokes_lost": figures.invokes_lost,
        f"{prefix}_completions_lost": figures.completions_lost,
        f"{prefix}_appends_lost": figures.appends_lost,
        f"{prefix}_acks_lost": figures.acks_lost,
        f"{prefix}_lost": lost,
        f"{prefix}_runs_twice": figures.runs_twice,
        f"{prefix}_records_twice": figures.records_twice,
        f"{prefix}_records_gone": figures.records_gone,
        f"{prefix}_refused": sum(figures.refused.values()),
        f"{prefix}_not_durable": figures.not_durable,
        f"{prefix}_stranded": len(figures.stranded) + len(figures.misfenced),
        f"{prefix}_repeated": len(figures.repeated),
        f"{prefix}_promoted_ms": figures.promoted_s * 1000,
        f"{prefix}_flow_ms": figures.flow_s * 1000,
        f"{prefix}_again_ms": figures.again_s * 1000,
        f"{prefix}_window_ms": figures.loss_window_s * 1000,
        f"_{prefix}": figures.line(),
    }


async def _on_pair(durability: str, options: dict[str, Any], lag_s: float = 0.0) -> Any:
    from cluster_replicas import ReplicatedPair

    pair = await ReplicatedPair.start(lag_s=lag_s)
    try:
        return await _scenario(pair.url, lambda: pair.failover(DETECT_S), durability, options)
    finally:
        await pair.stop()


async def _on_cluster() -> Any:
    from cluster_replicas import ReplicatedCluster
    from redis.crc import key_slot

    from flo_redis._wire.keys import action_keys

    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    cluster = await asyncio.to_thread(ReplicatedCluster().start)
    slot = key_slot(action_keys(namespace, "job").meta.encode())

    async def fail() -> None:
        old = cluster.kill_primary(slot)
        await asyncio.to_thread(cluster.wait_promoted, slot, old)

    try:
        return await _scenario(cluster.url, fail, "primary", {}, namespace)
    finally:
        cluster.stop()


async def _scenario(
    url: str,
    fail: Callable[[], Awaitable[None]],
    durability: str,
    options: dict[str, Any],
    namespace: str | None = None,
) -> Any:
    """The chaos scenario on ``url`` with its ledger in a folder of its own."""
    from chaos import run_chaos

    namespace = namespace or f"bench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="flo-failover-") as folder:
        ledger = Path(folder) / "ledger"
        return await run_chaos(url, namespace, "s", fail, ledger, durability, options)


TITLE = "a primary SIGKILLed under load: writes lost, time to flow; what replicated costs"


async def run_failover(s: Any) -> dict[str, Any]:
    """One failover of each kind (the workload's own servers; ``s.url`` is not used)."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    metrics: dict[str, Any] = {}
    progress("failover: one primary and its replica, default durability")
    metrics |= _figures("pair", await _on_pair("primary", {}))
    progress(f"failover: the same, the replica {LAG_S * 1000:.0f} ms behind, default durability")
    metrics |= _figures("lagging", await _on_pair("primary", {}, LAG_S))
    progress("failover: a cluster with a replica per primary, default durability")
    metrics |= _figures("cluster", await _on_cluster())
    durability = getattr(flo_redis, "Durability", None)
    if durability is None:
        metrics["_note"] = "replicated: not measured (this version has no durability levels)"
        return metrics
    progress(f"failover: the replica {LAG_S * 1000:.0f} ms behind, replicated")
    options = {"durability": durability.replicated(replicas=1, timeout_ms=1000)}
    metrics |= _figures("replicated", await _on_pair("replicated", options, LAG_S))
    progress("failover: what replicated costs beside the default (a replica in sync)")
    metrics |= {f"cost_{name}": value for name, value in (await run_durability(s)).items()}
    return metrics
