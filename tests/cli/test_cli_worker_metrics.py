"""``flo-redis worker --metrics-port``: a real worker process serving Prometheus metrics,
scraped over HTTP while it works."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import urllib.request

import redis.asyncio as aioredis
from cli_command import Command
from polling import eventually
from prometheus_client.parser import text_string_to_metric_families

from flo_redis import FloClient, RunStatus


def _worker(redis_url: str, namespace: str, *extra: str) -> list[str]:
    return ["worker", "--url", redis_url, "--namespace", namespace, *extra, "cli_app:build"]


async def _metrics_url(cmd: Command) -> str:
    async def logged() -> str:
        return cmd.output()

    out = await eventually(logged, lambda o: "metrics at " in o, timeout=30)
    match = re.search(r"metrics at (http://127\.0\.0\.1:\d+/metrics)", out)
    assert match, out
    return match.group(1)


async def _scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    def get() -> str:
        with urllib.request.urlopen(url, timeout=10) as response:
            body: bytes = response.read()
            return body.decode()

    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(await asyncio.to_thread(get))
        for s in family.samples
    }


async def test_a_worker_process_serves_metrics_of_what_it_did(
    command, client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    cmd = command(*_worker(redis_url, namespace, "--metrics-port", "0"))
    url = await _metrics_url(cmd)
    await eventually(client.worker.list, lambda r: len(r.workers) == 1, timeout=30)  # registered
    await raw.set(f"{namespace}:gate", 1)  # the handlers return at once
    runs = [(await client.action.invoke("hold", b"")).run_id for _ in range(3)]
    for run_id in runs:
        await eventually(
            lambda r=run_id: client.action.status(r),
            lambda s: s.status == RunStatus.COMPLETED,
            timeout=30,
        )
    success = frozenset({("action", "hold"), ("outcome", "success")})
    completed = ("flo_redis_runs_completed_total", success)
    samples = await eventually(lambda: _scrape(url), lambda s: s.get(completed) == 3, timeout=30)
    hold = frozenset({("action", "hold")})
    assert samples[("flo_redis_runs_claimed_total", hold)] == 3
    assert samples[("flo_redis_pickup_latency_seconds_count", hold)] == 3
    assert ("process_cpu_seconds_total", frozenset()) in samples  # the process's own
    cmd.signal(signal.SIGTERM)
    assert cmd.exits(0)


def test_a_metrics_port_in_use_stops_the_process_with_exit_1(
    command, redis_url: str, namespace: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cmd = command(*_worker(redis_url, namespace, "--metrics-port", str(port)))
        assert cmd.exits(1)
    assert "Address already in use" in cmd.output()
