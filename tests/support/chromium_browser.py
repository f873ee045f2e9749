"""Headless Chromium (Debian's ``chromium``) driven by Playwright, for the browser tests:
started and closed around a test; missing, it fails the test where CI is set and skips
it elsewhere. Screenshots go to $FLO_REDIS_SCREENSHOTS (``docs`` writes the docs' own)
or the test's temporary folder."""

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
    """A launched Chromium browser (Playwright's ``Browser``)."""
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
    """Where a test's screenshots go."""
    folder = Path(os.environ.get("FLO_REDIS_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder
