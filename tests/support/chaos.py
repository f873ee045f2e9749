"""A failover under load, and what it cost, counted from a ledger kept outside Redis.

:func:`run_chaos` starts a worker process (``chaos_worker.py``: an ActionWorker and a
StreamWorker writing every handler start and every report the store accepted or refused
to a file), then drives load from this process: invokes (each with an idempotency key,
sent again until answered) and stream appends. Mid-load, ``fail`` kills the primary and
brings a replica up in its place; the load goes on, stops, and everything left is given
time to settle. The :class:`Figures` say what a user of the default durability (or of
``durability``) lost at that failover. The failover tests (tests/faults) and the
``failover`` benchmark both run it.

A write answered with ``NotDurableError`` was applied, but not acknowledged at its level:
it may survive the failover or not, so it is counted apart (:attr:`Figures.not_durable`),
never as lost. The producer sends such an invoke again with its idempotency key until it
is answered at its level (the same run), and moves on from such an append (sending it
again would append it twice); the worker's ledger holds only the reports the store
answered at the worker's level (a worker sends the others again until they are).

Each handler's result names its hand-out as its outcome (``<run id>/<token>``), so the
ledger says which completes the store accepted; each handler takes :data:`HANDLER_S`, so
runs and records are in hand across the edge of what a lagging replica lost.
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

from redis.exceptions import RedisError

from flo_redis import (
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    FloError,
    NotDurableError,
    NotFoundError,
    RunStatus,
    StreamGroupJoinOptions,
    StreamID,
    StreamReadOptions,
)
from flo_redis._wire.codec import decoded
from flo_redis._wire.keys import stream_keys

HERE = Path(__file__).resolve().parent
ACTION, GROUP = "job", "g"
#: How long a run or a delivery stays with its worker without a report: longer than
#: SETTLE_S, so nothing done by the end came back by its lease. A run whose completion
#: was lost (a record whose ack was lost) is held, as the new primary sees it, by a live
#: worker that has moved on: its report is sent again (flo_redis.worker.replay).
LEASE_MS = 60_000
OPTIONS = ActionRegisterOptions(timeout_ms=LEASE_MS, max_retries=1000)
#: How long each handler takes.
HANDLER_S = 0.05
#: Load before the kill, and after the new primary is up.
BEFORE_S, AFTER_S = 3.0, 3.0
#: Once the load stops, every surviving run and record must be done within this.
SETTLE_S = 20.0
#: Answers already on their way when the primary died are not work flowing again.
IN_FLIGHT_S = 0.05


@dataclass
class Figures:
    """What one failover cost. Lost = acknowledged to its caller (at its durability
    level), gone after."""

    invokes: int = 0
    invokes_lost: int = 0
    completes: int = 0
    completions_lost: int = 0
    runs_twice: int = 0
    appends: int = 0
    appends_lost: int = 0
    acks: int = 0
    #: Answered acks that did not hold: their record was delivered again, or is pending.
    acks_lost: int = 0
    records_twice: int = 0
    #: Records the worker handled that are gone with the old primary (appended there
    #: only). An ack answered for one went with it, or was answered by the new primary,
    #: which never had the record (it answers an ack of a record not pending as done):
    #: the two cannot be told apart, and neither leaves a record undone, so neither is
    #: counted lost; the record's loss is its append's.
    records_gone: int = 0
    #: Of the runs twice, those whose earlier completion was accepted, then lost (the
    #: others' earlier reports were refused: their hand-out was lost).
    twice_completion_lost: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    #: Invokes and appends answered NotDurableError: applied, not acknowledged.
    not_durable: int = 0
    #: From the kill: the new primary serving; the first complete accepted after; the
    #: last hand-out or delivery of a run or record made again.
    promoted_s: float = 0.0
    flow_s: float = float("nan")
    again_s: float = float("nan")
    #: From the end of the load until every run and record was done (or SETTLE_S).
    settle_s: float = 0.0
    #: How long before the kill the oldest lost write was acknowledged (an invoke, an
    #: append, a complete), or the oldest hand-out or delivery made again began.
    loss_window_s: float = 0.0
    #: Runs and records whose record survived but were not done within SETTLE_S.
    stranded: list[str] = field(default_factory=list)
    #: Final runs completed by a report other than their last hand-out's.
    misfenced: list[str] = field(default_factory=list)
    #: Run ids, record ids or tokens given twice, or tokens handed out after the
    #: failover not above every one handed out before it.
    repeated: list[str] = field(default_factory=list)

    def line(self) -> str:
        again = "nothing made again"
        if self.again_s == self.again_s:  # not nan
            again = f"the last run or record made again after {self.again_s:.2f} s"
        return (
            f"invokes {self.invokes} lost {self.invokes_lost}; completes {self.completes} "
            f"lost {self.completions_lost}; runs twice {self.runs_twice} "
            f"({self.twice_completion_lost} after a lost completion); appends {self.appends}"
            f" lost {self.appends_lost}; acks {self.acks} lost {self.acks_lost} "
            f"({self.records_gone} records handled are gone); "
            f"records twice {self.records_twice}; refused {self.refused}; not durable "
            f"{self.not_durable}; promoted after "
            f"{self.promoted_s:.2f} s, work flowing after {self.flow_s:.2f} s, {again}; "
            f"losses acked within {self.loss_window_s * 1000:.0f} ms before the kill; "
            f"settled in {self.settle_s:.2f} s"
        )


@dataclass
class Load:
    """The producer's side: what each call was answered, and when."""

    client: FloClient
    stream: str
    running: bool = True
    invoked: dict[str, tuple[str, float]] = field(default_factory=dict)  # key: (run, t)
    appended: dict[bytes, tuple[str, float]] = field(default_factory=dict)  # payload: (id, t)
    #: Writes answered NotDurableError (module docstring).
    not_durable: int = 0

    async def invokes(self, lane: int) -> None:
        i = 0
        while self.running:
            key = f"{lane}-{i}"
            try:
                options = ActionInvokeOptions(idempotency_key=key)
                run = await self.client.action.invoke(ACTION, key.encode(), options)
            except FloError as exc:  # no primary now, or not durable: the same key again
                self.not_durable += isinstance(exc, NotDurableError)
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
                added = await self.client.stream.append(self.stream, payload)
            except NotDurableError:  # applied: the next payload
                self.not_durable += 1
                i += 1
                continue
            except FloError:  # not answered: perhaps applied, sent again
                await asyncio.sleep(0.05)
                continue
            self.appended[payload] = (f"{added.partition}-{added.id.to_redis()}", time.time())
            i += 1
            await asyncio.sleep(0.002)


