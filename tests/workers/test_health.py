"""Health from liveness, run as users run it: ``flo-redis worker --processes 2`` with both
children SIGKILLed while they run. Every surface (``client.worker.list``, ``flo-redis
check``, ``workers list``, ``status``, the dashboard over HTTP and the exporter's metrics)
shows them gone as soon as Redis dropped their subscriptions, long before the 90 s
heartbeat timeout, and "handlers busy" counts only live workers. A frozen (SIGSTOPped)
process keeps its subscription: it stays alive, and only its heartbeat age tells."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest
import redis.asyncio as aioredis
from cli_command import Command
from dashboard_pages import parsed
from exporter_scrape import sample, scrape, serving
from polling import eventually

from flo_redis import FloClient, RunStatus, WorkerStatus
from flo_redis.dashboard import start_dashboard
from flo_redis.types import WorkerInfo, WorkerListOptions

pytestmark = pytest.mark.slow  # worker processes killed and frozen

Run = Callable[..., Command]


def cli(url: str, namespace: str, *args: str) -> tuple[int, str]:
    """``flo-redis ARGS --url URL --namespace NS``: its exit code and output."""
    done = subprocess.run(
        [sys.executable, "-m", "flo_redis.cli", *args, "--url", url, "--namespace", namespace],
        capture_output=True,
        timeout=60,
    )
    return done.returncode, (done.stdout + done.stderr).decode().strip()


async def acli(url: str, namespace: str, *args: str) -> tuple[int, str]:
    return await asyncio.to_thread(cli, url, namespace, *args)


async def listed(client: FloClient) -> list[WorkerInfo]:
    return list((await client.worker.list(WorkerListOptions(limit=100))).workers)


async def workers_until(
    client: FloClient, accept: Callable[[list[WorkerInfo]], bool]
) -> list[WorkerInfo]:
    """The registered workers once ``accept`` holds for them (a generous deadline)."""
    return await eventually(lambda: listed(client), accept, timeout=60)


async def two_busy_children(
    command: Run, client: FloClient, raw: aioredis.Redis, url: str
) -> tuple[Command, list[WorkerInfo], list[int], list[str]]:
    """``flo-redis worker --processes 2`` of ``cli_app:build`` (one handler each), both
    children registered and alive, each running one ``hold`` run with its load
    recorded: the command, the workers, the children's process ids and the runs."""
    ns = client.namespace
    args = ["--url", url, "--namespace", ns, "--processes", "2", "--concurrency", "1"]
    cmd = command("worker", *args, "cli_app:build")
    workers = await workers_until(client, lambda ws: len(ws) == 2 and all(w.alive for w in ws))
    runs = [await client.action.invoke("hold", b"") for _ in range(2)]
    pids = [
        int(await eventually(lambda r=run: raw.get(f"{ns}:pid:{r.run_id}"), timeout=60))
        for run in runs
    ]
    assert len(set(pids)) == 2  # one run in each child
    await workers_until(client, lambda ws: [w.current_load for w in ws] == [1, 1])
    return cmd, workers, pids, [run.run_id for run in runs]


async def dashboard_pages(client: FloClient) -> tuple[str, str]:
    """The text of the dashboard's overview and workers pages, fetched over HTTP."""
    running = await start_dashboard(client, port=0)
    try:
        async with aiohttp.ClientSession() as session:
            pages = []
            for path in ("", "workers"):
                async with session.get(running.url + path) as response:
                    assert response.status == 200
                    pages.append(parsed(await response.text())[1])
    finally:
        await running.close()
    return pages[0], pages[1]


async def exporter_samples(url: str, namespace: str) -> dict:
    async with serving(url, namespace) as metrics:
        return await asyncio.to_thread(scrape, metrics)


