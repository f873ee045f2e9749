"""One bad record stops nothing: a stored record that does not decode is set aside into
its quarantine with its bytes and why, counted, logged once at WARNING, and can be put
back or deleted; every other run, entry, message, schedule and page goes on.

Each test writes garbage where flo-redis keeps a record, behind the API (``raw``), as a
bug elsewhere, a careless hand or a damaged restore would."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import aiohttp
import msgpack
import pytest
import redis.asyncio as aioredis
from polling import eventually, running
from script_state import by_sha

from flo_redis import (
    ActionContext,
    ActionInvokeOptions,
    ActionQuarantine,
    BadRecordError,
    DequeueOptions,
    FloClient,
    GroupQuarantine,
    NotFoundError,
    QueueQuarantine,
    RunStatus,
    StreamContext,
    StreamGroupJoinOptions,
    StreamGroupReadOptions,
    StreamReadOptions,
    ValidationError,
    WorkerAwaitOptions,
    WorkerQuarantine,
)
from flo_redis._wire.keys import action_keys, namespace_keys, queue_keys, stream_keys
from flo_redis.actions import graph
from flo_redis.actions.graph import deps_request
from flo_redis.actions.schedules import fire_due
from flo_redis.dashboard import start_dashboard

FLO_REDIS = str(Path(sys.executable).with_name("flo-redis"))
GARBAGE = b"\x80\x01not a record"  # an empty map, then bytes: msgpack's ExtraData
NOT_A_MAP = msgpack.packb([1, 2, 3])  # decodes, but to a list


@pytest.fixture(autouse=True, params=["functions", "by_sha"])
def calls(request: pytest.FixtureRequest) -> str:
    """Every test twice: the client calls the scripts as Redis Functions, then by SHA
    (as on a cluster), where each script carries only the helpers it includes."""
    if request.param == "by_sha":
        if "client" not in request.fixturenames:
            pytest.skip("a cluster calls its scripts by SHA either way")
        by_sha(request.getfixturevalue("client"))
    return str(request.param)


def warnings_about(caplog: pytest.LogCaptureFixture, key: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "flo_redis.quarantine"
        and r.levelno == logging.WARNING
        and key in r.getMessage()
    ]


def cli(redis_url: str, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``flo-redis ARGS`` as an operator runs it: its own process."""
    env = {
        **os.environ,
        "FLO_REDIS_URL": redis_url,
        "FLO_REDIS_NAMESPACE": namespace,
        "COLUMNS": "250",  # rich's tables at full width: ids unbroken
    }
    return subprocess.run(
        [FLO_REDIS, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def answered(done: subprocess.CompletedProcess[str], *codes: int) -> None:
    """The command ended as asked, with a message, never a traceback."""
    assert done.returncode in codes, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout, done.stderr


async def two_runs_set_aside(
    client: FloClient, raw: aioredis.Redis, inputs: tuple[bytes, bytes] = (b"x", b"x")
) -> tuple[str, str, bytes]:
    """Runs a and b of action 'job', their records overwritten with garbage and set aside
    by a claim; and a's record as it was (a fixed record to put back)."""
    await client.action.register("job")
    a, b = [(await client.action.invoke("job", x)).run_id for x in inputs]
    keys = action_keys(client.namespace, "job")
    good = await raw.hget(keys.runs, a)
    assert good is not None
    for run_id in (a, b):
        await raw.hset(keys.runs, run_id, GARBAGE)
    await client.worker.register("w", ["job"])
    assert await client.worker.await_tasks("w", ["job"], 10, WorkerAwaitOptions(block_ms=0)) == []
    return a, b, good


# --- runs -----------------------------------------------------------------------------


async def test_a_run_that_does_not_decode_is_set_aside_and_the_queue_goes_on(
    client: FloClient, raw: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "flo_redis.quarantine")
    await client.action.register("job")
    ids = [(await client.action.invoke("job", f"input-{i}".encode())).run_id for i in range(6)]
    keys = action_keys(client.namespace, "job")
    await raw.hset(keys.runs, ids[0], GARBAGE)  # the head of the queue
    await raw.hset(keys.runs, ids[3], NOT_A_MAP)
    done: list[str] = []
    worker = client.new_action_worker(block_ms=200)

    @worker.action("job")
    async def handle(ctx: ActionContext) -> bytes:
        done.append(ctx.task_id)
        return b"ok"

    async with running(worker):
        await eventually(lambda: asyncio.sleep(0, sorted(done)), lambda d: len(d) == 4)
        for _ in range(3):  # polls go on; nothing is set aside (or told) twice
            await client.action.invoke("job", b"more")
        await eventually(lambda: asyncio.sleep(0, len(done)), lambda n: n == 7)
    assert sorted(done[:4]) == sorted([ids[1], ids[2], ids[4], ids[5]])
    counts = await client.action.counts("job")
    assert (counts.quarantined, counts.pending, counts.completed) == (2, 0, 7)
    page = await client.quarantine.list(ActionQuarantine("job"))
    by_key = {r.key: r for r in page.records}
    assert set(by_key) == {ids[0], ids[3]}
    assert by_key[ids[0]].record == GARBAGE and by_key[ids[0]].payload == b"input-0"
    assert "left after its msgpack map" in by_key[ids[0]].reason
    assert by_key[ids[3]].kind == "run" and "not a run record" in by_key[ids[3]].reason
    assert len(warnings_about(caplog, repr(ids[0]))) == 1
    assert len(warnings_about(caplog, repr(ids[3]))) == 1
    with pytest.raises(NotFoundError, match="set aside in quarantine"):
        await client.action.status(ids[0])


async def test_a_run_set_aside_is_put_back_or_deleted(
    client: FloClient, raw: aioredis.Redis
) -> None:
    a, b, good = await two_runs_set_aside(client, raw, (b"in-a", b"in-b"))
    where = ActionQuarantine("job")
    first, second = (await client.quarantine.list(where)).records
    assert (first.key, second.key) == (a, b)
    with pytest.raises(ValidationError, match="still does not decode"):
        await client.quarantine.replay(where, first.id)  # the same bytes: refused
    await client.quarantine.replay(where, first.id, good)
    assert (await client.action.status(a)).status == RunStatus.PENDING
    [run] = await client.worker.await_tasks("w", ["job"], 10, WorkerAwaitOptions(block_ms=0))
    assert (run.run_id, run.payload) == (a, b"in-a")  # its input came back with it
    with pytest.raises(NotFoundError, match=r"no longer in the quarantine|no record"):
        await client.quarantine.replay(where, first.id, good)
    assert await client.quarantine.delete(where, [second.id, "1-0"]) == 1
    assert await client.quarantine.count(where) == 0
    assert (await client.action.counts("job")).quarantined == 0


@pytest.mark.parametrize("report", ["complete", "fail", "touch", "release", "cancel"])
async def test_a_report_on_a_run_that_no_longer_decodes_is_refused_and_sets_it_aside(
    client: FloClient, raw: aioredis.Redis, caplog: pytest.LogCaptureFixture, report: str
) -> None:
    caplog.set_level(logging.WARNING, "flo_redis.quarantine")
    await client.action.register("job")
    await client.worker.register("w", ["job"])
    run_id = (await client.action.invoke("job", b"x")).run_id
    [run] = await client.worker.await_tasks("w", ["job"], 1, WorkerAwaitOptions(block_ms=0))
    await raw.hset(action_keys(client.namespace, "job").runs, run_id, GARBAGE)
    calls = {
        "complete": lambda: client.worker.complete("w", "job", run_id, b"done"),
        "fail": lambda: client.worker.fail("w", "job", run_id, "boom"),
        "touch": lambda: client.worker.touch("w", "job", run_id),
        "release": lambda: client.worker.release("w", "job", run_id, run.token),
        "cancel": lambda: client.action.cancel(run_id),
    }
    with pytest.raises(BadRecordError, match="set aside"):
        await calls[report]()
    with pytest.raises(NotFoundError) as again:  # gone from the queue: told once only
        await calls[report]()
    assert not isinstance(again.value, BadRecordError)
    assert len(warnings_about(caplog, repr(run_id))) == 1
    [aside] = (await client.quarantine.list(ActionQuarantine("job"))).records
    assert (aside.key, aside.record, aside.payload) == (run_id, GARBAGE, b"x")
    assert (await client.action.counts("job")).running == 0


@pytest.mark.slow
async def test_runs_commands_and_dashboard_answer_about_a_run_that_does_not_decode(
    client: FloClient, raw: aioredis.Redis, redis_url: str
) -> None:
    await client.action.register("job")
    ids = [(await client.action.invoke("job", b"x")).run_id for _ in range(3)]
    await raw.hset(action_keys(client.namespace, "job").runs, ids[1], GARBAGE)
    ns = client.namespace
    listed = cli(redis_url, ns, "runs", "list", "job")
    answered(listed, 0)
    assert ids[0] in listed.stdout and ids[2] in listed.stdout
    assert "do not decode" in listed.stdout and ids[1] in listed.stdout
    shown = cli(redis_url, ns, "runs", "show", ids[1])
    answered(shown, 1)
    assert "BadRecordError" in shown.stderr and "does not decode" in shown.stderr
    dashboard = await start_dashboard(client, port=0)
    try:
        async with aiohttp.ClientSession() as http:
            for path in ("", "action?name=job", f"run?id={ids[1]}", "workers"):
                async with http.get(dashboard.url + path) as response:
                    assert response.status < 500, (path, response.status)
    finally:
        await dashboard.close()
    cancelled = cli(redis_url, ns, "runs", "cancel", "--yes", ids[1])
    answered(cancelled, 1)
    assert "set aside" in cancelled.stderr
    aside = cli(redis_url, ns, "quarantine", "list", "--action", "job", "--json")
    answered(aside, 0)
    assert ids[1] in aside.stdout
    status = cli(redis_url, ns, "status", "--json")
    answered(status, 0)
    assert '"quarantined": 1' in status.stdout
    assert (await client.action.counts("job")).pending == 2


async def test_the_dashboard_lists_replays_and_deletes_behind_its_guard(
    client: FloClient, raw: aioredis.Redis
) -> None:
    a, b, good = await two_runs_set_aside(client, raw)
    first, second = (await client.quarantine.list(ActionQuarantine("job"))).records
    # The bytes set aside do not decode: the dashboard puts back only a fixed record,
    # so here the operator fixes the first with the client, then replays from the page.
    await client.quarantine.replay(ActionQuarantine("job"), first.id, good)
    token = "a-long-enough-write-token"
    dashboard = await start_dashboard(client, port=0, token=token)
    jar = aiohttp.CookieJar(unsafe=True)  # keeps 127.0.0.1's cookies, as a browser does
    try:
        async with aiohttp.ClientSession(cookie_jar=jar) as http:
            page = dashboard.url + "quarantine?action=job"
            async with http.get(page) as response:
                body = await response.text()
                assert response.status == 200 and second.id in body and b in body
            form = {"action": "job", "id": second.id, "next": "/quarantine?action=job"}
            async with http.post(dashboard.url + "quarantine/delete", data=form) as response:
                assert response.status == 403  # not logged in: refused, nothing changed
            assert await client.quarantine.count(ActionQuarantine("job")) == 1
            async with http.post(
                dashboard.url + "login", data={"token": token, "next": "/quarantine?action=job"}
            ) as response:
                body = await response.text()
            csrf = body.split('name="csrf" value="', 1)[1].split('"', 1)[0]
            async with http.post(
                dashboard.url + "quarantine/replay", data={**form, "csrf": csrf}
            ) as response:  # the bytes still do not decode: refused, shown as such
                assert response.status == 400 and "still does not decode" in await response.text()
            async with http.post(
                dashboard.url + "quarantine/delete", data={**form, "csrf": csrf}
            ) as response:
                assert response.status == 200 and "deleted" in await response.text()
    finally:
        await dashboard.close()
    assert await client.quarantine.count(ActionQuarantine("job")) == 0
    assert (await client.action.status(a)).status == RunStatus.PENDING


@pytest.mark.slow
async def test_the_quarantine_commands_replay_and_delete(
    client: FloClient, raw: aioredis.Redis, redis_url: str
) -> None:
    a, b, good = await two_runs_set_aside(client, raw)
    first, second = (await client.quarantine.list(ActionQuarantine("job"))).records
    ns = client.namespace
    listed = cli(redis_url, ns, "quarantine", "list", "--action", "job")
    answered(listed, 0)
    assert first.id in listed.stdout and "2 in all" in listed.stdout
    refused = cli(redis_url, ns, "quarantine", "replay", "--action", "job", first.id)
    answered(refused, 1)
    assert "still does not decode" in refused.stderr
    put = cli(redis_url, ns, "quarantine", "replay", "--action", "job", first.id,
              "--record-hex", good.hex())  # fmt: skip
    answered(put, 0)
    assert (await client.action.status(a)).status == RunStatus.PENDING
    answered(cli(redis_url, ns, "quarantine", "list"), 2)  # which quarantine: a usage error
    gone = cli(redis_url, ns, "quarantine", "delete", "--action", "job", "--all", "--yes")
    answered(gone, 0)
    assert "deleted 1" in gone.stdout
    assert await client.quarantine.count(ActionQuarantine("job")) == 0
    assert second.key == b


@pytest.mark.slow
async def test_a_quarantine_keeps_its_newest_records(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.action.register("job")
    keys = action_keys(client.namespace, "job")
    n = 1010
    async with raw.pipeline(transaction=False) as pipe:
        for i in range(n):
            pipe.hset(keys.runs, f"job:{i + 1}", GARBAGE)
            pipe.zadd(keys.pending, {f"job:{i + 1}": i})
        await pipe.execute()
    await client.worker.register("w", ["job"])
    while await client.action.counts("job") and (await client.action.counts("job")).pending:
        await client.worker.await_tasks("w", ["job"], 100, WorkerAwaitOptions(block_ms=0))
    assert await client.quarantine.count(ActionQuarantine("job")) == 1000
    page = await client.quarantine.list(ActionQuarantine("job"), limit=1)
    assert page.records[0].key == "job:11" and page.cursor is not None


# --- schedules ------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_schedule_that_cannot_be_evaluated_is_set_aside_and_the_others_fire(
    client: FloClient, raw: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "flo_redis.quarantine")
    await client.action.register("tick")
    await client.action.schedule("tick", timedelta(seconds=1), name="good")
    await client.action.schedule("tick", "* * * * *", name="zoned", timezone="UTC")
    keys = action_keys(client.namespace, "tick")
    stored = await raw.hget(keys.schedules, "zoned")
    assert stored is not None
    record = msgpack.unpackb(stored, raw=True)
    record[b"z"] = b"Nowhere/Not_On_This_Host"  # a zone this host's tz database lacks
    await raw.hset(keys.schedules, "zoned", msgpack.packb(record, use_bin_type=False))
    await raw.zadd(keys.schedule_due, {"zoned": 0})  # due first, always
    worker = client.new_action_worker(block_ms=200)
    ran: list[bytes] = []

    @worker.action("tick")
    async def tick(ctx: ActionContext) -> bytes:
        ran.append(ctx.input())
        return b""

    async with running(worker):
        await eventually(lambda: asyncio.sleep(0, len(ran)), lambda n: n >= 2, timeout=30)
    assert len(warnings_about(caplog, "'zoned'")) == 1
    assert [s.name for s in await client.action.schedules("tick")] == ["good"]
    [aside] = (await client.quarantine.list(ActionQuarantine("tick"))).records
    assert (aside.kind, aside.key) == ("schedule", "zoned")
    assert "cannot be evaluated" in aside.reason and "Nowhere" in aside.reason
    assert (await client.action.counts("tick")).quarantined == 1
    with pytest.raises(ValidationError, match="cannot be evaluated on this host"):
        await client.quarantine.replay(ActionQuarantine("tick"), aside.id)
    await client.quarantine.replay(ActionQuarantine("tick"), aside.id, stored)  # fixed
    back = {s.name: s for s in await client.action.schedules("tick")}
    assert back["zoned"].timezone == "UTC" and back["zoned"].next_due_ms > 0
    assert await fire_due(client.session, "tick") >= 0


# --- the worker registry ---------------------------------------------------------------


@pytest.mark.slow
async def test_a_garbage_worker_entry_is_set_aside_and_status_and_pages_answer(
    client: FloClient, raw: aioredis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "flo_redis.quarantine")
    await client.worker.register("good", ["job"])
    ns = namespace_keys(client.namespace)
    await raw.hset(ns.workers, "junk", GARBAGE)
    await raw.zadd(ns.worker_ids, {"junk": 0})
    status = cli(redis_url, client.namespace, "status")
    answered(status, 0)
    assert "good" in status.stdout
    # The status command met it first, set it aside, and said so once on its stderr.
    assert status.stderr.count("worker 'junk' does not decode") == 1, status.stderr
    listed = cli(redis_url, client.namespace, "workers", "list")
    answered(listed, 0)
    assert "junk" not in listed.stderr + listed.stdout
    dashboard = await start_dashboard(client, port=0)
    try:
        async with aiohttp.ClientSession() as http:
            for path in ("", "workers"):
                async with http.get(dashboard.url + path) as response:
                    assert response.status == 200, (path, response.status)
    finally:
        await dashboard.close()
    assert [w.worker_id for w in (await client.worker.list()).workers] == ["good"]
    [aside] = (await client.quarantine.list(WorkerQuarantine())).records
    assert (aside.kind, aside.key, aside.record) == ("worker", "junk", GARBAGE)
    assert warnings_about(caplog, "'junk'") == []  # told where it was set aside, not again


@pytest.mark.slow
async def test_a_live_worker_whose_record_is_damaged_registers_again(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.action.register("job")
    worker = client.new_action_worker(worker_id="w-live", block_ms=200)
    done: list[str] = []

    @worker.action("job")
    async def handle(ctx: ActionContext) -> bytes:
        done.append(ctx.task_id)
        return b""

    async with running(worker):
        await eventually(lambda: client.worker.list(), lambda r: len(r.workers) == 1)
        await raw.hset(namespace_keys(client.namespace).workers, "w-live", NOT_A_MAP)
        run_id = (await client.action.invoke("job", b"")).run_id
        await eventually(lambda: asyncio.sleep(0, done), lambda d: run_id in d, timeout=30)
        await eventually(
            lambda: client.worker.list(),
            lambda r: [w.worker_id for w in r.workers] == ["w-live"],
            timeout=30,
        )
    assert await client.quarantine.count(WorkerQuarantine()) == 1


# --- streams ---------------------------------------------------------------------------


async def test_an_entry_whose_headers_do_not_decode_stops_nothing(
    client: FloClient, raw: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "flo_redis.quarantine")
    await client.stream.group_join("orders", "billing", "setup")
    log = stream_keys(client.namespace, "orders").log
    for i in range(3):
        await client.stream.append(
            "orders",
            f"order-{i}".encode(),
        )
    bad = (await raw.xadd(log, {"p": b"poisoned", "h": NOT_A_MAP})).decode()
    for i in range(3, 6):
        await client.stream.append("orders", f"order-{i}".encode())
    read = await client.stream.read("orders", StreamReadOptions())
    assert [r.payload for r in read.records][3] == b"poisoned"
    assert read.records[3].headers is None
    seen: list[bytes] = []

    async def handle(ctx: StreamContext) -> None:
        seen.append(ctx.payload)

    for _ in range(2):  # started again: the entry was set aside the first time
        worker = client.new_stream_worker(
            stream="orders", group="billing", handler=handle, batch_size=10, block_ms=200
        )
        async with running(worker):
            await eventually(lambda: asyncio.sleep(0, len(seen)), lambda n: n >= 6)
    assert sorted(seen) == sorted(f"order-{i}".encode() for i in range(6))
    where = GroupQuarantine("orders", "billing")
    [aside] = (await client.quarantine.list(where)).records
    assert (aside.kind, aside.key, aside.record, aside.payload) == (
        "entry", bad, NOT_A_MAP, b"poisoned",
    )  # fmt: skip
    assert len(warnings_about(caplog, repr(bad))) == 1
    [group] = await client.stream.groups("orders")
    assert (group.pending, group.quarantined) == (0, 1)
    with pytest.raises(ValidationError, match="still does not decode"):
        await client.quarantine.replay(where, aside.id)
    await client.quarantine.replay(where, aside.id, msgpack.packb({"fixed": "yes"}))
    again = await client.stream.group_read(
        "orders", "billing", "c1", StreamGroupReadOptions(count=10)
    )
    assert [(r.payload, r.headers) for r in again.records] == [(b"poisoned", {"fixed": "yes"})]


async def test_a_damaged_delivery_record_and_poll_memo_read_as_none(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.stream.group_join(
        "orders", "billing", "c1", StreamGroupJoinOptions(ack_timeout_ms=60_000)
    )
    for i in range(4):
        await client.stream.append("orders", f"o{i}".encode())
    options = StreamGroupReadOptions(count=2, poll_id="poller#1")
    got = await client.stream.group_read("orders", "billing", "c1", options)
    group = stream_keys(client.namespace, "orders").group("billing")
    await client.stream.group_nack("orders", "billing", [got.records[0].id])
    await raw.hset(group.deliveries, got.records[0].id.to_redis(), GARBAGE)
    await raw.hset(group.polls, "poller", GARBAGE)
    retried = await client.stream.group_read("orders", "billing", "c1", options)
    assert retried.records  # a fresh read: the memo reads as none
    ids = [r.id for r in retried.records]
    await client.stream.group_ack("orders", "billing", ids)
    assert got.records[0].id in ids


# --- plain queues ------------------------------------------------------------------------


async def test_a_message_that_does_not_decode_is_set_aside(
    client: FloClient, raw: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "flo_redis.quarantine")
    seqs = [await client.queue.enqueue("mail", f"m{i}".encode()) for i in range(4)]
    keys = queue_keys(client.namespace, "mail")
    good = await raw.hget(keys.msgs, str(seqs[1]))
    await raw.hset(keys.msgs, str(seqs[1]), GARBAGE)
    got = await client.queue.dequeue("mail", 10, DequeueOptions())
    assert [m.payload for m in got.messages] == [b"m0", b"m2", b"m3"]
    where = QueueQuarantine("mail")
    [aside] = (await client.quarantine.list(where)).records
    assert (aside.kind, aside.key, aside.payload) == ("message", str(seqs[1]), b"m1")
    assert len(warnings_about(caplog, repr(str(seqs[1])))) == 1
    await client.queue.ack("mail", [m.seq for m in got.messages])
    await client.quarantine.replay(where, aside.id, good)
    back = await client.queue.dequeue("mail", 10, DequeueOptions())
    assert [m.payload for m in back.messages] == [b"m1"]


# --- slots -------------------------------------------------------------------------------


async def test_a_slot_holder_that_does_not_decode_frees_its_slot(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.action.register("job")
    keys = action_keys(client.namespace, "job")
    await raw.hset(keys.slots, "1", GARBAGE)
    assert await client.slots.holders("job") == []
    stats = await client.action.stats("job")
    assert stats.slots_held == 0
    slot = await client.slots.acquire("job", capacity=1)
    assert slot is not None and slot.index == 1
    [aside] = (await client.quarantine.list(ActionQuarantine("job"))).records
    assert (aside.kind, aside.key) == ("slot", "1")
    with pytest.raises(ValidationError, match="not put back"):
        await client.quarantine.replay(ActionQuarantine("job"), aside.id)


# --- the cluster -------------------------------------------------------------------------


@pytest.mark.cluster
async def test_set_aside_replayed_and_deleted_on_a_cluster(cluster_url: str) -> None:
    async with FloClient(cluster_url, namespace=f"q-{os.getpid()}-{id(cluster_url)}") as c:
        names = [f"job{i}" for i in range(3)]  # spread over the cluster's slots
        conn = c.redis
        for name in names:
            await c.action.register(name)
            run_id = (await c.action.invoke(name, b"x")).run_id
            await conn.hset(action_keys(c.namespace, name).runs, run_id, GARBAGE)
            await c.action.invoke(name, b"y")
        await c.worker.register("w", names)
        for name in names:
            [run] = await c.worker.await_tasks("w", [name], 5, WorkerAwaitOptions(block_ms=0))
            assert run.payload == b"y"
            [aside] = (await c.quarantine.list(ActionQuarantine(name))).records
            assert (await c.action.counts(name)).quarantined == 1
            assert await c.quarantine.delete(ActionQuarantine(name), [aside.id]) == 1
        await c.stream.group_join("s", "g", "c1")
        log = stream_keys(c.namespace, "s").log
        await conn.xadd(log, {"p": b"bad", "h": GARBAGE})
        await c.stream.append("s", b"good")
        got = await c.stream.group_read("s", "g", "c1", StreamGroupReadOptions(count=5))
        assert [r.payload for r in got.records] == [b"good"]
        [entry] = (await c.quarantine.list(GroupQuarantine("s", "g"))).records
        await c.quarantine.replay(GroupQuarantine("s", "g"), entry.id, b"")
        again = await c.stream.group_read("s", "g", "c1", StreamGroupReadOptions(count=5))
        assert [(r.payload, r.headers) for r in again.records] == [(b"bad", None)]


async def test_graph_records_that_do_not_decode_are_set_aside_and_the_graph_goes_on(
    client: FloClient, raw: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "flo_redis.quarantine")
    for name in ("parent", "child"):
        await client.action.register(name)
    await client.worker.register("w", ["parent", "child"])
    keys = {name: action_keys(client.namespace, name) for name in ("parent", "child")}
    after = lambda *ids: ActionInvokeOptions(depends_on=list(ids))  # noqa: E731
    # A parent that no longer decodes when a child registers on it: set aside, and the
    # child ends as for a parent not found.
    broken = (await client.action.invoke("parent", b"p1")).run_id
    await raw.hset(keys["parent"].runs, broken, GARBAGE)
    orphan = (await client.action.invoke("child", b"c1", after(broken))).run_id
    # A waiting child that no longer decodes when its parent ends: set aside, and the
    # other child of that parent is released.
    parent = (await client.action.invoke("parent", b"p2")).run_id
    lost, kept = [(await client.action.invoke("child", b"c", after(parent))).run_id for _ in "ab"]
    await raw.hset(keys["child"].runs, lost, NOT_A_MAP)
    [task] = await client.worker.await_tasks("w", ["parent"], 1, WorkerAwaitOptions(block_ms=0))
    await client.worker.complete("w", "parent", task.run_id, b"done")
    await client.action.forward("parent")

    status = await client.action.status(orphan)
    assert (status.status, status.error_message) == (
        RunStatus.FAILED,
        f"parent {broken} not found",
    )
    assert (await client.action.status(kept)).status == RunStatus.PENDING
    assert await raw.zscore(keys["child"].waiting, lost) is None
    for name, run_id, record in (("parent", broken, GARBAGE), ("child", lost, NOT_A_MAP)):
        [aside] = (await client.quarantine.list(ActionQuarantine(name))).records
        assert (aside.kind, aside.key, aside.record) == ("run", run_id, record)
        assert len(warnings_about(caplog, repr(run_id))) == 1
    counts = await client.action.counts("child")
    assert (counts.quarantined, counts.pending, counts.failed) == (1, 1, 1)


async def test_a_run_that_no_longer_decodes_is_set_aside_when_it_waits_for_more(
    client: FloClient, raw: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "flo_redis.quarantine")
    await client.action.register("job")
    await client.worker.register("w", ["job"])
    other = (await client.action.invoke("job", b"other")).run_id
    run_id = (await client.action.invoke("job", b"x")).run_id
    tasks = await client.worker.await_tasks("w", ["job"], 2, WorkerAwaitOptions(block_ms=0))
    task = next(t for t in tasks if t.run_id == run_id)
    keys = action_keys(client.namespace, "job")
    await raw.hset(keys.runs, run_id, GARBAGE)
    deps = deps_request([other], None)
    with pytest.raises(BadRecordError, match="set aside"):
        await graph.suspend(client.session, keys, run_id, task.token, "w", deps)
    [aside] = (await client.quarantine.list(ActionQuarantine("job"))).records
    assert (aside.key, aside.record, aside.payload) == (run_id, GARBAGE, b"x")
    assert len(warnings_about(caplog, repr(run_id))) == 1
    assert await raw.zscore(keys.leases, run_id) is None
