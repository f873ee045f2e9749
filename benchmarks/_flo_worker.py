"""A flo-redis worker in its own process, driven by the benchmark (one JSON line out).

``python -m benchmarks._flo_worker MODE --url URL --namespace NS --name NAME --n N``

Modes:
  action   no-op ActionWorker; stops after ``n`` handler calls (its reports are sent
           before ``start()`` returns) and prints first-call and end times
  latency  idle ActionWorker; each payload carries the invoke time (``time.time()``);
           prints the pickup latencies after ``n`` runs
  hold     ActionWorker whose handlers never return; prints ``held`` once it holds ``n``
           runs, then waits to be killed
  take     ActionWorker that records when each run reached it; prints after ``n`` runs
  stream   StreamWorker (batch ``--batch``) acking ``n`` records

``--handler roundtrip`` (action and stream) adds one Redis round trip to each handler
call (benchmarks/_handler.py); the default is a no-op. ``--durability LEVEL`` (action
modes): the level of the worker's reports (``primary``, ``replicated``).

Every line printed is JSON; ``{"event": "ready"}`` comes right before the worker starts.
Times are ``time.time()`` so the parent process can compare them with its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from flo_redis import ActionRegisterOptions, FloClient

from ._handler import HANDLERS, make_handler

HOLD_TIMEOUT_MS = 300_000


def emit(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def register_options(mode: str) -> ActionRegisterOptions:
    if mode in ("hold", "take"):
        return ActionRegisterOptions(timeout_ms=HOLD_TIMEOUT_MS, max_retries=3)
    return ActionRegisterOptions()


async def run_action(args: argparse.Namespace) -> None:
    work, close = make_handler(args.handler, args.url)
    async with FloClient(args.url, namespace=args.namespace) as client:
        worker = client.new_action_worker(concurrency=args.concurrency, durability=args.durability)
        done = asyncio.Event()
        seen: set[str] = set()
        calls = 0
        first = 0.0
        latencies: list[float] = []
        arrivals: list[float] = []
        held = asyncio.Event()

        async def handler(ctx: Any) -> bytes:
            nonlocal calls, first
            now = time.time()
            calls += 1
            if calls == 1:
                first = now
            seen.add(ctx.task_id)
            if args.mode == "latency":
                latencies.append((now - float(ctx.payload)) * 1000.0)
            elif args.mode == "take":
                arrivals.append(now)
            if calls >= args.n:
                done.set()
            await work()
            if args.mode == "hold":
                if calls >= args.n:
                    held.set()
                await asyncio.sleep(3600)
            return b""

        worker.register_action(args.name, handler, register_options(args.mode))
        emit(event="ready", t=time.time())
        task = asyncio.create_task(worker.start())
        waiter = asyncio.create_task(done.wait())
        finished, _ = await asyncio.wait(
            {task, waiter}, timeout=args.timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if task in finished:
            task.result()  # the worker died: raise its error
        if args.mode == "hold":
            emit(event="held", t=time.time(), calls=calls)
            await asyncio.sleep(3600)  # the benchmark kills this process
            return
        if args.mode != "action":
            # Only the action mode measures until start() returned; the others report
            # what their handlers saw without waiting for the worker to wind down.
            worker.stop()
            emit_result(first, time.time(), calls, seen, done, latencies, arrivals)
            await task
        else:
            worker.stop()
            await task
            emit_result(first, time.time(), calls, seen, done, latencies, arrivals)
        waiter.cancel()
    await close()


def emit_result(
    first: float,
    end: float,
    calls: int,
    seen: set[str],
    done: asyncio.Event,
    latencies: list[float],
    arrivals: list[float],
) -> None:
    emit(
        event="result",
        first=first,
        end=end,
        calls=calls,
        unique=len(seen),
        timed_out=not done.is_set(),
        latencies_ms=latencies,
        arrivals=arrivals,
    )


async def run_stream(args: argparse.Namespace) -> None:
    work, close = make_handler(args.handler, args.url)
    async with FloClient(args.url, namespace=args.namespace) as client:
        done = asyncio.Event()
        seen: set[str] = set()
        calls = 0
        first = 0.0

        async def handler(ctx: Any) -> None:
            nonlocal calls, first
            calls += 1
            if calls == 1:
                first = time.time()
            seen.add(str(ctx.stream_id))
            if calls >= args.n:
                done.set()
            await work()

        worker = client.new_stream_worker(
            stream=args.name,
            group="bench",
            handler=handler,
            concurrency=args.concurrency,
            batch_size=args.batch,
        )
        emit(event="ready", t=time.time())
        task = asyncio.create_task(worker.start())
        waiter = asyncio.create_task(done.wait())
        finished, _ = await asyncio.wait(
            {task, waiter}, timeout=args.timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if task in finished:
            task.result()
        worker.stop()
        await task
        end = time.time()
        waiter.cancel()
        emit_result(first, end, calls, seen, done, [], [])
    await close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._flo_worker")
    parser.add_argument("mode", choices=["action", "latency", "hold", "take", "stream"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--handler", choices=HANDLERS, default="noop")
    parser.add_argument("--durability", default=None, help="the level of its reports")
    args = parser.parse_args()
    asyncio.run(run_stream(args) if args.mode == "stream" else run_action(args))


if __name__ == "__main__":
    main()
