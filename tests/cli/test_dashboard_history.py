"""The history charts over HTTP: the overview's (every action) and an action page's
(counts and latency percentiles), drawn on the server as inline SVG."""

from __future__ import annotations

import re

import aiohttp
import pytest
import redis.asyncio as aioredis
from dashboard_pages import get, parsed, served
from histories import history
from history_ring import write_ring

from flo_redis import FloClient


def section(body: str) -> str:
    """The page's history section."""
    match = re.search(r'<section class="history".*?</section>', body, re.DOTALL)
    assert match, "the page has no history section"
    return match.group(0)


async def test_the_overview_charts_every_actions_runs(client: FloClient) -> None:
    await history(client)  # 'job': 3 completed, 3 failed (one timed out), none retried
    await client.action.register("idle")
    async with served(client) as dash, aiohttp.ClientSession() as session:
        status, body = await get(session, dash.url)
    assert status == 200
    chart = section(body)
    _, text = parsed(chart)
    assert "last 6h, 5 min per bar" in text
    assert "3 completed" in text and "3 failed" in text and "0 retried" in text
    assert 'aria-label="every action, last 6h: 3 completed, 3 failed, 0 retried"' in chart
    assert re.search(r'<rect class="completed" [^>]*height="[1-9]', chart)
    assert re.search(r'<rect class="failed" [^>]*height="[1-9]', chart)
    # Drawn by the page itself: no script, no style attribute, no image to fetch (the
    # page's one script is the live updater, which the chart does not need).
    assert "<script" not in chart and "style=" not in chart and "<img" not in chart


@pytest.mark.parametrize(
    ("asked", "shown"), [("24h", "last 24h, 15 min per bar"), ("72h", "last 72h, 60 min per bar"),
                         ("1y", "last 6h, 5 min per bar")],
)  # fmt: skip
async def test_the_window_is_chosen_by_link(client: FloClient, asked: str, shown: str) -> None:
    await history(client)
    async with served(client) as dash, aiohttp.ClientSession() as session:
        status, body = await get(session, dash.url + f"?window={asked}")
    assert status == 200
    _, text = parsed(section(body))
    assert shown in text
    assert 'href="/?window=72h#history"' in body


async def test_an_action_page_charts_its_runs_and_latencies(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await write_ring(raw, client.namespace, "job", 6 * 60)  # hours before this minute
    await history(client)
    async with served(client) as dash, aiohttp.ClientSession() as session:
        status, body = await get(session, dash.url + "action?name=job&window=24h")
    assert status == 200
    chart = section(body)
    _, text = parsed(chart)
    assert "pickup p50" in text and "duration p50" in text and "attempts reported" in text
    assert chart.count('<svg class="history') == 2
    for series in ("pickup-p50", "pickup-p99", "duration-p50", "duration-p99"):
        assert f'<polyline class="{series}" points="' in chart
    assert 'href="/action?name=job&amp;window=6h#history"' in chart
    h = await client.action.history("job", since="24h")
    assert f"{h.completed} completed" in text and f"{h.retried} retried" in text
