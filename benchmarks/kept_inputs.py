"""``python -m benchmarks.kept_inputs [N] [ROUNDS] [--off-only]``: what an action's
``keep_inputs`` costs.

On a private redis-server, each of ``ROUNDS`` rounds (default 3) measures, for an action
without the setting and one with it (alternated, fresh namespaces), and prints the
medians as one JSON line:

- ``complete_us``: Redis's own time of a completing call (``SLOWLOG`` at threshold 0,
  so neither the client nor the network is counted): ``run_complete`` of one run, and
  ``run_complete_many`` of 100, each over ``N`` runs (default 5,000) claimed 100 at a
  time; median µs per call.
- ``worker_runs_per_s``: one in-process ``ActionWorker`` (concurrency 100, a handler
  that returns at once) working ``N`` runs invoked before it starts, from its start
  until every run completed.
- ``bytes_per_kept_input``: ``MEMORY USAGE`` of the inputs hash after ``N`` runs with
  inputs of 32 bytes and of 1 KiB completed and kept (the newest 10,000: the default
  retention), divided by how many it holds (the input's own bytes included).

``--off-only`` measures the action without the setting alone, so the same figures can
be taken of a version without ``keep_inputs`` (``PYTHONPATH`` at its tree) to compare.

``--callgrind`` counts instructions instead, steadier than time on a shared machine (a
redis-server under ``valgrind --tool=callgrind``, counting only inside ``FCALL`` and
``EVALSHA``, as ``benchmarks.action_scripts --callgrind --in-scripts`` does): per
``run_complete`` call over ``N`` runs, and per ``run_complete_many`` call of 100.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from typing import Any

import redis.asyncio as aioredis

from flo_redis import ActionContext, FloClient
from flo_redis._wire.gateway import RUN_COMPLETE, RUN_COMPLETE_MANY
from flo_redis._wire.keys import action_keys
from flo_redis.actions.reports import CompleteItem
from flo_redis.types import ActionRegisterOptions, WorkerAwaitOptions

from ._common import private_redis, script_times
from .action_scripts import _Callgrind

BATCH = 100
NOW = WorkerAwaitOptions(block_ms=0)
SLOWLOG_LEN = 1_000_000  # the commands a script runs are logged too
SIZES = (32, 1024)


def options(keep: bool) -> ActionRegisterOptions:
    # keep_inputs is passed only when set, so the figures without it can be taken of a
    # version that does not know it (--off-only).
    return ActionRegisterOptions(keep_inputs=True) if keep else ActionRegisterOptions()


async def _ready(client: FloClient, keep: bool, n: int, data: bytes = b"{}") -> None:
    await client.action.register("job", options=options(keep))
    await client.worker.register("w", ["job"])
    for start in range(0, n, 1000):
        await client.action.invoke_many("job", [data] * min(1000, n - start))


async def complete_times(url: str, ns: str, keep: bool, n: int) -> dict[str, float]:
    """Median µs of Redis time per ``run_complete`` and per ``run_complete_many`` call."""
    raw = aioredis.Redis.from_url(url)
    async with FloClient(url, namespace=ns) as client:
        await _ready(client, keep, 2 * n)
        await raw.config_set("slowlog-max-len", SLOWLOG_LEN)
        await raw.config_set("slowlog-log-slower-than", 0)
        await raw.slowlog_reset()
        for single in (True, False):
            for _ in range(0, n, BATCH):
                claimed = await client.worker.await_tasks("w", ["job"], BATCH, NOW)
                if single:
                    for c in claimed:
                        await client.worker.complete("w", "job", c.run_id, b"ok")
                else:
                    items = [CompleteItem(c.run_id, b"ok", token=c.token) for c in claimed]
                    await client.worker.complete_many("w", "job", items)
        entries = await raw.slowlog_get(SLOWLOG_LEN)
        await raw.config_set("slowlog-log-slower-than", 10000)
    await raw.aclose()
    by_sha = script_times(entries)
    return {
        s.name: statistics.median(by_sha.get(s.lua.sha.encode(), [0]))
        for s in (RUN_COMPLETE, RUN_COMPLETE_MANY)
    }


async def worker_rate(url: str, ns: str, keep: bool, n: int) -> float:
    """Runs a second one worker completes: from its start until, stopped once its
    handlers ran ``n`` times, its ``start()`` returned (every result sent)."""
    async with FloClient(url, namespace=ns) as client:
        await _ready(client, keep, n)
        worker = client.new_action_worker(concurrency=100)
        ran = 0
        all_ran = asyncio.Event()

        async def handler(ctx: ActionContext) -> bytes:
            nonlocal ran
            ran += 1
            if ran == n:
                all_ran.set()
            return b""

        worker.register_action("job", handler, options(keep))
        started = time.perf_counter()
        task = asyncio.create_task(worker.start())
        await all_ran.wait()
        worker.stop()
        await task
        elapsed = time.perf_counter() - started
        meta = action_keys(ns, "job").meta
        assert int(await client.session.redis.hget(meta, "n:completed") or 0) == n
    return n / elapsed


async def bytes_per_input(url: str, ns: str, n: int, size: int) -> float:
    """``MEMORY USAGE`` of the inputs hash per kept input of ``size`` bytes (at most
    10,000 are kept: the default retention)."""
    raw = aioredis.Redis.from_url(url)
    async with FloClient(url, namespace=ns) as client:
        await _ready(client, True, n, b"x" * size)
        while claimed := await client.worker.await_tasks("w", ["job"], BATCH, NOW):
            items = [CompleteItem(c.run_id, b"", token=c.token) for c in claimed]
            await client.worker.complete_many("w", "job", items)
        assert await raw.hlen(action_keys(ns, "job").inputs) == min(n, 10_000)
        used = await raw.memory_usage(action_keys(ns, "job").inputs, samples=0)
    await raw.aclose()
    return (used or 0) / min(n, 10_000)


async def measure(url: str, n: int, rounds: int, off_only: bool) -> dict[str, Any]:
    modes = (False,) if off_only else (False, True)
    times: dict[bool, list[dict[str, float]]] = {m: [] for m in modes}
    rates: dict[bool, list[float]] = {m: [] for m in modes}
    for r in range(rounds):
        for keep in modes:
            times[keep].append(await complete_times(url, f"kc{r}{keep:d}", keep, n))
            rates[keep].append(await worker_rate(url, f"kw{r}{keep:d}", keep, n))
    out: dict[str, Any] = {"runs": n, "rounds": rounds}
    for keep in modes:
        label = "keep_inputs" if keep else "without"
        out[label] = {
            "complete_us": {
                name: statistics.median(t[name] for t in times[keep]) for name in times[keep][0]
            },
            "worker_runs_per_s": round(statistics.median(rates[keep])),
        }
    if not off_only:
        out["bytes_per_kept_input"] = {
            size: round(await bytes_per_input(url, f"km{size}", n, size), 1) for size in SIZES
        }
    return out


async def instructions(n: int, modes: tuple[bool, ...]) -> dict[str, Any]:
    """Instructions inside the scripts per completing call, by mode."""
    cg = _Callgrind(in_scripts=True)
    out: dict[str, Any] = {"runs": n, "batch": BATCH}
    try:
        await cg.answering()
        for keep in modes:
            async with FloClient(cg.url, namespace=f"cg{keep:d}") as client:
                await _ready(client, keep, 2 * n + 1)
                [warm] = await client.worker.await_tasks("w", ["job"], 1, NOW)
                await client.worker.complete("w", "job", warm.run_id, b"ok")  # loads it
                batches = []
                for _ in range(0, 2 * n, BATCH):
                    batches.append(await client.worker.await_tasks("w", ["job"], BATCH, NOW))
                cg.on()
                for batch in batches[: len(batches) // 2]:
                    for c in batch:
                        await client.worker.complete("w", "job", c.run_id, b"ok")
                single = cg.off() // n
                many = batches[len(batches) // 2 :]
                cg.on()
                for batch in many:
                    items = [CompleteItem(c.run_id, b"ok", token=c.token) for c in batch]
                    await client.worker.complete_many("w", "job", items)
                out["keep_inputs" if keep else "without"] = {
                    "run_complete_ir_per_call": single,
                    "run_complete_many_ir_per_call": cg.off() // len(many),
                }
    finally:
        cg.close()
    return out


async def main(argv: list[str]) -> None:
    off_only = "--off-only" in argv
    if "--callgrind" in argv:
        args = [int(a) for a in argv if not a.startswith("--")]
        modes = (False,) if off_only else (False, True)
        print(json.dumps(await instructions(args[0] if args else 1000, modes)), flush=True)
        return
    args = [int(a) for a in argv if a != "--off-only"][:2]
    n, rounds = (args + [5_000, 3][len(args) :])[:2]
    url = os.environ.get("REDIS_URL")
    server = None if url else private_redis()
    try:
        out = await measure(url or server.url, n, rounds, off_only)  # type: ignore[union-attr]
        print(json.dumps(out), flush=True)
    finally:
        if server is not None:
            server.discard()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
