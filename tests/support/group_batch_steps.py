"""Steps the group batch tests share: a stream ``s`` (or another) read by group ``g``, and
a look at the group's bookkeeping keys in Redis."""

from __future__ import annotations

import redis.asyncio as aioredis

from flo_redis import (
    FloClient,
    StreamGroupAckOptions,
    StreamGroupJoinOptions,
    StreamGroupNackOptions,
    StreamGroupReadOptions,
    StreamID,
    StreamRecord,
)
from flo_redis._wire.keys import GroupKeys, stream_keys


async def fill(client: FloClient, n: int, stream: str = "s") -> list[StreamID]:
    return [(await client.stream.append(stream, f"e{i}".encode())).id for i in range(n)]


async def read(
    client: FloClient, consumer: str = "c1", count: int = 100, stream: str = "s", **kw: object
) -> list[StreamRecord]:
    options = StreamGroupReadOptions(count=count, **kw)  # type: ignore[arg-type]
    return (await client.stream.group_read(stream, "g", consumer, options)).records


def pairs(records: list[StreamRecord]) -> list[tuple[StreamID, int]]:
    return [(r.id, r.delivery_count) for r in records]


async def join(client: FloClient, ack_timeout_ms: int, max_deliver: int | None = None) -> GroupKeys:
    options = StreamGroupJoinOptions(ack_timeout_ms=ack_timeout_ms, max_deliver=max_deliver)
    await client.stream.group_join("s", "g", "c1", options)
    return stream_keys(client.namespace, "s").group("g")


async def ack(client: FloClient, ids: list[StreamID], token: int, consumer: str = "c1") -> None:
    options = StreamGroupAckOptions(consumer=consumer, token=token)
    await client.stream.group_ack("s", "g", ids, options)


async def nack(client: FloClient, ids: list[StreamID], token: int, consumer: str = "c1") -> None:
    options = StreamGroupNackOptions(consumer=consumer, token=token)
    await client.stream.group_nack("s", "g", ids, options)


async def bookkeeping(raw: aioredis.Redis, gk: GroupKeys) -> dict[str, int]:
    return {
        "batches": await raw.zcard(gk.batches),
        "batch_due": await raw.zcard(gk.batch_due),
        "due": await raw.zcard(gk.due),
        "deliveries": await raw.hlen(gk.deliveries),
        "owned": await raw.zcard(gk.owned),
    }
