"""Shared fixtures: one private Redis per test session, a fresh namespace per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis
from redis_server import RedisServer

from flo_redis import FloClient


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """FLO_REDIS_TEST_URL if set, else a private redis-server on a free port."""
    url = os.environ.get("FLO_REDIS_TEST_URL")
    if url:
        yield url
        return
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def namespace() -> str:
    """A namespace no other test uses, so tests never see each other's keys."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def client(redis_url: str, namespace: str) -> AsyncIterator[FloClient]:
    async with FloClient(redis_url, namespace=namespace) as c:
        yield c


@pytest.fixture
async def raw(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """A plain redis-py connection to the same server, for looking behind the API."""
    conn = aioredis.Redis.from_url(redis_url)
    try:
        yield conn
    finally:
        await conn.aclose()
