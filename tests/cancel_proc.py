"""A real worker process for the cancel and progress tests.

    python cancel_proc.py URL NAMESPACE ACTION TIMEOUT_MS

Its handlers (auto-touch on) keep running until cancelled. A handler that is cancelled
records what it saw in the key ``<NAMESPACE>:saw:<run id>`` (``ctx.cancelled`` then), and
one whose input is ``b"finish"`` completes at once instead.
"""

from __future__ import annotations

import asyncio
import os
import sys

import redis.asyncio as aioredis

from flo_redis import ActionContext, ActionRegisterOptions, FloClient


async def main(url: str, namespace: str, action: str, timeout_ms: int) -> None:
    raw = aioredis.Redis.from_url(url)

    async def handler(ctx: ActionContext) -> bytes:
        if ctx.input() == b"finish":
            return b"finished"
        try:
            await asyncio.Event().wait()  # holds the run until cancelled
        except asyncio.CancelledError:
            await raw.set(f"{namespace}:saw:{ctx.task_id}", f"cancelled={ctx.cancelled}")
            raise

    async with FloClient(url, namespace=namespace) as client:
        worker = client.new_action_worker(
            worker_id=f"proc-{os.getpid()}", concurrency=4, block_ms=1000, auto_touch=True
        )
        worker.register_action(action, handler, ActionRegisterOptions(timeout_ms=timeout_ms))
        await worker.start()


if __name__ == "__main__":
    url, namespace, action, timeout_ms = sys.argv[1:5]
    asyncio.run(main(url, namespace, action, int(timeout_ms)))
