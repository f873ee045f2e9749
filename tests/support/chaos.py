"""A failover under load, and what it cost, counted from a ledger kept outside Redis.

:func:`run_chaos` starts a worker process (``chaos_worker.py``: an ActionWorker and a
StreamWorker writing every handler start and every report the store accepted or refused
to a file), then drives load from this process: invokes (each with an idempotency key,
sent again until answered) and stream appends. Mid-load, ``fail`` kills the primary and
brings a replica up in its place; the load goes on, stops, and everything left is given
time to settle. The :class:`Figures` say what a user of the default durability (or of
``durability``) lost at that failover. The failover tests (tests/faults) and the
``failover`` benchmark both run it.
"""

from __future__ import annotations

import asyncio
import collections
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flo_redis import (
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    FloError,
    NotFoundError,
    RunStatus,
    StreamID,
    StreamReadOptions,
)

HERE = Path(__file__).resolve().parent
ACTION = "job"
OPTIONS = ActionRegisterOptions(timeout_ms=30_000, max_retries=1000)
#: Load before the kill, and after the new primary is up.
BEFORE_S, AFTER_S = 3.0, 3.0
#: Once the load stops, every surviving run and record must be done within this.
SETTLE_S = 20.0
#: Answers already on their way when the primary died are not work flowing again.
IN_FLIGHT_S = 0.05


@dataclass
class Figures:
    """What one failover cost. Lost = acknowledged to its caller, gone after."""

    invokes: int = 0
    invokes_lost: int = 0
    completes: int = 0
    completions_lost: int = 0
    runs_twice: int = 0
    appends: int = 0
    appends_lost: int = 0
    acks: int = 0
    acks_lost: int = 0
    records_twice: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    #: From the kill: the new primary serving; the first complete accepted after.
    promoted_s: float = 0.0
    flow_s: float = float("nan")
    #: How long before the kill the oldest lost write was acknowledged.
    loss_window_s: float = 0.0
    #: Runs and records whose record survived but were not done within SETTLE_S.
    stranded: list[str] = field(default_factory=list)
    #: Final runs completed by a report other than their last hand-out's.
    misfenced: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"invokes {self.invokes} lost {self.invokes_lost}; completes {self.completes} "
            f"lost {self.completions_lost}; runs twice {self.runs_twice}; appends "
            f"{self.appends} lost {self.appends_lost}; acks {self.acks} lost {self.acks_lost}; "
            f"records twice {self.records_twice}; refused {self.refused}; promoted after "
            f"{self.promoted_s:.2f} s, work flowing after {self.flow_s:.2f} s; losses acked "
            f"within {self.loss_window_s * 1000:.0f} ms before the kill"
        )


@dataclass
class Load:
    """The producer's side: what each call was answered, and when."""

    client: FloClient
    stream: str
    running: bool = True
    invoked: dict[str, tuple[str, float]] = field(default_factory=dict)  # key: (run, t)
    appended: dict[bytes, float] = field(default_factory=dict)  # payload: t

    async def invokes(self, lane: int) -> None:
        i = 0
        while self.running:
            key = f"{lane}-{i}"
            try:
                options = ActionInvokeOptions(idempotency_key=key)
                run = await self.client.action.invoke(ACTION, key.encode(), options)
            except FloError:  # no primary now, or not made durable: the same key again
                await asyncio.sleep(0.05)
                continue
            self.invoked[key] = (run.run_id, time.time())
            i += 1
            await asyncio.sleep(0.002)

    async def appends(self) -> None:
        i = 0
        while self.running:
            payload = f"a{i}".encode()
            try:
                await self.client.stream.append(self.stream, payload)
            except FloError:
                await asyncio.sleep(0.05)
                continue
            self.appended[payload] = time.time()
            i += 1
            await asyncio.sleep(0.002)


