"""The queue exporter as a scraper meets it: ``flo-redis exporter`` started for a
namespace, its page fetched and parsed with prometheus_client's parser."""

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

FLO_REDIS = str(Path(sys.executable).with_name("flo-redis"))


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def page(url: str) -> str:
    """The exposition text at ``url``."""
    with urllib.request.urlopen(url, timeout=30) as response:
        text: str = response.read().decode()
    return text


def scrape(url: str) -> Samples:
    text = page(url)
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(samples: Samples, name: str, **labels: str) -> float:
    """The value of the sample ``name`` with exactly ``labels``."""
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
