"""A worker process for the fault soak: every handler execution is written to a ledger.

    python soak_worker.py URL NAMESPACE ACTION LEDGER CONCURRENCY

Each handler appends ``<run id> <pid> <token>`` to the LEDGER file (one line, one
``write`` on a file opened for appending, so lines of several processes never mix), works
a few milliseconds and returns ``<pid> <token>`` as the run's result.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys

from polling import connected

from flo_redis import ActionContext, ActionRegisterOptions, FloClient

OPTIONS = ActionRegisterOptions(timeout_ms=300_000, max_retries=1000)


async def main(url: str, namespace: str, action: str, ledger: str, concurrency: int) -> None:
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    async def handler(ctx: ActionContext) -> bytes:
        line = f"{ctx.task_id} {os.getpid()} {ctx.token}\n"
        os.write(fd, line.encode())
        await asyncio.sleep(random.uniform(0.001, 0.03))
        return f"{os.getpid()} {ctx.token}".encode()

    client = await connected(FloClient(url, namespace=namespace))
    async with client:
        worker = client.new_action_worker(
            worker_id=f"soak-{os.getpid()}", concurrency=concurrency, block_ms=1000
        )
        worker.register_action(action, handler, OPTIONS)
        await worker.start()


if __name__ == "__main__":
    url, namespace, action, ledger, concurrency = sys.argv[1:6]
    asyncio.run(main(url, namespace, action, ledger, int(concurrency)))
