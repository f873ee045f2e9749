"""Headless Chromium (Debian's ``chromium``) driven by Playwright, for the dashboard's
browser tests, and where their screenshots go. A test that needs the browser fails
without it when ``CI`` is set, and is skipped elsewhere."""

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
async def chromium_browser() -> AsyncIterator[Any]:
    """A launched Chromium, closed when the block ends."""
    playwright_api = pytest.importorskip("playwright.async_api")
    if not shutil.which(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: .ci/run installs Debian's chromium")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    async with playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            await browser.close()


def screenshots(tmp_path: Path) -> Path:
    """Where screenshots go: ``FLO_REDIS_SCREENSHOTS`` (``docs`` writes the docs' own),
    else the test's temporary folder."""
    folder = Path(os.environ.get("FLO_REDIS_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder
