"""A consumer-group loop on the low-level stream API: read, process, ack or nack.

    FLO_REDIS_URL=redis://localhost:6379 python examples/stream_consumer.py [consumer]

On start it first re-processes the entries this consumer was given but never acked (a
claim loop over its own pending list), then reads new ones. Each ack/nack carries the
delivery's token (``delivery_count``): if the entry was meanwhile delivered to another
consumer (this one was too slow, past the group's ack timeout), the report is refused
with ``STALE_REPORT`` and dropped. An entry nacked ``max_deliver`` times lands in the
group's dead letters, listed at the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys

from flo_redis import (
    ConflictError,
    FloClient,
    StreamGroupAckOptions,
    StreamGroupJoinOptions,
    StreamGroupNackOptions,
    StreamGroupReadOptions,
    StreamID,
    StreamRecord,
)

# The settings of the flo-redis command, so `flo-redis status` shows what this runs.
REDIS_URL = os.environ.get("FLO_REDIS_URL") or os.environ.get("REDIS_URL", "redis://localhost:6379")
NAMESPACE = os.environ.get("FLO_REDIS_NAMESPACE", "default")
STREAM = "orders"
GROUP = "billing"


async def process(record: StreamRecord) -> None:
    event = json.loads(record.payload)
    if event["amount"] < 0:
        raise ValueError(f"order {event['order']} has a negative amount")
    await asyncio.sleep(0.01)  # the real work would go here


async def settle(client: FloClient, consumer: str, record: StreamRecord) -> None:
    """Process one record, then ack it, or nack it for redelivery if processing failed."""
    try:
        await process(record)
    except Exception as exc:
        print(f"{record.id.to_redis()}: failed ({exc}); delivery {record.delivery_count}")
        options = StreamGroupNackOptions(consumer=consumer, token=record.delivery_count)
        report = client.stream.group_nack(STREAM, GROUP, [record.id], options)
    else:
        print(f"{record.id.to_redis()}: done; {record.headers}")
        ack = StreamGroupAckOptions(consumer=consumer, token=record.delivery_count)
        report = client.stream.group_ack(STREAM, GROUP, [record.id], ack)
    try:
        await report
    except ConflictError as exc:  # delivered to someone else meanwhile: theirs now
        print(f"{record.id.to_redis()}: report refused: {exc}")


async def main(consumer: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async with FloClient(REDIS_URL, namespace=NAMESPACE) as client:
        # Creates the group at the beginning of the stream on first use; unacked entries
        # come back after 5 s, and an entry is given up after 3 deliveries.
        await client.stream.group_join(
            STREAM, GROUP, consumer, StreamGroupJoinOptions(ack_timeout_ms=5000, max_deliver=3)
        )

        # First the entries this consumer held when it last stopped.
        cursor = StreamID()
        while True:
            page = await client.stream.group_claim(STREAM, GROUP, consumer, 0, cursor, 50)
            for record in page.records:
                await settle(client, consumer, record)
            if page.done:
                break
            cursor = page.next_cursor

        print(f"{consumer}: reading {STREAM!r} in group {GROUP!r}")
        while not stop.is_set():
            poll = asyncio.create_task(
                client.stream.group_read(
                    STREAM, GROUP, consumer, StreamGroupReadOptions(count=10, block_ms=5000)
                )
            )
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait({poll, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not poll.done():
                client.interrupt()  # a stop request: the read returns empty at once
            for record in (await poll).records:
                await settle(client, consumer, record)

        await client.stream.group_leave(STREAM, GROUP, consumer)
        for letter in await client.stream.dead_letters(STREAM, GROUP):
            print(
                f"dead letter {letter.original_id.to_redis()}: {letter.payload!r} after "
                f"{letter.delivery_count} deliveries ({letter.reason})"
            )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else f"{socket.gethostname()}-1"))
