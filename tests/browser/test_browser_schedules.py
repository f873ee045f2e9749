"""The schedules page in a real browser (headless Chromium through Playwright) against
real Redis and a real worker: an operator sees each schedule's next and last occurrence,
the run its last occurrence created, and a schedule set aside with its error; logged in,
pauses one (it shows PAUSED, and offers Resume), triggers one (its run shows as the last
trigger) and resumes it. The screenshot is the docs' (docs/schedules.md):
``FLO_REDIS_SCREENSHOTS=docs pytest tests/browser/test_browser_schedules.py``.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from chromium_pages import logged_in_page
from polling import eventually

from flo_redis import ActionContext, FloClient, RunStatus
from flo_redis._wire.codec import pack
from flo_redis._wire.keys import action_keys
from flo_redis.actions.schedules import fire_due
from flo_redis.dashboard import start_dashboard

TOKEN = "browser-test-write-token"


async def set_aside(client: FloClient, raw: aioredis.Redis, action: str, name: str) -> None:
    """A schedule of ``action`` whose time zone no host knows, fired: set aside."""
    keys = action_keys(client.namespace, action)
    record = pack({"c": "0 4 * * *", "e": 0, "z": "Europe/Atlantis", "i": b"", "m": "once"})
    await raw.hset(keys.schedules, name, record)
    await raw.zadd(keys.schedule_due, {name: 0})
    await fire_due(client.session, action)


async def test_an_operator_sees_next_last_and_error_and_pauses_and_triggers(
    client: FloClient, raw: aioredis.Redis, browser: Any, shots: Path
) -> None:
    worker = client.new_action_worker(block_ms=500)
    done: list[bytes] = []

    @worker.action("nightly-report")
    async def report(ctx: ActionContext) -> bytes:
        done.append(ctx.input())
        return b'{"rows": 1200}'

    await client.action.register("nightly-report")
    await client.action.register("send-digest")
    nightly = await client.action.schedule(
        "nightly-report", "0 2 * * *", timezone="Europe/Paris", input=b'{"full": true}'
    )
    await client.action.schedule("send-digest", timedelta(minutes=15), name="digest-eu")
    await client.action.schedule("send-digest", timedelta(hours=1), name="digest-us")
    await client.action.pause_schedule("send-digest", "digest-us")
    # The night before's occurrence, missed while no worker ran: fired now, late, once.
    keys = action_keys(client.namespace, "nightly-report")
    before = nightly.next_due_ms - 86_400_000
    await raw.zadd(keys.schedule_due, {"nightly-report": before})
    await fire_due(client.session, "nightly-report")
    await set_aside(client, raw, "send-digest", "cleanup-eu")
    last_run = (await client.action.get_schedule("nightly-report")).last_run_id

    task = asyncio.create_task(worker.start())
    dash = await start_dashboard(client, port=0, token=TOKEN)
    try:
        await eventually(
            lambda: client.action.status(last_run), lambda s: s.status == RunStatus.COMPLETED
        )
        page = await logged_in_page(browser, dash.url, TOKEN)
        await page.get_by_role("link", name="Schedules", exact=True).click()
        await page.get_by_role("heading", name="Schedules").first.wait_for()

        row = page.locator("tr.schedule", has=page.get_by_text("0 2 * * *"))
        assert "Europe/Paris" in await row.inner_text()
        assert "in " in await row.locator("td.next").inner_text()  # the next occurrence
        shown = datetime.fromtimestamp(before / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M")
        assert shown in await row.locator("td.last").inner_text()  # the last one
        await row.get_by_role("link", name=last_run).wait_for()
        assert "COMPLETED" in await row.inner_text()
        aside = page.locator("tr.set-aside", has=page.get_by_text("cleanup-eu"))
        assert "Europe/Atlantis" in await aside.locator("td.error").inner_text()
        paused = page.locator("tr.schedule", has=page.get_by_text("digest-us"))
        assert "PAUSED" in await paused.inner_text()
        await page.screenshot(path=str(shots / "dashboard-schedules.png"), full_page=True)

        digest = page.locator("tr.schedule", has=page.get_by_text("digest-eu"))
        await digest.get_by_role("button", name="Pause").click()
        await page.get_by_role("status").filter(has_text="Schedule paused").wait_for()
        assert "PAUSED" in await digest.inner_text()
        await digest.get_by_role("button", name="Resume").wait_for()
        assert (await client.action.get_schedule("send-digest", "digest-eu")).paused

        await row.get_by_role("button", name="Trigger").click()
        await page.get_by_role("status").filter(has_text="one run created now").wait_for()
        triggered = await client.action.get_schedule("nightly-report")
        await row.get_by_role("link", name=triggered.triggered_run_id).wait_for()
        await eventually(lambda: asyncio.sleep(0, len(done)), lambda n: n == 2)
        assert done == [b'{"full": true}'] * 2  # the trigger ran with the schedule's input

        await digest.get_by_role("button", name="Resume").click()
        await page.get_by_role("status").filter(has_text="Schedule resumed").wait_for()
        assert not (await client.action.get_schedule("send-digest", "digest-eu")).paused
        await page.context.close()
    finally:
        await dash.close()
        worker.stop()
        await asyncio.wait_for(task, 30)