@dataclass
class Seen:
    """The worker's ledger (chaos_worker.py), read: each run's hand-outs (token: when its
    handler began), each accepted complete (run and token: when), each record's handler
    starts, and how many acks and refusals the store answered."""

    handouts: dict[str, dict[int, float]] = field(default_factory=dict)
    completed: dict[tuple[str, int], float] = field(default_factory=dict)
    handled: dict[str, list[float]] = field(default_factory=dict)
    acks: int = 0
    refused: dict[str, int] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> Seen:
        ledger = cls()
        lines = path.read_text().splitlines() if path.exists() else []
        for kind, *words, at in (line.split() for line in lines):
            t = float(at)
            if kind == "run":
                ledger.handouts.setdefault(words[0], {}).setdefault(int(words[1]), t)
            elif kind == "completed":
                run_id, _, token = words[0].rpartition("/")
                ledger.completed[(run_id, int(token))] = t
            elif kind == "record":
                ledger.handled.setdefault(words[0], []).append(t)
            elif kind == "acked":
                ledger.acks += 1
            else:
                ledger.refused[words[0]] = ledger.refused.get(words[0], 0) + 1
        return ledger


async def _until(probe: Callable[[], Awaitable[bool]], deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            if await probe():
                return True
        except (FloError, RedisError):
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
    figures = Figures()
    async with FloClient(url, namespace=namespace, **(client_options or {})) as client:
        await client.action.register(ACTION, options=OPTIONS)
        leased = StreamGroupJoinOptions(ack_timeout_ms=LEASE_MS)
        await client.stream.group_join(stream, GROUP, "setup", leased)
        await client.stream.group_leave(stream, GROUP, "setup")
        worker = subprocess.Popen(  # noqa: ASYNC220 - starting it does not block
            [sys.executable, str(HERE / "chaos_worker.py"), url, namespace, ACTION, stream,
             str(ledger), durability], cwd=HERE,
        )  # fmt: skip
        try:
            await _joined(client, stream)
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
            await _count(client, load, Seen.read(ledger), killed, figures)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait(10)
    return figures


async def _joined(client: FloClient, stream: str) -> None:
    """Wait until the worker process has joined the group and registered its actions."""

    async def joined() -> bool:
        groups = await client.stream.groups(stream)
        return any(g.consumers for g in groups) and bool((await client.worker.list()).workers)

    assert await _until(joined, time.monotonic() + 30), "the worker process did not start"


async def _settle(client: FloClient, load: Load, figures: Figures) -> None:
    """Wait until every surviving run is completed and the group has nothing left."""
    start = time.monotonic()
    deadline = start + SETTLE_S
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
        return not await records_left(client, load.stream)

    await _until(runs_done, deadline)
    if not await _until(group_done, deadline):
        figures.stranded.append(f"stream {load.stream}: records left in group {GROUP}")
    figures.stranded += sorted(left)
    figures.settle_s = time.monotonic() - start


async def records_left(client: FloClient, stream: str) -> set[str]:
    """The records of ``stream`` (``<partition>-<id>``) the group has not done: pending,
    or past its cursor. Read from the group, not from its ``lag``: a replica's copy of a
    group never knows how many entries it has read, so once promoted it reports no lag
    (None) until its cursor reaches the end of the stream."""
    redis, namespace = client.session.redis, client.session.get_namespace(None)
    left: set[str] = set()
    for partition in range(max(g.partitions for g in await client.stream.groups(stream))):
        log = stream_keys(namespace, stream, partition).log
        (group,) = [g for g in await redis.xinfo_groups(log) if decoded(g["name"]) == GROUP]
        pending = await redis.xpending_range(log, GROUP, "-", "+", int(group["pending"]) + 1)
        ahead: Any = await redis.xrange(log, f"({decoded(group['last-delivered-id'])}", "+")
        ids = [p["message_id"] for p in pending] + [entry_id for entry_id, _ in ahead]
        left.update(f"{partition}-{decoded(i)}" for i in ids)
    return left


async def _count(
    client: FloClient, load: Load, ledger: Seen, killed: float, figures: Figures
) -> None:
    """Read the end state against what the callers were told and what the ledger saw."""
    lost_at: list[float] = []
    kept = await _runs_kept(client, load, ledger, figures, lost_at)
    for (run_id, token), t in ledger.completed.items():
        if kept.get(run_id) != token:
            figures.completions_lost += 1
            lost_at.append(t)
    again: list[float] = []
    for run_id, handouts in ledger.handouts.items():
        starts = [handouts[token] for token in sorted(handouts)]
        if len(starts) > 1:
            figures.runs_twice += 1
            lost = any((run_id, token) in ledger.completed for token in sorted(handouts)[:-1])
            figures.twice_completion_lost += lost
            lost_at += starts[:-1]
            again.append(starts[-1])
    records = await _stream_records(client, load.stream)
    present = set(records.values())
    for payload, (_, acked_at) in load.appended.items():
        if payload not in present:
            figures.appends_lost += 1
            lost_at.append(acked_at)
    for starts in ledger.handled.values():
        if len(starts) > 1:
            figures.records_twice += 1
            lost_at += starts[:-1]
            again.append(starts[-1])
    figures.stranded += sorted(set(records) - set(ledger.handled))
    figures.invokes, figures.appends = len(load.invoked), len(load.appended)
    figures.completes, figures.acks = len(ledger.completed), ledger.acks
    figures.records_gone = len(set(ledger.handled) - set(records))
    done = len(set(records) - await records_left(client, load.stream))  # one ack of each held
    figures.acks_lost = figures.acks - figures.records_gone - done
    assert figures.acks_lost >= 0, (
        f"{figures.acks} acks answered, fewer than the {done} records done and the "
        f"{figures.records_gone} handled records gone: the ledger or the group is miscounted"
    )
    figures.refused, figures.not_durable = ledger.refused, load.not_durable
    flowing = killed + IN_FLIGHT_S
    after = [t for t in ledger.completed.values() if t > flowing]
    figures.flow_s = min(after) - killed if after else float("nan")
    figures.again_s = max(again) - killed if again else float("nan")
    figures.loss_window_s = max((killed - t for t in lost_at), default=0.0)
    figures.repeated = _repeated(load, ledger, killed, killed + figures.promoted_s)


async def _runs_kept(
    client: FloClient, load: Load, ledger: Seen, figures: Figures, lost_at: list[float]
) -> dict[str, int]:
    """The token each surviving completed run was completed with; lost invokes counted
    (when each was answered added to ``lost_at``), runs completed by another report than
    their last hand-out's listed as misfenced."""
    kept: dict[str, int] = {}
    for run_id, acked_at in load.invoked.values():
        try:
            status = await client.action.status(run_id)
        except NotFoundError:
            figures.invokes_lost += 1
            lost_at.append(acked_at)
            continue
        if status.status != RunStatus.COMPLETED:
            continue  # stranded: listed by _settle
        kept[run_id] = status.token
        token = int((status.output or b"0 0").split()[1])
        if token != status.token or token != max(ledger.handouts.get(run_id, {0: 0.0})):
            figures.misfenced.append(run_id)
    return kept


def _repeated(load: Load, ledger: Seen, killed: float, promoted: float) -> list[str]:
    """Ids and tokens given twice, and tokens handed out after the failover not above
    every one handed out before the kill (the lost ones too)."""
    runs = collections.Counter(run_id for run_id, _ in load.invoked.values())
    records = collections.Counter(record for record, _ in load.appended.values())
    handouts = [(token, t) for run in ledger.handouts.values() for token, t in run.items()]
    tokens = collections.Counter(token for token, _ in handouts)
    repeated = [f"run id {run_id}" for run_id, n in runs.items() if n > 1]
    repeated += [f"record id {record}" for record, n in records.items() if n > 1]
    repeated += [f"token {token}" for token, n in tokens.items() if n > 1]
    before = [token for token, t in handouts if t < killed]
    after = [token for token, t in handouts if t > promoted]
    if before and after and min(after) <= max(before):
        repeated.append(f"token {min(after)} after the failover, {max(before)} before")
    return repeated
