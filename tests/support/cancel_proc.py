"""A real worker process for the cancel and progress tests.

    python cancel_proc.py URL NAMESPACE ACTION TIMEOUT_MS [MODE]

MODE ``touch`` (the default): ``async def`` handlers, auto-touch on; ``inline``: the
same handlers, auto-touch off; ``sync``: a plain ``def`` handler, auto-touch off.

Handlers keep running until cancelled. One that is cancelled records what it saw in the
key ``<NAMESPACE>:saw:<run id>`` (``ctx.cancelled`` then) and when (``time.time()``) in
``<NAMESPACE>:saw-at:<run id>``; a sync one then returns ``b"late"`` (its complete must
be refused). One whose input is ``b"finish"`` completes at once instead. One whose input
is ``b"progress"`` reports progress ``{"done": 50}``, waits for the key
``<NAMESPACE>:gate:<run id>``, reports ``{"done": 100}`` and completes.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import redis
import redis.asyncio as aioredis

from flo_redis import ActionContext, ActionRegisterOptions, FloClient


async def main(url: str, namespace: str, action: str, timeout_ms: int, mode: str) -> None:
    raw = aioredis.Redis.from_url(url)
    blocking = redis.Redis.from_url(url)

    async def handler(ctx: ActionContext) -> bytes:
        if ctx.input() == b"finish":
            return b"finished"
        if ctx.input() == b"progress":
            await ctx.progress({"done": 50})
            while True:
                if await raw.exists(f"{namespace}:gate:{ctx.task_id}"):
                    break
                await asyncio.sleep(0.02)
            await ctx.progress({"done": 100})
            return b"finished"
        try:
            await asyncio.Event().wait()  # holds the run until cancelled
        except asyncio.CancelledError:
            at = time.time()
            await raw.set(f"{namespace}:saw-at:{ctx.task_id}", repr(at))
            await raw.set(f"{namespace}:saw:{ctx.task_id}", f"cancelled={ctx.cancelled}")
            raise
        raise AssertionError("unreachable")

    def sync_handler(ctx: ActionContext) -> bytes:
        if ctx.input() == b"finish":
            return b"finished"
        while not ctx.cancelled:
            time.sleep(0.005)
        blocking.set(f"{namespace}:saw-at:{ctx.task_id}", repr(time.time()))
        blocking.set(f"{namespace}:saw:{ctx.task_id}", f"cancelled={ctx.cancelled}")
        return b"late"

    async with FloClient(url, namespace=namespace) as client:
        worker = client.new_action_worker(
            worker_id=f"proc-{os.getpid()}",
            concurrency=4,
            block_ms=1000,
            auto_touch=mode == "touch",
        )
        chosen = sync_handler if mode == "sync" else handler
        worker.register_action(action, chosen, ActionRegisterOptions(timeout_ms=timeout_ms))
        await worker.start()


if __name__ == "__main__":
    url, namespace, action, timeout_ms = sys.argv[1:5]
    mode = sys.argv[5] if len(sys.argv) > 5 else "touch"
    asyncio.run(main(url, namespace, action, int(timeout_ms), mode))
