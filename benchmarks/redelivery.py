"""How long a SIGKILLed worker's run waits before another worker gets it.

    python benchmarks/redelivery.py [--url redis://...] [--trials 50]

Each trial: a worker process takes a run (action lease timeout: 5 minutes, so only
liveness can bring it back sooner) and blocks in its handler; a second worker (this
process) is polling; the first is SIGKILLed, and the time until the second worker's
handler starts on the run is measured. Prints p50 / p99 / max over all trials. Without
``--url`` a private ``redis-server`` is started on a free port.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid

from flo_redis import ActionContext, ActionRegisterOptions, ActionType, FloClient, RunStatus
from flo_redis._session.liveness import DEFAULT_GRACE_MS
from flo_redis.testing import RedisServer, RedisServerNotFound

ACTION = "bench"
TIMEOUT_MS = 300_000


async def child(url: str, namespace: str) -> None:
    """The worker that will be killed: holds whatever it takes."""

    async def hold(ctx: ActionContext) -> bytes:
        await asyncio.Event().wait()
        return b""

    async with FloClient(url, namespace=namespace) as client:
        worker = client.new_action_worker(worker_id=f"victim-{os.getpid()}", block_ms=1000)
        worker.register_action(ACTION, hold, ActionRegisterOptions(timeout_ms=TIMEOUT_MS))
        await worker.start()


async def trial(client: FloClient, url: str) -> float:
    run_id = (await client.action.invoke(ACTION, b"x")).run_id
    argv = [sys.executable, __file__, "--child", url, client.namespace]
    proc = subprocess.Popen(argv)  # noqa: ASYNC220 - starting it does not block
    try:
        while (await client.action.status(run_id)).status != RunStatus.RUNNING:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        started = asyncio.Event()
        got_at = 0.0

        async def catch(ctx: ActionContext) -> bytes:
            nonlocal got_at
            if ctx.task_id == run_id:
                got_at = time.monotonic()
                started.set()
            return b""

        worker = client.new_action_worker(worker_id="catcher", block_ms=1000)
        worker.register_action(ACTION, catch, ActionRegisterOptions(timeout_ms=TIMEOUT_MS))
        task = asyncio.create_task(worker.start())
        try:
            # The catcher registers, polls and reaps; kill at a random point of its
            # reaper's round, so every phase is sampled.
            await asyncio.sleep(0.2 + random.random() * 0.5)
            killed_at = time.monotonic()
            os.kill(proc.pid, signal.SIGKILL)
            await asyncio.wait_for(started.wait(), 60)
            return got_at - killed_at
        finally:
            worker.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()


async def bench(url: str, trials: int) -> None:
    async with FloClient(url, namespace=f"bench-{uuid.uuid4().hex[:8]}") as client:
        await client.action.register(
            ACTION, ActionType.USER, ActionRegisterOptions(timeout_ms=TIMEOUT_MS)
        )
        times = []
        for i in range(trials):
            took = await trial(client, url)
            times.append(took)
            print(f"trial {i + 1:3d}: {took * 1000:7.0f} ms", flush=True)
    times.sort()
    p99 = times[min(len(times) - 1, round(0.99 * (len(times) - 1)))]
    print(
        f"\nSIGKILL -> redelivery over {trials} trials (grace {DEFAULT_GRACE_MS} ms, lease "
        f"timeout {TIMEOUT_MS // 1000} s): p50 {statistics.median(times) * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms, max {times[-1] * 1000:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="a Redis URL (default: start a private redis-server)")
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--child", nargs=2, metavar=("URL", "NAMESPACE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(child(*args.child))
        return
    server = None
    url = args.url
    if url is None:
        try:
            server = RedisServer().start()
        except RedisServerNotFound as exc:
            sys.exit(f"{exc}; or pass --url")
        url = server.url
    try:
        asyncio.run(bench(url, args.trials))
    finally:
        if server is not None:
            server.discard()


if __name__ == "__main__":
    main()
