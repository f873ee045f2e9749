"""Side by side: the same no-op action workload on flo-redis, the raw floor and peers.

Each queue runs in its own subprocess (``python -m benchmarks.peers NAME``) with a
deadline, on its own Redis database, flushed before each run. A queue that is not
installed, fails or hangs is reported as such.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from ._common import progress, summary, with_db
from ._procs import Child

ORDER = [
    "flo-redis",
    "raw-redis-py",
    "taskiq-redis",
    "saq",
    "dramatiq",
    "bullmq",
    "streaq",
    "rq",
    "arq",
]

# Queues too slow for the full count get fewer tasks (the rate is what is compared).
SMALLER_N = {"rq": 2000, "saq": 3000, "streaq": 3000, "bullmq": 3000}

# What is known not to install beside flo-redis (reported instead of a figure).
KNOWN_UNINSTALLABLE = {
    "arq": "arq 0.28 requires redis<6; flo-redis requires redis>=8, so they cannot share "
    "an environment",
}


async def _one(url: str, name: str, n: int, concurrency: int, timeout: float) -> dict[str, Any]:
    child = await Child.start(
        "benchmarks.peers",
        name,
        "--url",
        url,
        "--n",
        str(n),
        "--concurrency",
        str(concurrency),
        "--timeout",
        str(timeout),
        label=name,
    )
    try:
        event = await child.event(timeout + 30)
    except TimeoutError:
        child.kill()
        tail = await child.stderr_tail(400)
        await child.close()
        return {"status": "timed out", "detail": f"no result within {timeout + 30:g} s; {tail}"}
    except RuntimeError as exc:
        await child.close()
        return {"status": "failed", "detail": str(exc)[-600:]}
    await child.close()
    return event


async def run_compare(
    url: str, repeats: int, n: int, concurrency: int = 100, timeout: float = 60.0
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for db, name in enumerate(ORDER, start=1):
        db_url = with_db(url, db)
        count = min(n, SMALLER_N.get(name, n))
        rates: list[float] = []
        info: dict[str, Any] = {}
        failures: list[str] = []
        for rep in range(repeats):
            async with aioredis.Redis.from_url(db_url) as r:
                await r.flushdb()
            progress(f"compare: {name} run {rep + 1}/{repeats} ({count} tasks) ...")
            event = await _one(db_url, name, count, concurrency, timeout)
            status = event.get("status")
            if status != "ok":
                detail = str(event.get("detail", ""))
                if status == "not installed":
                    info = {"status": status, "detail": KNOWN_UNINSTALLABLE.get(name, detail)}
                    progress(f"compare: {name}: not installed: {info['detail']}")
                    break
                failures.append(f"run {rep + 1}: {status}: {detail[-300:]}")
                progress(f"compare: {name}: run {rep + 1} {status}: {detail[-200:]}")
                if len(failures) >= 2:
                    break
                continue
            rates.append(float(event["rate"]))
            dups = int(event["calls"]) - int(event.get("unique") or event["calls"])
            info = {
                "status": "ok",
                "version": event.get("version"),
                "note": event.get("note"),
                "n": count,
                "duplicates": max(info.get("duplicates", 0), dups),
            }
            progress(f"compare: {name}: {event['rate']:,.0f} tasks/s")
        if failures:
            info["failures"] = failures
            if not rates:
                info["status"] = "failed"
                info["detail"] = failures[-1]
        async with aioredis.Redis.from_url(db_url) as r:
            await r.flushdb()
        if rates:
            info["tasks_per_s"] = summary(rates)
        results[name] = info
    flo = results.get("flo-redis", {}).get("tasks_per_s", {}).get("median")
    for info in results.values():
        med = info.get("tasks_per_s", {}).get("median")
        info["ratio_to_flo"] = med / flo if med and flo else None
    return results
