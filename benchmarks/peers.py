"""One side-by-side run: ``python -m benchmarks.peers NAME --url URL --n N``.

Enqueues ``n`` no-op tasks, then runs one worker (in this process, after the enqueue has
finished, so producer and worker never share the loop) at ``--concurrency`` until the
``n``-th handler call. Every queue is measured the same way: processed/s from its first
handler call to its ``n``-th. Prints one JSON line: ``{"rate", "calls", "unique", ...}``,
with ``user_us`` and ``sys_us``: the process's CPU time per task over the same window
(``getrusage``, every thread), a steadier figure than the rate to set two runs side by
side on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from importlib.metadata import PackageNotFoundError, version
from typing import Any

CHUNK = 100


class Meter:
    """Counts handler calls (thread-safe); notes the first and the ``n``-th."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.calls = 0
        self.seen: set[Any] = set()
        self.first = 0.0
        self.last = 0.0
        self._cpu_first = self._cpu_last = (0.0, 0.0)  # (user, system) seconds
        self.done = threading.Event()
        self._lock = threading.Lock()

    def hit(self, key: Any = None) -> None:
        now = time.perf_counter()
        with self._lock:
            self.calls += 1
            if self.calls == 1:
                self.first = now
                self._cpu_first = _cpu()
            if key is not None:
                self.seen.add(key)
            if self.calls == self.n:
                self.last = now
                self._cpu_last = _cpu()
                self.done.set()

    async def wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.done.is_set():
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {self.calls} of {self.n} tasks ran in {timeout:g} s")
            await asyncio.sleep(0.01)

    def result(self) -> dict[str, Any]:
        elapsed = self.last - self.first
        done = elapsed > 0
        (user0, sys0), (user1, sys1) = self._cpu_first, self._cpu_last
        return {
            "rate": self.n / elapsed if done else None,
            "calls": self.calls,
            "unique": len(self.seen) if self.seen else None,
            "user_us": (user1 - user0) / self.n * 1e6 if done else None,
            "sys_us": (sys1 - sys0) / self.n * 1e6 if done else None,
        }


