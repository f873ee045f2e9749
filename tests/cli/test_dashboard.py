"""The dashboard over HTTP against real Redis: pages, escaping, and who may change what
(read-only by default, the write token, sessions, CSRF, origin). The browser test is
test_dashboard_browser.py."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from urllib.parse import urlencode

import aiohttp
import pytest
from dashboard_pages import TOKEN, get, logged_in, parsed, post

from flo_redis import (
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    FlowControl,
    RunStatus,
    WorkerAwaitOptions,
    WorkerStatus,
)
from flo_redis.dashboard import RunningDashboard, start_dashboard
from flo_redis.dashboard.guard import local_path
from flo_redis.dashboard.sparkline import sparkline
from flo_redis.streams import StreamDeadLetterOptions
from flo_redis.types import (
    StreamGroupJoinOptions,
    StreamGroupNackOptions,
    StreamGroupReadOptions,
    WorkerRegisterOptions,
)

EVIL = "<img src=x onerror=alert(1)>&\"'"


async def failed_run(client: FloClient, action: str, error: str) -> str:
    """A run of ``action`` that failed for good with ``error``."""
    await client.action.register(action, options=ActionRegisterOptions(max_retries=1))
    await client.worker.register("w1", [action], WorkerRegisterOptions())
    run_id = (await client.action.invoke(action, b"{}")).run_id
    [claimed] = await client.worker.await_tasks("w1", [action], 1)
    await client.worker.fail("w1", action, claimed.run_id, error)
    assert (await client.action.status(run_id)).status == RunStatus.FAILED
    return run_id


async def log_in(session: aiohttp.ClientSession, dash: RunningDashboard) -> str:
    """Log in with the token; the CSRF value the dashboard's forms now carry."""
    return await logged_in(session, dash.url, TOKEN)


async def test_pages_show_the_namespace_and_escape_every_value(
    client: FloClient, read_only: RunningDashboard, browser: aiohttp.ClientSession
) -> None:
    run_id = await failed_run(client, f"pay{EVIL}", f"KeyError: {EVIL}")
    status, body = await get(browser, read_only.url)
    assert status == 200
    tags, text = parsed(body)
    assert "img" not in tags  # nothing the user wrote became markup...
    assert f"pay{EVIL}" in text  # ...the name shows as the text it is
    assert f"KeyError: {EVIL}" in text  # and so does the failed run's error
    for page in (
        "action?" + urlencode({"name": f"pay{EVIL}"}),
        "run?" + urlencode({"id": run_id}),
        "workers?" + urlencode({"w": EVIL}),
    ):
        status, body = await get(browser, read_only.url + page)
        assert status == 200, (page, body)
        tags, text = parsed(body)
        assert "img" not in tags and f"pay{EVIL}" in text, page


