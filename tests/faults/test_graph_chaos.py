"""Run dependencies on the 3-master cluster while workers are SIGKILLed every 2 s.

A three-level graph (tests/support/graph_chaos.py: roots; runs waiting for one parent,
a fifth for 2-4; 1% failing every attempt; ``on_failure`` mostly ``fail``, some
``ignore`` and ``run``) is invoked while three worker processes serve its actions, one of
them SIGKILLed and started again every :data:`KILL_EVERY_S`, until every run has ended.
Each handler's side effect is a commit to a ledger fenced by its token (on a plain server
outside the cluster). Then:

- every run whose parents let it run ran to a committed side effect, its output and
  outcome those of the hand-out whose commit the ledger holds; a run committed twice
  only because the process of its earlier commit was killed before its complete reached
  the store (at-least-once: the lease was taken back and the run handed out again);
- every run read exactly its parents' results (a completed parent's output and the
  token of the hand-out that completed it; a failed one under ``run``; none under
  ``ignore``);
- a child of a parent that failed under ``fail`` ended FAILED naming a failing parent,
  without ever being handed out; nothing is left PENDING or RUNNING;
- once the failed runs are purged and the actions keep one finished run, no graph key
  of any action remains.

``FLO_REDIS_GRAPH_CHAOS_RUNS`` sets the graph's size (:data:`RUNS`: 3,000 by default, so
CI's three passes side by side stay short; ``FLO_REDIS_GRAPH_CHAOS_RUNS=10000`` is the
full figure, which a 2-core machine invokes, settles and clears in one to two minutes).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from graph_chaos import (
    DOOMED,
    LEVELS,
    MAX_RETRIES,
    Ledger,
    Node,
    check,
    plan,
)
from polling import eventually, registered, running
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from flo_redis import (
    ActionContext,
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
)
from flo_redis._wire.keys import action_keys
from flo_redis.types import ActionRunStatus, Dependency, OnFailure

RUNS = int(os.environ.get("FLO_REDIS_GRAPH_CHAOS_RUNS", "3000"))
WORKERS = 3
KILL_EVERY_S = 2.0
#: Every run must have ended within this of the last invoke.
SETTLE_S = 240.0
HERE = os.path.dirname(os.path.abspath(__file__))
SUPPORT = os.path.join(os.path.dirname(HERE), "support")


@dataclass
class Pool:
    """The worker processes; ``killed`` the pids SIGKILLed."""

    args: list[str]
    #: The workers' output (their logs name each failed attempt).
    log: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    killed: set[int] = field(default_factory=set)
    turn: int = 0

    def start(self) -> subprocess.Popen[bytes]:
        script = os.path.join(SUPPORT, "graph_chaos_worker.py")
        with self.log.open("ab") as out:
            return subprocess.Popen(
                [sys.executable, script, *self.args], cwd=SUPPORT, stdout=out, stderr=out
            )

    def kill_one(self) -> None:
        """SIGKILL the next worker in turn and start another in its place."""
        i = self.turn % len(self.procs)
        self.turn += 1
        victim = self.procs[i]
        self.killed.add(victim.pid)
        victim.kill()
        victim.wait(10)
        self.procs[i] = self.start()

    async def kill_until(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), KILL_EVERY_S)
            except TimeoutError:
                self.kill_one()

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@contextmanager
def workers(args: list[str], log: Path) -> Iterator[Pool]:
    pool = Pool(args, log)
    pool.procs = [pool.start() for _ in range(WORKERS)]
    try:
        yield pool
    finally:
        for proc in pool.procs:
            proc.kill()
            proc.wait(10)


async def invoke_graph(client: FloClient, nodes: list[Node]) -> None:
    """Invoke the plan level by level (``run_id`` of each node set): the roots in one
    invoke_many, the runs of one parent under one policy in one invoke_many each, a run
    of several parents by invoke; a few calls at a time."""
    lanes = asyncio.Semaphore(8)

    def input_of(i: int) -> bytes:
        return DOOMED if nodes[i].doomed else b"ok"

    async def many(level: int, members: list[int], deps: list[Dependency]) -> None:
        options = ActionInvokeOptions(depends_on=deps or None)
        async with lanes:
            made = await client.action.invoke_many(
                LEVELS[level], [input_of(i) for i in members], options
            )
        for i, result in zip(members, made, strict=True):
            nodes[i].run_id = result.run_id

    async def one(level: int, i: int) -> None:
        deps = [Dependency(nodes[p].run_id, pol) for p, pol in nodes[i].deps]
        async with lanes:
            made = await client.action.invoke(
                LEVELS[level], input_of(i), ActionInvokeOptions(depends_on=deps)
            )
        nodes[i].run_id = made.run_id

    for level in range(len(LEVELS)):
        members = [i for i, n in enumerate(nodes) if n.level == level]
        if level == 0:
            await many(0, members, [])
            continue
        groups: dict[tuple[int, OnFailure], list[int]] = {}
        calls = []
        for i in members:
            if len(nodes[i].deps) == 1:
                groups.setdefault(nodes[i].deps[0], []).append(i)
            else:
                calls.append(one(level, i))
        for (p, pol), group in groups.items():
            calls.append(many(level, group, [Dependency(nodes[p].run_id, pol)]))
        await asyncio.gather(*calls)


async def all_ended(client: FloClient, nodes: list[Node]) -> list[int]:
    """Runs of each level not ended yet."""
    left = []
    for level, name in enumerate(LEVELS):
        counts = await client.action.counts(name)
        total = sum(1 for n in nodes if n.level == level)
        left.append(total - counts.completed - counts.failed - counts.timed_out)
    return left


async def statuses_of(client: FloClient, run_ids: list[str]) -> dict[str, ActionRunStatus]:
    found: dict[str, ActionRunStatus] = {}
    for start in range(0, len(run_ids), 32):  # within the client's connections
        chunk = run_ids[start : start + 32]
        for run_id, status in zip(
            chunk, await asyncio.gather(*(client.action.status(r) for r in chunk)), strict=True
        ):
            found[run_id] = status
    return found


async def graph_keys(craw: RedisCluster, namespace: str) -> list[str]:
    left = []
    for name in LEVELS:
        k = action_keys(namespace, name)
        for key in (k.graph, k.graph_idx, k.outbox, k.waiting):
            if await craw.exists(key):
                left.append(key)
    return left


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(600)
async def test_a_graph_settles_exactly_once_while_workers_are_killed(
    cclient: FloClient, craw: RedisCluster, cluster_url: str, redis_url: str, tmp_path: Path
) -> None:
    namespace = cclient.namespace
    slots = {key_slot(action_keys(namespace, n).runs.encode()) for n in LEVELS}
    assert len(slots) == len(LEVELS)  # each level in a slot of its own
    options = ActionRegisterOptions(timeout_ms=60_000, max_retries=MAX_RETRIES)
    for name in LEVELS:
        await cclient.action.register(name, options=options)
    seed = int.from_bytes(namespace.encode()[-4:], "big")
    nodes = plan(RUNS, seed)
    conn = Redis.from_url(redis_url)
    ledger = Ledger(conn, namespace)
    began = time.monotonic()
    with workers([cluster_url, namespace, redis_url], tmp_path / "workers.log") as pool:
        stop = asyncio.Event()
        killing = asyncio.create_task(pool.kill_until(stop))
        await invoke_graph(cclient, nodes)
        invoked = time.monotonic()
        await eventually(  # and at least two kills, however small the graph
            lambda: all_ended(cclient, nodes),
            lambda left: not any(left) and pool.turn >= 2,
            timeout=SETTLE_S,
            interval=0.5,
            what="every run ended",
        )
        settled = time.monotonic()
        stop.set()
        await killing
        pool.stop()
    run_ids = [n.run_id for n in nodes]
    statuses = await statuses_of(cclient, run_ids)
    entries = await ledger.read(run_ids)
    await conn.aclose()
    found = check(nodes, statuses, entries, pool.killed)
    print(
        f"graph chaos (seed {seed}): {len(nodes)} runs ({found.ran} ran, "
        f"{found.doomed_failed} failed every attempt, {found.cascaded} failed by a parent); "
        f"{len(pool.killed)} workers killed; "
        f"invoked in {invoked - began:.1f} s, settled {settled - invoked:.1f} s later; "
        f"{found.redeliveries} redeliveries, {found.recommitted} runs committed again after "
        f"a kill, {found.fenced} commits fenced; problems {dict(found.kinds)}"
    )
    assert found.problems == []
    assert len(pool.killed) >= 2 and found.ran and found.cascaded and found.doomed_failed

    # Nothing of the graph stays once its runs are gone: failed runs are kept until
    # purged; completed ones go by retention (one kept), their graph entries after them.
    for name in LEVELS:
        await cclient.action.purge(name, "failed")
    kept = ActionRegisterOptions(timeout_ms=60_000, max_retries=MAX_RETRIES, retention_count=1)
    worker = cclient.new_action_worker(block_ms=500, concurrency=8)

    async def plain(ctx: ActionContext) -> bytes:
        return b"ok"

    for name in LEVELS:
        await cclient.action.register(name, options=kept)
        worker.register_action(name, plain, kept)
    async with running(worker, ready=registered):
        for name in LEVELS:
            for _ in range(2):
                await cclient.action.wait((await cclient.action.invoke(name, b"")).run_id, 30_000)
        cleared = time.monotonic()
        await eventually(
            lambda: graph_keys(craw, namespace), lambda left: left == [], timeout=120,
            interval=0.5, what="no graph key",
        )  # fmt: skip
    print(f"graph chaos: every graph key gone {time.monotonic() - cleared:.1f} s after retention")
