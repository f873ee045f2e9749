"""Invoke runs of the demo actions and wait for their results.

FLO_REDIS_URL=redis://localhost:6379 python examples/producer.py [count]
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from flo_redis import ActionRegisterOptions, FloClient, NotFoundError, RunStatus

# The settings of the flo-redis command, so `flo-redis status` shows what this runs.
REDIS_URL = os.environ.get("FLO_REDIS_URL") or os.environ.get("REDIS_URL", "redis://localhost:6379")
NAMESPACE = os.environ.get("FLO_REDIS_NAMESPACE", "default")
FINISHED = {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.CANCELLED}


async def main(count: int) -> int:
    async with FloClient(REDIS_URL, namespace=NAMESPACE) as client:
        # Registering is idempotent: the last registration's settings win.
        await client.action.register(
            "resize", options=ActionRegisterOptions(timeout_ms=10_000, max_retries=3)
        )
        started = time.perf_counter()
        run_ids = []
        for i in range(count):
            payload = json.dumps({"image": f"photo-{i}.jpg", "width": 100 + i}).encode()
            run_ids.append((await client.action.invoke("resize", payload)).run_id)
        print(f"producer: invoked {count} runs of 'resize'")

        pending = set(run_ids)
        results = {}
        deadline = time.monotonic() + 60
        while pending and time.monotonic() < deadline:
            for run_id in list(pending):
                status = await client.action.status(run_id)
                if status.status in FINISHED:
                    results[run_id] = status
                    pending.discard(run_id)
            if pending:
                await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        by_status: dict[str, int] = {}
        for status in results.values():
            by_status[status.status.name] = by_status.get(status.status.name, 0) + 1
        print(f"producer: {len(results)}/{count} runs finished in {elapsed:.2f}s: {by_status}")
        sample = results.get(run_ids[0])
        if sample is not None and sample.output:
            print(f"producer: {run_ids[0]} -> {sample.output.decode()} by {sample.worker_id}")
        others = await invoke_others(client)
        return 0 if not pending and others else 1


async def invoke_others(client: FloClient) -> bool:
    """One run of each action the ActionWorker example serves, if it is registered."""
    inputs = {
        "approve": b'{"amount": 120}',
        "import-file": b'{"file": "broken.csv"}',  # no rows: fails without retry
        "report": b"{}",  # outlives its lease; auto-touch keeps it
    }
    runs = {}
    for name, payload in inputs.items():
        try:
            runs[name] = (await client.action.invoke(name, payload)).run_id
        except NotFoundError:
            print(f"producer: {name!r} is not registered (start examples/action_worker.py)")
    ok = True
    for name, run_id in runs.items():
        deadline = time.monotonic() + 30
        status = await client.action.status(run_id)
        while status.status not in FINISHED and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            status = await client.action.status(run_id)
        detail = status.output.decode() if status.output else status.error_message
        print(
            f"producer: {name}: {status.status.name} after {status.attempt} attempt(s), "
            f"outcome {status.outcome!r}: {detail}"
        )
        ok = ok and status.status in FINISHED
    return ok


if __name__ == "__main__":
    sys.exit(asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)))
