"""A real queue consumer process for the liveness fault test.

    python queue_proc.py URL NAMESPACE QUEUE COUNT

Dequeues up to COUNT messages with a 5-minute visibility timeout, prints their seqs on
one line, then holds them (never acks) until it is killed.
"""

from __future__ import annotations

import asyncio
import sys

from flo_redis import DequeueOptions, FloClient


async def main(url: str, namespace: str, queue: str, count: int) -> None:
    async with FloClient(url, namespace=namespace) as client:
        taken = await client.queue.dequeue(
            queue, count, DequeueOptions(block_ms=10_000, visibility_timeout_ms=300_000)
        )
        print(" ".join(str(m.seq) for m in taken.messages), flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    url, namespace, queue, count = sys.argv[1:5]
    asyncio.run(main(url, namespace, queue, int(count)))
