"""Random bytes in every kind of stored record, at once: the other runs, entries and
messages are still handled by real workers, what was damaged is handled or set aside,
and every surface still answers -- the client, the ``flo-redis`` command (its own
process: status, runs list/show/cancel, workers list, quarantine list), the dashboard
over HTTP (no 5xx) and the exporter.

``FLO_QUARANTINE_EXAMPLES`` sets how many random sets of damage to try (default 4,
besides four written out; each set with the scripts called as Redis Functions and by
SHA). Marked slow: a few seconds a set.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from asyncio.subprocess import PIPE
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import aiohttp
import msgpack
import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from polling import eventually, running
from script_state import by_sha

from flo_redis import (
    ActionContext,
    ActionQuarantine,
    ActionRegisterOptions,
    DequeueOptions,
    FloClient,
    FloError,
    GroupQuarantine,
    QueueQuarantine,
    RunState,
    StreamContext,
    StreamGroupJoinOptions,
    StreamGroupReadOptions,
    StreamReadOptions,
    WorkerAwaitOptions,
    WorkerFailOptions,
    WorkerQuarantine,
)
from flo_redis._wire.keys import action_keys, namespace_keys, queue_keys, stream_keys
from flo_redis.dashboard import start_dashboard
from flo_redis.ops.discovery import overview
from flo_redis.ops.exporter import families
from flo_redis.streams import StreamDeadLetterOptions

CLI_BATCH = Path(__file__).resolve().parents[1] / "support" / "cli_batch.py"
EXAMPLES = int(os.environ.get("FLO_QUARANTINE_EXAMPLES", "4"))
KINDS = (
    "run_pending",  # a run waiting in the queue
    "run_completed",  # a finished run kept for retention
    "run_failed",  # a failed run kept for requeue
    "input",  # a run's input (opaque: handed as it is)
    "run_poll_memo",  # what an action poll was handed
    "slot",  # a concurrency slot's holder
    "schedule",  # a schedule of the action
    "entry_headers",  # a stream entry's headers
    "delivery",  # a group's record of an entry handed out again
    "group_poll_memo",  # what a group read was handed
    "dead_letter_headers",  # a dead letter's headers
    "worker",  # a worker registry entry
    "message",  # a plain queue's message record
    "queue_poll_memo",  # what a dequeue was handed
)
BYTES = st.binary(max_size=48)
DAMAGE = st.fixed_dictionaries({kind: BYTES for kind in KINDS})


@dataclass
class World:
    """What one example built, and what it damaged."""

    ns: str
    runs: list[str] = field(default_factory=list)  # pending, undamaged
    bad_run: str = ""
    odd_input_run: str = ""
    completed: str = ""
    failed: str = ""
    entries: list[str] = field(default_factory=list)  # payloads, undamaged
    bad_entry: str = ""
    nacked: bytes = b""
    messages: list[bytes] = field(default_factory=list)
    bad_seq: int = 0


async def build(client: FloClient, raw: aioredis.Redis, damage: dict[str, bytes]) -> World:
    """An action, a stream group, a plain queue and a worker registry, each with one
    record of every kind replaced by ``damage``'s bytes."""
    w = World(client.namespace)
    keys = action_keys(w.ns, "job")
    await client.action.register("job", options=ActionRegisterOptions(max_retries=1))
    await client.worker.register("ghost", ["job"])
    # A completed and a failed run, kept.
    w.completed, w.failed = [(await client.action.invoke("job", b"k")).run_id for _ in range(2)]
    claimed = await client.worker.await_tasks("ghost", ["job"], 2, WorkerAwaitOptions(block_ms=0))
    by_id = {c.run_id: c for c in claimed}
    await client.worker.complete("ghost", "job", w.completed, b"done")
    fail = WorkerFailOptions(retry=False, token=by_id[w.failed].token)
    await client.worker.fail("ghost", "job", w.failed, "boom", fail)
    await raw.hset(keys.runs, w.completed, damage["run_completed"])
    await raw.hset(keys.runs, w.failed, damage["run_failed"])
    # Pending runs: one damaged, one with random bytes as its input.
    ids = [(await client.action.invoke("job", f"in-{i}".encode())).run_id for i in range(5)]
    w.bad_run, w.runs = ids[1], [ids[0], *ids[2:]]
    await raw.hset(keys.runs, w.bad_run, damage["run_pending"])
    w.odd_input_run = (await client.action.invoke("job", damage["input"])).run_id
    await raw.hset(keys.polls, "fuzz", damage["run_poll_memo"])
    await raw.zadd(keys.poll_times, {"fuzz": 10**13})
    await raw.hset(keys.slots, "1", damage["slot"])
    await client.action.schedule("job", timedelta(hours=1), name="hourly")
    await raw.hset(keys.schedules, "hourly", damage["schedule"])
    await raw.zadd(keys.schedule_due, {"hourly": 0})
    # A stream group: entries, one with damaged headers, one nacked (damaged delivery
    # record), a damaged poll memo and a dead letter with damaged headers.
    join = StreamGroupJoinOptions(ack_timeout_ms=60_000)
    await client.stream.group_join("events", "billing", "c0", join)
    part = stream_keys(w.ns, "events")
    group = part.group("billing")
    w.entries = [f"e{i}" for i in range(4)]
    for payload in w.entries[:2]:
        await client.stream.append("events", payload.encode())
    first = await client.stream.group_read(
        "events", "billing", "c0", StreamGroupReadOptions(count=1)
    )
    [held] = first.records
    w.nacked = held.payload
    await client.stream.group_nack("events", "billing", [held.id])
    await raw.hset(group.deliveries, held.id.to_redis(), damage["delivery"])
    headers = damage["entry_headers"]
    w.bad_entry = (await raw.xadd(part.log, {"p": b"odd", "h": headers})).decode()
    for payload in w.entries[2:]:
        await client.stream.append("events", payload.encode())
    await raw.hset(group.polls, "fuzz", damage["group_poll_memo"])
    await raw.zadd(group.poll_times, {"fuzz": 10**13})
    await raw.xadd(group.dead, {"id": "1-1", "p": b"dead", "n": 3, "r": "nacked", "c": "c0",
                                "o": "", "t": 1, "h": damage["dead_letter_headers"]})  # fmt: skip
    # The worker registry and a plain queue.
    registry = namespace_keys(w.ns)
    await raw.hset(registry.workers, "ghost", damage["worker"])
    w.messages = [f"m{i}".encode() for i in range(4)]
    seqs = [await client.queue.enqueue("mail", m) for m in w.messages]
    w.bad_seq = seqs[2]
    queue = queue_keys(w.ns, "mail")
    await raw.hset(queue.msgs, str(w.bad_seq), damage["message"])
    await raw.hset(queue.polls, "fuzz", damage["queue_poll_memo"])
    await raw.zadd(queue.poll_times, {"fuzz": 10**13})
    return w


