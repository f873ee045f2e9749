"""How long a running handler goes on after its run is cancelled.

    python -m benchmarks.cancel_notice [--url redis://...] [--trials 30] [--lease-ms 3000]

Each trial: a worker process (auto-touch on, so it touches every ``lease-ms / 3``) takes
a run and blocks in its handler; at a random moment of the touch interval this process
calls ``client.action.cancel``; the time from just before that call until the handler
sees its cancellation (``time.time()`` written by the worker to Redis) is measured.
Prints p50 / p99 / max. Without ``--url`` a private ``redis-server`` is started.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import redis.asyncio as aioredis

from flo_redis import ActionContext, ActionRegisterOptions, FloClient, RunStatus

from ._common import private_redis

ACTION = "bench"
ROOT = Path(__file__).resolve().parent.parent


async def child(url: str, namespace: str, lease_ms: int) -> None:
    """The worker: holds each run until its handler is cancelled, then says when."""
    raw = aioredis.Redis.from_url(url)

    async def hold(ctx: ActionContext) -> bytes:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await raw.set(f"{namespace}:saw:{ctx.task_id}", repr(time.time()))
            raise
        return b""

    async with FloClient(url, namespace=namespace) as client:
        worker = client.new_action_worker(
            worker_id=f"holder-{os.getpid()}", block_ms=1000, auto_touch=True
        )
        worker.register_action(ACTION, hold, ActionRegisterOptions(timeout_ms=lease_ms))
        await worker.start()


async def trial(client: FloClient, raw: aioredis.Redis, lease_ms: int) -> float:
    run_id = (await client.action.invoke(ACTION, b"x")).run_id
    while (await client.action.status(run_id)).status != RunStatus.RUNNING:  # noqa: ASYNC110
        await asyncio.sleep(0.005)
    await asyncio.sleep(random.random() * lease_ms / 3000)  # anywhere in a touch interval
    began = time.time()
    await client.action.cancel(run_id)
    key = f"{client.namespace}:saw:{run_id}"
    deadline = time.monotonic() + lease_ms / 1000 + 30
    while (saw := await raw.get(key)) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the handler of {run_id} was never cancelled")
        await asyncio.sleep(0.002)
    return float(saw) - began


async def bench(url: str, trials: int, lease_ms: int) -> None:
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    argv = [sys.executable, "-m", "benchmarks.cancel_notice", "--child", url, namespace]
    proc = subprocess.Popen([*argv, str(lease_ms)], cwd=ROOT)  # noqa: ASYNC220 - starting it does not block
    raw = aioredis.Redis.from_url(url)
    try:
        async with FloClient(url, namespace=namespace) as client:
            await client.action.register(ACTION, options=ActionRegisterOptions(timeout_ms=lease_ms))
            times = []
            for i in range(trials):
                took = await trial(client, raw, lease_ms)
                times.append(took)
                print(f"trial {i + 1:3d}: {took * 1000:8.1f} ms", flush=True)
    finally:
        proc.kill()
        proc.wait()
        await raw.aclose()
    times.sort()
    p99 = times[min(len(times) - 1, round(0.99 * (len(times) - 1)))]
    print(
        f"\ncancel -> handler cancelled over {trials} trials (lease {lease_ms} ms, touch "
        f"every {lease_ms / 3:.0f} ms): p50 {statistics.median(times) * 1000:.1f} ms, "
        f"p99 {p99 * 1000:.1f} ms, max {times[-1] * 1000:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--url", help="a Redis URL (default: start a private redis-server)")
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--lease-ms", type=int, default=3000)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        url, namespace, lease_ms = args.child
        asyncio.run(child(url, namespace, int(lease_ms)))
        return
    server = None if args.url else private_redis()
    url = args.url if server is None else server.url
    try:
        asyncio.run(bench(url, args.trials, args.lease_ms))
    finally:
        if server is not None:
            server.discard()


if __name__ == "__main__":
    main()