def _cpu() -> tuple[float, float]:
    """This process's user and system CPU time so far, in seconds."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


METER = Meter(0)


async def gather_chunks(make: Callable[[int], Coroutine[Any, Any, Any]], n: int) -> None:
    for start in range(0, n, CHUNK):
        await asyncio.gather(*(make(i) for i in range(start, min(n, start + CHUNK))))


# --- the floor: plain lists, no acks, no leases ---------------------------------------


async def run_raw(url: str, n: int, concurrency: int, timeout: float) -> dict[str, Any]:
    import redis.asyncio as aioredis

    key = "bench:raw"
    async with aioredis.Redis.from_url(url) as r:
        for start in range(0, n, CHUNK):
            async with r.pipeline(transaction=False) as pipe:
                for i in range(start, min(n, start + CHUNK)):
                    pipe.lpush(key, str(i).encode())
                await pipe.execute()

        async def handler(item: bytes) -> None:
            METER.hit(item)

        while not METER.done.is_set():
            items = await r.rpop(key, concurrency)
            if not items:
                break
            await asyncio.gather(*(handler(x) for x in items))
    await METER.wait(timeout)
    return {"version": version("redis"), "note": "LPUSH x100 pipelined / RPOP count=100"}


# --- flo-redis, measured exactly like the peers ----------------------------------------


async def run_flo(url: str, n: int, concurrency: int, timeout: float) -> dict[str, Any]:
    from flo_redis import ActionRegisterOptions, FloClient

    from .workloads import invoke_all

    async with FloClient(url, namespace="bench") as client:
        await client.action.register("noop", options=ActionRegisterOptions())
        await invoke_all(client, "noop", n)
    async with FloClient(url, namespace="bench") as client:
        worker = client.new_action_worker(concurrency=concurrency)

        @worker.action("noop")
        async def noop(ctx: Any) -> bytes:
            METER.hit(ctx.task_id)
            return b""

        task = asyncio.create_task(worker.start())
        try:
            await METER.wait(timeout)
        finally:
            worker.stop()
            await task
    return {"version": version("flo-redis"), "note": f"ActionWorker concurrency {concurrency}"}


# --- peers -----------------------------------------------------------------------------


async def run_taskiq(url: str, n: int, concurrency: int, timeout: float) -> dict[str, Any]:
    from taskiq.api import run_receiver_task
    from taskiq_redis import RedisStreamBroker

    broker = RedisStreamBroker(url, queue_name="bench")

    @broker.task(task_name="noop")
    async def noop(i: int) -> None:
        METER.hit(i)

    await broker.startup()  # declares the consumer group before anything is sent
    await gather_chunks(lambda i: noop.kiq(i), n)
    broker.is_worker_process = True
    task = asyncio.create_task(run_receiver_task(broker, max_async_tasks=concurrency))
    try:
        await METER.wait(timeout)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await broker.shutdown()
    return {
        "version": version("taskiq-redis"),
        "note": f"RedisStreamBroker, max_async_tasks {concurrency}",
    }


async def run_saq(url: str, n: int, concurrency: int, timeout: float) -> dict[str, Any]:
    import redis.asyncio as aioredis
    from saq import Worker
    from saq.queue.redis import RedisQueue

    # redis-py's default pool is too small for saq's worker at concurrency 100
    queue = RedisQueue(aioredis.from_url(url, max_connections=4 * concurrency), name="bench")

    async def noop(ctx: Any, *, i: int) -> None:
        METER.hit(i)

    await queue.connect()
    await gather_chunks(lambda i: queue.enqueue("noop", i=i), n)
    worker = Worker(queue, functions=[("noop", noop)], concurrency=concurrency)
    task = asyncio.create_task(worker.start())
    try:
        await METER.wait(timeout)
    finally:
        await worker.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await queue.disconnect()
    return {"version": version("saq"), "note": f"Worker concurrency {concurrency}"}


async def run_bullmq(url: str, n: int, concurrency: int, timeout: float) -> dict[str, Any]:
    from bullmq import Queue, Worker

    queue = Queue("bench", {"connection": url})
    for start in range(0, n, 1000):
        await queue.addBulk(
            [{"name": "noop", "data": {"i": i}} for i in range(start, min(n, start + 1000))]
        )

    async def process(job: Any, token: str) -> None:
        METER.hit(job.id)

    worker = Worker("bench", process, {"connection": url, "concurrency": concurrency})
    try:
        await METER.wait(timeout)
    finally:
        await worker.close()
        await queue.close()
    return {"version": version("bullmq"), "note": f"Worker concurrency {concurrency}"}


async def run_streaq(url: str, n: int, concurrency: int, timeout: float) -> dict[str, Any]:
    from streaq import Worker

    worker = Worker(
        redis_url=url, concurrency=concurrency, queue_name="bench", handle_signals=False
    )

    @worker.task
    async def noop(i: int) -> None:
        METER.hit(i)

    async with worker:
        for start in range(0, n, 1000):
            await worker.enqueue_many([noop.enqueue(i) for i in range(start, min(n, start + 1000))])
    task = asyncio.create_task(worker.run_async())
    try:
        await METER.wait(timeout)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return {"version": version("streaq"), "note": f"Worker concurrency {concurrency}"}


DRAMATIQ_THREADS = 8


async def run_dramatiq(url: str, n: int, concurrency: int, timeout: float) -> dict[str, Any]:
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    broker = RedisBroker(url=url)
    dramatiq.set_broker(broker)

    @dramatiq.actor(queue_name="bench", max_retries=0)
    def noop(i: int) -> None:
        METER.hit(i)

    for i in range(n):
        noop.send(i)
    worker = dramatiq.Worker(broker, worker_threads=DRAMATIQ_THREADS)
    worker.start()
    try:
        await METER.wait(timeout)
    finally:
        await asyncio.to_thread(worker.stop)
        broker.close()
    return {
        "version": version("dramatiq"),
        "note": f"RedisBroker, {DRAMATIQ_THREADS} worker threads (sync actor)",
    }


def rq_noop(i: int) -> None:
    METER.hit(i)


async def run_rq(url: str, n: int, concurrency: int, timeout: float) -> dict[str, Any]:
    from redis import Redis
    from rq import Queue, SimpleWorker

    conn = Redis.from_url(url)
    queue = Queue("bench", connection=conn)
    for start in range(0, n, 1000):
        queue.enqueue_many(
            [Queue.prepare_data(rq_noop, (i,)) for i in range(start, min(n, start + 1000))]
        )
    worker = SimpleWorker([queue], connection=conn)
    # rq installs signal handlers, so it works in the main thread (nothing else runs here)
    worker.work(burst=True, logging_level="WARNING")
    await METER.wait(timeout)
    conn.close()
    return {"version": version("rq"), "note": "SimpleWorker, one job at a time (no fork)"}


async def run_arq(url: str, n: int, concurrency: int, timeout: float) -> dict[str, Any]:
    from arq import create_pool
    from arq.connections import RedisSettings
    from arq.worker import Worker

    settings = RedisSettings.from_dsn(url)
    pool = await create_pool(settings)
    await gather_chunks(lambda i: pool.enqueue_job("noop", i), n)

    async def noop(ctx: Any, i: int) -> None:
        METER.hit(i)

    worker = Worker(
        functions=[noop],  # type: ignore[list-item]
        redis_settings=settings,
        max_jobs=concurrency,
        handle_signals=False,
    )
    task = asyncio.create_task(worker.async_run())
    try:
        await METER.wait(timeout)
    finally:
        await worker.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return {"version": version("arq"), "note": f"max_jobs {concurrency}"}


RUNNERS: dict[str, tuple[str, Callable[..., Coroutine[Any, Any, dict[str, Any]]]]] = {
    # name: (distribution to import, runner)
    "raw-redis-py": ("redis", run_raw),
    "flo-redis": ("flo-redis", run_flo),
    "taskiq-redis": ("taskiq-redis", run_taskiq),
    "saq": ("saq", run_saq),
    "dramatiq": ("dramatiq", run_dramatiq),
    "bullmq": ("bullmq", run_bullmq),
    "streaq": ("streaq", run_streaq),
    "rq": ("rq", run_rq),
    "arq": ("arq", run_arq),
}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers")
    parser.add_argument("name", choices=sorted(RUNNERS))
    parser.add_argument("--url", required=True)
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    dist, runner = RUNNERS[args.name]
    try:
        version(dist)
    except PackageNotFoundError:
        print(json.dumps({"status": "not installed", "detail": f"{dist} is not installed"}))
        return
    METER.n = args.n
    info = asyncio.run(runner(args.url, args.n, args.concurrency, args.timeout))
    print(json.dumps({"status": "ok", **METER.result(), **info}), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