async def test_answers_carry_a_strict_content_security_policy(
    read_only: RunningDashboard, browser: aiohttp.ClientSession
) -> None:
    async with browser.get(read_only.url) as response:
        # Scripts and connections from the dashboard itself only: no inline script, no
        # other site's, nothing framed, posted or based elsewhere.
        assert response.headers["Content-Security-Policy"] == (
            "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; "
            "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        )
        assert response.headers["X-Frame-Options"] == "DENY"
        body = await response.text()
    assert '<script src="/static/live.js" defer></script>' in body  # the only script
    assert body.count("<script") == 1
    async with browser.get(read_only.url + "static/style.css") as response:
        assert response.status == 200 and response.content_type == "text/css"
    async with browser.get(read_only.url + "static/live.js") as response:
        assert response.status == 200 and response.content_type == "text/javascript"
        assert "Content-Security-Policy" in response.headers


async def test_a_read_only_dashboard_offers_no_changes_and_refuses_them(
    client: FloClient, read_only: RunningDashboard, browser: aiohttp.ClientSession
) -> None:
    run_id = await failed_run(client, "pay", "card declined")
    _, body = await get(browser, read_only.url)
    assert "card declined" in body and "read-only" in body
    assert "/run/requeue" not in body  # no form to press
    status, body = await post(browser, read_only.url + "run/requeue", {"id": run_id})
    assert status == 403 and "read-only" in body
    status, body = await post(browser, read_only.url + "login", {"token": TOKEN})
    assert status == 403
    assert (await client.action.status(run_id)).status == RunStatus.FAILED


async def test_changes_need_the_token_a_session_and_the_forms_csrf(
    client: FloClient, writable: RunningDashboard, browser: aiohttp.ClientSession
) -> None:
    run_id = await failed_run(client, "pay", "card declined")
    url = writable.url + "run/requeue"
    # Without logging in: refused, and the page says how to get access.
    status, body = await post(browser, url, {"id": run_id, "csrf": "0" * 64})
    assert status == 403 and "log in" in body
    # A wrong token logs nobody in.
    status, body = await post(browser, writable.url + "login", {"token": "not-the-token-at-all"})
    assert status == 403 and "not this dashboard" in body
    csrf = await log_in(browser, writable)
    # Logged in, but without the form's CSRF value, or from another site: refused.
    status, body = await post(browser, url, {"id": run_id})
    assert status == 403 and "CSRF" in body
    status, body = await post(
        browser, url, {"id": run_id, "csrf": csrf}, Origin="http://evil.example"
    )
    assert status == 403 and "another site" in body
    assert (await client.action.status(run_id)).status == RunStatus.FAILED
    # The real form: re-queued, back on the page it came from, with a note.
    status, body = await post(browser, url, {"id": run_id, "csrf": csrf, "next": "/"})
    assert status == 200 and "Run re-queued" in body
    assert (await client.action.status(run_id)).status == RunStatus.PENDING
    # Logged out: refused again.
    await post(browser, writable.url + "logout", {"csrf": csrf})
    status, _ = await post(browser, url, {"id": run_id, "csrf": csrf})
    assert status == 403


async def test_a_library_refusal_is_shown_not_a_crash(
    client: FloClient, writable: RunningDashboard, browser: aiohttp.ClientSession
) -> None:
    csrf = await log_in(browser, writable)
    await client.action.register("pay")
    run_id = (await client.action.invoke("pay", b"")).run_id
    status, body = await post(browser, writable.url + "run/requeue", {"id": run_id, "csrf": csrf})
    assert status == 409 and "not failed" in body  # a pending run cannot be re-queued
    status, body = await get(browser, writable.url + "action?name=nope")
    assert status == 404 and "not registered" in body
    status, body = await get(browser, writable.url + "run?id=pay:999999")
    assert status == 404


async def test_drain_a_worker(
    client: FloClient, writable: RunningDashboard, browser: aiohttp.ClientSession
) -> None:
    await client.worker.register("w<1>", ["pay"], WorkerRegisterOptions())
    csrf = await log_in(browser, writable)
    status, body = await get(browser, writable.url + "workers")
    assert status == 200 and "w&lt;1&gt;" in body and "Drain" in body
    status, body = await post(
        browser, writable.url + "worker/drain", {"id": "w<1>", "csrf": csrf, "next": "/workers"}
    )
    assert status == 200 and "DRAINING" in body
    [info] = (await client.worker.list()).workers
    assert info.status == WorkerStatus.DRAINING


async def test_a_group_page_shows_dead_letters_and_replays_them(
    client: FloClient, writable: RunningDashboard, browser: aiohttp.ClientSession
) -> None:
    await client.stream.group_join("events", "billing", "c1", StreamGroupJoinOptions(max_deliver=1))
    await client.stream.append("events", b"poison <pill>")
    [record] = (await client.stream.group_read("events", "billing", "c1")).records
    await client.stream.group_nack(
        "events", "billing", [record.id], StreamGroupNackOptions(consumer="c1")
    )
    assert len(await client.stream.dead_letters("events", "billing")) == 1
    csrf = await log_in(browser, writable)
    page = writable.url + "group?stream=events&group=billing"
    status, body = await get(browser, page)
    assert status == 200 and "poison &lt;pill&gt;" in body and "Replay" in body
    status, body = await post(
        browser,
        writable.url + "group/replay",
        {
            "stream": "events",
            "group": "billing",
            "csrf": csrf,
            "next": "/group?stream=events&group=billing",
        },
    )
    assert status == 200 and "appended to the stream again" in body
    left = await client.stream.dead_letters("events", "billing", StreamDeadLetterOptions())
    assert left == []


def test_redirects_after_a_form_stay_on_the_dashboard() -> None:
    assert local_path("/action?name=x") == "/action?name=x"
    for target in ("//evil.example/", "https://evil.example/", "javascript:alert(1)", "", "x"):
        assert local_path(target) == "/"
    assert local_path("/\\evil.example") == "/"


async def test_the_command_serves_until_interrupted(redis_url: str, namespace: str) -> None:
    """``flo-redis dashboard`` through its real entry point: it says where it listens,
    serves the overview, and stops on Ctrl-C."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "flo_redis.cli",
        "dashboard",
        "--url",
        redis_url,
        "--namespace",
        namespace,
        "--port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        match = re.search(r"at (http://127\.0\.0\.1:\d+/) \(read-only\)", line)
        assert match, line
        async with aiohttp.ClientSession() as session:
            status, body = await get(session, match.group(1))
        assert status == 200 and namespace in body
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def words(text: str) -> str:
    return " ".join(text.split())


async def test_counts_and_runs_by_state(
    client: FloClient, read_only: RunningDashboard, browser: aiohttp.ClientSession
) -> None:
    await failed_run(client, "pay", "declined")  # 1 failed
    for _ in range(3):
        await client.action.invoke("pay", b"")  # 3 pending
    await client.action.invoke("pay", b"", ActionInvokeOptions(delay_ms=3_600_000))
    _, body = await get(browser, read_only.url)
    _, text = parsed(body)
    assert "pay 3 1 0 0 1 0" in words(text)  # pending delayed running completed failed t/o
    _, body = await get(browser, read_only.url + "action?name=pay")
    _, text = parsed(body)
    assert "pending 3 delayed 1 running 0 completed 0 failed 1" in words(text)
    assert "declined" in text  # failed runs first when there are any
    _, body = await get(browser, read_only.url + "action?name=pay&state=delayed")
    _, text = parsed(body)
    assert "in 59 min" in text or "in 60 min" in text  # when the delayed run is due
    status, body = await get(browser, read_only.url + "action?name=pay&state=bogus")
    assert status == 400 and "not one of" in body


async def test_requeue_every_failed_run_and_purge_a_state(
    client: FloClient, writable: RunningDashboard, browser: aiohttp.ClientSession
) -> None:
    for i in range(3):
        await failed_run(client, "pay", f"declined {i}")
    csrf = await log_in(browser, writable)
    status, body = await post(
        browser,
        writable.url + "action/requeue-failed",
        {"name": "pay", "csrf": csrf, "next": "/action?name=pay"},
    )
    assert status == 200 and "3 failed runs re-queued." in body
    counts = await client.action.counts("pay")
    assert (counts.pending, counts.failed) == (3, 0)
    purge = {"name": "pay", "state": "pending", "csrf": csrf, "next": "/action?name=pay"}
    status, body = await post(browser, writable.url + "action/purge", purge)
    assert status == 400 and "confirm" in body  # not without the box ticked
    assert (await client.action.counts("pay")).pending == 3
    status, body = await post(browser, writable.url + "action/purge", {**purge, "confirm": "yes"})
    assert status == 200 and "3 runs purged." in body
    assert (await client.action.counts("pay")).pending == 0


def test_a_sparkline_draws_every_series_on_one_scale() -> None:
    line = sparkline([0, 2, 4], [1, 0, 0])
    assert line.totals == (6, 1) and line.peak == 4
    completed = [tuple(map(float, xy.split(","))) for xy in line.lines[0].split()]
    failed = [tuple(map(float, xy.split(","))) for xy in line.lines[1].split()]
    assert [x for x, _ in completed] == [x for x, _ in failed]  # same minutes
    assert completed[2][1] < failed[0][1] < completed[0][1]  # 4 above 1 above 0
    assert sparkline([0, 0], [0, 0]).lines[0] == sparkline([0, 0], [0, 0]).lines[1]


async def test_stream_groups_show_their_lag_pending_and_consumers(
    client: FloClient, read_only: RunningDashboard, browser: aiohttp.ClientSession
) -> None:
    await client.stream.group_join("events", "billing", "c1")
    for i in range(5):
        await client.stream.append("events", f"record {i}".encode())
    got = await client.stream.group_read("events", "billing", "c1", StreamGroupReadOptions(count=2))
    assert len(got.records) == 2
    # stream, group, lag (not handed out), pending (not acked), consumers, dead, set aside,
    # partitions
    row = "events billing 3 2 1 0 0 1"
    _, body = await get(browser, read_only.url)
    assert row in words(parsed(body)[1])
    _, body = await get(browser, read_only.url + "streams")
    assert row in words(parsed(body)[1])
    _, body = await get(browser, read_only.url + "group?stream=events&group=billing")
    text = words(parsed(body)[1])
    assert "lag 3 not yet handed out" in text and "c1 (2 pending)" in text


async def test_cancel_a_running_run_from_its_page(
    client: FloClient,
    read_only: RunningDashboard,
    writable: RunningDashboard,
    browser: aiohttp.ClientSession,
) -> None:
    await client.action.register("pay")
    await client.worker.register("w1", ["pay"], WorkerRegisterOptions())
    run_id = (await client.action.invoke("pay", b"")).run_id
    assert len(await client.worker.await_tasks("w1", ["pay"], 1)) == 1  # now RUNNING
    page = "run?" + urlencode({"id": run_id})
    _, body = await get(browser, read_only.url + page)
    assert "RUNNING" in body and "/run/cancel" not in body  # read-only: no form
    status, body = await post(browser, read_only.url + "run/cancel", {"id": run_id})
    assert status == 403 and "read-only" in body
    url = writable.url + "run/cancel"
    status, body = await post(browser, url, {"id": run_id, "csrf": "0" * 64})
    assert status == 403 and "log in" in body
    csrf = await log_in(browser, writable)
    _, body = await get(browser, writable.url + page)
    assert "Cancel this run" in body and "Requeue this run" not in body
    status, body = await post(browser, url, {"id": run_id})
    assert status == 403 and "CSRF" in body
    status, body = await post(
        browser, url, {"id": run_id, "csrf": csrf}, Origin="http://evil.example"
    )
    assert status == 403 and "another site" in body
    assert (await client.action.status(run_id)).status == RunStatus.RUNNING
    # The real form: cancelled, back on the run's page, which now offers a re-queue.
    status, body = await post(browser, url, {"id": run_id, "csrf": csrf, "next": "/" + page})
    assert status == 200 and "Run cancelled" in body
    assert "CANCELLED" in body and "Requeue this run" in body and "Cancel this run" not in body
    assert (await client.action.status(run_id)).status == RunStatus.CANCELLED
    # Cancelling it again is refused, and said so.
    status, body = await post(browser, url, {"id": run_id, "csrf": csrf})
    assert status == 409 and "already ended CANCELLED" in body


async def test_a_loopback_dashboard_answers_only_requests_addressed_to_it(
    read_only: RunningDashboard, browser: aiohttp.ClientSession
) -> None:
    # A page whose name was made to resolve to 127.0.0.1 (DNS rebinding) sends its own
    # name as Host: refused, so it cannot read the dashboard through a browser.
    port = read_only.url.rstrip("/").rsplit(":", 1)[1]
    for name in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):
        async with browser.get(read_only.url, headers={"Host": name}) as response:
            assert response.status == 200, name
    async with browser.get(read_only.url, headers={"Host": f"attacker.example:{port}"}) as response:
        assert response.status == 403
        assert "answers only requests addressed to it" in await response.text()


async def test_behind_a_proxy_the_public_origin_is_served_and_may_change(
    client: FloClient,
) -> None:
    # Listening on loopback, reached by browsers at https://dash.example.com through a
    # proxy that forwards their Host (the first form) or puts its own (the second).
    dash = await start_dashboard(
        client, port=0, token=TOKEN, origins=["https://Dash.Example.com:443/"]
    )
    # The session cookie is Secure (every public origin is https): this browser talks
    # to the dashboard's own address as the proxy would, and is let send it there.
    jar = aiohttp.CookieJar(unsafe=True, treat_as_secure_origin=[dash.url])
    browser = aiohttp.ClientSession(cookie_jar=jar)
    try:
        public = {"Host": "dash.example.com"}
        async with browser.get(dash.url, headers=public) as response:
            assert response.status == 200
        async with browser.get(dash.url, headers={"Host": "attacker.example"}) as response:
            assert response.status == 403 and "--origin" in await response.text()
        csrf = await log_in(browser, dash)
        assert all(cookie["secure"] for cookie in jar)
        first, second, third = [await failed_run(client, "pay", "declined") for _ in range(3)]
        url = dash.url + "run/requeue"
        mine = "https://dash.example.com"
        status, _ = await post(browser, url, {"id": first, "csrf": csrf}, Origin=mine, **public)
        assert status == 200
        status, _ = await post(browser, url, {"id": second, "csrf": csrf}, Origin=mine)
        assert status == 200
        assert (await client.action.status(first)).status == RunStatus.PENDING
        assert (await client.action.status(second)).status == RunStatus.PENDING
        # Another site, or the same name over plain http, is still refused, whichever
        # Host the proxy sends.
        for origin in ("https://evil.example", "http://dash.example.com", "null"):
            for host in ({}, public):
                form = {"id": third, "csrf": csrf}
                status, body = await post(browser, url, form, Origin=origin, **host)
                assert status == 403 and "another site" in body, (origin, host)
        assert (await client.action.status(third)).status == RunStatus.FAILED
    finally:
        await browser.close()
        await dash.close()


async def test_a_dashboard_reached_without_tls_keeps_its_cookie_plain(
    client: FloClient, writable: RunningDashboard, browser: aiohttp.ClientSession
) -> None:
    await log_in(browser, writable)
    assert [cookie["secure"] for cookie in browser.cookie_jar] == [""]
    dash = await start_dashboard(client, port=0, token=TOKEN, origins=["http://dash.lan"])
    try:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as other:
            await log_in(other, dash)
            assert [cookie["secure"] for cookie in other.cookie_jar] == [""]
    finally:
        await dash.close()


@pytest.mark.parametrize(
    "origin",
    [
        "dash.example.com",
        "ftp://dash.example.com",
        "https://x.example/path",
        "https://x:ab",
        "https://[::1",
        "https://dash.example.com",  # one str, not a list of them
    ],
)
async def test_an_origin_that_is_not_one_is_refused_at_start(
    client: FloClient, origin: str
) -> None:
    origins = origin if origin == "https://dash.example.com" else [origin]
    with pytest.raises(ValueError, match="origin"):
        await start_dashboard(client, port=0, origins=origins)


async def test_a_path_that_looks_like_another_site_never_links_there(
    read_only: RunningDashboard, browser: aiohttp.ClientSession
) -> None:
    status, body = await get(browser, read_only.url + "/evil.example/x")  # //evil.example/x
    assert status == 404
    hrefs = re.findall(r'href="([^"]*)"', body)
    assert hrefs and not any("evil.example" in href for href in hrefs)


async def test_the_action_page_shows_its_busiest_flow_keys(
    client: FloClient, read_only: RunningDashboard
) -> None:
    flow = FlowControl(concurrency=1)
    await client.action.register("keyed", options=ActionRegisterOptions(flow=flow))
    await client.worker.register("w1", ["keyed"])
    for key in ("tenant-big", "tenant-big", "tenant-big", "tenant-small"):
        await client.action.invoke("keyed", b"", ActionInvokeOptions(flow_key=key))
    await client.worker.await_tasks("w1", ["keyed"], 10, WorkerAwaitOptions(block_ms=0))
    async with aiohttp.ClientSession() as browser:
        status, body = await get(browser, read_only.url + "action?name=keyed")
        assert status == 200
        tags, text = parsed(body)
        assert "table" in tags
        assert "Busiest flow keys" in text and "tenant-big" in text and "tenant-small" in text
        # An action whose runs name no key shows no such table.
        await client.action.register("plain")
        status, body = await get(browser, read_only.url + "action?name=plain")
        assert status == 200 and "Busiest flow keys" not in body
