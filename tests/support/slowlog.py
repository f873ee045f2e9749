"""A private server whose SLOWLOG lists every call that ran longer than 50 ms, for the
tests that hold scripts under that bound."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator

import redis.asyncio as aioredis
from redis_server import RedisServer

from flo_redis import FloClient

SLOW_US = 50_000


@contextlib.contextmanager
def slowlog_server() -> Iterator[str]:
    """The URL of a server logging every call over :data:`SLOW_US`, stopped after."""
    server = RedisServer(extra=("--slowlog-log-slower-than", str(SLOW_US))).start()
    # SLOWLOG times a call on the wall clock: on a machine loaded with other processes a
    # short script can be descheduled midway and look slow. Where allowed, the server
    # runs ahead of its neighbours, so what is timed is the script's own work.
    assert server.process is not None
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, server.process.pid, -10)
    try:
        yield server.url
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def watched_clients(
    url: str, namespace: str
) -> AsyncIterator[tuple[FloClient, aioredis.Redis]]:
    """A client of ``namespace`` on the server at ``url``, and a plain connection to read
    its SLOWLOG with."""
    async with FloClient(url, namespace=namespace) as client:
        conn = aioredis.Redis.from_url(url)
        try:
            yield client, conn
        finally:
            await conn.aclose()


async def slow_calls(conn: aioredis.Redis) -> list[tuple[int, str]]:
    """(duration in µs, command) of every call SLOWLOG holds: those over 50 ms."""
    entries = await conn.slowlog_get(128)
    return [(int(e["duration"]), e["command"][:60].decode(errors="replace")) for e in entries]
