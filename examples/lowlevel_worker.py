"""A worker loop on the low-level API: register, await a run, complete or fail it.

    FLO_REDIS_URL=redis://localhost:6379 python examples/lowlevel_worker.py [worker-id]

Each run's fencing token is passed back on complete/fail, so a report from a worker whose
lease was taken back is refused instead of overwriting the new holder's result.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys

from flo_redis import (
    ConflictError,
    FloClient,
    WorkerAwaitOptions,
    WorkerCompleteOptions,
    WorkerFailOptions,
    WorkerRegisterOptions,
)

# The settings of the flo-redis command, so `flo-redis status` shows what this runs.
REDIS_URL = os.environ.get("FLO_REDIS_URL") or os.environ.get("REDIS_URL", "redis://localhost:6379")
NAMESPACE = os.environ.get("FLO_REDIS_NAMESPACE", "default")
ACTIONS = ["resize"]


async def handle(payload: bytes) -> bytes:
    job = json.loads(payload)
    await asyncio.sleep(0.01)  # the real work would go here
    return json.dumps({"image": job["image"], "resized_to": job["width"]}).encode()


async def main(worker_id: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async with FloClient(REDIS_URL, namespace=NAMESPACE) as client:
        await client.worker.register(
            worker_id,
            ACTIONS,
            WorkerRegisterOptions(concurrency=1, machine_id=socket.gethostname()),
        )
        print(f"{worker_id}: waiting for runs of {ACTIONS}")

        async def heartbeat() -> None:
            while not stop.is_set():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), 30)
                await client.worker.heartbeat(worker_id)

        beat = asyncio.create_task(heartbeat(), name="heartbeat")
        done = 0
        while not stop.is_set():
            poll = asyncio.create_task(
                client.worker.await_task(worker_id, ACTIONS, WorkerAwaitOptions(block_ms=5000))
            )
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait({poll, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not poll.done():
                client.interrupt()  # a stop request: the poll returns empty at once
            task = (await poll).task
            if task is None:
                continue
            try:
                output = await handle(task.payload)
            except Exception as exc:  # the handler failed: let the run be retried
                await client.worker.fail(
                    worker_id, task.task_type, task.task_id, str(exc),
                    WorkerFailOptions(retry=True, token=task.token),
                )  # fmt: skip
                continue
            try:
                await client.worker.complete(
                    worker_id, task.task_type, task.task_id, output,
                    WorkerCompleteOptions(token=task.token),
                )  # fmt: skip
                done += 1
            except ConflictError:
                print(f"{worker_id}: {task.task_id} was taken back; result dropped")
        beat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beat
        print(f"{worker_id}: stopped after completing {done} runs")


if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else f"{socket.gethostname()}-lowlevel"
    asyncio.run(main(name))
