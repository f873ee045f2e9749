"""A StreamWorker processing the ``orders`` stream in the ``billing`` group.

    FLO_REDIS_URL=redis://localhost:6379 python examples/stream_worker.py

A handler that returns acks the record; one that raises nacks it, and the group delivers
it again (delivery count raised) until ``max_deliver``, then dead-letters it.
"""

from __future__ import annotations

import asyncio
import os
import signal

from flo_redis import FloClient, StreamContext, StreamGroupJoinOptions

# The settings of the flo-redis command, so `flo-redis status` shows what this runs.
REDIS_URL = os.environ.get("FLO_REDIS_URL") or os.environ.get("REDIS_URL", "redis://localhost:6379")
NAMESPACE = os.environ.get("FLO_REDIS_NAMESPACE", "default")


async def bill(ctx: StreamContext) -> None:
    order = ctx.json()
    if order["amount"] < 0:
        raise ValueError(f"order {order['order']} has a negative amount")
    await asyncio.sleep(0.005)  # charge the card


async def main() -> None:
    async with FloClient(REDIS_URL, namespace=NAMESPACE) as client:
        # Group settings are set when the group is created (an extension to flo).
        await client.stream.group_join(
            "orders", "billing", "setup", StreamGroupJoinOptions(max_deliver=3)
        )
        worker = client.new_stream_worker(
            stream="orders", group="billing", handler=bill, batch_size=50
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, worker.stop)
        print(f"stream worker {worker.config.consumer}: consuming 'orders' as 'billing'")
        await worker.start()
        letters = await client.stream.dead_letters("orders", "billing")
        print(f"stream worker: stopped; {len(letters)} dead letters in 'billing'")


if __name__ == "__main__":
    asyncio.run(main())
