"""Dashboard sessions and what every answer carries, over HTTP against real Redis:
a log-out ends the session for every process, sessions end when idle and at their
absolute end, failed log-ins are throttled per address and as a whole, every error page
carries the security headers, and no route answers 500 whatever its parameters."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polling import eventually

from flo_redis import ActionInvokeOptions, ActionRegisterOptions, FloClient
from flo_redis.dashboard import RunningDashboard, SessionPolicy, create_app, start_dashboard
from flo_redis.dashboard.app import HEADERS
from flo_redis.dashboard.guard import SESSION_COOKIE, Guard
from flo_redis.types import StreamGroupJoinOptions, StreamGroupNackOptions, WorkerRegisterOptions
from flo_redis.types.base import MAX_TIME_MS

TOKEN = "a-long-enough-write-token"


def jar() -> aiohttp.CookieJar:
    return aiohttp.CookieJar(unsafe=True)  # keeps the cookies of 127.0.0.1


async def log_in(session: aiohttp.ClientSession, dash: RunningDashboard, token: str = TOKEN) -> str:
    """Log in; the CSRF value the dashboard's forms now carry."""
    async with session.post(dash.url + "login", data={"token": token, "next": "/"}) as response:
        body = await response.text()
        assert response.status == 200 and "write access" in body, body
    match = re.search(r'name="csrf" value="([0-9a-f]{64})"', body)
    assert match, body
    return match.group(1)


async def drain(session: aiohttp.ClientSession, dash: RunningDashboard, csrf: str) -> int:
    """POST a change (drain worker w1); the status answered."""
    form = {"id": "w1", "csrf": csrf, "next": "/workers"}
    async with session.post(dash.url + "worker/drain", data=form) as response:
        return response.status


def secured(response: aiohttp.ClientResponse) -> bool:
    return all(response.headers.get(k) == v for k, v in HEADERS.items())


@pytest.fixture
async def dashboards(client: FloClient) -> AsyncIterator[list[RunningDashboard]]:
    """Two processes' worth of dashboards of one namespace with one token."""
    await client.worker.register("w1", ["pay"], WorkerRegisterOptions())
    running = [await start_dashboard(client, port=0, token=TOKEN) for _ in range(2)]
    try:
        yield running
    finally:
        for dash in running:
            await dash.close()


async def session_keys(raw: aioredis.Redis, namespace: str) -> list[bytes]:
    return [k async for k in raw.scan_iter(match=f"flo:dash:{{{namespace}}}:session:*", count=1000)]


async def test_a_log_out_ends_the_session_in_every_process(
    dashboards: list[RunningDashboard], raw: aioredis.Redis, namespace: str
) -> None:
    first, second = dashboards
    async with aiohttp.ClientSession(cookie_jar=jar()) as browser:
        csrf = await log_in(browser, first)
        [cookie] = [c for c in browser.cookie_jar if c.key == SESSION_COOKIE]
        stolen = {SESSION_COOKIE: cookie.value}
        # The session works in the other process too (one store: Redis).
        assert await drain(browser, second, csrf) == 200
        # Redis holds an HMAC of the session id, never the id (the cookie's value).
        [key] = await session_keys(raw, namespace)
        assert cookie.value.encode() not in key and cookie.value.encode() not in await raw.get(key)
        async with browser.post(second.url + "logout", data={"csrf": csrf}) as response:
            assert response.status == 200 and "Logged out" in await response.text()
        assert await session_keys(raw, namespace) == []
    # The cookie copied before the log-out no longer works anywhere.
    async with aiohttp.ClientSession(cookie_jar=jar(), cookies=stolen) as thief:
        for dash in dashboards:
            assert await drain(thief, dash, csrf) == 403
            async with thief.get(dash.url) as response:
                assert "log in to make changes" in await response.text()


async def test_another_token_knows_none_of_the_old_sessions(
    client: FloClient, dashboards: list[RunningDashboard]
) -> None:
    async with aiohttp.ClientSession(cookie_jar=jar()) as browser:
        csrf = await log_in(browser, dashboards[0])
        rotated = await start_dashboard(client, port=0, token="another-long-write-token")
        try:
            assert await drain(browser, rotated, csrf) == 403
        finally:
            await rotated.close()


