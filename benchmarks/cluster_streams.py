"""Throughput of one partitioned stream (3 partitions) next to one unpartitioned stream,
on a Redis Cluster, measured in the same run.

    python -m benchmarks.cluster_streams [--records N] [--producers P] [--batch B]

Uses ``REDIS_CLUSTER_URL`` (``redis+cluster://host:port``) when set, else starts a private
3-master cluster with the tests' helper (``tests/support/redis_server.py``). For each stream:
appends per second (``P`` concurrent producers), then group reads + acks per second (one
consumer per partition reading batches of ``B``, acking each batch per partition), and
the whole pipeline (append, read, ack) per record. One asyncio process drives it all,
so the figures are the client's as much as the cluster's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

from flo_redis import (
    FloClient,
    StreamAppendOptions,
    StreamGroupAckOptions,
    StreamGroupReadOptions,
    StreamID,
)

TESTS = Path(__file__).resolve().parent.parent / "tests"


async def _append_all(client: FloClient, stream: str, records: int, producers: int) -> float:
    payload = b"x" * 100
    per = records // producers

    async def produce(p: int) -> None:
        for i in range(per):
            await client.stream.append(
                stream, payload, StreamAppendOptions(partition_key=f"key-{p}-{i % 64}")
            )

    began = time.perf_counter()
    await asyncio.gather(*(produce(p) for p in range(producers)))
    return time.perf_counter() - began


async def _consume_all(
    client: FloClient, stream: str, records: int, consumers: int, batch: int
) -> float:
    left = [records]

    async def consume(c: int) -> None:
        while left[0] > 0:
            got = (
                await client.stream.group_read(
                    stream, "bench", f"c{c}", StreamGroupReadOptions(count=batch)
                )
            ).records
            if not got:
                await asyncio.sleep(0.001)
                continue
            left[0] -= len(got)
            by_partition: dict[int, list[StreamID]] = defaultdict(list)
            for record in got:
                by_partition[record.partition].append(record.id)
            for partition, ids in by_partition.items():
                await client.stream.group_ack(
                    stream, "bench", ids, StreamGroupAckOptions(partition=partition)
                )

    began = time.perf_counter()
    await asyncio.gather(*(consume(c) for c in range(consumers)))
    return time.perf_counter() - began


async def measure(
    url: str, partitions: int, records: int, producers: int, batch: int
) -> dict[str, float]:
    async with FloClient(url, namespace=f"bench-{uuid.uuid4().hex[:8]}") as client:
        stream = "events"
        await client.stream.create(stream, partitions=partitions)
        for c in range(partitions):
            await client.stream.group_join(stream, "bench", f"c{c}")
        per = records // producers * producers
        t_append = await _append_all(client, stream, per, producers)
        t_consume = await _consume_all(client, stream, per, max(partitions, 3), batch)
        return {
            "records": per,
            "appends_per_s": per / t_append,
            "reads_acks_per_s": per / t_consume,
            "end_to_end_per_s": per / (t_append + t_consume),
        }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    url = os.environ.get("REDIS_CLUSTER_URL")
    cluster = None
    if not url:
        sys.path.insert(0, str(TESTS))
        from redis_server import RedisCluster

        cluster = RedisCluster(masters=3).start()
        url = cluster.url
    try:
        results = {}
        for name, partitions in (("unpartitioned", 1), ("3 partitions", 3)):
            results[name] = await measure(url, partitions, args.records, args.producers, args.batch)
        print(
            f"cluster {url}: {args.records} records of 100 bytes, {args.producers} producers, "
            f"group reads of {args.batch}, acks per batch"
        )
        print(f"{'stream':<16}{'appends/s':>12}{'reads+acks/s':>15}{'end-to-end/s':>15}")
        for name, r in results.items():
            print(
                f"{name:<16}{r['appends_per_s']:>12.0f}{r['reads_acks_per_s']:>15.0f}"
                f"{r['end_to_end_per_s']:>15.0f}"
            )
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    asyncio.run(main())