async def work(client: FloClient, w: World) -> None:
    """Real workers handle every undamaged run and entry; a damaged one is handled or
    set aside, never stops the others."""
    done: dict[str, bytes] = {}
    seen: list[bytes] = []
    worker = client.new_action_worker(block_ms=200)

    @worker.action("job", options=ActionRegisterOptions(max_retries=1))
    async def handle(ctx: ActionContext) -> bytes:
        done[ctx.task_id] = ctx.input()
        return b"ok"

    async def read(ctx: StreamContext) -> None:
        seen.append(ctx.payload)

    streams = client.new_stream_worker(
        stream="events", group="billing", handler=read, batch_size=10, block_ms=200
    )
    async with running(worker), running(streams):
        wanted = {*w.runs, w.odd_input_run}
        await eventually(lambda: asyncio.sleep(0, done), lambda d: wanted <= d.keys(), timeout=30)
        await eventually(
            lambda: asyncio.sleep(0, seen),
            lambda s: {p.encode() for p in w.entries} | {w.nacked} <= set(s),
            timeout=30,
        )
        aside = await eventually(
            lambda: client.quarantine.list(ActionQuarantine("job")),
            lambda page: w.bad_run in done or w.bad_run in {r.key for r in page.records},
            timeout=30,
        )
        # A schedule that cannot be evaluated is set aside by the worker's upkeep.
        await eventually(
            lambda: action_state(client),
            lambda names: "hourly" in names or "set aside" in names,
            timeout=30,
        )
    assert done[w.odd_input_run] == w.damage_input
    keys_aside = {r.key for r in aside.records}
    assert w.bad_run in done or w.bad_run in keys_aside
    group_aside = {
        r.key for r in (await client.quarantine.list(GroupQuarantine("events", "billing"))).records
    }
    assert b"odd" in seen or w.bad_entry in group_aside
    # The plain queue: the undamaged messages come out; the damaged one is set aside.
    got = await client.queue.dequeue("mail", 10, DequeueOptions(poll_id="fuzz#2"))
    payloads = {m.payload for m in got.messages}
    assert set(w.messages) - {w.messages[2]} <= payloads
    aside_seqs = {r.key for r in (await client.quarantine.list(QueueQuarantine("mail"))).records}
    assert w.messages[2] in payloads or str(w.bad_seq) in aside_seqs
    await client.queue.ack("mail", [m.seq for m in got.messages])


async def action_state(client: FloClient) -> set[str]:
    names = {s.name for s in await client.action.schedules("job")}
    page = await client.quarantine.list(ActionQuarantine("job"))
    if any(r.kind == "schedule" for r in page.records):
        names.add("set aside")
    return names


