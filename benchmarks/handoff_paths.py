"""``python -m benchmarks.handoff_paths [N]``: how soon an idle worker starts a run that
is made ready again — a failure's retry, a release, a re-queue, the reclaim of a dead
process's run — and a delayed run invoked while the worker waits, after its due time.

One ActionWorker (concurrency 2) waits parked in its queue. Each sample makes one run
ready and times, in this process (``perf_counter``), from the call that does it (for a
retry: the handler's raise; for a delayed run: its due time) to the handler's start. The
runs given back are first held by a second poller, which parks with an earlier deadline
than the worker's, so the invoke hands the run to it. Prints one JSON line: per path the
median and p90 in ms over N samples (default 40).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import statistics
import sys
import time
from typing import Any

import redis.asyncio as aioredis

from flo_redis import (
    ActionContext,
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    WorkerFailOptions,
)
from flo_redis._session.reclaim import reclaim_gone_owners
from flo_redis._wire.keys import ActionKeys, action_keys, handoff_channel
from flo_redis.actions.claims import claim

from ._common import private_redis

DELAY_MS = 300


async def _parked(raw: aioredis.Redis, keys: ActionKeys, at_least: int = 1) -> None:
    for _ in range(5000):
        if await raw.zcard(keys.parked) >= at_least:
            return
        await asyncio.sleep(0.001)
    raise RuntimeError("the worker did not park")


class _Starts:
    """When each run's handler started (and, for a retried run, raised)."""

    def __init__(self) -> None:
        self.at: dict[str, list[float]] = {}
        self._changed = asyncio.Event()

    def note(self, run_id: str) -> None:
        self.at.setdefault(run_id, []).append(time.perf_counter())
        self._changed.set()

    async def until(self, run_id: str, n: int = 1) -> list[float]:
        while len(self.at.get(run_id, ())) < n:
            self._changed.clear()
            await self._changed.wait()
        return self.at[run_id]


async def _held(url: str, namespace: str, keys: ActionKeys, raw: aioredis.Redis) -> Any:
    """A run held by a second client's poller: (that client, the run)."""
    holder = FloClient(url, namespace=namespace)
    await holder.connect()
    pubsub = raw.pubsub()
    await pubsub.ssubscribe(handoff_channel(keys.tag, holder.owner_id))
    await pubsub.get_message(timeout=1.0)
    await _parked(raw, keys)
    poll = f"hold-{secrets.token_hex(3)}"
    await claim(holder.session, keys, "holder", b"", 1, f"{poll}#0", 1000)
    await holder.action.invoke(keys.action, b"")
    (run,) = (await claim(holder.session, keys, "holder", b"", 0, f"{poll}#0")).runs
    await pubsub.aclose()  # type: ignore[no-untyped-call]
    return holder, run


def _summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(x * 1000 for x in samples)
    return {"p50": round(statistics.median(ms), 2), "p90": round(ms[int(len(ms) * 0.9)], 2)}


async def measure(url: str, n: int) -> dict[str, Any]:
    namespace = f"paths-{secrets.token_hex(3)}"
    keys = action_keys(namespace, "job")
    raw = aioredis.Redis.from_url(url)
    out: dict[str, Any] = {}
    async with FloClient(url, namespace=namespace) as client:
        options = ActionRegisterOptions(max_retries=1_000_000, timeout_ms=600_000)
        await client.action.register("job", options=options)
        worker = client.new_action_worker(concurrency=2, block_ms=30_000)
        starts = _Starts()
        fail_once: set[str] = set()

        @worker.action("job")
        async def job(ctx: ActionContext) -> bytes:
            starts.note(ctx.task_id)
            if ctx.task_id in fail_once:
                fail_once.discard(ctx.task_id)
                await _parked(raw, keys)
                starts.note(ctx.task_id)  # the raise
                raise RuntimeError("once more")
            return b""

        task = asyncio.create_task(worker.start())
        try:
            await _parked(raw, keys)
            samples: list[float] = []
            for _ in range(n):
                run_id = (await client.action.invoke("job", b"")).run_id
                fail_once.add(run_id)
                at = await starts.until(run_id, 3)
                samples.append(at[2] - at[1])
            out["retry"] = _summary(samples)
            for path in ("release", "requeue", "reclaim"):
                samples = []
                for _ in range(n):
                    holder, run = await _held(url, namespace, keys, raw)
                    if path == "requeue":
                        final = WorkerFailOptions(retry=False, token=run.token)
                        await holder.worker.fail("holder", "job", run.run_id, "x", final)
                    if path == "reclaim":
                        await holder.close()  # its process is gone
                        await asyncio.sleep(0.05)
                    began = time.perf_counter()
                    if path == "release":
                        await holder.worker.release("holder", "job", run.run_id, run.token)
                    elif path == "requeue":
                        await client.action.requeue(run.run_id)
                    else:
                        await reclaim_gone_owners(client.session, "job", grace_ms=0)
                    samples.append((await starts.until(run.run_id))[0] - began)
                    if path != "reclaim":
                        await holder.close()
                out[path] = _summary(samples)
            samples = []
            for _ in range(max(n // 2, 5)):
                await _parked(raw, keys)
                await asyncio.sleep(0.05)
                due = time.perf_counter() + DELAY_MS / 1000
                delayed = ActionInvokeOptions(delay_ms=DELAY_MS)
                run_id = (await client.action.invoke("job", b"", delayed)).run_id
                samples.append((await starts.until(run_id))[0] - due)
            out["delayed_after_due"] = _summary(samples)
        finally:
            worker.stop()
            await task
    await raw.aclose()
    return out


async def main(n: int) -> None:
    logging.getLogger("flo_redis").setLevel(logging.CRITICAL)  # the retried runs' failures
    server = private_redis()
    try:
        print(json.dumps(await measure(server.url, n)), flush=True)
    finally:
        server.discard()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 40))