async def test_a_session_lasts_its_idle_time_capped_by_its_absolute_end(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    await client.worker.register("w1", ["pay"], WorkerRegisterOptions())
    for policy, most_ms in (
        (SessionPolicy(idle_s=600), 600_000),
        (SessionPolicy(max_s=60), 60_000),
    ):
        dash = await start_dashboard(client, port=0, token=TOKEN, policy=policy)
        try:
            async with aiohttp.ClientSession(cookie_jar=jar()) as browser:
                csrf = await log_in(browser, dash)
                assert await drain(browser, dash, csrf) == 200
                [key] = await session_keys(raw, namespace)
                assert 0 < await raw.pttl(key) <= most_ms
                await browser.post(dash.url + "logout", data={"csrf": csrf})
        finally:
            await dash.close()
    # A session not used for its idle time ends; one used all along ends at its
    # absolute end.
    for policy, keep_using in ((SessionPolicy(idle_s=1), False), (SessionPolicy(max_s=2), True)):
        dash = await start_dashboard(client, port=0, token=TOKEN, policy=policy)
        try:
            async with aiohttp.ClientSession(cookie_jar=jar()) as browser:
                csrf = await log_in(browser, dash)

                async def used(b: Any = browser, d: Any = dash, c: str = csrf) -> int:
                    return await drain(b, d, c)

                async def kept() -> int:
                    return len(await session_keys(raw, namespace))

                if keep_using:
                    await eventually(used, lambda status: status == 403, timeout=30)
                else:
                    await eventually(kept, lambda n: n == 0, timeout=30)
                    assert await used() == 403
        finally:
            await dash.close()


def _second_loopback() -> bool:
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.2", 0))
        return True
    except OSError:
        return False


async def _attempt(dash: RunningDashboard, token: str, source: str) -> aiohttp.ClientResponse:
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    async with (
        aiohttp.ClientSession(connector=connector, cookie_jar=jar()) as browser,
        browser.post(dash.url + "login", data={"token": token}) as response,
    ):
        await response.read()
        return response


@pytest.mark.skipif(not _second_loopback(), reason="127.0.0.2 is not a local address here")
async def test_failed_log_ins_are_throttled_per_address_and_as_a_whole(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    policy = SessionPolicy(failures_per_address=3, failures_total=5, window_s=600)
    dash = await start_dashboard(client, port=0, token=TOKEN, policy=policy)
    try:
        for _ in range(3):
            assert (await _attempt(dash, "wrong-token-xxxxxxxx", "127.0.0.1")).status == 403
        # That address is refused now, even with the right token, and told when to retry.
        refused = await _attempt(dash, TOKEN, "127.0.0.1")
        assert refused.status == 429 and secured(refused)
        assert 1 <= int(refused.headers["Retry-After"]) <= 600
        # Another address still logs in...
        assert (await _attempt(dash, TOKEN, "127.0.0.2")).status == 200
        for _ in range(2):
            assert (await _attempt(dash, "wrong-token-xxxxxxxx", "127.0.0.2")).status == 403
        # ...until the failures of all of them reach the total: then nobody does.
        assert (await _attempt(dash, TOKEN, "127.0.0.3")).status == 429
        counted = await raw.zcard(f"flo:dash:{{{namespace}}}:login-failures")
        assert counted == 5  # refused attempts are not counted: the set stays bounded
    finally:
        await dash.close()


async def test_every_error_page_carries_the_security_headers(
    client: FloClient, dashboards: list[RunningDashboard]
) -> None:
    dash = dashboards[0]
    async with aiohttp.ClientSession(cookie_jar=jar()) as browser:
        for method, path, status in (
            ("GET", "nowhere", 404),
            ("GET", "logout", 405),
            ("GET", "action", 400),
            ("GET", "run?id=pay:1", 404),
            ("POST", "run/requeue", 403),
            ("GET", "", 200),
            ("GET", "static/style.css", 200),
        ):
            async with browser.request(method, dash.url + path) as response:
                assert response.status == status, (path, await response.text())
                assert secured(response), path
        async with browser.post(dash.url + "login", data={"token": TOKEN}) as response:
            assert response.history and secured(response.history[0])  # the redirect too
    # A request aiohttp cannot read answers 400 before the app sees it: headers too.
    address = urlsplit(dash.url)
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: x\r\n\r\n")
    head = (await asyncio.wait_for(reader.read(65536), 30)).decode(errors="replace")
    writer.close()
    assert re.match(r"HTTP/1\.[01] 400 ", head), head
    for name, value in HEADERS.items():
        assert f"{name}: {value}" in head, (name, head)


async def test_an_unexpected_failure_is_a_page_with_the_headers(client: FloClient) -> None:
    app = create_app(client, Guard(None))

    async def broken(_request: Any) -> Any:
        raise RuntimeError("not for the browser")

    app.router.add_get("/broken", broken)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        async with (
            aiohttp.ClientSession() as browser,
            browser.get(f"http://127.0.0.1:{port}/broken") as response,
        ):
            body = await response.text()
            assert response.status == 500 and secured(response)
            assert "not for the browser" not in body and "failed to answer" in body
    finally:
        await runner.cleanup()


async def test_odd_counts_and_far_dates_are_shown_not_a_crash(
    client: FloClient, dashboards: list[RunningDashboard]
) -> None:
    await client.action.register("pay")
    far = await client.action.invoke("pay", b"", ActionInvokeOptions(delay_ms=MAX_TIME_MS))
    dash = dashboards[0]
    async with aiohttp.ClientSession(cookie_jar=jar()) as browser:
        for path in (
            "?done=requeued_all&n=%C2%B2",
            "?done=requeued_all&n=" + "9" * 5000,
            "action?name=pay&state=delayed",
            f"run?id={far.run_id}",
        ):
            async with browser.get(dash.url + path) as response:
                assert response.status == 200, (path, await response.text())
                assert secured(response)


# --- every route's parameters and forms, fuzzed -----------------------------------------

GETS = {
    "/": ("done", "n", "refresh", "ns"),
    "/action": ("name", "state", "cursor", "done", "n", "ns"),
    "/run": ("id", "ns"),
    "/workers": ("w", "ns"),
    "/streams": ("ns",),
    "/group": ("stream", "group", "ns"),
    "/login": ("next", "ns"),
    "/static/style.css": (),
    "/static/live.js": (),
}
POSTS = {
    "/login": ("token", "next", "ns"),
    "/logout": ("csrf", "ns"),
    "/run/requeue": ("id", "next", "ns"),
    "/run/cancel": ("id", "next", "ns"),
    "/action/requeue-failed": ("name", "next", "ns"),
    "/action/purge": ("name", "state", "confirm", "next", "ns"),
    "/worker/drain": ("id", "next", "ns"),
    "/group/replay": ("stream", "group", "id", "next", "ns"),
}
# Text a browser can send (no lone surrogates), weighted towards what the pages use.
TEXT = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=40),
    st.sampled_from(
        ["pay", "pay:1", "pay:999999999999", "w1", "events", "billing", "0/1-0", "9" * 5000,
         "²", "-1", "failed", "delayed", "pending", "completed", "yes", "/", "//evil", "\x00",
         "a{b}", "\u202e", "\x9b", "requeued_all", "30", "default", "t-other"]
    ),
)  # fmt: skip


