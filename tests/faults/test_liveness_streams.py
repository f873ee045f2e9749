"""Stream deliveries held by a dead worker process come back in about a second."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from polling import eventually, running

from flo_redis import FloClient, StreamContext, StreamGroupJoinOptions

HERE = Path(__file__).resolve().parents[1] / "support"


def consumer_process(
    url: str, namespace: str, stream: str, group: str, consumer: str
) -> subprocess.Popen[bytes]:
    """A real StreamWorker process whose handler holds every record it is given."""
    args = [sys.executable, str(HERE / "stream_proc.py"), url, namespace, stream, group, consumer]
    return subprocess.Popen(args, cwd=HERE, stdout=subprocess.DEVNULL)


@pytest.mark.slow
async def test_a_sigkilled_consumers_entries_go_to_another_consumer(
    client: FloClient, redis_url: str, namespace: str
) -> None:
    # Ack timeout 5 minutes: only liveness can explain a redelivery within seconds.
    await client.stream.group_join(
        "events", "g", "setup", StreamGroupJoinOptions(ack_timeout_ms=300_000)
    )
    for i in range(5):
        await client.stream.append("events", f"e{i}".encode())
    proc = consumer_process(redis_url, namespace, "events", "g", "doomed")
    try:
        pending = await eventually(
            lambda: client.stream.group_pending("events", "g", "doomed"),
            lambda p: len(p) == 5,
            timeout=30,
        )
        assert {p.delivery_count for p in pending} == {1}
        seen: dict[bytes, int] = {}

        async def handle(ctx: StreamContext) -> None:
            seen[ctx.payload] = ctx.delivery_count

        worker = client.new_stream_worker(
            stream="events", group="g", consumer="rescuer", handler=handle, block_ms=1000
        )
        async with running(worker):
            proc.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            # Redelivered by liveness: the 5 minute ack timeout is far beyond this deadline.
            await eventually(lambda: len(seen), lambda n: n == 5, timeout=60)
            took = time.monotonic() - killed
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(10)
    print(f"stream entries redelivered {took:.2f} s after SIGKILL")
    assert seen == {f"e{i}".encode(): 2 for i in range(5)}  # delivery count raised
    assert await client.stream.group_pending("events", "g") == []


async def test_a_live_consumers_entries_are_never_given_back(client: FloClient) -> None:
    for i in range(3):
        await client.stream.append("s", f"{i}".encode())
    got = await client.stream.group_read("s", "g", "alive")
    assert len(got.records) == 3
    for _ in range(3):  # well past the grace: this client's liveness stays subscribed
        assert await client.stream.reclaim_gone_owners("s", "g", grace_ms=0) == 0
        await asyncio.sleep(0.1)
    pending = await client.stream.group_pending("s", "g")
    assert [(p.consumer, p.delivery_count) for p in pending] == [("alive", 1)] * 3


async def test_a_claimer_holds_its_liveness_so_its_claims_are_not_reclaimed(
    client: FloClient, redis_url: str
) -> None:
    from flo_redis import StreamID

    for i in range(2):
        await client.stream.append("s", f"{i}".encode())
    await client.stream.group_read("s", "g", "c1")
    # Another live process takes c1's entries over with group_claim only.
    async with FloClient(redis_url, namespace=client.namespace) as other:
        claimed = await other.stream.group_claim("s", "g", "c1", 0, StreamID(), 10)
        assert len(claimed.records) == 2
        await asyncio.sleep(0.05)
        assert await client.stream.reclaim_gone_owners("s", "g", grace_ms=0) == 0
        assert await client.stream.reclaim_gone_owners("s", "g", grace_ms=0) == 0
    pending = await client.stream.group_pending("s", "g")
    assert [p.delivery_count for p in pending] == [2, 2]
