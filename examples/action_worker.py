"""An ActionWorker serving several actions, stopped cleanly on SIGTERM/SIGINT.

    FLO_REDIS_URL=redis://localhost:6379 python examples/action_worker.py

- ``resize`` returns bytes (a plain complete);
- ``approve`` names an outcome with ``ctx.result(...)``;
- ``import-file`` raises ``NonRetryableError`` for input it can never handle (no retry);
- ``report`` runs longer than its lease and keeps it with ``auto_touch``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal

from flo_redis import (
    ActionContext,
    ActionRegisterOptions,
    ActionResult,
    FloClient,
    NonRetryableError,
)

# The settings of the flo-redis command, so `flo-redis status` shows what this runs.
REDIS_URL = os.environ.get("FLO_REDIS_URL") or os.environ.get("REDIS_URL", "redis://localhost:6379")
NAMESPACE = os.environ.get("FLO_REDIS_NAMESPACE", "default")


async def main() -> None:
    async with FloClient(REDIS_URL, namespace=NAMESPACE) as client:
        worker = client.new_action_worker(concurrency=20, auto_touch=True)

        @worker.action("resize", ActionRegisterOptions(timeout_ms=10_000))
        async def resize(ctx: ActionContext) -> bytes:
            job = ctx.json()
            return json.dumps({"image": job["image"], "resized_to": job["width"]}).encode()

        @worker.action("approve")
        async def approve(ctx: ActionContext) -> ActionResult:
            amount = ctx.json()["amount"]
            outcome = "approved" if amount < 1000 else "needs_review"
            return ctx.result(outcome, {"amount": amount})

        @worker.action("import-file", ActionRegisterOptions(max_retries=5))
        async def import_file(ctx: ActionContext) -> dict[str, int]:
            rows = ctx.json().get("rows")
            if not isinstance(rows, list):
                raise NonRetryableError("input has no 'rows' list; retrying will not help")
            return {"imported": len(rows)}

        @worker.action("report", ActionRegisterOptions(timeout_ms=600))
        async def report(ctx: ActionContext) -> bytes:
            # Three times longer than the lease: auto_touch renews it every 200 ms.
            await asyncio.sleep(1.8)
            return f"report for attempt {ctx.attempt}, token {ctx.token}".encode()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, worker.stop)
        print(
            f"action worker {worker.config.worker_id}: serving resize, approve, import-file, report"
        )
        await worker.start()
        print("action worker: stopped")


if __name__ == "__main__":
    asyncio.run(main())