async def surfaces(client: FloClient, w: World) -> None:
    """Every read of the client answers, with a value or a typed error."""

    async def answers(call: object) -> None:
        with contextlib.suppress(FloError):
            await call  # type: ignore[misc]

    for run_id in (*w.runs, w.bad_run, w.completed, w.failed):
        await answers(client.action.status(run_id))
    for state in RunState:
        await client.action.runs("job", state)
    await client.action.failed("job")
    await client.action.counts("job")
    await client.action.stats("job")
    await client.action.schedules("job")
    await client.slots.holders("job")
    assert await client.slots.acquire("job", capacity=2) is not None
    await client.worker.list()
    await answers(client.worker.await_tasks("ghost", ["job"], 1, WorkerAwaitOptions(
        block_ms=0, poll_id="fuzz#7")))  # fmt: skip
    await client.stream.read("events", StreamReadOptions())
    await client.stream.dead_letters("events", "billing", StreamDeadLetterOptions())
    await client.stream.group_pending("events", "billing")
    await client.stream.groups("events")
    await client.stream.group_read("events", "billing", "c9", StreamGroupReadOptions(
        count=5, poll_id="fuzz#3"))  # fmt: skip
    await client.queue.peek("mail", 10)
    await client.queue.dlq_list("mail")
    await answers(client.action.requeue_failed("job"))
    for where in (
        ActionQuarantine("job"),
        GroupQuarantine("events", "billing"),
        QueueQuarantine("mail"),
        WorkerQuarantine(),
    ):
        page = await client.quarantine.list(where)
        assert await client.quarantine.count(where) == len(page.records)
    seen = await overview(client)
    assert families([seen])  # what the exporter serves
    assert seen.actions and seen.actions[0].action == "job"


async def commands(redis_url: str, w: World) -> None:
    """The ``flo-redis`` command answers in a process of its own, never with a
    traceback (``cli_batch.py``: the commands one after the other, in one process)."""
    env = {**os.environ, "FLO_REDIS_URL": redis_url, "FLO_REDIS_NAMESPACE": w.ns}
    batch = [
        ["status"],
        ["runs", "list", "job", "--state", "failed"],
        ["runs", "show", w.completed],
        ["runs", "cancel", "--yes", w.failed],
        ["workers", "list"],
        ["quarantine", "list", "--action", "job"],
    ]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(CLI_BATCH), json.dumps(batch), env=env, stdout=PIPE, stderr=PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode(errors="replace")
    for done in json.loads(out):
        text = done["stdout"] + done["stderr"]
        assert done["code"] in (0, 1), (done["args"], text)
        assert "Traceback" not in text, (done["args"], text)


async def pages(client: FloClient, w: World) -> None:
    """Every dashboard page answers, none with a 5xx."""
    dashboard = await start_dashboard(client, port=0)
    try:
        async with aiohttp.ClientSession() as http:
            paths = [
                "", "workers", "streams", "action?name=job", "action?name=job&state=failed",
                "action?name=job&state=completed", "group?stream=events&group=billing",
                "quarantine?action=job", "quarantine?stream=events&group=billing",
                "quarantine?queue=mail", "quarantine?workers=1",
                *(f"run?id={r}" for r in (w.bad_run, w.completed, w.failed)),
            ]  # fmt: skip
            for path in paths:
                async with http.get(dashboard.url + path) as response:
                    assert response.status < 500, (path, response.status)
    finally:
        await dashboard.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("calls", ["functions", "by_sha"])
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@example(damage=dict.fromkeys(KINDS, b"\x80\x01junk"))  # a map, then bytes
@example(damage=dict.fromkeys(KINDS, msgpack.packb([1, 2, 3])))  # a list, not a map
@example(damage=dict.fromkeys(KINDS, b"\x80"))  # an empty map
@example(damage=dict.fromkeys(KINDS, b""))  # nothing at all
@given(damage=DAMAGE)
def test_random_bytes_in_every_record_stop_nothing(
    redis_url: str, calls: str, damage: dict[str, bytes]
) -> None:
    async def scenario() -> None:
        ns = f"fz-{os.urandom(5).hex()}"
        raw = aioredis.Redis.from_url(redis_url)
        try:
            async with FloClient(redis_url, namespace=ns) as client:
                if calls == "by_sha":
                    by_sha(client)
                w = await build(client, raw, damage)
                w.damage_input = damage["input"]  # type: ignore[attr-defined]
                await work(client, w)
                await surfaces(client, w)
                await pages(client, w)
                await commands(redis_url, w)
        finally:
            found = [k async for k in raw.scan_iter(match=f"*{ns}*", count=1000)]
            if found:
                await raw.delete(*found)
            await raw.aclose()

    asyncio.run(scenario())
