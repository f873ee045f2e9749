"""The queue exporter: ``flo-redis exporter`` scraped over HTTP, parsed with
prometheus_client's parser, its values held against a known history."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from test_cli_ops import streams_history
from test_counts import history

from flo_redis import FloClient
from flo_redis.ops.discovery import overview
from flo_redis.ops.exporter import families

FLO_REDIS = str(Path(sys.executable).with_name("flo-redis"))


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def get(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@contextlib.asynccontextmanager
async def serving(redis_url: str, namespace: str) -> AsyncIterator[str]:
    """``flo-redis exporter --port 0`` for ``namespace`` while the block runs: its URL."""
    env = {**os.environ, "FLO_REDIS_URL": redis_url, "FLO_REDIS_NAMESPACE": namespace}
    proc = await asyncio.create_subprocess_exec(
        FLO_REDIS, "exporter", "--port", "0",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().strip()
        assert line.startswith("serving http://127.0.0.1:"), line
        yield line.split()[-1]
    finally:
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.wait(), 30)


async def test_a_scrape_reports_the_queue_as_it_is(client: FloClient, redis_url: str) -> None:
    await history(client)
    await streams_history(client)
    ns = client.namespace
    async with serving(redis_url, ns) as url:
        samples = await asyncio.to_thread(scrape, url)
        assert get(samples, "flo_redis_exporter_up") == 1
        runs = {
            state: get(samples, "flo_redis_queue_runs", namespace=ns, action="job", state=state)
            for state in ("pending", "delayed", "running", "completed", "failed", "timed_out")
        }
        assert runs == {
            "pending": 3, "delayed": 2, "running": 1, "completed": 3, "failed": 2, "timed_out": 1,
        }  # fmt: skip
        finished = "flo_redis_queue_runs_finished_total"
        assert get(samples, finished, namespace=ns, action="job", outcome="completed") == 3
        assert get(samples, finished, namespace=ns, action="job", outcome="failed") == 3
        group = {"namespace": ns, "stream": "events", "group": "billing"}
        assert get(samples, "flo_redis_stream_group_lag", **group) == 2
        assert get(samples, "flo_redis_stream_group_pending", **group) == 1
        assert get(samples, "flo_redis_stream_group_consumers", **group) == 1
        assert get(samples, "flo_redis_stream_group_dead_letters", **group) == 1
        assert (
            get(samples, "flo_redis_workers", namespace=ns, status="active")
            + get(samples, "flo_redis_workers", namespace=ns, status="idle")
            == 1
        )

        # Each scrape reads Redis afresh.
        await client.action.requeue_failed("job")
        samples = await asyncio.to_thread(scrape, url)
        assert (
            get(samples, "flo_redis_queue_runs", namespace=ns, action="job", state="pending") == 6
        )
        assert get(samples, "flo_redis_queue_runs", namespace=ns, action="job", state="failed") == 0


async def test_metric_names_follow_prometheus_conventions(client: FloClient) -> None:
    await history(client)
    for family in families([await overview(client)]):
        assert family.name.startswith("flo_redis_")
        if family.type == "counter":
            assert not family.name.endswith("_total")  # the exposition adds it
        for sample in family.samples:
            assert set(sample.labels) >= {"namespace"}
