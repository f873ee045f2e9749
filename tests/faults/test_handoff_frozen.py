"""A parked worker that cannot take a run — a frozen process (SIGSTOP), or one behind a
connection that stays open but carries nothing — is only offered it (lua/lib/offer.lua):
the run goes back to the head of its queue once the offer window passes, a live worker
starts it within the window plus a second, with its attempt unspent, and it completes
once. The frozen worker, resumed, has its late reports refused and stops what it
started of the run. Real worker processes (tests/support/offer_proc.py); a ledger (a file they
append to) records every handler's start and end."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from handoff import late_reports_refused
from offer_proc import OPTIONS
from polling import eventually, finished
from processes import script_process
from proxy import Proxy

from flo_redis import FloClient, RunStatus
from flo_redis._wire.keys import action_keys


class Ledger:
    """What the worker processes' handlers wrote, one dict per line."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        path.touch()

    async def lines(self, run_id: str) -> list[dict[str, Any]]:
        text = await asyncio.to_thread(Path(self.path).read_text)
        lines = [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]
        return [line for line in lines if line["run"] == run_id]

    async def first(self, event: str, run_id: str, pid: int) -> dict[str, Any]:
        def found(lines: list[dict[str, Any]]) -> bool:
            return any(line["event"] == event and line["pid"] == pid for line in lines)

        lines = await eventually(lambda: self.lines(run_id), found, timeout=30)
        return next(line for line in lines if line["event"] == event and line["pid"] == pid)


@pytest.fixture(params=["redis", pytest.param("cluster", marks=pytest.mark.cluster)])
def url(request: pytest.FixtureRequest, redis_url: str) -> str:
    """Where the workers work: the tests' Redis, or the 3-master cluster."""
    if request.param == "cluster":
        return str(request.getfixturevalue("cluster_url"))
    return redis_url


@contextlib.asynccontextmanager
async def serving(url: str, namespace: str) -> AsyncIterator[FloClient]:
    async with FloClient(url, namespace=namespace) as client:
        await client.action.register("job", options=OPTIONS)
        yield client


async def parked(client: FloClient, n: int) -> None:
    """Wait until ``n`` pollers are parked in the queue."""
    keys = action_keys(client.namespace, "job")
    await eventually(lambda: client.redis.zcard(keys.parked), lambda got: got == n, timeout=30)


async def handed_to_the_stalled_worker(
    client: FloClient, stalled: int, live: int, ledger: Ledger
) -> tuple[str, int]:
    """Invoke a run while both workers are parked (the stalled one parked first, so it
    is handed the run); check the live one starts it once the window passed (long
    before the lease would end), on its first attempt, and completes it. The run's id
    and the stalled hand-out's token."""
    began = time.time()
    run_id = (await client.action.invoke("job", b"x")).run_id
    handed = await client.action.status(run_id)
    assert (handed.status, handed.worker_id) == (RunStatus.RUNNING, f"proc-{stalled}")
    # Within 30 s: half the 60 s lease (offer_proc.OPTIONS) that would otherwise free it.
    start = await ledger.first("start", run_id, live)
    print(f"started on the live worker {start['at'] - began:.2f} s after the invoke")
    assert start["attempt"] == 1 and start["token"] > handed.token
    done = await finished(client, run_id)
    assert (done.status, done.worker_id) == (RunStatus.COMPLETED, f"proc-{live}")
    stats = await client.action.stats("job")
    assert (stats.offers_expired, stats.reclaimed_deadline) == (1, 0)
    return run_id, handed.token


async def test_a_frozen_parked_worker_leaves_the_run_to_a_live_one(
    url: str, namespace: str, tmp_path: Path
) -> None:
    ledger = Ledger(tmp_path / "ledger")
    async with serving(url, namespace) as client:
        with script_process("offer_proc.py", url, namespace, "job", ledger.path) as frozen:
            await parked(client, 1)
            os.kill(frozen.pid, signal.SIGSTOP)
            try:
                with script_process("offer_proc.py", url, namespace, "job", ledger.path) as live:
                    await parked(client, 2)
                    run_id, token = await handed_to_the_stalled_worker(
                        client, frozen.pid, live.pid, ledger
                    )
                    os.kill(frozen.pid, signal.SIGCONT)
                    # Resumed, it reads the hand-off and parks again. What it started of
                    # the run was stopped when its accept was refused: it reports nothing.
                    await parked(client, 2)
                    await late_reports_refused(client, run_id, token)
                    mine = await ledger.lines(run_id)
                    if any(line["pid"] == frozen.pid for line in mine):
                        await ledger.first("cancelled", run_id, frozen.pid)
            finally:
                os.kill(frozen.pid, signal.SIGCONT)
        ran = [(line["event"], line["pid"]) for line in await ledger.lines(run_id)]
        assert ran.count(("done", live.pid)) == 1
        assert ("done", frozen.pid) not in ran
        final = await client.action.status(run_id)
        assert (final.status, final.worker_id) == (RunStatus.COMPLETED, f"proc-{live.pid}")


async def test_a_parked_worker_behind_a_silent_connection_leaves_the_run_to_a_live_one(
    redis_url: str, namespace: str, tmp_path: Path, proxy: Proxy
) -> None:
    # Its connections stay open and Redis still counts its subscriptions, but nothing
    # reaches it (a network cut Redis has not noticed, up to tcp-keepalive).
    ledger = Ledger(tmp_path / "ledger")
    async with serving(redis_url, namespace) as client:
        with script_process("offer_proc.py", proxy.url, namespace, "job", ledger.path) as cut:
            await parked(client, 1)
            proxy.silence()
            with script_process("offer_proc.py", redis_url, namespace, "job", ledger.path) as live:
                await parked(client, 2)
                run_id, token = await handed_to_the_stalled_worker(
                    client, cut.pid, live.pid, ledger
                )
                await late_reports_refused(client, run_id, token)
        ran = [(line["event"], line["pid"]) for line in await ledger.lines(run_id)]
        assert ran == [("start", live.pid), ("done", live.pid)]
