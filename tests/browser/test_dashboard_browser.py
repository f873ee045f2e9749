"""The dashboard in a real browser: headless Chromium (Debian's ``chromium``) driven by
Playwright, against real Redis and a real worker.

An operator opens the overview and sees a failed run with its error; pressing Requeue
without the token is refused; after logging in with it, Requeue puts the run back and the
worker completes it; a name with HTML in it shows as text. A running run's page shows its
progress, and Cancel ends it and cancels its handler. The screenshots it takes are the
docs' (docs/dashboard.md):
``FLO_REDIS_SCREENSHOTS=docs pytest tests/browser/test_dashboard_browser.py`` writes them to
docs/ (elsewhere they go to the test's temporary folder).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlencode

from polling import eventually

from flo_redis import (
    ActionContext,
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    FlowControl,
    RunStatus,
    WorkerAwaitOptions,
)
from flo_redis.dashboard import RunningDashboard, start_dashboard
from flo_redis.types import StreamGroupJoinOptions, StreamGroupNackOptions, StreamGroupReadOptions

TOKEN = "browser-test-write-token"
HTML_NAME = "<b>bold</b>&co"


@contextlib.asynccontextmanager
async def dashboard(client: FloClient) -> AsyncIterator[RunningDashboard]:
    running = await start_dashboard(client, port=0, token=TOKEN)
    try:
        yield running
    finally:
        await running.close()


async def test_an_operator_requeues_a_failed_run_and_a_worker_completes_it(
    client: FloClient, browser: object, shots: Path
) -> None:
    declined = True
    worker = client.new_action_worker(block_ms=500)

    @worker.action("charge-card", ActionRegisterOptions(max_retries=1))
    async def charge(ctx: ActionContext) -> bytes:
        if declined:
            raise RuntimeError("card declined: insufficient funds")
        return b'{"charged": true}'

    @worker.action(HTML_NAME)
    async def bold(ctx: ActionContext) -> bytes:
        return b""

    await client.action.register("charge-card", options=ActionRegisterOptions(max_retries=1))
    await client.action.register(HTML_NAME)
    await client.action.invoke_many(HTML_NAME, [b""] * 25)
    # A stream group with work waiting, work handed out and one dead letter.
    await client.stream.group_join("orders", "billing", "c1", StreamGroupJoinOptions(max_deliver=1))
    for i in range(6):
        await client.stream.append("orders", f'{{"order": {i}}}'.encode())
    read = await client.stream.group_read(
        "orders", "billing", "c1", StreamGroupReadOptions(count=3)
    )
    await client.stream.group_nack(
        "orders", "billing", [read.records[0].id], StreamGroupNackOptions(consumer="c1")
    )
    task = asyncio.create_task(worker.start())
    try:
        run_id = (await client.action.invoke("charge-card", b'{"amount": 42}')).run_id
        await eventually(
            lambda: client.action.status(run_id), lambda s: s.status == RunStatus.FAILED
        )
        await eventually(lambda: client.action.counts(HTML_NAME), lambda c: c.completed == 25)
        async with dashboard(client) as dash:
            await refused_without_token(browser, dash, run_id, shots)
            # The operator's requeue succeeds only once the card is accepted.
            declined = False
            await requeue_with_token(browser, dash, run_id, shots)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)


async def refused_without_token(
    browser: object, dash: RunningDashboard, run_id: str, shots: Path
) -> None:
    """Without the token: see the failure, press Requeue, be refused."""
    context = await browser.new_context(viewport={"width": 1280, "height": 760})  # type: ignore[attr-defined]
    page = await context.new_page()
    await page.goto(dash.url)
    row = page.locator("tr", has=page.get_by_text(run_id))
    message = row.locator(".message")
    await message.filter(has_text="card declined: insufficient funds").wait_for()
    # The HTML in a name is shown as text; the page holds no <b> element of it.
    await page.get_by_text(HTML_NAME, exact=True).wait_for()
    assert await page.locator("td b").count() == 0
    # Counts per state, and the last hour's throughput drawn for each action.
    html_row = page.locator("tr", has=page.get_by_role("link", name=HTML_NAME, exact=True))
    assert "25" in await html_row.locator("td").nth(4).inner_text()  # completed
    await html_row.get_by_role("img", name="last hour: 25 completed, 0 failed").wait_for()
    await page.screenshot(path=str(shots / "dashboard-overview.png"), full_page=True)

    await page.get_by_role("link", name="charge-card", exact=True).click()
    await page.get_by_role("heading", name="Action charge-card").wait_for()
    # The handler's traceback is kept with the run, folded under its error.
    await page.get_by_text("traceback", exact=True).click()
    await (
        page.locator("details pre").filter(has_text='raise RuntimeError("card declined').wait_for()
    )
    await page.screenshot(path=str(shots / "dashboard-action.png"), full_page=True)

    await (
        page.locator("tr", has=page.get_by_text(run_id))
        .get_by_role("button", name="Requeue")
        .click()
    )
    await page.get_by_role("heading", name="Refused").wait_for()
    assert "log in" in await page.get_by_role("alert").inner_text()
    await context.close()


async def requeue_with_token(
    browser: object, dash: RunningDashboard, run_id: str, shots: Path
) -> None:
    """Log in with the token, press Requeue, watch the run complete."""
    context = await browser.new_context(viewport={"width": 1280, "height": 760})  # type: ignore[attr-defined]
    page = await context.new_page()
    await page.goto(dash.url + "login")
    await page.get_by_label("token").fill(TOKEN)
    await page.get_by_role("button", name="Log in").click()
    await page.get_by_text("write access").wait_for()

    await (
        page.locator("tr", has=page.get_by_text(run_id))
        .get_by_role("button", name="Requeue")
        .click()
    )
    await page.get_by_role("status").filter(has_text="Run re-queued").wait_for()
    await page.goto(dash.url + "run?" + urlencode({"id": run_id}))

    async def status() -> str:
        await page.reload()
        return await page.locator("h1 .status").inner_text()

    assert await eventually(status, lambda s: s == "COMPLETED", interval=0.2) == "COMPLETED"
    assert "charged" in await page.locator("pre").last.inner_text()

    await page.get_by_role("link", name="Workers").click()
    await page.get_by_role("heading", name="Workers").wait_for()  # its shot: test_browser_live

    await page.get_by_role("link", name="Streams").click()
    await page.get_by_role("link", name="billing").first.click()
    await page.get_by_role("heading", name="Stream orders, group billing").wait_for()
    assert "3 not yet handed out" in await page.locator("dl").inner_text()
    await page.get_by_role("button", name="Replay", exact=True).wait_for()
    await page.screenshot(path=str(shots / "dashboard-streams.png"), full_page=True)
    await context.close()


async def test_an_operator_sees_a_runs_progress_and_cancels_it(
    client: FloClient, browser: object, shots: Path
) -> None:
    # A ten-minute lease and no touches: the worker hears of the cancel by its notice.
    options = ActionRegisterOptions(timeout_ms=600_000)
    worker = client.new_action_worker(block_ms=500)
    stopped: list[bool] = []

    @worker.action("export", options)
    async def export(ctx: ActionContext) -> bytes:
        await ctx.progress({"rows": 500, "of": 1000})
        try:
            await asyncio.Event().wait()  # a long export
        finally:
            stopped.append(ctx.cancelled)
        return b""

    await client.action.register("export", options=options)
    task = asyncio.create_task(worker.start())
    try:
        run_id = (await client.action.invoke("export", b"{}")).run_id
        await eventually(lambda: client.action.status(run_id), lambda s: s.progress is not None)
        async with dashboard(client) as dash:
            context = await browser.new_context(viewport={"width": 1280, "height": 760})  # type: ignore[attr-defined]
            page = await context.new_page()
            await page.goto(dash.url + "login")
            await page.get_by_label("token").fill(TOKEN)
            await page.get_by_role("button", name="Log in").click()
            await page.get_by_text("write access").wait_for()
            await page.goto(dash.url + "run?" + urlencode({"id": run_id}))
            assert await page.locator("h1 .status").inner_text() == "RUNNING"
            facts = await page.locator("dl.facts").inner_text()
            assert '{"rows": 500, "of": 1000}' in facts
            await page.get_by_role("button", name="Cancel this run").click()
            await page.get_by_role("status").filter(has_text="Run cancelled").wait_for()
            assert await page.locator("h1 .status").inner_text() == "CANCELLED"
            await page.get_by_role("button", name="Requeue this run").wait_for()
            await context.close()
        await eventually(lambda: asyncio.sleep(0, list(stopped)), bool)
        assert stopped == [True]
        assert (await client.action.status(run_id)).status == RunStatus.CANCELLED
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)


async def test_an_operator_sees_the_busiest_flow_keys_of_an_action(
    client: FloClient, browser: object, shots: Path
) -> None:
    flow = FlowControl(concurrency=2, fair=True)
    await client.action.register("resize", options=ActionRegisterOptions(flow=flow))
    await client.worker.register("w1", ["resize"])
    for key, n in (("tenant-big", 40), ("tenant-small", 1)):
        opts = ActionInvokeOptions(flow_key=key)
        await client.action.invoke_many("resize", [b""] * n, opts)
    await client.worker.await_tasks("w1", ["resize"], 50, WorkerAwaitOptions(block_ms=0))
    async with dashboard(client) as dash:
        context = await browser.new_context()  # type: ignore[attr-defined]
        page = await context.new_page()
        await page.goto(dash.url + "action?" + urlencode({"name": "resize"}))
        table = page.locator("section.flow-keys table")
        big = table.locator("tr", has=page.get_by_text("tenant-big", exact=True))
        cells = [await big.locator("td").nth(i).inner_text() for i in range(4)]
        assert cells == ["tenant-big", "0", "2", "38"]  # running 2 (its limit), 38 held
        assert await table.locator("tr", has=page.get_by_text("tenant-small")).count() == 1
        await page.screenshot(path=str(shots / "dashboard-flow-keys.png"), full_page=True)
        await context.close()
