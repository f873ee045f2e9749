"""The handler work every queue and baseline runs: nothing, or one Redis round trip.

``roundtrip``: one pipelined Redis round trip per task (``INCR`` of one key, in a
pipeline of its own), on a redis-py client of the process's own. Throughput figures
name which handler they ran; ``HANDLERS`` lists the choices.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

HANDLERS = ("noop", "roundtrip")
# The key the round-trip handler increments (one per namespace, so it counts the calls).
HIT_KEY = "bench:hits"

Handler = Callable[[], Awaitable[None]]


async def _noop() -> None:
    return None


def redis_client(url: str) -> aioredis.Redis | aioredis.RedisCluster:
    """A redis-py client for ``url``, a cluster client for flo's ``redis+cluster://``."""
    if "+cluster://" in url:  # redis-py names the scheme without "+cluster"
        return aioredis.RedisCluster.from_url(url.replace("+cluster://", "://", 1))
    return aioredis.Redis.from_url(url)


def make_handler(kind: str, url: str, key: str = HIT_KEY) -> tuple[Handler, Handler]:
    """The handler ``kind`` names, and what closes the Redis client it uses."""
    if kind == "noop":
        return _noop, _noop
    if kind != "roundtrip":
        raise ValueError(f"handler {kind!r}: choose from {HANDLERS}")
    redis = redis_client(url)

    async def roundtrip() -> None:
        async with redis.pipeline(transaction=False) as pipe:
            pipe.incr(key)
            await pipe.execute()

    async def close() -> None:
        await redis.aclose()

    return roundtrip, close