@pytest.fixture(scope="module")
def served(redis_url: str) -> Iterator[dict[str, Any]]:
    """A writable dashboard on its own loop over a namespace with something of
    everything, and a browser logged in to it."""
    loop = asyncio.new_event_loop()
    made: dict[str, Any] = {"loop": loop}

    async def start() -> None:
        client = FloClient(redis_url, namespace="fuzz-dashboard")
        await client.connect()
        await client.action.register("pay", options=ActionRegisterOptions(max_retries=1))
        await client.worker.register("w1", ["pay"], WorkerRegisterOptions())
        for _ in range(3):
            await client.action.invoke("pay", b"{}")
        await client.action.invoke("pay", b"", ActionInvokeOptions(delay_ms=MAX_TIME_MS))
        await client.stream.group_join(
            "events", "billing", "c1", StreamGroupJoinOptions(max_deliver=1)
        )
        await client.stream.append("events", b"x")
        [record] = (await client.stream.group_read("events", "billing", "c1")).records
        await client.stream.group_nack(
            "events", "billing", [record.id], StreamGroupNackOptions(consumer="c1")
        )
        policy = SessionPolicy(failures_per_address=10_000, failures_total=10_000)
        dash = await start_dashboard(client, port=0, token=TOKEN, policy=policy)
        browser = aiohttp.ClientSession(cookie_jar=jar())
        made.update(client=client, dash=dash, browser=browser, csrf=await log_in(browser, dash))

    loop.run_until_complete(start())
    try:
        yield made
    finally:

        async def stop() -> None:
            await made["browser"].close()
            await made["dash"].close()
            await made["client"].action.delete("pay")
            await made["client"].close()

        loop.run_until_complete(stop())
        loop.close()


