"""Plain ``def`` handlers in handler processes: a time limit that stops CPU-bound code,
a memory limit, and a reload on SIGHUP.

    FLO_REDIS_URL=redis://localhost:6379 python examples/process_worker.py

- ``checksum`` is CPU-bound: in the worker's threads it would hold up its event loop (its
  leases and heartbeats); in a process it runs beside it on another core;
- ``render`` has a 2 s time limit (the worker's ``action_timeout``): a render that runs
  longer is stopped, for sure, and retried;
- each process is replaced after 1,000 runs or past 512 MB.

Send the process SIGHUP (``kill -HUP PID``) to start new handler processes with the code
as it is on disk now; SIGTERM or Ctrl-C to stop. Handlers run in a process must be
module-level functions: a handler process imports them by name (from this script too,
which is why the worker starts under ``if __name__ == "__main__":``).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import time

from flo_redis import ActionRegisterOptions, FloClient, HandlerInterrupted, ProcessExecutor

REDIS_URL = os.environ.get("FLO_REDIS_URL") or os.environ.get("REDIS_URL", "redis://localhost:6379")
NAMESPACE = os.environ.get("FLO_REDIS_NAMESPACE", "default")


def checksum(ctx) -> str:
    """SHA-256 of the input, hashed 10,000 times over."""
    digest = ctx.input()
    for _ in range(10_000):
        digest = hashlib.sha256(digest).digest()
    return digest.hex()


def render(ctx) -> dict[str, object]:
    """Pretends to render for ``seconds``; stopped when its time limit passes."""
    seconds = float(ctx.json().get("seconds", 0.1))
    began = time.monotonic()
    try:
        while time.monotonic() - began < seconds:
            time.sleep(0.01)
    except HandlerInterrupted as stop:
        print(f"render of {ctx.task_id} stopped: {stop.why}; cleaning up")
        raise
    return {"rendered_in_s": round(time.monotonic() - began, 3), "pid": os.getpid()}


async def main() -> None:
    async with FloClient(REDIS_URL, namespace=NAMESPACE) as client:
        worker = client.new_action_worker(
            concurrency=4,
            action_timeout=2.0,
            executor=ProcessExecutor(max_runs_per_child=1000, memory_limit_mb=512),
        )
        worker.register_action("checksum", checksum)
        worker.register_action("render", render, ActionRegisterOptions(max_retries=2))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, worker.stop)
        loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(worker.reload()))
        await worker.start()


if __name__ == "__main__":
    asyncio.run(main())
