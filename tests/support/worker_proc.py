"""A real worker process for the liveness fault tests.

    python worker_proc.py URL NAMESPACE ACTION MODE CONCURRENCY TIMEOUT_MS [MAX/PER_MS]

MODE ``hold``: every handler blocks until the key ``<NAMESPACE>:gate`` exists, then returns
the process id as its result.
MODE ``done``: handlers return at once; ``busy``: each takes 20 ms. The tests SIGKILL or
SIGSTOP the process while it holds runs.
``MAX/PER_MS``: register the action with ``RateLimit(MAX, PER_MS)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from flo_redis import ActionContext, ActionRegisterOptions, FloClient, RateLimit


async def main(
    url: str,
    namespace: str,
    action: str,
    mode: str,
    concurrency: int,
    timeout: int,
    rate: RateLimit | None = None,
) -> None:
    gate_key = f"{namespace}:gate"
    raw = aioredis.Redis.from_url(url)

    async def handler(ctx: ActionContext) -> bytes:
        while mode == "hold":
            with contextlib.suppress(RedisError):  # the gate outlives a Redis restart
                if await raw.exists(gate_key):
                    break
            await asyncio.sleep(0.02)
        if mode == "busy":
            await asyncio.sleep(0.02)
        return str(os.getpid()).encode()

    async with FloClient(url, namespace=namespace) as client:
        worker = client.new_action_worker(
            worker_id=f"proc-{os.getpid()}", concurrency=concurrency, block_ms=1000
        )
        options = ActionRegisterOptions(timeout_ms=timeout, rate_limit=rate)
        worker.register_action(action, handler, options)
        await worker.start()


if __name__ == "__main__":
    url, namespace, action, mode, concurrency, timeout = sys.argv[1:7]
    rate = None
    if len(sys.argv) > 7:
        most, per_ms = sys.argv[7].split("/")
        rate = RateLimit(int(most), int(per_ms))
    asyncio.run(main(url, namespace, action, mode, int(concurrency), int(timeout), rate))
