"""A worker process for the graph chaos test: one ActionWorker serving every level of
the graph (graph_chaos.LEVELS), whose handlers write their side effect to the fenced
ledger on a plain server of its own.

    python graph_chaos_worker.py URL NAMESPACE LEDGER_URL

Each handler notes its hand-out in the ledger (``begin``), reads every page of its
parents' results, raises if its input is graph_chaos.DOOMED, else commits (its token, its
pid and the parents it read) and returns graph_chaos.output_of(run id) with its token as
the outcome. SIGTERM stops the worker; the test SIGKILLs it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

import redis.asyncio as aioredis
from graph_chaos import DOOMED, LEVELS, MAX_RETRIES, PARENTS_PAGE, Ledger, output_of
from polling import connected

from flo_redis import ActionContext, ActionRegisterOptions, ActionResult, FloClient

#: Each handler's work: long enough that a kill finds runs in hand.
HANDLER_S = 0.005
OPTIONS = ActionRegisterOptions(timeout_ms=60_000, max_retries=MAX_RETRIES)


async def main(url: str, namespace: str, ledger_url: str) -> None:
    conn = aioredis.Redis.from_url(ledger_url)
    ledger = Ledger(conn, namespace)
    pid = os.getpid()

    async def handle(ctx: ActionContext) -> ActionResult:
        await ledger.begin(ctx.task_id, ctx.token)
        seen: list[Any] = []
        after = None
        while True:
            page = await ctx.parents(after=after, count=PARENTS_PAGE)
            seen += [
                [p.run_id, p.status.name, (p.output or b"").decode(), p.outcome] for p in page.items
            ]
            if page.after is None:
                break
            after = page.after
        await asyncio.sleep(HANDLER_S)
        if ctx.payload == DOOMED:
            raise RuntimeError("planned failure")
        await ledger.commit(ctx.task_id, ctx.token, pid, seen)
        return ctx.result(str(ctx.token), output_of(ctx.task_id))

    client = await connected(FloClient(url, namespace=namespace))
    async with client:
        worker = client.new_action_worker(
            worker_id=f"graph-chaos-{pid}", concurrency=32, block_ms=1000
        )
        for name in LEVELS:
            worker.register_action(name, handle, OPTIONS)
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
        await worker.start()
    await conn.aclose()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
