"""The history charts in a real browser: headless Chromium against real Redis and a real
worker. The action page draws its runs per bar and its latency percentiles as inline
SVG, styled by the dashboard's stylesheet under its Content-Security-Policy, with no
script. The screenshot is the docs' (docs/dashboard.md):
``FLO_REDIS_SCREENSHOTS=docs pytest tests/browser/test_browser_history.py`` writes
docs/dashboard-history.png."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from chromium_pages import screenshots
from dashboard_pages import served
from history_ring import write_ring
from polling import eventually

from flo_redis import ActionContext, ActionRegisterOptions, FloClient
from flo_redis.actions.history import ActionHistory


async def test_the_action_page_draws_its_history(
    client: FloClient, raw: aioredis.Redis, browser: Any, tmp_path: Path
) -> None:
    worker = client.new_action_worker(block_ms=500)
    options = ActionRegisterOptions(max_retries=2)

    @worker.action("resize-image", options)
    async def resize(ctx: ActionContext) -> bytes:
        if ctx.payload == b"broken" and ctx.attempt < 2:
            raise RuntimeError("image truncated")
        return b"ok"

    await client.action.register("resize-image", options=options)
    # The hours before this minute, written into the ring (the scripts count the rest).
    await write_ring(raw, client.namespace, "resize-image", 24 * 60)
    since = await client.server_time_ms() // 60_000 * 60_000

    def counted(h: ActionHistory) -> tuple[int, int]:
        now = [p for p in h.points if p.at_ms >= since]
        return sum(p.completed for p in now), sum(p.retried for p in now)

    task = asyncio.create_task(worker.start())
    try:
        await client.action.invoke_many("resize-image", [b"photo"] * 40 + [b"broken"] * 3)
        await eventually(
            lambda: client.action.history("resize-image", since="5m"),
            lambda h: counted(h) == (43, 3),
            what="the runs counted since the worker started",
        )
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)

    async with served(client) as dash:
        page = await browser.new_page(viewport={"width": 1200, "height": 900})
        refusals: list[str] = []
        page.on("console", lambda m: refusals.append(m.text) if "Content" in m.text else None)
        await page.goto(dash.url + "action?name=resize-image&window=24h")
        history = page.locator("section.history")
        await history.wait_for()
        charts = history.locator("svg.history")
        assert await charts.count() == 2
        box = await charts.first.bounding_box()
        assert box is not None and box["width"] > 600 and box["height"] > 100
        bars = history.locator("rect.completed")
        assert await bars.count() > 48
        # Coloured by the stylesheet: the page's own CSS reached the drawing.
        fill = await bars.first.evaluate("r => getComputedStyle(r).fill")
        assert fill == "rgb(23, 92, 211)"
        lines = history.locator("svg.latency polyline")
        assert await lines.count() >= 4
        stroke = await lines.first.evaluate("l => getComputedStyle(l).stroke")
        assert stroke not in ("", "none")
        assert await history.locator("script").count() == 0
        assert refusals == []
        text = await history.inner_text()
        assert "retried" in text and "pickup p50" in text
        await history.screenshot(path=str(screenshots(tmp_path) / "dashboard-history.png"))
        # The window is a link: 72 hours, an hour per bar.
        await history.get_by_role("link", name="72h").click()
        await page.locator("section.history h2").filter(has_text="60 min per bar").wait_for()
