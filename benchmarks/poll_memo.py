"""``python -m benchmarks.poll_memo``: the Redis memory a claim's replay memo costs.

Claims ``N`` runs the way an ActionWorker does (poll ids ``<poller>#<n>``, one run a poll;
and, for comparison, flo's ``await_task`` without a poll id), completes each, and
reports the bytes the poll memos hold afterwards: ``MEMORY USAGE`` of the queue's
``polls`` hash and ``poll_times`` zset, and the ``INFO memory`` used_memory growth, per
claim. Prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
from typing import Any

import redis.asyncio as aioredis

from flo_redis import FloClient, WorkerAwaitOptions
from flo_redis._wire.keys import action_keys

from ._common import private_redis


async def _used(raw: aioredis.Redis) -> int:
    info: dict[str, Any] = await raw.info("memory")
    return int(info["used_memory"])


async def measure(url: str, n: int, style: str) -> dict[str, Any]:
    namespace = f"memo-{style}-{secrets.token_hex(3)}"
    raw = aioredis.Redis.from_url(url)
    async with FloClient(url, namespace=namespace) as client:
        await client.action.register("job")
        await client.worker.register("w", ["job"])
        await client.action.invoke_many("job", [b"x"] * n)
        keys = action_keys(namespace, "job")
        await raw.memory_purge()
        before = await _used(raw)
        poller = secrets.token_hex(6)
        for i in range(n):
            poll_id = f"{poller}#{i}" if style == "worker" else None
            runs = await client.worker.await_tasks(
                "w", ["job"], 1, WorkerAwaitOptions(block_ms=0, poll_id=poll_id)
            )
            (run,) = runs
            await client.worker.complete_many(
                "w", "job", [_item(run.run_id, run.token)], tally=False
            )
        held = 0
        for key in (keys.polls, keys.poll_times):
            held += int(await raw.memory_usage(key, samples=0) or 0)
        await raw.memory_purge()
        grown = await _used(raw) - before
        await client.action.delete("job")
    await raw.aclose()
    return {"style": style, "claims": n, "memo_bytes_per_claim": round(held / n, 1),
            "used_memory_growth_per_claim": round(grown / n, 1)}  # fmt: skip


def _item(run_id: str, token: int) -> Any:
    from flo_redis.actions import CompleteItem

    return CompleteItem(run_id, b"", token=token)


async def main(n: int) -> None:
    server = private_redis()
    try:
        for style in ("worker", "await_task"):
            print(json.dumps(await measure(server.url, n, style)), flush=True)
    finally:
        server.discard()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000))
