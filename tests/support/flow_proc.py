"""A worker process for the flow control fault test: an ActionWorker whose handlers write
when they enter and leave to a ledger in Redis, on Redis's clock.

    python flow_proc.py URL NAMESPACE LEDGER LIMIT [MAX/PER_MS]

The action ``job`` is registered with ``FlowControl(concurrency=LIMIT, fair=True)``
(LIMIT 0: none), and ``rate=RateLimit(MAX, PER_MS)`` when given.
Each handler appends ``enter <key> <run id> <token> <pid> <µs>`` to the list ``LEDGER``,
works 100 ms, then appends ``exit ...`` the same way, the time read with ``TIME`` after
the run was handed out and before its complete is sent (so within the time it held its
key's slot). The test SIGKILLs these processes.
"""

from __future__ import annotations

import asyncio
import os
import sys

import redis.asyncio as aioredis

from flo_redis import ActionContext, ActionRegisterOptions, FloClient, FlowControl, RateLimit

WORK_S = 0.1


async def main(url: str, namespace: str, ledger: str, limit: int, rate: RateLimit | None) -> None:
    raw = aioredis.Redis.from_url(url)

    async def write(kind: str, ctx: ActionContext) -> None:
        seconds, micros = await raw.time()
        key = ctx.input().decode()
        micros_now = seconds * 1_000_000 + micros
        line = f"{kind} {key} {ctx.task_id} {ctx.token} {os.getpid()} {micros_now}"
        await raw.rpush(ledger, line)

    async def handler(ctx: ActionContext) -> bytes:
        await write("enter", ctx)
        await asyncio.sleep(WORK_S)
        await write("exit", ctx)
        return str(os.getpid()).encode()

    async with FloClient(url, namespace=namespace) as client:
        worker = client.new_action_worker(
            worker_id=f"proc-{os.getpid()}", concurrency=8, block_ms=1000
        )
        flow = FlowControl(concurrency=limit, fair=True, rate=rate)
        worker.register_action("job", handler, ActionRegisterOptions(flow=flow, max_retries=20))
        await worker.start()


if __name__ == "__main__":
    url, namespace, ledger, limit = sys.argv[1:5]
    rate = None
    if len(sys.argv) > 5:
        most, per_ms = sys.argv[5].split("/")
        rate = RateLimit(int(most), int(per_ms))
    asyncio.run(main(url, namespace, ledger, int(limit), rate))
