"""Worker targets for the ``flo-redis worker`` command tests (imported by the command).

Action ``hold``: the handler records its process id under ``<namespace>:pid:<run id>``,
then waits until the key ``<namespace>:gate`` exists and returns the process id.
Action ``stubborn``: the handler records its process id as ``hold`` does, then ignores
cancellation and never returns.
``build_stream``: a StreamWorker adding each payload of stream ``events`` to the set
``<namespace>:seen``.
Action ``blocking``: a plain ``def`` handler that records its process id as ``hold`` does,
then blocks its thread for an hour.
Action ``frozen``: returns how many objects the process's garbage collector leaves alone
(``gc.get_freeze_count()``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time

import redis
import redis.asyncio as aioredis

from flo_redis import (
    ActionContext,
    ActionRegisterOptions,
    ActionWorker,
    FloClient,
    StreamContext,
    StreamWorker,
)

# The command moves a worker made at import onto its own --url and --namespace.
module_worker = FloClient("redis://127.0.0.1:1", namespace="unused").new_action_worker()
not_a_worker = 42


async def _started(ctx: ActionContext) -> None:
    async with aioredis.Redis.from_url(os.environ["CLI_APP_URL"]) as raw:
        await raw.set(f"{ctx.namespace}:pid:{ctx.task_id}", os.getpid())


async def hold(ctx: ActionContext) -> bytes:
    await _started(ctx)
    raw = aioredis.Redis.from_url(os.environ["CLI_APP_URL"])
    try:
        while not await raw.exists(f"{ctx.namespace}:gate"):  # noqa: ASYNC110 - a Redis key
            await asyncio.sleep(0.02)
    finally:
        await raw.aclose()
    return str(os.getpid()).encode()


async def stubborn(ctx: ActionContext) -> bytes:
    while True:  # cancelled even while it records its start, it carries on
        with contextlib.suppress(asyncio.CancelledError):
            await _started(ctx)
            await asyncio.sleep(3600)


def blocking(ctx: ActionContext) -> bytes:
    with redis.Redis.from_url(os.environ["CLI_APP_URL"]) as raw:
        raw.set(f"{ctx.namespace}:pid:{ctx.task_id}", os.getpid())
    time.sleep(3600)  # a plain def handler, stuck in its thread
    return b""


async def frozen(ctx: ActionContext) -> bytes:
    return str(gc.get_freeze_count()).encode()


def _actions(worker: ActionWorker) -> ActionWorker:
    worker.register_action("frozen", frozen)
    worker.register_action("hold", hold, ActionRegisterOptions(timeout_ms=120_000))
    worker.register_action("blocking", blocking, ActionRegisterOptions(timeout_ms=120_000))
    worker.register_action("stubborn", stubborn, ActionRegisterOptions(timeout_ms=120_000))
    return worker


_actions(module_worker)


def build(client: FloClient) -> ActionWorker:
    return _actions(client.new_action_worker(concurrency=4, block_ms=1000))


async def build_async(client: FloClient) -> ActionWorker:
    await client.server_time_ms()  # the client is connected when this is called
    return _actions(client.new_action_worker(concurrency=4, block_ms=1000))


def build_stream(client: FloClient) -> StreamWorker:
    async def handle(ctx: StreamContext) -> None:
        raw = aioredis.Redis.from_url(os.environ["CLI_APP_URL"])
        try:
            await raw.sadd(f"{ctx.namespace}:seen", ctx.payload)
        finally:
            await raw.aclose()

    return client.new_stream_worker(stream="events", group="g", handler=handle, block_ms=1000)


def build_broken(client: FloClient) -> ActionWorker:
    raise RuntimeError("this worker cannot start")


def build_nothing(client: FloClient) -> str:
    return "not a worker"
