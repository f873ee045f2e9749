"""Live pages in a real browser: headless Chromium against real Redis. An open overview
shows a run that failed without being reloaded; the workers page shows the runs a
worker holds, and one it takes while the page is open; the namespace switcher shows
another namespace. No page breaks the Content-Security-Policy. Screenshots for the docs:
``FLO_REDIS_SCREENSHOTS=docs pytest tests/browser/test_browser_live.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chromium_pages import screenshots
from polling import eventually

from flo_redis import ActionRegisterOptions, FloClient, WorkerAwaitOptions, WorkerRegisterOptions
from flo_redis.dashboard import RunningDashboard

NOW = WorkerAwaitOptions(block_ms=0)


async def open_page(browser: Any, url: str) -> tuple[Any, list[str]]:
    """A page at ``url`` and what went wrong on it: a CSP refusal, a failed request
    (but the favicon's, which the dashboard does not have)."""
    page = await browser.new_page(viewport={"width": 1280, "height": 800})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if "Refused" in m.text else None)
    page.on(
        "response",
        lambda r: (
            errors.append(f"{r.status} {r.url}")
            if r.status >= 400 and not r.url.endswith("/favicon.ico")
            else None
        ),
    )
    await page.goto(url)
    await page.wait_for_selector("html[data-live-connected]")
    await page.evaluate("window.notReloaded = true")
    return page, errors


async def text_of(page: Any, selector: str) -> str:
    return str(await page.inner_text(selector))


async def still_the_same_page(page: Any) -> bool:
    return bool(await page.evaluate("window.notReloaded === true"))


async def test_a_count_changes_on_the_open_overview_without_a_reload(
    client: FloClient, read_only: RunningDashboard, browser: Any, tmp_path: Path
) -> None:
    await client.action.register("pay", options=ActionRegisterOptions(max_retries=1))
    await client.worker.register("w1", ["pay"], WorkerRegisterOptions())
    page, errors = await open_page(browser, read_only.url)
    assert "updating live" in await text_of(page, "footer")
    assert "No failed runs." in await text_of(page, "[data-live=overview-failures]")

    await client.action.invoke("pay", b"{}")
    [run] = await client.worker.await_tasks("w1", ["pay"], 1, NOW)
    await client.worker.fail("w1", "pay", run.run_id, "card declined")

    async def shown() -> bool:
        return "card declined" in await text_of(page, "[data-live=overview-failures]")

    await eventually(shown, timeout=30)
    counts = await text_of(page, "[data-live=overview-counts]")
    assert "1\nfailed runs kept" in counts or "1 failed runs kept" in counts
    assert await still_the_same_page(page)
    await page.screenshot(path=str(screenshots(tmp_path) / "dashboard-live.png"), full_page=True)
    assert errors == []


async def test_the_workers_page_shows_a_workers_current_run(
    client: FloClient, read_only: RunningDashboard, browser: Any, tmp_path: Path
) -> None:
    await client.action.register("resize")
    await client.worker.register("w1", ["resize"], WorkerRegisterOptions(concurrency=4))
    await client.worker.register("w2", ["resize"], WorkerRegisterOptions(concurrency=4))
    await client.action.invoke("resize", b"{}")
    [first] = await client.worker.await_tasks("w1", ["resize"], 1, NOW)
    page, errors = await open_page(browser, read_only.url + "workers")
    row = "tr[data-worker=w1]"
    assert first.run_id in await text_of(page, row)

    await client.action.invoke("resize", b"{}")
    [second] = await client.worker.await_tasks("w1", ["resize"], 1, NOW)

    async def shown() -> bool:
        return second.run_id in await text_of(page, row)

    await eventually(shown, timeout=30)
    assert "2/4" in await text_of(page, row)
    assert "idle" in await text_of(page, "tr[data-worker=w2]")
    assert await still_the_same_page(page)
    await page.screenshot(path=str(screenshots(tmp_path) / "dashboard-workers.png"))
    assert errors == []


async def test_the_switcher_changes_namespace(
    client: FloClient, read_only: RunningDashboard, browser: Any
) -> None:
    await client.action.register("pay")
    other = client.sibling(namespace=client.namespace + "-other")
    await other.connect()
    try:
        await other.action.register("ship")
        page, errors = await open_page(browser, read_only.url)
        assert "pay" in await text_of(page, "[data-live=overview-actions]")

        await page.select_option("form.ns select", other.namespace)
        await page.click("form.ns button")
        await page.wait_for_selector("html[data-live-connected]")

        assert f"ns={other.namespace}" in page.url
        assert "ship" in await text_of(page, "[data-live=overview-actions]")
        await page.click("header nav >> text=Workers")
        assert f"ns={other.namespace}" in page.url  # the links carry it
        assert errors == []
    finally:
        await other.close()
