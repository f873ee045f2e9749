"""A real worker process for the offer fault tests (test_handoff_offers.py).

    python offer_proc.py URL NAMESPACE ACTION LEDGER

One ``ActionWorker`` (concurrency 1, ``block_ms`` 30000, so its park outlives a freeze;
the default offer window) on ``URL`` (a cluster's ``redis+cluster://`` URL works too).
Its handler appends to the file ``LEDGER`` (shared by the test's processes; a line
written at once, so the handler awaits nothing but its hold) a JSON line
``{"event": "start", "run", "pid", "token", "attempt", "at"}`` when it begins, then,
``HOLD_S`` later, ``"done"`` and returns its process id; ``"cancelled"`` when it is
stopped before that. The tests SIGSTOP it, or silence its connections, while it is
parked.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time

from flo_redis import ActionContext, ActionRegisterOptions, FloClient

HOLD_S = 1.5
OPTIONS = ActionRegisterOptions(timeout_ms=60_000, max_retries=1)


async def main(url: str, namespace: str, action: str, ledger: str) -> None:
    def note(event: str, ctx: ActionContext) -> None:
        line = {
            "event": event,
            "run": ctx.task_id,
            "pid": os.getpid(),
            "token": ctx.token,
            "attempt": ctx.attempt,
            "at": time.time(),
        }
        with open(ledger, "a") as book:  # O_APPEND: whole lines from every process
            book.write(json.dumps(line) + "\n")

    async def handler(ctx: ActionContext) -> bytes:
        note("start", ctx)
        try:
            await asyncio.sleep(HOLD_S)
        except asyncio.CancelledError:
            note("cancelled", ctx)
            raise
        note("done", ctx)
        return str(os.getpid()).encode()

    async with FloClient(url, namespace=namespace) as client:
        worker = client.new_action_worker(
            worker_id=f"proc-{os.getpid()}", concurrency=1, block_ms=30_000
        )
        worker.register_action(action, handler, OPTIONS)
        await worker.start()


if __name__ == "__main__":
    # What the worker logs goes to the test's output, shown when a test fails.
    where = f"%(asctime)s [{os.getpid()}] %(name)s %(message)s"
    logging.basicConfig(level=logging.INFO, format=where)
    asyncio.run(main(*sys.argv[1:5]))
