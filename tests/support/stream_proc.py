"""A real StreamWorker process for the stream liveness fault tests.

    python stream_proc.py URL NAMESPACE STREAM GROUP CONSUMER

Its handler blocks forever, so every record it is given stays delivered to it, unacked,
until the test SIGKILLs the process.
"""

from __future__ import annotations

import asyncio
import sys

from flo_redis import FloClient, StreamContext


async def main(url: str, namespace: str, stream: str, group: str, consumer: str) -> None:
    async def hold(ctx: StreamContext) -> None:
        print(f"holding {ctx.stream_id.to_redis()}", flush=True)
        await asyncio.Event().wait()

    async with FloClient(url, namespace=namespace) as client:
        worker = client.new_stream_worker(
            stream=stream, group=group, consumer=consumer, handler=hold, block_ms=1000
        )
        await worker.start()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
