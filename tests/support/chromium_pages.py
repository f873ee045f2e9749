"""Headless Chromium (Debian's ``chromium``) driven by Playwright, for dashboard tests in
a real browser, and the folder their screenshots go to.

``FLO_REDIS_SCREENSHOTS=docs pytest tests/browser/...`` writes the screenshots to docs/
(elsewhere they go to the test's temporary folder). Where Chromium is missing a test
skips, and fails when ``CI`` is set.
"""

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
async def chromium() -> AsyncIterator[Any]:
    """A launched browser, closed after the block."""
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
    """Where screenshots go: ``$FLO_REDIS_SCREENSHOTS``, else ``tmp_path``."""
    folder = Path(os.environ.get("FLO_REDIS_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder
