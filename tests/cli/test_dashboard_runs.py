"""The dashboard's run page and run search over HTTP against real Redis: the input shown
(pretty JSON, text or hex, escaped), what a redactor hides, and finding a run from the
action page's GET form. The browser test is tests/browser/test_browser_runs.py."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from urllib.parse import urlencode

import aiohttp
import pytest
from dashboard_pages import get, parsed
from run_graphs import MANY, MISSING, graph_world

from flo_redis import (
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    WorkerAwaitOptions,
    WorkerFailOptions,
)
from flo_redis.dashboard import RunningDashboard, start_dashboard
from flo_redis.dashboard.run_pages import FOUND_SHOWN
from flo_redis.ops.redaction import Redactor, redactor
from flo_redis.ops.run_graph import SHOWN

NOW = WorkerAwaitOptions(block_ms=0)
SECRET = "hunter2-secret"
EVIL = "<img src=x onerror=alert(1)>"


async def seeded(client: FloClient) -> dict[str, str]:
    """Action 'resize': a run failed with a traceback (JSON input with a password and an
    idempotency key), a waiting run with binary input, a completed run."""
    await client.action.register("resize", options=ActionRegisterOptions(max_retries=1))
    await client.worker.register("w1", ["resize"])
    payload = json.dumps({"user": EVIL, "password": SECRET}).encode()
    failed = await client.action.invoke(
        "resize", payload, ActionInvokeOptions(idempotency_key="order-42")
    )
    await client.worker.await_tasks("w1", ["resize"], 1, NOW)
    await client.worker.fail(
        "w1", "resize", failed.run_id, f"ImageTooLarge: 9000x9000 ({SECRET})",
        WorkerFailOptions(retry=False, traceback="Traceback (most recent call last):\n  x"),
    )  # fmt: skip
    done = await client.action.invoke("resize", b"small")
    await client.worker.await_tasks("w1", ["resize"], 1, NOW)
    await client.worker.complete("w1", "resize", done.run_id, b"ok")
    binary = await client.action.invoke("resize", b"\x00\x01\xffpng")
    return {"failed": failed.run_id, "done": done.run_id, "binary": binary.run_id}


@pytest.fixture
async def runs(client: FloClient) -> dict[str, str]:
    return await seeded(client)


async def serving(client: FloClient, hide: Redactor | None = None) -> RunningDashboard:
    return await start_dashboard(client, port=0, redactor=hide or Redactor())


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def page(session: aiohttp.ClientSession, dash: RunningDashboard, path: str) -> str:
    status, body = await get(session, dash.url + path.lstrip("/"))
    assert status == 200, body
    return body


async def test_the_run_page_shows_the_input_escaped_and_pretty(
    client: FloClient, runs: dict[str, str], session: aiohttp.ClientSession
) -> None:
    dash = await serving(client)
    try:
        body = await page(session, dash, "/run?" + urlencode({"id": runs["failed"]}))
        _, text = parsed(body)
        assert EVIL not in body and "&lt;img src=x onerror=alert(1)&gt;" in body
        assert "Input json, " in " ".join(text.split())
        assert f'"password": "{SECRET}"' in text and '{\n  "user":' in text
        assert "order-42" in text and "Traceback (most recent call last)" in text
        assert re.search(r"\d+(\.\d)? (ms|s) after started", text), text  # how long it ran
        binary = await page(session, dash, "/run?" + urlencode({"id": runs["binary"]}))
        assert "00000000  00 01 ff 70 6e 67" in parsed(binary)[1]
        done = await page(session, dash, "/run?" + urlencode({"id": runs["done"]}))
        assert (
            "Not kept: completed runs keep their input only with keep_inputs=True "
            "(ActionRegisterOptions)."
        ) in " ".join(parsed(done)[1].split())
    finally:
        await dash.close()


async def test_the_run_page_shows_a_completed_runs_kept_input(
    client: FloClient, session: aiohttp.ClientSession
) -> None:
    await client.action.register("kept", options=ActionRegisterOptions(keep_inputs=True))
    await client.worker.register("w1", ["kept"])
    run = await client.action.invoke("kept", b'{"width": 640}')
    await client.worker.await_tasks("w1", ["kept"], 1, NOW)
    await client.worker.complete("w1", "kept", run.run_id, b"ok")
    dash = await serving(client)
    try:
        _, text = parsed(await page(session, dash, "/run?" + urlencode({"id": run.run_id})))
        assert "COMPLETED" in text and '"width": 640' in text
        assert "Not kept" not in text
    finally:
        await dash.close()


async def test_a_redactor_hides_input_and_error_on_the_run_page(
    client: FloClient, runs: dict[str, str], session: aiohttp.ClientSession
) -> None:
    def hide_secret(field: str, value: bytes | str, run_id: str) -> bytes | str:
        if isinstance(value, bytes):
            return value.replace(SECRET.encode(), b"***")
        return value.replace(SECRET, "***")

    def broken(field: str, value: bytes | str, run_id: str) -> bytes | str:
        raise RuntimeError(f"no {value!r}")

    for hide, shown in ((redactor(keys="password"), '"password": "[redacted]"'),
                        (Redactor(hook=hide_secret), "ImageTooLarge: 9000x9000 (***)"),
                        (Redactor(hook=broken), "[redaction failed]")):  # fmt: skip
        dash = await serving(client, hide)
        try:
            body = await page(session, dash, "/run?" + urlencode({"id": runs["failed"]}))
            search = "/find?" + urlencode({"name": "resize", "q": "imagetoolarge"})
            found = await page(session, dash, search)
            # Failed runs listed with their errors: the overview, the action's failed tab.
            listed = [await page(session, dash, path) for path in ("/", "/action?name=resize")]
        finally:
            await dash.close()
        error = "[redaction failed]" if hide.hook is broken else "ImageTooLarge: 9000x9000"
        assert all(error in body for body in listed)
        if hide.hook is not None:  # the key names hide only the input's member
            assert SECRET not in body and SECRET not in found
            assert not any(SECRET in body for body in listed)
        assert SECRET not in parsed(body)[1].split("Error")[0]
        assert shown in parsed(body)[1]


async def test_the_action_page_searches_by_a_get_form(
    client: FloClient, runs: dict[str, str], session: aiohttp.ClientSession
) -> None:
    dash = await serving(client)
    try:
        action = await page(session, dash, "/action?name=resize")
        form = re.search(r'<form method="get" action="/find"[^>]*>(.*?)</form>', action, re.S)
        assert form, action
        assert 'name="name" value="resize"' in form.group(1) and 'name="q"' in form.group(1)
        for query, by in (("imagetoolarge", "error"), ("order-42", "idempotency key"),
                          (runs["failed"], "run id")):  # fmt: skip
            body = await page(session, dash, "/find?" + urlencode({"name": "resize", "q": query}))
            assert f'href="/run?{urlencode({"id": runs["failed"]})}"' in body
            assert by in parsed(body)[1]
        none = await page(session, dash, "/find?" + urlencode({"name": "resize", "q": EVIL}))
        assert "No run of resize matches" in parsed(none)[1] and EVIL not in none
        status, _ = await get(session, dash.url + "find?" + urlencode({"name": "nope", "q": "x"}))
        assert status == 404
        status, _ = await get(
            session, dash.url + "find?" + urlencode({"name": "resize", "q": "x" * 300})
        )
        assert status == 400
        # A search goes on from a cursor (the page's "search further" link): from the
        # completed runs on, the failed run is not met again.
        later = {"name": "resize", "q": "imagetoolarge", "cursor": "completed"}
        assert runs["failed"] not in await page(session, dash, "/find?" + urlencode(later))
        bad = {"name": "resize", "q": "x", "cursor": "nowhere 1 x"}
        status, _ = await get(session, dash.url + "find?" + urlencode(bad))
        assert status == 400
        empty = await page(session, dash, "/find?name=resize")
        assert "run-search" in empty and "runs examined" not in empty
    finally:
        await dash.close()


async def test_the_command_takes_redact_options(
    client: FloClient, runs: dict[str, str], redis_url: str, namespace: str
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "flo_redis.cli", "dashboard", "--url", redis_url,
        "--namespace", namespace, "--port", "0",
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "FLO_REDIS_REDACT_KEYS": "password"},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        match = re.search(r"at (http://127\.0\.0\.1:\d+/)", line)
        assert match, line
        async with aiohttp.ClientSession() as session:
            url = match.group(1) + "run?" + urlencode({"id": runs["failed"]})
            status, body = await get(session, url)
        assert status == 200 and SECRET not in parsed(body)[1].split("Error")[0]
        assert '"password": "[redacted]"' in parsed(body)[1]
    finally:
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 60) == 0


async def test_a_search_that_stopped_links_to_the_rest(
    client: FloClient, session: aiohttp.ClientSession
) -> None:
    await client.action.register("mail", options=ActionRegisterOptions(max_retries=1))
    await client.worker.register("w1", ["mail"])
    for i in range(FOUND_SHOWN + 5):
        run = await client.action.invoke("mail", b"{}")
        await client.worker.await_tasks("w1", ["mail"], 1, NOW)
        await client.worker.fail("w1", "mail", run.run_id, f"SMTP 550 for #{i}")
    dash = await serving(client)
    try:
        first = await page(session, dash, "/find?" + urlencode({"name": "mail", "q": "smtp 550"}))
        assert first.count('href="/run?') == FOUND_SHOWN
        more = re.search(r'<a href="(/find\?[^"]+)">search further</a>', first)
        assert more, first
        rest = await page(session, dash, more.group(1).replace("&amp;", "&"))
        assert rest.count('href="/run?') == 5 and "search further" not in rest
        assert "SMTP 550 for #0<" in rest  # the oldest failure comes last
    finally:
        await dash.close()


def link(run_id: str) -> str:
    return f'href="/run?{urlencode({"id": run_id})}"'


def words(body: str) -> str:
    return " ".join(parsed(body)[1].split())


async def test_the_run_page_shows_the_graph_around_the_run(
    client: FloClient, session: aiohttp.ClientSession
) -> None:
    graph = await graph_world(client)
    dash = await serving(client)
    try:
        child = await page(session, dash, "/run?" + urlencode({"id": graph["child"]}))
        assert "of action b · waiting on 1 of 4 parents" in words(child)
        assert "Parents 4 (1 waiting)" in words(child) and "Dependents" not in words(child)
        rows = re.findall(r"<tr>\s*(<td>.*?)</tr>", child.split('id="graph"')[1], re.S)
        states = {words(re.findall(r"<td>(.*?)</td>", r, re.S)[2]): r for r in rows}
        for parent, policy, state in ((graph["done"], "fail", "COMPLETED"),
                                      (graph["failed"], "run", "FAILED"),
                                      (graph["waiting"], "fail", "waiting"),
                                      (MISSING, "ignore", "not found")):  # fmt: skip
            assert link(parent) in states[state] and f"<td>{policy}</td>" in states[state]
        assert MISSING not in child and "&lt;img src=x onerror=alert(1)&gt;:7" in child
        # A parent lists the runs waiting for it, each a link; a page's worth and the count.
        waiting = await page(session, dash, "/run?" + urlencode({"id": graph["waiting"]}))
        assert "Dependents 1" in words(waiting) and link(graph["child"]) in waiting
        assert "waiting on" not in words(waiting) and "Parents" not in words(waiting)
        wide = await page(session, dash, "/run?" + urlencode({"id": graph["wide"]}))
        assert f"Dependents {MANY}; the first {SHOWN}" in words(wide)
        children = sorted(graph["children"])
        assert all(link(c) in wide for c in children[:SHOWN])
        assert not any(c in wide for c in children[SHOWN:])
        crowded = await page(session, dash, "/run?" + urlencode({"id": graph["crowded"]}))
        assert f"waiting on {MANY} of {MANY} parents" in words(crowded)
        assert f"Parents {MANY} ({MANY} waiting); the first {SHOWN}" in words(crowded)
        plain = await page(session, dash, "/run?" + urlencode({"id": graph["plain"]}))
        assert 'id="graph"' not in plain and "waiting on" not in words(plain)
    finally:
        await dash.close()
