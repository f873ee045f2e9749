"""A real browser for dashboard tests: headless Chromium (Debian's ``chromium``) driven by
Playwright, and the folder its screenshots go to (the docs' with
``FLO_REDIS_SCREENSHOTS=docs``, else the test's temporary folder). A test module makes
the fixtures of ``tests/browser/conftest.py`` of these: ``browser`` from
:func:`launched`, ``shots`` from :func:`screenshots`."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("FLO_REDIS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextlib.asynccontextmanager
async def launched() -> AsyncIterator[Any]:
    """A Chromium browser for the block; the test fails (with ``CI`` set) or is skipped
    where Playwright or Chromium is missing."""
    api = pytest.importorskip("playwright.async_api")
    if not shutil.which(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: .ci/run installs Debian's chromium")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    async with api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            await browser.close()


def screenshots(tmp_path: Path) -> Path:
    """Where screenshots go: ``FLO_REDIS_SCREENSHOTS`` (``docs``), else ``tmp_path``."""
    folder = Path(os.environ.get("FLO_REDIS_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def logged_in_page(browser: Any, base_url: str, token: str) -> Any:
    """A page of a new browser context, logged in to the dashboard at ``base_url``."""
    context = await browser.new_context(viewport={"width": 1280, "height": 760})
    page = await context.new_page()
    await page.goto(base_url + "login")
    await page.get_by_label("token").fill(token)
    await page.get_by_role("button", name="Log in").click()
    await page.get_by_text("write access").wait_for()
    return page
