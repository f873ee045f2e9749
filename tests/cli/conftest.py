"""What the operator commands' tests share: a namespace with a known history."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from cli_runner import with_client
from histories import history, streams_history

from flo_redis import FloClient


@pytest.fixture
def world(redis_url: str, namespace: str) -> dict[str, Any]:
    """Action 'job' with runs in every state (histories.history, whose ids it returns)
    and stream 'events' with group 'billing' (histories.streams_history)."""

    async def build(client: FloClient) -> dict[str, Any]:
        h = await history(client)
        await streams_history(client)
        return h

    return with_client(redis_url, namespace, build)


@pytest.fixture
async def browser() -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTP client that keeps cookies as a browser does (an IP host's too: unsafe)."""
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        yield session
