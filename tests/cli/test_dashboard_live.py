"""The dashboard's live pages over HTTP (their event streams: what they send, to whom,
how many, and that they end), the workers page's runs held now, and the namespace
switcher. The browser's side is tests/browser/test_browser_live.py."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from dashboard_pages import TOKEN, get, parsed
from polling import eventually

from flo_redis import (
    ActionRegisterOptions,
    FloClient,
    RunStatus,
    WorkerAwaitOptions,
    WorkerRegisterOptions,
)
from flo_redis.actions.worker_registry import flo_redis_version
from flo_redis.dashboard import RunningDashboard, start_dashboard
from flo_redis.dashboard.live import live_regions
from flo_redis.dashboard.spaces import Busy, Namespaces

NOW = WorkerAwaitOptions(block_ms=0)
READ_S = 30.0  # a generous bound on waiting for the next event


async def events(response: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, dict[str, str]]]:
    """The events of a stream, as (event, data), until it ends."""
    name, data = "message", ""
    while True:
        line = await asyncio.wait_for(response.content.readline(), READ_S)
        if not line:
            return
        text = line.decode().rstrip("\n")
        if text.startswith("event: "):
            name = text[len("event: ") :]
        elif text.startswith("data: "):
            data = text[len("data: ") :]
        elif not text and data:
            yield name, json.loads(data)
            name, data = "message", ""


async def region_until(response: aiohttp.ClientResponse, name: str, text: str) -> dict[str, str]:
    """The first update of region ``name`` whose HTML holds ``text`` (within READ_S)."""

    async def first() -> dict[str, str]:
        async for event, data in events(response):
            if event == "region" and data["name"] == name and text in data["html"]:
                return data
        raise AssertionError(f"the stream ended before region {name!r} showed {text!r}")

    return await asyncio.wait_for(first(), READ_S)


async def test_an_open_overview_is_sent_each_region_then_what_changes(
    client: FloClient, read_only: RunningDashboard, browser: aiohttp.ClientSession
) -> None:
    await client.action.register("pay", options=ActionRegisterOptions(max_retries=1))
    await client.worker.register("w1", ["pay"], WorkerRegisterOptions())
    async with browser.get(read_only.url + "live/") as response:
        assert response.status == 200
        assert response.content_type == "text/event-stream"
        assert "Content-Security-Policy" in response.headers
        first = set()
        async for event, data in events(response):
            if event == "region":
                first.add(data["name"])
            if first >= {"overview-counts", "overview-actions", "overview-failures"}:
                break
        await client.action.invoke("pay", b"{}")
        [run] = await client.worker.await_tasks("w1", ["pay"], 1, NOW)
        await client.worker.fail("w1", "pay", run.run_id, "card declined")

        update = await region_until(response, "overview-failures", "card declined")

    assert run.run_id in update["html"]
    _, page = await get(browser, read_only.url)
    assert live_regions(page)["overview-failures"] == update["html"]  # as the page draws it


async def test_a_live_workers_page_shows_a_run_taken_while_it_is_open(
    client: FloClient, read_only: RunningDashboard, browser: aiohttp.ClientSession
) -> None:
    await client.action.register("pay")
    await client.worker.register("w1", ["pay"], WorkerRegisterOptions(concurrency=4))
    async with browser.get(read_only.url + "live/workers") as response:
        await region_until(response, "workers", "idle")
        await client.action.invoke("pay", b"{}")
        [run] = await client.worker.await_tasks("w1", ["pay"], 1, NOW)

        update = await region_until(response, "workers", run.run_id)

    assert "1/4" in update["html"]


async def test_the_workers_page_shows_what_each_worker_holds_and_its_process(
    client: FloClient, read_only: RunningDashboard, browser: aiohttp.ClientSession
) -> None:
    await client.action.register("pay")
    await client.worker.register("w1", ["pay"], WorkerRegisterOptions(concurrency=4))
    for _ in range(2):
        await client.action.invoke("pay", b"{}")
    held = [c.run_id for c in await client.worker.await_tasks("w1", ["pay"], 2, NOW)]

    status, body = await get(browser, read_only.url + "workers")

    assert status == 200
    _, text = parsed(body)
    assert all(run_id in text for run_id in held)
    assert "2/4" in text
    assert f"flo-redis {flo_redis_version()}" in text
    assert f"{socket.gethostname()}:{os.getpid()}" in text


async def test_streams_are_capped_and_the_one_over_is_told_to_come_back(
    client: FloClient, browser: aiohttp.ClientSession
) -> None:
    running = await start_dashboard(client, port=0, max_streams=1)
    try:
        async with browser.get(running.url + "live/workers") as first:
            assert first.status == 200
            async with browser.get(running.url + "live/") as second:
                assert second.status == 503
                assert second.headers["Retry-After"] == "10"
                assert "too many live pages" in await second.text()
    finally:
        await running.close()


async def test_closing_the_dashboard_ends_its_open_streams(
    client: FloClient, browser: aiohttp.ClientSession
) -> None:
    running = await start_dashboard(client, port=0)
    async with browser.get(running.url + "live/") as response:
        await region_until(response, "overview-counts", "")
        # aiohttp would wait up to 60 s for a handler still running: the stream ends
        # on shutdown, so close() does not wait for it.
        await asyncio.wait_for(running.close(), READ_S)
        async for _ in events(response):  # what it sent before it ended, then its end
            pass
        assert response.content.at_eof()


async def test_a_stream_is_a_page_the_guard_checks(
    read_only: RunningDashboard, browser: aiohttp.ClientSession
) -> None:
    status, body = await get(browser, read_only.url + "live/run")
    assert status == 404 and "not a page that refreshes live" in body
    async with browser.get(read_only.url + "live/", headers={"Host": "evil.example"}) as r:
        assert r.status == 403  # DNS rebinding: a loopback dashboard answers loopback names
    status, _ = await get(browser, read_only.url + "live/?ns=" + "{bad}")
    assert status == 400


# --- the namespace switcher ------------------------------------------------------------


@pytest.fixture
async def other(client: FloClient) -> AsyncIterator[FloClient]:
    """A client of a second namespace on the same Redis, with an action in it."""
    sibling = client.sibling(namespace=client.namespace + "-other")
    await sibling.connect()
    await sibling.action.register("ship")
    try:
        yield sibling
    finally:
        await sibling.close()


async def test_the_switcher_lists_the_namespaces_and_shows_the_one_named(
    client: FloClient,
    other: FloClient,
    read_only: RunningDashboard,
    browser: aiohttp.ClientSession,
) -> None:
    await client.action.register("pay")
    _, home = await get(browser, read_only.url)
    assert f'<option value="{other.namespace}">' in home
    assert f'<option value="{client.namespace}" selected>' in home

    status, page = await get(browser, read_only.url + "?ns=" + other.namespace)

    assert status == 200
    assert f'<option value="{other.namespace}" selected>' in page
    assert "/action?name=ship&amp;ns=" + other.namespace in page  # links stay there
    assert f'href="/workers?ns={other.namespace}"' in page
    assert "/action?name=pay" not in page
    status, action = await get(browser, read_only.url + f"action?name=ship&ns={other.namespace}")
    assert status == 200 and "ship" in action
    async with browser.get(read_only.url + "live/?ns=" + other.namespace) as response:
        update = await region_until(response, "overview-actions", "ship")
    assert "pay" not in update["html"]


async def test_a_namespace_that_holds_nothing_or_is_not_allowed_is_refused(
    client: FloClient, other: FloClient, browser: aiohttp.ClientSession
) -> None:
    running = await start_dashboard(client, port=0, namespaces=[])
    try:
        status, body = await get(browser, running.url + "?ns=" + other.namespace)
        assert status == 404 and "--show-namespace" in body
        _, home = await get(browser, running.url)
        assert "<select" not in home  # nothing to switch to
    finally:
        await running.close()
    running = await start_dashboard(client, port=0)
    try:
        status, body = await get(browser, running.url + "?ns=nothing-here")
        assert status == 404 and "holds nothing" in body
    finally:
        await running.close()


async def test_a_stream_whose_browser_went_away_frees_its_place(
    client: FloClient, browser: aiohttp.ClientSession
) -> None:
    running = await start_dashboard(client, port=0, max_streams=1)
    try:
        async with aiohttp.ClientSession() as gone, gone.get(running.url + "live/") as first:
            await region_until(first, "overview-counts", "")

        async def accepted() -> int:
            async with browser.get(running.url + "live/") as again:
                return again.status

        assert await eventually(accepted, lambda s: s == 200, timeout=30, interval=0.5) == 200
    finally:
        await running.close()


async def test_a_log_in_allows_changes_in_its_own_namespace_only(
    client: FloClient, other: FloClient
) -> None:
    await other.action.register("ship", options=ActionRegisterOptions(max_retries=1))
    await other.worker.register("w1", ["ship"], WorkerRegisterOptions())
    run_id = (await other.action.invoke("ship", b"{}")).run_id
    [run] = await other.worker.await_tasks("w1", ["ship"], 1, NOW)
    await other.worker.fail("w1", "ship", run.run_id, "lost")
    running = await start_dashboard(client, port=0, token=TOKEN)
    jar = aiohttp.CookieJar(unsafe=True)  # keeps cookies of 127.0.0.1, as a browser does
    try:
        async with aiohttp.ClientSession(cookie_jar=jar) as session:
            home = await log_in(session, running.url, "")
            back = f"/?ns={other.namespace}"  # the page the form was on
            requeue = {"id": run_id, "csrf": home, "ns": other.namespace, "next": back}
            status, body = await post(session, running.url + "run/requeue", requeue)
            assert status == 403 and "log in" in body  # the home log-in is not this one's
            assert (await other.action.status(run_id)).status == RunStatus.FAILED

            there = await log_in(session, running.url, other.namespace)
            assert there != home
            requeue["csrf"] = there
            status, body = await post(session, running.url + "run/requeue", requeue)
            assert status == 200 and "Run re-queued" in body
            assert f'<option value="{other.namespace}" selected>' in body  # back there
            assert (await other.action.status(run_id)).status == RunStatus.PENDING
            _, page = await get(session, running.url)
            assert "write access" in page  # the home session is still open
    finally:
        await running.close()


async def log_in(session: aiohttp.ClientSession, url: str, ns: str) -> str:
    """Log in to namespace ``ns`` ('' the dashboard's own); its forms' CSRF value."""
    form = {"token": TOKEN, "next": "/" + (f"?ns={ns}" if ns else ""), "ns": ns}
    status, body = await post(session, url + "login", form)
    assert status == 200 and "write access" in body, body
    match = re.search(r'name="csrf" value="([0-9a-f]{64})"', body)
    assert match, body
    return match.group(1)


async def post(session: aiohttp.ClientSession, url: str, form: dict[str, str]) -> tuple[int, str]:
    async with session.post(url, data=form) as response:
        return response.status, await response.text()


async def test_clients_of_other_namespaces_are_bounded_and_idle_ones_closed(
    client: FloClient, other: FloClient
) -> None:
    third = client.sibling(namespace=client.namespace + "-third")
    await third.connect()
    await third.action.register("pack")
    spaces = Namespaces(client, max_clients=1)
    try:
        async with spaces.client(other.namespace) as first:
            assert first.namespace == other.namespace
            with pytest.raises(Busy, match="try again"):  # the one client is in use
                async with spaces.client(third.namespace):
                    pass
        async with spaces.client(third.namespace) as second:  # the idle one made way
            assert second.namespace == third.namespace
            assert await second.action.counts("pack")
        assert not first.is_connected
        async with spaces.client(None) as home:
            assert home is client
    finally:
        await spaces.close()
        await third.close()
