"""Rate limits: ActionRegisterOptions(rate_limit=RateLimit(max, per_ms)) caps the starts of
an action in any window of per_ms, across every worker; a held-back claim says when the
next start is allowed. Start times are the claim script's Redis TIME (started_at_ms)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from polling import eventually
from windows import most_in_any_window

from flo_redis import (
    ActionRegisterOptions,
    FloClient,
    RateLimit,
    RunStatus,
    ValidationError,
    WorkerAwaitOptions,
)
from flo_redis._wire.keys import action_keys
from flo_redis.actions.claims import claim

HERE = Path(__file__).resolve().parents[1] / "support"
NOW = WorkerAwaitOptions(block_ms=0)


@contextmanager
def worker_process(url: str, namespace: str, rate: str) -> Iterator[subprocess.Popen[bytes]]:
    args = [url, namespace, "job", "done", "4", "30000", rate]
    proc = subprocess.Popen([sys.executable, str(HERE / "worker_proc.py"), *args], cwd=HERE)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.slow
async def test_a_rate_limit_holds_across_three_worker_processes(
    client: FloClient, redis_url: str, namespace: str
) -> None:
    # A short window, many times over, stands in for "per minute": the bound is the same
    # per window, every window position is checked, and CI stays quick.
    most, per_ms, runs = 5, 250, 100
    limit = RateLimit(most, per_ms)
    await client.action.register("job", options=ActionRegisterOptions(rate_limit=limit))
    run_ids = [r.run_id for r in await client.action.invoke_many("job", [b""] * runs)]
    with ExitStack() as procs:
        for _ in range(3):
            procs.enter_context(worker_process(redis_url, namespace, f"{most}/{per_ms}"))

        async def completed() -> int:
            return (await client.action.counts("job")).completed

        await eventually(completed, lambda n: n == runs, timeout=90)
    statuses = [await client.action.status(r) for r in run_ids]
    assert all(s.status == RunStatus.COMPLETED and s.attempt == 1 for s in statuses)
    starts = [s.started_at_ms for s in statuses if s.started_at_ms is not None]
    assert len(starts) == runs
    assert most_in_any_window(starts, per_ms) <= most
    # And it is held, not undershot: a held-back worker sleeps until the next start is
    # allowed (not until its 1 s poll deadline), so the start `most` places later
    # typically comes one window after (measured: 250-252 ms apart for a 250 ms window).
    starts.sort()
    gaps = sorted(b - a for a, b in zip(starts, starts[most:], strict=False))
    assert gaps[len(gaps) // 2] < 2 * per_ms
    # So the starts spread over at least runs / most windows (by Redis time, not speed).
    assert max(starts) - min(starts) >= (runs // most - 1) * per_ms
    assert len({s.output for s in statuses}) >= 2  # shared by the worker processes


async def test_a_held_back_claim_says_when_the_next_start_is_allowed(
    client: FloClient, namespace: str
) -> None:
    limit = RateLimit(2, 60_000)
    await client.action.register("job", options=ActionRegisterOptions(rate_limit=limit))
    await client.action.invoke_many("job", [b""] * 3)
    await client.worker.register("w1", ["job"])
    first = await client.worker.await_tasks("w1", ["job"], 3, NOW)
    assert len(first) == 2  # room for two starts in the window
    keys = action_keys(namespace, "job")
    reply = await claim(client.session, keys, "w1", b"", 3, "")
    assert reply.runs == ()
    assert reply.rate_next_ms == min(r.claimed_at_ms for r in first) + 60_000
    assert reply.next_due_ms <= reply.rate_next_ms


async def test_registering_again_without_a_rate_limit_lifts_it(client: FloClient) -> None:
    limited = ActionRegisterOptions(rate_limit=RateLimit(1, 60_000))
    await client.action.register("job", options=limited)
    await client.action.invoke_many("job", [b""] * 3)
    await client.worker.register("w1", ["job"])
    assert len(await client.worker.await_tasks("w1", ["job"], 3, NOW)) == 1
    await client.action.register("job")
    assert len(await client.worker.await_tasks("w1", ["job"], 3, NOW)) == 2


@pytest.mark.parametrize(
    "bad",
    [
        RateLimit(0, 1000),
        RateLimit(10_001, 1000),
        RateLimit(5, 0),
        RateLimit(5, 86_400_001),
        RateLimit(True, 1000),
        RateLimit(5, 1.5),  # type: ignore[arg-type]
        "5/s",
        (5, 1000),
    ],
)
async def test_a_bad_rate_limit_is_refused_before_anything_is_written(
    client: FloClient, raw: aioredis.Redis, namespace: str, bad: object
) -> None:
    with pytest.raises(ValidationError, match="rate_limit"):
        await client.action.register("job", options=ActionRegisterOptions(rate_limit=bad))  # type: ignore[arg-type]
    assert await raw.keys(f"*{namespace}*") == []
