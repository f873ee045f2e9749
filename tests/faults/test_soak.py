"""A fault soak: a stream of invokes and a burst of 1,000 concurrent ones, while worker
processes are SIGKILLed and replaced, the network to Redis blacks out, and Redis itself is
SIGKILLed and restarted from its AOF. Every handler execution is written to a ledger.

Once the faults stop, every job must be completed within seconds (not a lease: leases
are 5 minutes here), each job has exactly one run (invokes are retried with an
idempotency key), every run was completed by a hand-out that really ran, and no hand-out
ran twice. Marked slow; about half a minute (``FLO_SOAK_ROUNDS`` for longer).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from polling import eventually
from proxy import Proxy
from redis_server import RedisServer

from flo_redis import ActionInvokeOptions, ActionRegisterOptions, FloClient, FloError, RunStatus

HERE = Path(__file__).resolve().parents[1] / "support"
ACTION = "soak"
OPTIONS = ActionRegisterOptions(timeout_ms=300_000, max_retries=1000)
STEADY_JOBS = 1200
BURST_JOBS = 1000
#: After the last fault, every job must be completed within this (leases are 5 minutes).
SETTLE_S = 30.0
#: Rounds of faults, 2.5 s each (FLO_SOAK_ROUNDS=100 for a long soak).
ROUNDS = max(int(os.environ.get("FLO_SOAK_ROUNDS", "8")), 6)


class Workers:
    """Worker processes, killed and replaced at will."""

    def __init__(self, url: str, namespace: str, ledger: Path) -> None:
        self.args = [sys.executable, str(HERE / "soak_worker.py"), url, namespace, ACTION]
        self.ledger = ledger
        self.procs: list[subprocess.Popen[bytes]] = []
        self.killed = 0

    def spawn(self) -> None:
        self.procs.append(subprocess.Popen([*self.args, str(self.ledger), "50"], cwd=HERE))

    def kill_one(self) -> None:
        victim = self.procs.pop(random.randrange(len(self.procs)))
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        self.killed += 1
        self.spawn()

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(10)


async def _invoke(client: FloClient, key: str) -> str:
    """Invoke until Redis answers; the idempotency key makes a resend find the same run."""
    while True:
        try:
            opts = ActionInvokeOptions(idempotency_key=key)
            return (await client.action.invoke(ACTION, key.encode(), opts)).run_id
        except FloError:
            await asyncio.sleep(0.1)  # Redis restarting, or unreachable for a moment


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_nothing_lost_stuck_or_done_twice_under_faults(tmp_path: Path) -> None:
    server = RedisServer(appendonly=True, extra=("--appendfsync", "always")).start()
    proxy = await Proxy("127.0.0.1", server.port).start()
    namespace = "soak"
    workers = Workers(proxy.url, namespace, tmp_path / "ledger")
    runs: dict[str, str] = {}
    loop = asyncio.get_running_loop()
    try:
        async with FloClient(server.url, namespace=namespace) as client:
            await client.action.register(ACTION, options=OPTIONS)
            for _ in range(3):
                workers.spawn()

            async def steady() -> None:
                for i in range(STEADY_JOBS):
                    key = f"steady-{i}"
                    runs[key] = await _invoke(client, key)
                    if i % 40 == 0:
                        await asyncio.sleep(0.5)

            async def burst() -> None:
                keys = [f"burst-{i}" for i in range(BURST_JOBS)]
                ids = await asyncio.gather(*(_invoke(client, k) for k in keys))
                runs.update(zip(keys, ids, strict=True))

            async def faults() -> None:
                for step in range(ROUNDS):
                    await asyncio.sleep(2.5)
                    workers.kill_one()
                    if step in (1, 5):
                        proxy.blackout()  # workers lose Redis for 1.5 s
                        await asyncio.sleep(1.5)
                        proxy.restore()
                    if step == 3:
                        server.stop(signal.SIGKILL)  # Redis dies under load...
                        await asyncio.sleep(1.0)
                        server.start()  # ...and comes back from its AOF
                    if step == 4:
                        await burst()

            producer = asyncio.create_task(steady())
            await faults()
            await producer
            faults_ended = loop.time()

            async def unfinished() -> list[str]:
                left = []
                for key, run_id in runs.items():
                    try:
                        if (await client.action.status(run_id)).status != RunStatus.COMPLETED:
                            left.append(key)
                    except FloError:
                        left.append(key)  # this client's connection was cut: ask again
                return left

            await eventually(unfinished, lambda left: not left, timeout=SETTLE_S, interval=0.2)
            settled_s = loop.time() - faults_ended
            finals = {key: await client.action.status(run_id) for key, run_id in runs.items()}
    finally:
        workers.stop()
        await proxy.stop()
        server.discard()

    print(f"soak: {len(runs)} jobs, {workers.killed} workers killed, settled in {settled_s:.1f} s")
    assert len(runs) == STEADY_JOBS + BURST_JOBS
    assert len(set(runs.values())) == len(runs)  # one run per job, none made twice
    ledger = [line.split() for line in (tmp_path / "ledger").read_text().splitlines()]
    executions = collections.Counter((run_id, int(token)) for run_id, _, token in ledger)
    assert max(executions.values()) == 1  # no hand-out ran twice
    ran = {run_id for run_id, _ in executions}
    for run in finals.values():
        assert run.status == RunStatus.COMPLETED and run.run_id in ran
        _pid, token = (run.output or b"").decode().split()
        # Completed by the hand-out that ran it, under the run's last token, once.
        assert int(token) == run.token and (run.run_id, int(token)) in executions