async def both_children_killed_show_gone(
    command: Run, client: FloClient, raw: aioredis.Redis, url: str
) -> None:
    ns = client.namespace
    cmd, first, pids, _ = await two_busy_children(command, client, raw, url)
    old = sorted(w.worker_id for w in first)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)

    # The library: gone (and not ACTIVE) as soon as Redis dropped the subscriptions.
    seen = await workers_until(
        client, lambda ws: all(w.alive is False for w in ws if w.worker_id in old)
    )
    for w in seen:
        if w.worker_id in old:
            assert w.status == WorkerStatus.UNHEALTHY
            assert w.current_load == 1  # the load it last reported, never counted as busy
    # The probe: the killed worker is gone.
    code, line = await eventually(
        lambda: acli(url, ns, "check", "--worker", old[0]), lambda r: r[0] == 1, timeout=30
    )
    assert line.startswith(f"unhealthy: worker {old[0]} is gone: no process holds"), line

    # The supervisor starts two new children; the killed children's runs are taken back
    # and run again there, so two live workers are busy, two gone ones are not.
    await workers_until(client, lambda ws: [w.current_load for w in ws if w.alive] == [1, 1])
    code, line = await acli(url, ns, "check", "--action", "hold")
    assert code == 0, line
    assert line == (
        f"ok: 2 worker(s) of action 'hold' ACTIVE in namespace '{ns}'; 2 gone ({old[0]}, {old[1]})"
    )

    code, out = await acli(url, ns, "workers", "list", "--json")
    assert code == 0, out
    by_id = {w["worker_id"]: w for w in json.loads(out)}
    assert [(by_id[i]["alive"], by_id[i]["status"]) for i in old] == [(False, "UNHEALTHY")] * 2
    assert sorted(w["alive"] for w in by_id.values()) == [False, False, True, True]
    code, out = await acli(url, ns, "workers", "list")
    assert code == 0, out
    assert out.count("GONE") == 2 and "2 live, 2 gone; handlers busy 2/2" in out

    code, out = await acli(url, ns, "status", "--json")
    assert code == 0, out
    alive = {w["worker_id"]: w["alive"] for w in json.loads(out)["workers"]}
    assert [alive[i] for i in old] == [False, False]
    code, out = await acli(url, ns, "status")
    assert code == 0, out
    assert out.count("GONE") == 2 and "2 live, 2 gone; handlers busy 2/2" in out

    overview, workers = await dashboard_pages(client)
    assert "2/2 handlers busy" in " ".join(overview.split())
    assert "2 gone" in overview
    text = " ".join(workers.split())
    assert "4 registered, 2 gone" in text and "2 of 2 handler slots busy" in text
    assert text.count("GONE") == 2

    samples = await exporter_samples(url, ns)
    assert sample(samples, "flo_redis_workers", namespace=ns, status="gone") == 2
    assert sample(samples, "flo_redis_workers", namespace=ns, status="active") == 2
    assert sample(samples, "flo_redis_worker_handlers_busy", namespace=ns) == 2
    assert sample(samples, "flo_redis_worker_handler_slots", namespace=ns) == 2

    await raw.set(f"{ns}:gate", 1)
    cmd.signal(signal.SIGTERM)
    assert cmd.exits(0)


async def test_killed_worker_processes_show_gone_everywhere(
    command: Run, client: FloClient, raw: aioredis.Redis, redis_url: str
) -> None:
    await both_children_killed_show_gone(command, client, raw, redis_url)


@pytest.fixture
async def cclient(cluster_url: str) -> AsyncIterator[FloClient]:
    async with FloClient(cluster_url, namespace=f"c-{uuid.uuid4().hex[:10]}") as c:
        yield c


@pytest.mark.cluster
async def test_killed_worker_processes_show_gone_everywhere_on_a_cluster(
    command: Run, cclient: FloClient, raw: aioredis.Redis, cluster_url: str
) -> None:
    await both_children_killed_show_gone(command, cclient, raw, cluster_url)


async def test_a_frozen_worker_stays_alive_and_its_heartbeat_age_tells(
    command: Run, client: FloClient, raw: aioredis.Redis, redis_url: str
) -> None:
    ns = client.namespace
    cmd, first, pids, runs = await two_busy_children(command, client, raw, redis_url)
    frozen, killed = pids
    os.kill(frozen, signal.SIGSTOP)
    try:
        os.kill(killed, signal.SIGKILL)
        # Once the killed child shows gone, the frozen one, stopped before it, still
        # holds its subscription: alive and ACTIVE, by liveness and heartbeats alike.
        seen = await workers_until(client, lambda ws: sum(1 for w in ws if w.alive is False) == 1)
        [still] = [w for w in seen if w.worker_id in {f.worker_id for f in first} and w.alive]
        assert still.status == WorkerStatus.ACTIVE
        code, line = await acli(redis_url, ns, "check", "--worker", still.worker_id)
        assert code == 0 and line.startswith(f"ok: worker {still.worker_id} is ACTIVE"), line
        # What tells it apart is its heartbeat age, shown by the probe.
        await eventually(client.server_time_ms, lambda ms: ms - still.last_heartbeat_ms > 1000)
        code, line = await acli(
            redis_url, ns, "check", "--worker", still.worker_id, "--max-heartbeat-age", "1"
        )
        assert code == 1 and f"worker {still.worker_id}: last heartbeat" in line, line
    finally:
        os.kill(frozen, signal.SIGCONT)
    await raw.set(f"{ns}:gate", 1)
    for run_id in runs:
        await eventually(
            lambda r=run_id: client.action.status(r),
            lambda s: s.status == RunStatus.COMPLETED,
            timeout=60,
        )
    cmd.signal(signal.SIGTERM)
    assert cmd.exits(0)