def _answer(
    served: dict[str, Any], method: str, path: str, fields: dict[str, str]
) -> tuple[int, bool, str]:
    async def send() -> tuple[int, bool, str]:
        browser: aiohttp.ClientSession = served["browser"]
        url = served["dash"].url.rstrip("/") + path
        if method == "GET":
            request = browser.get(url, params=fields, allow_redirects=False)
        else:
            request = browser.post(url, data=fields, allow_redirects=False)
        async with request as response:
            return response.status, secured(response), await response.text()

    result: tuple[int, bool, str] = served["loop"].run_until_complete(send())
    return result


_FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_FUZZ
@given(data=st.data())
def test_no_page_answers_500_whatever_its_parameters(served: dict[str, Any], data: Any) -> None:
    path = data.draw(st.sampled_from(sorted(GETS)))
    names = data.draw(st.lists(st.sampled_from(GETS[path] or ("x",)), unique=True))
    fields = {name: data.draw(TEXT) for name in names}
    status, headers, body = _answer(served, "GET", path, fields)
    assert status < 500, (path, fields, body)
    assert headers, (path, fields)


@_FUZZ
@given(data=st.data())
def test_no_form_answers_500_whatever_it_holds(served: dict[str, Any], data: Any) -> None:
    path = data.draw(st.sampled_from(sorted(set(POSTS) - {"/logout"})))
    names = data.draw(st.lists(st.sampled_from(POSTS[path]), unique=True))
    fields = {name: data.draw(TEXT) for name in names}
    if data.draw(st.booleans()):  # most forms as the page sends them, with its CSRF value
        fields["csrf"] = served["csrf"]
    status, headers, body = _answer(served, "POST", path, fields)
    assert status < 500, (path, fields, body)
    assert headers, (path, fields)


def test_the_command_refuses_a_session_time_out_of_range() -> None:
    for option in ("--session-idle", "--session-max"):
        for bad in ("0", "nan", "40000000"):
            done = subprocess.run(
                [sys.executable, "-m", "flo_redis.cli", "dashboard", option, bad],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 2 and option in done.stderr, done.stderr


@pytest.mark.cluster
async def test_sessions_and_the_throttle_work_on_a_cluster(
    cluster_url: str, namespace: str
) -> None:
    async with FloClient(cluster_url, namespace=namespace) as client:
        await client.worker.register("w1", ["pay"], WorkerRegisterOptions())
        policy = SessionPolicy(failures_per_address=1)
        dash = await start_dashboard(client, port=0, token=TOKEN, policy=policy)
        try:
            async with aiohttp.ClientSession(cookie_jar=jar()) as browser:
                csrf = await log_in(browser, dash)
                assert await drain(browser, dash, csrf) == 200
                await browser.post(dash.url + "logout", data={"csrf": csrf})
                assert await drain(browser, dash, csrf) == 403
                form = {"token": "wrong-token-xxxxxxxx"}
                async with browser.post(dash.url + "login", data=form) as response:
                    assert response.status == 403
                async with browser.post(dash.url + "login", data={"token": TOKEN}) as response:
                    assert response.status == 429
        finally:
            await dash.close()
