"""Hours of an action's history written straight into its ring (lua/lib/history.lua's
layout), for pages and charts that need more than the minutes a test can wait for."""

from __future__ import annotations

import math
from collections.abc import Callable

import redis.asyncio as aioredis

from flo_redis._wire.keys import action_keys
from flo_redis.actions.history import BUCKETS, DURATION, MINUTES, PICKUP

# A minute ago -> (completed, failed, retried, pickup bucket, duration bucket)
Minute = Callable[[int], tuple[int, int, int, int, int]]


def daily(ago: int) -> tuple[int, int, int, int, int]:
    """A working day's shape: traffic that rises and falls, a burst of failures with
    retries around 3 hours ago, pickups slower while the traffic peaks."""
    load = 40 + int(30 * math.sin(ago / 90) ** 2)
    failing = 150 <= ago < 195
    failed = 6 + ago % 4 if failing else (1 if ago % 17 == 0 else 0)
    retried = 9 if failing else (2 if ago % 11 == 0 else 0)
    return load, failed, retried, 3 + (load > 60), 6 + ago % 3


async def write_ring(
    raw: aioredis.Redis, namespace: str, action: str, minutes: int, shape: Minute = daily
) -> None:
    """Write ``minutes`` minutes of ``shape`` ending with the previous one into the ring
    of ``action``, as a ring its scripts last wrote a minute ago: call it before they
    count anything in the current minute (they go on from there as from any minute)."""
    key = action_keys(namespace, action).history
    sec, _ = await raw.time()
    now = sec // 60
    first = now - MINUTES + 1
    slot = 4 + 3 * (DURATION + BUCKETS)
    head = first.to_bytes(4, "big") + (now - 1).to_bytes(4, "big")
    await raw.setrange(key, 0, head)
    for ago in range(minutes, 0, -1):
        completed, failed, retried, pickup, duration = shape(ago)
        counters = [0] * (DURATION + BUCKETS)
        counters[:3] = [completed, failed, retried]
        counters[PICKUP + pickup] = completed + failed
        counters[DURATION + duration] = completed + failed
        minute = now - ago
        body = (minute).to_bytes(4, "big") + b"".join(n.to_bytes(3, "big") for n in counters)
        await raw.setrange(key, 8 + ((minute - first) % MINUTES) * slot, body)
    await raw.pexpire(key, (MINUTES + 1) * 60_000)
