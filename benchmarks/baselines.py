"""One baseline or flo-redis measurement: ``python -m benchmarks.baselines NAME --url URL``.

Each runs in its own process, like the peers, and prints one JSON line. The baselines are
what plain redis-py does for the same job with none of flo-redis's guarantees; the flo
entries measure flo-redis the same way, with the same handler work
(benchmarks/_handler.py), so benchmarks/targets.py can set each beside its baseline.

Throughput (N tasks enqueued first, then processed/s from the first handler call to the
N-th, as for the peers):
  floor         ``BLMPOP COUNT 100``, then one pipeline per batch carrying every task's
                handler round trip (``INCR``); no acks, no leases
  bare-loop     no queue: the round-trip handler called N times at concurrency C
  flo-action    ActionWorker at concurrency C, handler ``--handler``
  xreadgroup    ``XREADGROUP COUNT 100``, the handlers, one ``XACK`` of the batch's ids
  flo-stream    StreamWorker, batch 100, concurrency C
Rate (one call at a time for ``--seconds``):
  evalsha       ``EVALSHA`` of ``return 1``
  flo-invoke    ``client.action.invoke``
  invoke-commands  what bounds an invoke: the Redis commands ``action_invoke`` makes for
                a run ready now with nobody parked, in a script of nothing else, on the
                invoke's own KEYS and ARGV, sent as flo's lane sends (one kept
                connection, the command packed once); no checks, no Python around it
  keys-return   ``return 1`` with those KEYS and ARGV, sent the same way: the
                transport alone
Pickup (the parent pushes one task at a time, ``time.time()`` as the payload; latency =
handler start - that time):
  blmove        an idle consumer blocked in ``BLMOVE``: one round trip from ``LPUSH`` to
                the handler (flo's idle worker is ``benchmarks._flo_worker latency``)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable, Coroutine
from importlib.metadata import version
from typing import Any

import redis.asyncio as aioredis

from ._handler import HANDLERS, make_handler
from .peers import CHUNK, METER

BATCH = 100
QUEUE = "bench:queue"
STREAM = "bench:stream"


async def _push(r: aioredis.Redis, n: int) -> None:
    for start in range(0, n, CHUNK):
        async with r.pipeline(transaction=False) as pipe:
            for i in range(start, min(n, start + CHUNK)):
                pipe.lpush(QUEUE, str(i).encode())
            await pipe.execute()


async def run_floor(args: argparse.Namespace) -> dict[str, Any]:
    work, close = make_handler(args.handler, args.url)
    async with aioredis.Redis.from_url(args.url) as r:
        await _push(r, args.n)
        while not METER.done.is_set():
            popped = await r.blmpop(1, 1, QUEUE, direction="RIGHT", count=BATCH)
            if not popped:
                break
            items = popped[1]
            for item in items:
                METER.hit(item)
            if args.name == "floor-own":
                await asyncio.gather(*(work() for _ in items))
            elif args.handler == "roundtrip":
                async with r.pipeline(transaction=False) as pipe:
                    for _ in items:
                        pipe.incr("bench:hits")
                    await pipe.execute()
    await close()
    await METER.wait(args.timeout)
    return {"note": "BLMPOP COUNT 100 + one pipeline per batch (the handlers' INCRs); no acks"}


async def run_bare_loop(args: argparse.Namespace) -> dict[str, Any]:
    work, close = make_handler(args.handler, args.url)
    left = [args.n]

    async def slot() -> None:
        while left[0] > 0:
            left[0] -= 1
            METER.hit(left[0])
            await work()

    await asyncio.gather(*(slot() for _ in range(args.concurrency)))
    await close()
    await METER.wait(args.timeout)
    return {"note": f"no queue: the handler {args.n} times, {args.concurrency} at once"}


async def _until_metered(worker: Any, timeout: float) -> None:
    """Run a flo worker until the meter has seen every task, then stop it cleanly."""
    running = asyncio.create_task(worker.start())
    try:
        await METER.wait(timeout)
    finally:
        worker.stop()
        await running


async def run_flo_action(args: argparse.Namespace) -> dict[str, Any]:
    from flo_redis import ActionRegisterOptions, FloClient

    async with FloClient(args.url, namespace="bench") as client:
        await client.action.register("task", options=ActionRegisterOptions())
        for start in range(0, args.n, 1000):
            await client.action.invoke_many("task", [b"{}"] * min(1000, args.n - start))
    work, close = make_handler(args.handler, args.url)
    async with FloClient(args.url, namespace="bench") as client:
        worker = client.new_action_worker(concurrency=args.concurrency)

        @worker.action("task")
        async def task(ctx: Any) -> bytes:
            METER.hit(ctx.task_id)
            await work()
            return b""

        await _until_metered(worker, args.timeout)
    await close()
    return {"note": f"ActionWorker concurrency {args.concurrency}"}


async def run_xreadgroup(args: argparse.Namespace) -> dict[str, Any]:
    work, close = make_handler(args.handler, args.url)
    async with aioredis.Redis.from_url(args.url) as r:
        for start in range(0, args.n, CHUNK):
            async with r.pipeline(transaction=False) as pipe:
                for _ in range(start, min(args.n, start + CHUNK)):
                    pipe.xadd(STREAM, {"d": b"{}"})
                await pipe.execute()
        await r.xgroup_create(STREAM, "bench", id="0")
        while not METER.done.is_set():
            got = await r.xreadgroup("bench", "c1", {STREAM: ">"}, count=BATCH, block=1000)
            if not got:
                break
            entries = got[0][1]
            ids = [entry_id for entry_id, _ in entries]
            for entry_id in ids:
                METER.hit(entry_id)
            await asyncio.gather(*(work() for _ in ids))
            await r.xack(STREAM, "bench", *ids)
    await close()
    await METER.wait(args.timeout)
    return {"note": "XREADGROUP COUNT 100 + one XACK per batch"}


async def run_flo_stream(args: argparse.Namespace) -> dict[str, Any]:
    from flo_redis import FloClient

    async with FloClient(args.url, namespace="bench") as client:
        for start in range(0, args.n, CHUNK):
            k = min(CHUNK, args.n - start)
            await asyncio.gather(*(client.stream.append("events", b"{}") for _ in range(k)))
    work, close = make_handler(args.handler, args.url)

    async def handler(ctx: Any) -> None:
        METER.hit(str(ctx.stream_id))
        await work()

    async with FloClient(args.url, namespace="bench") as client:
        worker = client.new_stream_worker(
            stream="events",
            group="bench",
            handler=handler,
            concurrency=args.concurrency,
            batch_size=BATCH,
        )
        await _until_metered(worker, args.timeout)
    await close()
    return {"note": f"StreamWorker batch {BATCH}, concurrency {args.concurrency}"}


async def _rate(call: Callable[[], Coroutine[Any, Any, Any]], seconds: float) -> float:
    for _ in range(200):  # warm the connection and the script cache
        await call()
    count = 0
    began = time.perf_counter()
    deadline = began + seconds
    while True:
        for _ in range(50):
            await call()
        count += 50
        now = time.perf_counter()
        if now >= deadline:
            return count / (now - began)


async def run_evalsha(args: argparse.Namespace) -> dict[str, Any]:
    async with aioredis.Redis.from_url(args.url) as r:
        sha = await r.script_load("return 1")
        rate = await _rate(lambda: r.evalsha(sha, 0), args.seconds)
    return {"rate": rate, "note": "EVALSHA of `return 1`, one at a time"}


async def run_flo_invoke(args: argparse.Namespace) -> dict[str, Any]:
    from flo_redis import ActionRegisterOptions, FloClient

    async with FloClient(args.url, namespace="bench") as client:
        await client.action.register("task", options=ActionRegisterOptions())
        rate = await _rate(lambda: client.action.invoke("task", b"{}"), args.seconds)
    return {"rate": rate, "note": "client.action.invoke, one at a time"}


# The Redis commands of an invoke of a run ready now, nobody parked and no idempotency key,
# in the order lua/action_invoke.lua and lua/lib/invoke.lua make them: the action's
# settings, the clock, the run id, the input, the parked pollers, the record, the queue
# order, the queue, the wake-up. ARGV[3] is the record, packed by the caller here.
INVOKE_COMMANDS = """
redis.call('HMGET', KEYS[1], 'max_retries', 'max_payload')
redis.call('TIME')
local id = ARGV[1] .. redis.call('HINCRBY', KEYS[2], 'seq', '1')
redis.call('HSET', KEYS[4], id, ARGV[2])
redis.call('ZCARD', KEYS[9])
redis.call('HSET', KEYS[3], id, ARGV[3])
redis.call('ZADD', KEYS[5], redis.call('HINCRBY', KEYS[2], 'qseq', '1'), id)
redis.call('SPUBLISH', KEYS[8], '1')
return {0, id, 0, 0}
"""


async def _kept(args: argparse.Namespace, script: str) -> dict[str, Any]:
    """``script`` one call at a time with the KEYS and ARGV of ``client.action.invoke``
    of a 2-byte input, on a :class:`flo_redis._wire.lane.Lane` of its own: one connection
    kept aside, the command packed once by the lane's own packer, written and its reply
    read straight back, as flo's script calls are sent."""
    import msgpack

    from flo_redis import ActionRegisterOptions, FloClient
    from flo_redis._wire.gateway import ACTION_INVOKE
    from flo_redis._wire.keys import action_keys
    from flo_redis._wire.lane import Lane, bulk, packed_command, packed_head
    from flo_redis.actions.runs import invoke_request
    from flo_redis.types import ActionInvokeOptions

    async with FloClient(args.url, namespace="bench") as client:
        await client.action.register("task", options=ActionRegisterOptions())
    keys = action_keys("bench", "task")
    names = ACTION_INVOKE.keys(keys)
    argv, _ = invoke_request(keys, b"{}", ActionInvokeOptions(), 1 << 20, b"")
    record = {"s": 0, "a": 0, "t": 0, "c": int(time.time() * 1000), "mr": 3}
    argv[2] = msgpack.packb(record)  # INVOKE_COMMANDS stores it as the record
    async with aioredis.Redis.from_url(args.url) as r:
        sha = await r.script_load(script)
        name = bulk(b"EVALSHA") + bulk(sha.encode())
        packed = packed_command(name, packed_head(names), len(names), argv)
        assert packed is not None  # every argument is bytes, str or int
        lane = Lane(r.connection_pool)
        rate = await _rate(lambda: lane.call(packed), args.seconds)
        lane.release()  # its connection closes with the pool
    return {"rate": rate, "note": f"{len(names)} KEYS, {len(argv)} ARGV, on a kept connection"}


