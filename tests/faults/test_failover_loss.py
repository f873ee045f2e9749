"""A primary SIGKILLed under load, its replica promoted: what is lost, and what holds.

Invokes, a worker process claiming and completing, a stream appender and a group
consumer acking, all at once; the primary holding the action dies mid-load and its replica
takes over (tests/support/chaos.py counts the cost against a ledger kept outside Redis).
Replication is asynchronous, so at the default durability the writes the primary
acknowledged in its last moments may be gone. What a user relies on holds anyway:

- nothing is stranded: every run and record that survived is done soon after, without
  waiting out a lease;
- fencing holds: every run was completed by its last hand-out, never by a stale report;
- what was lost was acknowledged just before the kill (the replication lag), never
  earlier.

With ``Durability.replicated`` no acknowledged write is lost at all.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from chaos import Figures, run_chaos
from cluster_replicas import ReplicatedCluster, ReplicatedPair
from redis.crc import key_slot

import flo_redis
from flo_redis._wire.keys import action_keys, stream_keys

#: The time the pair's watcher takes to judge the primary down before promoting.
DETECT_S = 1.0
#: Lost writes were acknowledged at most this long before the kill (the replica trails
#: its primary by milliseconds on one machine; this is generous).
LAG_WINDOW_S = 1.0

durability_levels = pytest.mark.skipif(
    not hasattr(flo_redis, "Durability"), reason="needs the durability levels"
)


@pytest.fixture
async def pair() -> AsyncIterator[ReplicatedPair]:
    servers = await ReplicatedPair.start()
    try:
        yield servers
    finally:
        await servers.stop()


@pytest.fixture
def replicated_cluster() -> Iterator[ReplicatedCluster]:
    cluster = ReplicatedCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _holds(figures: Figures) -> None:
    """The invariants at any durability."""
    print(figures.line())
    assert figures.stranded == []
    assert figures.misfenced == []
    assert figures.loss_window_s <= LAG_WINDOW_S
    assert figures.invokes > 0 and figures.appends > 0 and figures.completes > 0


def _nothing_acknowledged_lost(figures: Figures) -> None:
    assert (figures.invokes_lost, figures.completions_lost) == (0, 0)
    assert (figures.appends_lost, figures.acks_lost) == (0, 0)


async def _pair_failover(pair: ReplicatedPair) -> None:
    pair.kill_primary()
    await asyncio.sleep(DETECT_S)
    pair.fail_over()


def _same_node_stream(cluster: ReplicatedCluster, namespace: str) -> tuple[str, int]:
    """A stream whose slot the action's primary also serves, and the action's slot."""
    slot = key_slot(action_keys(namespace, "job").meta.encode())
    owner = cluster.owner_port(slot)
    for i in range(1000):
        if cluster.owner_port(key_slot(stream_keys(namespace, f"s{i}").meta.encode())) == owner:
            return f"s{i}", slot
    raise LookupError("no stream name on the action's node")


async def _cluster_failover(cluster: ReplicatedCluster, slot: int) -> None:
    old = cluster.kill_primary(slot)
    await asyncio.to_thread(cluster.wait_promoted, slot, old)


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_killed_primary_behind_a_moving_address(
    pair: ReplicatedPair, tmp_path: Path
) -> None:
    figures = await run_chaos(
        pair.url, f"t-{uuid.uuid4().hex[:8]}", "s", lambda: _pair_failover(pair),
        tmp_path / "ledger",
    )  # fmt: skip
    _holds(figures)


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(120)
async def test_a_killed_cluster_primary(
    replicated_cluster: ReplicatedCluster, tmp_path: Path
) -> None:
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    stream, slot = _same_node_stream(replicated_cluster, namespace)
    figures = await run_chaos(
        replicated_cluster.url, namespace, stream,
        lambda: _cluster_failover(replicated_cluster, slot), tmp_path / "ledger",
    )  # fmt: skip
    _holds(figures)


@durability_levels
@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_replicated_writes_survive_a_killed_primary(
    pair: ReplicatedPair, tmp_path: Path
) -> None:
    durability = flo_redis.Durability.replicated(replicas=1, timeout_ms=1000)
    figures = await run_chaos(
        pair.url, f"t-{uuid.uuid4().hex[:8]}", "s", lambda: _pair_failover(pair),
        tmp_path / "ledger", durability="replicated",
        client_options={"durability": durability},
    )  # fmt: skip
    _holds(figures)
    _nothing_acknowledged_lost(figures)
