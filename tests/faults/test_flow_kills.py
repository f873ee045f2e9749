"""Per-key concurrency under SIGKILL: three worker processes share an action registered
with FlowControl(concurrency=2, fair=True), and one of them is SIGKILLed every 1.5
seconds (and replaced). The handlers write when they enter and leave to a ledger on
Redis's clock (support/flow_proc.py); a killed handler left when its process died. At
no instant do more than two handlers of one key overlap, and every run completes: the
slots of a killed process's runs come back through the liveness take-back."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from flo_redis import ActionInvokeOptions, ActionRegisterOptions, FloClient, FlowControl

pytestmark = pytest.mark.slow

SUPPORT = Path(__file__).resolve().parents[1] / "support"
LIMIT = 2
KEYS = ("a", "b", "c", "d", "e")
RUNS_PER_KEY = 60
KILL_EVERY_S = 1.5


def start(url: str, namespace: str, ledger: str) -> subprocess.Popen[bytes]:
    script = str(SUPPORT / "flow_proc.py")
    return subprocess.Popen([sys.executable, script, url, namespace, ledger, str(LIMIT)])


async def redis_micros(raw: aioredis.Redis) -> int:
    seconds, micros = await raw.time()
    return int(seconds) * 1_000_000 + int(micros)


def most_at_once(intervals: list[tuple[int, int]]) -> int:
    """The most intervals [enter, leave] that hold one instant together."""
    events = sorted([(t, 1) for t, _ in intervals] + [(t, -1) for _, t in intervals])
    most = now = 0
    for _, step in events:  # a leave sorts before an enter at the same µs
        now += step
        most = max(most, now)
    return most


@pytest.mark.timeout(240)  # its own deadline is 180 s: 45 s alone, 120 s beside other passes
async def test_a_keys_limit_holds_while_worker_processes_are_killed(
    client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    ledger = f"{namespace}:ledger"
    flow = FlowControl(concurrency=LIMIT, fair=True)
    await client.action.register("job", options=ActionRegisterOptions(flow=flow, max_retries=20))
    for key in KEYS:
        inputs = [key.encode()] * RUNS_PER_KEY
        await client.action.invoke_many("job", inputs, ActionInvokeOptions(flow_key=key))
    total = len(KEYS) * RUNS_PER_KEY
    procs = [start(redis_url, namespace, ledger) for _ in range(3)]
    kills: dict[int, int] = {}  # pid -> Redis µs just after it died
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 180
    try:
        victim = 0
        while (await client.action.counts("job")).completed < total:
            assert loop.time() < deadline, "runs still not done after 180 s"
            await asyncio.sleep(KILL_EVERY_S)
            proc = procs[victim % 3]
            proc.kill()
            proc.wait(10)
            kills[proc.pid] = await redis_micros(raw)
            procs[victim % 3] = start(redis_url, namespace, ledger)
            victim += 1
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(10)
    assert victim >= 3, "the runs ended before three processes were killed"

    entries = [line.decode().split() for line in await raw.lrange(ledger, 0, -1)]
    entered: dict[tuple[str, str], tuple[str, int, int]] = {}
    left: dict[tuple[str, str], int] = {}
    for kind, key, run_id, token, pid, micros in entries:
        if kind == "enter":
            entered[(run_id, token)] = (key, int(pid), int(micros))
        else:
            left[(run_id, token)] = int(micros)
    # A handler that never left was in a process that was killed: it left then.
    per_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for hand_out, (key, pid, enter) in entered.items():
        per_key[key].append((enter, left.get(hand_out) or kills[pid]))
    assert set(per_key) == set(KEYS)
    assert len(entered) > len(left), "no handler was killed while it ran"
    for key, intervals in per_key.items():
        assert most_at_once(intervals) <= LIMIT, key
    # Each key did run two at a time (the limit is reached, not undershot).
    assert all(most_at_once(v) == LIMIT for v in per_key.values())
    assert (await client.action.counts("job")).completed == total
