"""The scale-out curve: throughput with 1, 2 and 4 worker processes, on one Redis and on a
local 3-master cluster.

Each point: N tasks enqueued first (spread over 6 actions, or appended round-robin to a
stream of 3 partitions), then ``flo-redis worker benchmarks._scale_app:build --processes
P`` (concurrency 100 a process, each handler one Redis round trip that counts the call).
The first handler call of each process holds until every process has one, then all
start together; tasks/s is from that moment to the poll (every 20 ms) of the handlers'
counters that sees all the work done. The cluster is started with the tests'
helper (``tests/support/redis_server.py``), or taken from ``REDIS_CLUSTER_URL``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from flo_redis import ActionRegisterOptions, FloClient

from ._common import child_env, progress, text_table, with_db
from ._handler import redis_client
from ._scale_app import go_key, hit_key, ready_key

TESTS = Path(__file__).resolve().parent.parent / "tests"
ACTIONS = [f"a{i}" for i in range(6)]
PARTITIONS = 3
PROCESSES = (1, 2, 4)
POLL_S = 0.02


async def _enqueue(client: FloClient, kind: str, n: int) -> list[str]:
    """The work, enqueued; the tags of the counters its handlers will bump."""
    if kind == "actions":
        per = n // len(ACTIONS)
        for name in ACTIONS:
            await client.action.register(name, options=ActionRegisterOptions())
            for start in range(0, per, 1000):
                await client.action.invoke_many(name, [b"{}"] * min(1000, per - start))
        return ACTIONS
    await client.stream.create("events", partitions=PARTITIONS)
    for start in range(0, n, 100):
        k = min(100, n - start)
        await asyncio.gather(*(client.stream.append("events", b"{}") for _ in range(k)))
    return [f"p{p}" for p in range(PARTITIONS)]


async def measure(url: str, kind: str, processes: int, n: int, timeout: float = 60) -> float:
    """Tasks/s of ``processes`` worker processes working through ``n`` tasks."""
    ns = f"scale-{uuid.uuid4().hex[:8]}"
    async with FloClient(url, namespace=ns) as client:
        tags = await _enqueue(client, kind, n)
    total = n // len(ACTIONS) * len(ACTIONS) if kind == "actions" else n
    keys = [hit_key(f"{ns}:{tag}") for tag in tags]
    env = {
        **child_env(),
        "BENCH_SCALE_KIND": kind,
        "BENCH_SCALE_URL": url,
        "BENCH_SCALE_ACTIONS": ",".join(ACTIONS),
    }
    err = tempfile.TemporaryFile()  # noqa: SIM115 - closed below
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "flo_redis.cli", "worker", "benchmarks._scale_app:build", "--url", url),
        *("--namespace", ns, "--processes", str(processes), "--log-level", "WARNING"),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=err,
        env=env,
    )
    counter = redis_client(url)
    try:
        deadline = time.monotonic() + timeout

        def gone(done: int) -> RuntimeError | None:
            if proc.returncode is None and time.monotonic() < deadline:
                return None
            err.seek(0)
            tail = err.read().decode(errors="replace")[-600:]
            return RuntimeError(f"{done} of {total} done; worker: {tail or 'no output'}")

        while int(await counter.get(ready_key(ns)) or 0) < processes:
            if failed := gone(0):
                raise failed
            await asyncio.sleep(POLL_S)
        began = time.perf_counter()
        await counter.set(go_key(ns), 1)
        while True:
            done = sum(int(v or 0) for v in [await counter.get(k) for k in keys])
            if done >= total:
                return total / (time.perf_counter() - began)
            if failed := gone(done):
                raise failed
            await asyncio.sleep(POLL_S)
    finally:
        await counter.aclose()
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
        err.close()


def _start_cluster() -> tuple[str, Any]:
    url = os.environ.get("REDIS_CLUSTER_URL")
    if url:
        return url, None
    sys.path.insert(0, str(TESTS))
    from redis_server import RedisCluster

    cluster = RedisCluster(masters=3).start()
    return cluster.url, cluster


async def run_scale(url: str, n: int, with_cluster: bool = True) -> dict[str, Any]:
    """Every point of the curve: {"actions"|"stream": {"redis"|"cluster": {P: tasks/s}}}."""
    single = with_db(url, 3)
    targets = [("redis", single)]
    cluster = None
    if with_cluster:
        try:
            cluster_url, cluster = _start_cluster()
            targets.append(("cluster", cluster_url))
        except Exception as exc:  # no cluster: the one-Redis curve still runs
            progress(f"scale: no cluster ({type(exc).__name__}: {exc}); one Redis only")
    curve: dict[str, Any] = {"n": n, "points": {}, "errors": {}}
    try:
        for kind in ("actions", "stream"):
            for where, target_url in targets:
                for processes in PROCESSES:
                    label = f"{kind}/{where}/{processes}"
                    if where == "redis":
                        async with aioredis.Redis.from_url(single) as r:
                            await r.flushdb()
                    progress(f"scale: {kind}, {where}, {processes} process(es), {n} tasks ...")
                    try:
                        rate = await measure(target_url, kind, processes, n)
                    except Exception as exc:
                        curve["errors"][label] = f"{type(exc).__name__}: {exc}"[-300:]
                        progress(f"scale: {label} FAILED: {curve['errors'][label]}")
                        continue
                    curve["points"][label] = rate
                    progress(f"scale: {label}: {rate:,.0f} tasks/s")
    finally:
        async with aioredis.Redis.from_url(single) as r:
            await r.flushdb()
        if cluster is not None:
            with contextlib.suppress(Exception):
                cluster.stop()
    return curve


def table(curve: dict[str, Any]) -> list[str]:
    points = curve["points"]
    lines = [
        f"scale-out: {curve['n']:,} tasks, handler one Redis round trip, concurrency 100 "
        "per process, `flo-redis worker --processes P` (tasks/s)"
    ]
    rows = [("workload", "processes", "one Redis", "3-master cluster")]
    titles = {"actions": "6 actions, ActionWorker", "stream": "stream of 3 partitions"}
    for kind, title in titles.items():
        for processes in PROCESSES:
            cells = []
            for where in ("redis", "cluster"):
                label = f"{kind}/{where}/{processes}"
                value = points.get(label)
                cells.append(
                    f"{value:,.0f}" if value else ("failed" if label in curve["errors"] else "")
                )
            rows.append((title if processes == PROCESSES[0] else "", str(processes), *cells))
    return lines + text_table(rows)
