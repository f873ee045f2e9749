"""A run's input and the search of an action's runs in a real browser (headless
Chromium, tests/support/chromium_pages.py), against real Redis.

An operator opens an action whose runs fail, types a piece of the error into the action
page's search box, finds the run, and opens it: its input is shown as pretty JSON, with
the member a key-name redactor hides shown as "[redacted]". Its screenshots are the
docs' run and search pictures (docs/dashboard.md):
``FLO_REDIS_SCREENSHOTS=docs pytest tests/browser/test_browser_runs.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chromium_pages import screenshots

from flo_redis import (
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    WorkerAwaitOptions,
    WorkerFailOptions,
)
from flo_redis.dashboard import start_dashboard
from flo_redis.ops.redaction import redactor

ACTION = "resize-image"
API_TOKEN = "sk-live-4f9a2c7e"
NOW = WorkerAwaitOptions(block_ms=0)


TRACEBACK = """Traceback (most recent call last):
  File "/srv/thumbnails/app.py", line 41, in resize
    check_size(image)
  File "/srv/thumbnails/images.py", line 17, in check_size
    raise ValueError(f"image too large: {width}x{height} pixels")
ValueError: image too large: 12000x3000 pixels"""


async def failed_and_completed(client: FloClient) -> str:
    """Three thumbnails made and one image refused as too large, reported as a worker
    reports them (with the handler's traceback); the refused run's id."""
    options = ActionRegisterOptions(max_retries=1)
    await client.action.register(ACTION, options=options)
    await client.worker.register("thumbnailer-1", [ACTION])
    for i, width in enumerate((1024, 2048, 800)):
        small = {"source": f"s3://photos/cat-{i}.png", "width": width, "height": 768}
        run = await client.action.invoke(ACTION, json.dumps(small).encode())
        await client.worker.await_tasks("thumbnailer-1", [ACTION], 1, NOW)
        thumbnail = {"thumbnail": f"s3://photos/cat-{i}-256.png"}
        await client.worker.complete(
            "thumbnailer-1", ACTION, run.run_id, json.dumps(thumbnail).encode()
        )
    big = {
        "source": "s3://photos/panorama.png",
        "width": 12000,
        "height": 3000,
        "owner": {"account": "acme", "api_token": API_TOKEN},
    }
    keyed = ActionInvokeOptions(idempotency_key="upload-7731")
    run = await client.action.invoke(ACTION, json.dumps(big).encode(), keyed)
    await client.worker.await_tasks("thumbnailer-1", [ACTION], 1, NOW)
    await client.worker.fail(
        "thumbnailer-1", ACTION, run.run_id, "ValueError: image too large: 12000x3000 pixels",
        WorkerFailOptions(retry=False, traceback=TRACEBACK),
    )  # fmt: skip
    return run.run_id


async def test_an_operator_finds_a_run_by_its_error_and_reads_its_input(
    client: FloClient, browser: Any, tmp_path: Path
) -> None:
    shots = screenshots(tmp_path)
    run_id = await failed_and_completed(client)
    dash = await start_dashboard(client, port=0, redactor=redactor(keys="token,password"))
    try:
        context = await browser.new_context(viewport={"width": 1280, "height": 760})
        page = await context.new_page()
        await page.goto(dash.url + "action?name=" + ACTION)
        await page.get_by_label("Find a run").fill("TOO LARGE")
        await page.get_by_role("button", name="Find").click()
        await page.get_by_role("heading", name=f"Find runs of {ACTION}").wait_for()
        row = page.locator("table.found tbody tr")
        assert await row.count() == 1
        assert "image too large: 12000x3000 pixels" in await row.inner_text()
        await page.screenshot(path=str(shots / "dashboard-search.png"), full_page=True)

        await row.get_by_role("link", name=run_id).click()
        await page.get_by_role("heading", name=f"Run {run_id}").wait_for()
        shown = await page.locator("#input pre").inner_text()
        assert '"source": "s3://photos/panorama.png"' in shown
        assert '"api_token": "[redacted]"' in shown and API_TOKEN not in await page.content()
        assert "upload-7731" in await page.locator("dl.facts").inner_text()
        assert "raise ValueError" in await page.locator("pre.traceback").inner_text()
        await page.screenshot(path=str(shots / "dashboard-run.png"), full_page=True)
        await context.close()
    finally:
        await dash.close()


async def test_a_completed_runs_kept_input_is_shown_and_a_missing_one_explained(
    client: FloClient, browser: Any
) -> None:
    await client.action.register("price", options=ActionRegisterOptions(keep_inputs=True))
    await client.action.register("notify")
    await client.worker.register("w1", ["price", "notify"])
    kept = await client.action.invoke("price", b'{"sku": "A-17", "qty": 3}')
    gone = await client.action.invoke("notify", b'{"to": "ann"}')
    for name, run in (("price", kept), ("notify", gone)):
        await client.worker.await_tasks("w1", [name], 1, NOW)
        await client.worker.complete("w1", name, run.run_id, b'{"ok": true}')
    dash = await start_dashboard(client, port=0)
    try:
        context = await browser.new_context()
        page = await context.new_page()
        await page.goto(dash.url + "action?name=price&state=completed")
        await page.get_by_role("link", name=kept.run_id).click()
        await page.get_by_role("heading", name=f"Run {kept.run_id}").wait_for()
        assert '"sku": "A-17"' in await page.locator("#input pre").inner_text()
        await page.goto(dash.url + "run?id=" + gone.run_id)
        missing = await page.locator("#input p.empty").inner_text()
        assert missing == (
            "Not kept: completed runs keep their input only with keep_inputs=True "
            "(ActionRegisterOptions)."
        )
        await context.close()
    finally:
        await dash.close()
