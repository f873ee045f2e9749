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


# Commands of constant cost: one of them logged as slow inside a script call is the
# server process descheduled by a loaded machine, not work the script chose to do.
CONSTANT = {"SPUBLISH", "HGET", "HSET", "HINCRBY", "HDEL", "ZSCORE", "ZADD", "ZREM", "TIME"}


async def slow_script_work(conn: aioredis.Redis) -> list[tuple[int, str]]:
    """The script calls over 50 ms, leaving out those whose time went to one command of
    constant cost inside them (logged beside them, taking most of their time): a stall
    of the process, not the script's own work."""
    entries = await conn.slowlog_get(128)
    stalls = [
        (int(e["start_time"]), int(e["duration"]))
        for e in entries
        if e["command"].split(b" ", 1)[0].decode().upper() in CONSTANT
    ]
    out = []
    for e in entries:
        name = e["command"].split(b" ", 1)[0].decode().upper()
        if name not in ("FCALL", "EVALSHA", "EVAL"):
            continue
        at, took = int(e["start_time"]), int(e["duration"])
        if any(abs(t - at) <= 1 and d >= 0.8 * took for t, d in stalls):
            continue
        out.append((took, e["command"][:60].decode(errors="replace")))
    return out
