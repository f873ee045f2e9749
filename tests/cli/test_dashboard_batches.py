"""The dashboard's batch page over HTTP against real Redis: counts, seal, outcome,
parent and callbacks made, the first page of members each linking to its run or batch
page, an unknown batch as a 404 page; and the run page's link to its batch."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
from batch_worlds import MANY, batch_world
from dashboard_pages import get, parsed

from flo_redis import FloClient
from flo_redis.dashboard import RunningDashboard, start_dashboard
from flo_redis.ops.batch_view import SHOWN
from flo_redis.ops.redaction import Redactor


@pytest.fixture
async def served(client: FloClient) -> AsyncIterator[tuple[RunningDashboard, dict[str, Any]]]:
    world = await batch_world(client)
    dash = await start_dashboard(client, port=0, redactor=Redactor())
    try:
        yield dash, world
    finally:
        await dash.close()


async def page(dash: RunningDashboard, path: str, query: dict[str, str]) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session:
        return await get(session, f"{dash.url}{path.lstrip('/')}?{urlencode(query)}")


def run_link(run_id: str) -> str:
    return f'<a href="/run?{urlencode({"id": run_id})}"><code>{run_id}</code></a>'


def batch_link(batch_id: str) -> str:
    return f'<a href="/batch?{urlencode({"id": batch_id})}"><code>{batch_id}</code></a>'


def facts(body: str) -> dict[str, str]:
    """The page's facts (``<dt>``/``<dd>`` pairs), as text."""
    pairs = re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", body, re.S)
    return {k: " ".join(parsed(v)[1].split()) for k, v in pairs}


def member_rows(body: str) -> dict[str, tuple[str, str, str]]:
    """Each member row by the id it shows: its link, its kind and its state's text."""
    section = body.split('id="members"')[1]
    rows = re.findall(r"<tr>\s*<td>(.*?)</td>\s*<td>(.*?)</td>\s*<td>(.*?)</td>", section, re.S)
    return {parsed(a)[1].strip(): (a, kind, parsed(state)[1].strip()) for a, kind, state in rows}


async def test_the_batch_page_shows_counts_and_links_each_member(
    served: tuple[RunningDashboard, dict[str, Any]],
) -> None:
    dash, world = served
    status, body = await page(dash, "/batch", {"id": world["outer"]})
    assert status == 200, body
    shown = facts(body)
    assert (shown["members"], shown["completed"], shown["failed"], shown["pending"]) == (
        "4", "1", "1", "2",
    )  # fmt: skip
    assert (shown["sealed"], shown["outcome"], shown["callbacks made"]) == ("yes", "—", "death")
    assert "parent batch" not in shown
    rows = member_rows(body)
    assert rows == {
        world["inner"]: (batch_link(world["inner"]), "batch", "pending"),
        world["done"]: (run_link(world["done"]), "run", "COMPLETED"),
        world["failed"]: (run_link(world["failed"]), "run", "FAILED"),
        world["waiting"]: (run_link(world["waiting"]), "run", "pending"),
    }
    _, inner = await page(dash, "/batch", {"id": world["inner"]})
    assert facts(inner)["parent batch"] == world["outer"]
    assert batch_link(world["outer"]) in inner
    assert member_rows(inner)[world["inner_run"]][0] == run_link(world["inner_run"])
    _, settled = await page(dash, "/batch", {"id": world["settled"]})
    assert facts(settled)["outcome"] == "COMPLETED"
    assert '<span class="status s-completed">COMPLETED</span></h1>' in settled


async def test_the_batch_page_lists_the_first_page_of_a_big_batch(
    served: tuple[RunningDashboard, dict[str, Any]],
) -> None:
    dash, world = served
    _, body = await page(dash, "/batch", {"id": world["big"]})
    text = " ".join(parsed(body)[1].split())
    assert f"Members {MANY} ({MANY} pending); the first {SHOWN}" in text
    assert len(member_rows(body)) == SHOWN
    assert set(member_rows(body)) <= set(world["big_runs"])


async def test_an_unknown_batch_is_a_404_page(
    served: tuple[RunningDashboard, dict[str, Any]],
) -> None:
    dash, _ = served
    status, body = await page(dash, "/batch", {"id": "0" * 32})
    assert status == 404 and "not found" in parsed(body)[1]
    status, _ = await page(dash, "/batch", {})
    assert status == 400


async def test_the_run_page_links_to_the_runs_batch(
    served: tuple[RunningDashboard, dict[str, Any]],
) -> None:
    dash, world = served
    _, body = await page(dash, "/run", {"id": world["done"]})
    assert f"batch {world['outer']}" in " ".join(parsed(body)[1].split())
    assert batch_link(world["outer"]) in body
    _, plain = await page(dash, "/run", {"id": world["plain"]})
    assert "/batch?" not in plain
