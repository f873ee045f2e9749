"""The browser tests' fixtures: a launched Chromium and the folder screenshots go to."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from chromium_pages import launched, screenshots


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """Headless Chromium for the test (fails with ``CI`` set where it is missing)."""
    async with launched() as started:
        yield started


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where the test's screenshots go (``FLO_REDIS_SCREENSHOTS=docs``: the docs')."""
    return screenshots(tmp_path)
