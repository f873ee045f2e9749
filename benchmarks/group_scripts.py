"""``python -m benchmarks.group_scripts [N]``: Redis's own time in a StreamWorker's two
scripts, per entry.

Appends ``N`` records (default 20,000), then one consumer reads them 100 at a time
(``group_read`` with a worker's poll ids ``<poller>#<n>``) and acks each batch with
its tokens (``group_ack_many``), one call at a time, on a private redis-server. Every
call's server time is read from ``SLOWLOG`` (threshold 0), so neither the client nor
the network is counted (the log also holds the commands a script runs, and logging
them adds a little to each call). Prints one JSON line: µs of script time per entry
for each script, and the median µs per call.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
from typing import Any

import redis.asyncio as aioredis

from flo_redis import FloClient, StreamGroupReadOptions
from flo_redis._wire.gateway import GROUP_ACK_MANY, GROUP_READ
from flo_redis._wire.keys import stream_keys

from ._common import private_redis, script_times

BATCH = 100
SLOWLOG_LEN = 1_000_000  # the commands a script runs are logged too


async def measure(url: str, n: int) -> dict[str, Any]:
    raw = aioredis.Redis.from_url(url)
    async with FloClient(url, namespace="gs") as client:
        log = stream_keys("gs", "events").log
        for start in range(0, n, 1000):
            async with raw.pipeline(transaction=False) as pipe:
                for _ in range(min(1000, n - start)):
                    pipe.xadd(log, {"p": b"{}"})
                await pipe.execute()
        warm = StreamGroupReadOptions(count=1, poll_id="w#0")
        first = await client.stream.group_read("events", "g", "c1", warm)
        items = [(r.id, r.delivery_count) for r in first.records]
        await client.stream.group_ack_many("events", "g", items, consumer="c1")
        await raw.config_set("slowlog-max-len", SLOWLOG_LEN)
        await raw.config_set("slowlog-log-slower-than", 0)
        await raw.slowlog_reset()
        done, poll = len(items), 0
        while True:
            poll += 1
            options = StreamGroupReadOptions(count=BATCH, poll_id=f"w#{poll}")
            got = await client.stream.group_read("events", "g", "c1", options)
            if not got.records:
                break
            items = [(r.id, r.delivery_count) for r in got.records]
            await client.stream.group_ack_many("events", "g", items, consumer="c1")
            done += len(items)
        log_entries = await raw.slowlog_get(SLOWLOG_LEN)
        await raw.config_set("slowlog-log-slower-than", 10000)
    await raw.aclose()
    by_sha = script_times(log_entries)
    out: dict[str, Any] = {"entries": done, "batch": BATCH}
    for script in (GROUP_READ, GROUP_ACK_MANY):
        calls = by_sha.get(script.lua.sha.encode(), [])
        out[script.name] = {
            "calls": len(calls),
            "us_per_entry": round(sum(calls) / max(done, 1), 2),
            "median_us_per_call": statistics.median(calls) if calls else None,
        }
    return out


async def main(n: int) -> None:
    server = private_redis()
    try:
        print(json.dumps(await measure(server.url, n)), flush=True)
    finally:
        server.discard()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000))