def _ledger(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


async def _until(probe: Callable[[], Awaitable[bool]], deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            if await probe():
                return True
        except FloError:
            pass  # a connection made before the failover: asked again
        await asyncio.sleep(0.2)
    return False


async def _stream_records(client: FloClient, stream: str) -> dict[str, bytes]:
    """Every record of ``stream``: ``<partition>-<id>`` to its payload."""
    found: dict[str, bytes] = {}
    start: StreamID | None = None
    while True:
        page = await client.stream.read(stream, StreamReadOptions(start=start, count=1000))
        fresh = [r for r in page.records if f"{r.partition}-{r.id.to_redis()}" not in found]
        if not fresh:
            return found
        for r in fresh:
            found[f"{r.partition}-{r.id.to_redis()}"] = r.payload
        start = fresh[-1].id


async def run_chaos(
    url: str,
    namespace: str,
    stream: str,
    fail: Callable[[], Awaitable[None]],
    ledger: Path,
    durability: str = "primary",
    client_options: dict[str, Any] | None = None,
) -> Figures:
    """Load, ``fail()`` (kill the primary; return once a new one serves), more load,
    settle; the figures. ``durability`` is the worker's (chaos_worker.py),
    ``client_options`` the producer client's extra keywords."""
    worker = subprocess.Popen(  # noqa: ASYNC220 - starting it does not block
        [sys.executable, str(HERE / "chaos_worker.py"), url, namespace, ACTION, stream,
         str(ledger), durability], cwd=HERE,
    )  # fmt: skip
    figures = Figures()
    try:
        async with FloClient(url, namespace=namespace, **(client_options or {})) as client:
            await client.action.register(ACTION, options=OPTIONS)
            ready = time.monotonic() + 30

            async def joined() -> bool:
                groups = await client.stream.groups(stream)
                return any(g.consumers for g in groups) and bool(
                    (await client.worker.list()).workers
                )

            assert await _until(joined, ready), "the worker process did not start"
            load = Load(client, stream)
            tasks = [asyncio.create_task(load.invokes(n)) for n in range(2)]
            tasks.append(asyncio.create_task(load.appends()))
            await asyncio.sleep(BEFORE_S)
            killed = time.time()
            await fail()
            figures.promoted_s = time.time() - killed
            await asyncio.sleep(AFTER_S)
            load.running = False
            await asyncio.gather(*tasks)
            await _settle(client, load, figures)
            worker.send_signal(signal.SIGTERM)
            await asyncio.to_thread(worker.wait, 30)
            await _count(client, load, _ledger(ledger), killed, figures)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    return figures


async def _settle(client: FloClient, load: Load, figures: Figures) -> None:
    """Wait until every surviving run is completed and the group has nothing left."""
    deadline = time.monotonic() + SETTLE_S
    left = {run_id for run_id, _ in load.invoked.values()}

    async def runs_done() -> bool:
        for run_id in list(left):
            try:
                if (await client.action.status(run_id)).status == RunStatus.COMPLETED:
                    left.discard(run_id)
            except NotFoundError:
                left.discard(run_id)  # lost with the old primary: counted later
        return not left

    async def group_done() -> bool:
        (group,) = await client.stream.groups(load.stream)
        return group.pending == 0 and not group.lag

    await _until(runs_done, deadline)
    if not await _until(group_done, deadline):
        figures.stranded.append(f"stream {load.stream}: records left in group g")
    figures.stranded += sorted(left)


async def _count(
    client: FloClient, load: Load, ledger: list[list[str]], killed: float, figures: Figures
) -> None:
    """Read the end state against what the callers were told and what the ledger saw."""
    kinds = collections.Counter(line[0] for line in ledger)
    executions = collections.Counter((w[1], int(w[2])) for w in ledger if w[0] == "run")
    lost_at: list[float] = []
    completed = 0
    for run_id, acked_at in load.invoked.values():
        try:
            status = await client.action.status(run_id)
        except NotFoundError:
            figures.invokes_lost += 1
            lost_at.append(acked_at)
            continue
        if status.status != RunStatus.COMPLETED:
            continue  # stranded: listed by _settle
        completed += 1
        token = int((status.output or b"0 0").split()[1])
        if token != status.token or (run_id, token) not in executions:
            figures.misfenced.append(run_id)
    records = await _stream_records(client, load.stream)
    present = set(records.values())
    for payload, acked_at in load.appended.items():
        if payload not in present:
            figures.appends_lost += 1
            lost_at.append(acked_at)
    handled = collections.Counter(w[1] for w in ledger if w[0] == "record")
    figures.stranded += sorted(set(records) - set(handled))
    figures.invokes, figures.appends = len(load.invoked), len(load.appended)
    figures.completes, figures.acks = kinds["completed"], kinds["acked"]
    figures.completions_lost = figures.completes - completed
    figures.acks_lost = figures.acks - len(records)
    figures.runs_twice = sum(
        1 for n in collections.Counter(run for run, _ in executions).values() if n > 1
    )
    figures.records_twice = sum(1 for n in handled.values() if n > 1)
    figures.refused = dict(collections.Counter(w[1] for w in ledger if w[0] == "refused"))
    flowing = killed + IN_FLIGHT_S
    after = [float(w[-1]) for w in ledger if w[0] == "completed" and float(w[-1]) > flowing]
    figures.flow_s = min(after) - killed if after else float("nan")
    figures.loss_window_s = max((killed - t for t in lost_at), default=0.0)
