"""The dashboard's schedules page over HTTP against real Redis: each schedule's spec,
next and last occurrence, the run it last created and how it ended, paused or not, and
the schedules set aside with why; its pause, resume, trigger and remove forms work only
for a logged-in operator with the form's CSRF value. The browser test is
tests/browser/test_browser_schedules.py."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlencode

import aiohttp
import redis.asyncio as aioredis
from dashboard_pages import TOKEN, get, logged_in, parsed, post

from flo_redis import FloClient
from flo_redis._wire.codec import pack
from flo_redis._wire.keys import action_keys
from flo_redis.actions.schedules import fire_due
from flo_redis.dashboard import RunningDashboard

EVIL = "<img src=x onerror=alert(1)>"


async def schedules_set(client: FloClient, raw: aioredis.Redis) -> str:
    """'report' on a cron in Paris time, fired once (its last run), 'resize' every 30 s
    under a name with HTML in it, and 'martian' set aside: its time zone is unknown.
    Answers report's last run."""
    await client.action.register("report")
    await client.action.register("resize")
    await client.action.schedule("report", "0 9 * * 1-5", timezone="Europe/Paris")
    await client.action.schedule("resize", timedelta(seconds=30), name=f"thumbs{EVIL}")
    keys, resize = action_keys(client.namespace, "report"), action_keys(client.namespace, "resize")
    await raw.zadd(keys.schedule_due, {"report": 1_765_000_000_000})  # missed: fires now
    record = pack({"c": "0 3 * * *", "e": 0, "z": "Mars/Olympus", "i": b"", "m": "once"})
    await raw.hset(resize.schedules, "martian", record)
    await raw.zadd(resize.schedule_due, {"martian": 0})
    await fire_due(client.session, "report")
    await fire_due(client.session, "resize")
    return (await client.action.get_schedule("report")).last_run_id


async def test_the_page_shows_next_last_paused_and_set_aside(
    client: FloClient,
    raw: aioredis.Redis,
    writable: RunningDashboard,
    browser: aiohttp.ClientSession,
) -> None:
    last_run = await schedules_set(client, raw)
    status, body = await get(browser, writable.url)
    assert status == 200 and 'href="/schedules"' in body  # in the nav
    status, body = await get(browser, writable.url + "schedules")
    assert status == 200
    tags, text = parsed(body)
    assert "img" not in tags and f"thumbs{EVIL}" in text  # a name is text, never markup
    assert "0 9 * * 1-5" in text and "Europe/Paris" in text and "every 30s" in text
    assert "2025-12-06 05:46:40 UTC" in text  # report's last occurrence, as fired
    assert last_run in text and "PENDING" in text  # the run it created, and its state
    assert "Set aside: cannot be evaluated" in text and "martian" in text
    assert "Mars/Olympus" in text  # why

    await client.action.pause_schedule("report")
    _, body = await get(browser, writable.url + "schedules?" + urlencode({"action": "report"}))
    _, text = parsed(body)
    assert "PAUSED" in text and "held while paused" in text and "thumbs" not in text


async def test_pause_resume_trigger_and_remove_need_a_session_and_its_csrf(
    client: FloClient,
    raw: aioredis.Redis,
    writable: RunningDashboard,
    browser: aiohttp.ClientSession,
) -> None:
    await schedules_set(client, raw)
    report = {"action": "report", "name": "report", "next": "/schedules"}
    status, _ = await post(browser, writable.url + "schedule/pause", {**report, "csrf": "0" * 64})
    assert status == 403
    assert not (await client.action.get_schedule("report")).paused

    csrf = await logged_in(browser, writable.url, TOKEN)
    status, _ = await post(browser, writable.url + "schedule/pause", {**report, "csrf": "f" * 64})
    assert status == 403  # another CSRF value: refused
    status, body = await post(browser, writable.url + "schedule/pause", {**report, "csrf": csrf})
    assert status == 200 and "Schedule paused" in body and "/schedule/resume" in body
    held = await client.action.get_schedule("report")
    assert held.paused

    status, body = await post(browser, writable.url + "schedule/trigger", {**report, "csrf": csrf})
    assert status == 200 and "one run created now" in body
    triggered = await client.action.get_schedule("report")
    assert triggered.triggered_run_id and triggered.next_due_ms == held.next_due_ms
    assert triggered.triggered_run_id in body  # shown as the last trigger

    status, body = await post(browser, writable.url + "schedule/resume", {**report, "csrf": csrf})
    assert status == 200 and "Schedule resumed" in body
    assert not (await client.action.get_schedule("report")).paused

    status, body = await post(browser, writable.url + "schedule/remove", {**report, "csrf": csrf})
    assert status == 200 and "Schedule removed" in body
    assert [s.name for s in await client.action.schedules("report")] == []
    gone = {**report, "name": "nope", "csrf": csrf}
    status, body = await post(browser, writable.url + "schedule/pause", gone)
    assert status == 404 and "has no schedule 'nope'" in parsed(body)[1]