async def run_invoke_commands(args: argparse.Namespace) -> dict[str, Any]:
    return await _kept(args, INVOKE_COMMANDS)


async def run_keys_return(args: argparse.Namespace) -> dict[str, Any]:
    return await _kept(args, "return 1")


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


async def run_blmove(args: argparse.Namespace) -> dict[str, Any]:
    latencies: list[float] = []
    async with aioredis.Redis.from_url(args.url) as r:
        await r.ping()
        emit(event="ready")
        while len(latencies) < args.n:
            item = await r.blmove(QUEUE, "bench:taken", 1, "RIGHT", "LEFT")
            if item is None:
                continue
            latencies.append((time.time() - float(item)) * 1000.0)
    return {"latencies_ms": latencies, "note": "idle BLMOVE consumer"}


THROUGHPUT: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, dict[str, Any]]]] = {
    "floor": run_floor,
    "floor-own": run_floor,
    "bare-loop": run_bare_loop,
    "flo-action": run_flo_action,
    "xreadgroup": run_xreadgroup,
    "flo-stream": run_flo_stream,
}
OTHER: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, dict[str, Any]]]] = {
    "evalsha": run_evalsha,
    "flo-invoke": run_flo_invoke,
    "invoke-commands": run_invoke_commands,
    "keys-return": run_keys_return,
    "blmove": run_blmove,
}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.baselines")
    parser.add_argument("name", choices=[*THROUGHPUT, *OTHER])
    parser.add_argument("--url", required=True)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--handler", choices=HANDLERS, default="roundtrip")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    if args.name in THROUGHPUT:
        METER.n = args.n
        info = asyncio.run(THROUGHPUT[args.name](args))
        info = {**METER.result(), **info}
    else:
        info = asyncio.run(OTHER[args.name](args))
    emit(event="result", status="ok", redis_py=version("redis"), **info)


if __name__ == "__main__":
    main()
