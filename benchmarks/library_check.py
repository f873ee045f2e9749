"""``python -m benchmarks.library_check``: what the check of the script library costs.

Before the first ``FCALL`` on each connection a client compares the server's library with
the one it ships (``FUNCTION LIST WITHCODE``; ``flo_redis/_wire/functions.py``). For ``N``
fresh connections this measures, on each: the check alone (one round trip bringing the
library's code, and the comparison), a ``PING`` on the same connection for scale, and
the first call of a script made on a checked connection and on one not yet checked
(``action_counts``, as a client's first call would). Redis's own time per check is read
from ``INFO commandstats``. Prints one JSON line: medians and 90th percentiles in µs.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import redis.asyncio as aioredis

from flo_redis import FloClient
from flo_redis._wire.functions import Functions
from flo_redis._wire.gateway import ACTION_COUNTS
from flo_redis._wire.keys import action_keys
from flo_redis._wire.runner import LIBRARY

from ._common import percentile, private_redis


async def _timed(call: Any) -> float:
    start = time.perf_counter()
    await call
    return (time.perf_counter() - start) * 1e6


async def measure(url: str, n: int) -> dict[str, Any]:
    raw = aioredis.Redis.from_url(url)
    async with FloClient(url, namespace="library-check") as client:
        await client.action.register("job")  # loads the library
    keys = ACTION_COUNTS.keys(action_keys("library-check", "job"))
    call = ("FCALL", ACTION_COUNTS.lua.function, len(keys), *keys)
    await raw.config_resetstat()
    checks, pings, checked_first, unchecked_first = [], [], [], []
    pool = aioredis.ConnectionPool.from_url(url)
    for i in range(n):
        conn = await pool.get_connection()
        functions = Functions(LIBRARY)
        if i % 2:  # alternate: the first call on a connection checked first, or not
            checks.append(await _timed(functions.verify(conn)))
            checked_first.append(await _timed(_send(conn, call)))
        else:
            unchecked_first.append(await _timed(_both(functions.verify(conn), _send(conn, call))))
        pings.append(await _timed(_send(conn, ("PING",))))
        await conn.disconnect()  # the next one is a new connection
        await pool.release(conn)
    stats: dict[str, Any] = await raw.info("commandstats")
    await raw.aclose()
    await pool.aclose()
    server = stats.get("cmdstat_function|list", {})
    return {
        "connections": n,
        "library_bytes": len(LIBRARY.source.encode()),
        "check_us": _summary(checks),
        "ping_us": _summary(pings),
        "first_call_checked_us": _summary(checked_first),
        "first_call_with_check_us": _summary(unchecked_first),
        "redis_us_per_check": float(server.get("usec_per_call", 0.0)),
    }


async def _send(conn: Any, command: tuple[Any, ...]) -> Any:
    await conn.send_command(*command)
    return await conn.read_response()


async def _both(first: Any, second: Any) -> None:
    await first
    await second


def _summary(values: list[float]) -> dict[str, float]:
    return {"p50": round(percentile(values, 50), 1), "p90": round(percentile(values, 90), 1)}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    server = private_redis()
    try:
        print(json.dumps(asyncio.run(measure(server.url, n))))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
