"""Append events to a stream, then show what the stream holds.

    FLO_REDIS_URL=redis://localhost:6379 python examples/stream_producer.py [count]

Run ``examples/stream_consumer.py`` alongside to process them in a consumer group.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys

from flo_redis import FloClient, StreamAppendOptions

# The settings of the flo-redis command, so `flo-redis status` shows what this runs.
REDIS_URL = os.environ.get("FLO_REDIS_URL") or os.environ.get("REDIS_URL", "redis://localhost:6379")
NAMESPACE = os.environ.get("FLO_REDIS_NAMESPACE", "default")
STREAM = "orders"


async def main(count: int) -> None:
    async with FloClient(REDIS_URL, namespace=NAMESPACE) as client:
        for i in range(count):
            event = {"order": i, "amount": round(random.uniform(1, 500), 2)}
            if i % 10 == 9:
                event["amount"] = -1  # a poison event the consumer keeps failing on
            result = await client.stream.append(
                STREAM,
                json.dumps(event).encode(),
                StreamAppendOptions(headers={"type": "order.created", "source": "shop"}),
            )
            print(f"appended order {i} as {result.id.to_redis()}")
        info = await client.stream.info(STREAM)
        print(
            f"{STREAM!r} holds {info.count} records ({info.bytes_size} bytes), "
            f"{info.first_id.to_redis()} .. {info.last_id.to_redis()}"
        )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20))
