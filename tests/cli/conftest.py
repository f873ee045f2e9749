"""What the operator commands' tests share: a namespace with a known history."""

from __future__ import annotations

from typing import Any

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
