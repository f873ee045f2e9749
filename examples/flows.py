"""Runs that depend on runs: a fan-out and a fan-in, served by one ActionWorker.

    FLO_REDIS_URL=redis://localhost:6379 python examples/flows.py [WIDTH]

One ``split`` run cuts a list of numbers into WIDTH parts (default 10); WIDTH ``total``
runs, invoked together, each wait for it (``depends_on``) and add up their part; one
``join`` run waits for all of them (for their group as a whole) and adds up their
results, reading its parents a page at a time with ``ctx.parents()``. Every run is
invoked at once, before any has started: each waits, PENDING, until its parents have
ended. Prints the join's result (docs/flows.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from flo_redis import ActionContext, ActionInvokeOptions, FloClient, RunStatus

# The settings of the flo-redis command, so `flo-redis status` shows what this runs.
REDIS_URL = os.environ.get("FLO_REDIS_URL") or os.environ.get("REDIS_URL", "redis://localhost:6379")
NAMESPACE = os.environ.get("FLO_REDIS_NAMESPACE", "default")
NUMBERS = list(range(1, 1001))
PAGE = 4  # parents the join reads a page (up to 1000): small, to show the paging


async def main(width: int) -> int:
    async with FloClient(REDIS_URL, namespace=NAMESPACE) as client:
        worker = client.new_action_worker(concurrency=8)

        @worker.action("split")
        async def split(ctx: ActionContext) -> list[list[int]]:
            size = -(-len(NUMBERS) // width)  # ceiling: every number in some part
            return [NUMBERS[i : i + size] for i in range(0, len(NUMBERS), size)]

        @worker.action("total")
        async def total(ctx: ActionContext) -> int:
            [parent] = (await ctx.parents()).items  # the split run's result
            parts = json.loads(parent.output)
            index = ctx.json()["part"]
            return sum(parts[index]) if index < len(parts) else 0

        @worker.action("join")
        async def join(ctx: ActionContext) -> dict[str, int]:
            result, read, after = 0, 0, None
            while True:
                page = await ctx.parents(after=after, count=PAGE)
                for parent in page.items:
                    if parent.status != RunStatus.COMPLETED:
                        raise RuntimeError(f"parent {parent.run_id}: {parent.error_message}")
                    result += json.loads(parent.output)
                read += len(page.items)
                if page.after is None:
                    return {"sum": result, "parents": read}
                after = page.after

        for name in ("split", "total", "join"):
            await client.action.register(name)
        serving = asyncio.create_task(worker.start())
        try:
            top = (await client.action.invoke("split", b"")).run_id
            after_split = ActionInvokeOptions(depends_on=[top])
            # Invoked together, they wait as one group, and the join waits for the group.
            parts = [json.dumps({"part": i}).encode() for i in range(width)]
            made = await client.action.invoke_many("total", parts, after_split)
            totals = [run.run_id for run in made]
            joined = (
                await client.action.invoke("join", b"", ActionInvokeOptions(depends_on=totals))
            ).run_id
            print(f"invoked split {top}, {width} totals after it, join {joined} after them")
            status = await client.action.wait(joined, timeout_ms=60_000)
            if status.status != RunStatus.COMPLETED:
                print(f"join ended {status.status.name}: {status.error_message}")
                return 1
            print(f"join: {json.loads(status.output or b'null')}")
            return 0
        finally:
            worker.stop()
            await serving


if __name__ == "__main__":
    sys.exit(asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)))
