"""The roles of ``flo-redis acl`` (flo_redis.ops.roles) on a real server: each role does what
it needs in its namespace, through the public API, its workers and the CLI; a user of
namespace A reads, writes, publishes and subscribes to nothing of namespace B, over the
whole public API and over raw commands on B's keys and channels; and a refused call
writes nothing. The docs' ACL lines are the ones the command prints."""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest
import redis
from click.testing import CliRunner
from polling import eventually
from roles_world import World, build_world, role_url, snapshot, user_conn

from flo_redis import (
    ActionContext,
    FloClient,
    PermissionDeniedError,
    RunState,
    RunStatus,
    StreamContext,
    StreamGroupReadOptions,
    StreamID,
    StreamTrimOptions,
    WorkerAwaitOptions,
    WorkerCompleteOptions,
)
from flo_redis._wire.denied import is_denied
from flo_redis._wire.keys import action_keys, handoff_channel, notice_channel, owner_channel
from flo_redis.cli import main
from flo_redis.dashboard import start_dashboard
from flo_redis.ops import discovery
from flo_redis.ops.roles import ROLES, setuser_line
from flo_redis.streams.acks import StreamGroupAckOptions
from flo_redis.testing import RedisServer

ACL_PAGE = Path(__file__).resolve().parents[2] / "docs" / "security.md"
THREAT_MODEL = Path(__file__).resolve().parents[2] / "docs" / "threat-model.md"

# What each role needs, by level: every operation below names its level.
NEEDS = {
    "read-only": {"read"},
    "producer": {"read", "produce"},
    "operator": {"read", "produce", "operate"},
    "worker": {"read", "produce", "work"},
    "admin": {"read", "produce", "operate", "work"},
}
SCOPED = [role for role in ROLES if role != "admin"]

Op = Callable[[FloClient, World], Awaitable[object]]


@dataclass(frozen=True)
class Operation:
    name: str
    level: str
    run: Op


async def _claim_and_complete(c: FloClient, w: World) -> None:
    task = (await c.worker.await_task("w1", ["job"], WorkerAwaitOptions(block_ms=0))).task
    assert task is not None
    await c.worker.complete(
        "w1", "job", task.task_id, b"ok", WorkerCompleteOptions(token=task.token)
    )


async def _read_and_ack(c: FloClient, w: World) -> None:
    read = await c.stream.group_read("orders", "g", "c2", StreamGroupReadOptions(count=1))
    ids = [r.id for r in read.records]
    await c.stream.group_ack("orders", "g", ids, StreamGroupAckOptions())


async def _dequeue_and_ack(c: FloClient, w: World) -> None:
    taken = await c.queue.dequeue("q", 1)
    await c.queue.ack("q", [m.seq for m in taken.messages])


async def _acquire_and_release(c: FloClient, w: World) -> None:
    slot = await c.slots.acquire("job", capacity=2)
    assert slot is not None
    await c.slots.release(slot)


OPERATIONS = [
    # Reading.
    Operation("action.status", "read", lambda c, w: c.action.status(w.pending)),
    Operation("action.wait", "read", lambda c, w: c.action.wait(w.completed, timeout_ms=2000)),
    Operation("action.list", "read", lambda c, w: c.action.list()),
    Operation("action.counts", "read", lambda c, w: c.action.counts("job")),
    Operation("action.runs", "read", lambda c, w: c.action.runs("job", RunState.FAILED)),
    Operation("action.failed", "read", lambda c, w: c.action.failed("job")),
    Operation("action.stats", "read", lambda c, w: c.action.stats("job")),
    Operation("action.schedules", "read", lambda c, w: c.action.schedules("job")),
    Operation("worker.list", "read", lambda c, w: c.worker.list()),
    Operation("stream.read", "read", lambda c, w: c.stream.read("orders")),
    Operation("stream.info", "read", lambda c, w: c.stream.info("orders")),
    Operation("stream.list", "read", lambda c, w: c.stream.list()),
    Operation("stream.groups", "read", lambda c, w: c.stream.groups("orders")),
    Operation("stream.group_pending", "read", lambda c, w: c.stream.group_pending("orders", "g")),
    Operation("stream.group_settings", "read", lambda c, w: c.stream.group_settings("orders", "g")),
    Operation("stream.dead_letters", "read", lambda c, w: c.stream.dead_letters("orders", "g")),
    Operation("stream.partitions", "read", lambda c, w: c.stream.partitions("orders")),
    Operation("queue.peek", "read", lambda c, w: c.queue.peek("q", 10)),
    Operation("queue.dlq_list", "read", lambda c, w: c.queue.dlq_list("q")),
    Operation("slots.holders", "read", lambda c, w: c.slots.holders("job")),
    Operation("overview", "read", lambda c, w: discovery.overview(c)),
    # Producing.
    Operation("action.register", "produce", lambda c, w: c.action.register("job2")),
    Operation("action.invoke", "produce", lambda c, w: c.action.invoke("job", b"x")),
    Operation("action.invoke_many", "produce", lambda c, w: c.action.invoke_many("job", [b"a"])),
    Operation("action.cancel (waiting)", "produce", lambda c, w: c.action.cancel(w.pending)),
    Operation(
        "action.schedule",
        "produce",
        lambda c, w: c.action.schedule("job", timedelta(minutes=5), name="five"),
    ),
    Operation("action.unschedule", "produce", lambda c, w: c.action.unschedule("job", "hourly")),
    Operation("stream.create", "produce", lambda c, w: c.stream.create("s2", partitions=2)),
    Operation("stream.append", "produce", lambda c, w: c.stream.append("orders", b"x")),
    Operation("queue.enqueue", "produce", lambda c, w: c.queue.enqueue("q", b"x")),
    # Steering.
    Operation("action.cancel (running)", "operate", lambda c, w: c.action.cancel(w.running)),
    Operation("action.requeue", "operate", lambda c, w: c.action.requeue(w.failed)),
    Operation("action.requeue_failed", "operate", lambda c, w: c.action.requeue_failed("job")),
    Operation("action.purge", "operate", lambda c, w: c.action.purge("job", RunState.FAILED)),
    Operation("action.reap", "operate", lambda c, w: c.action.reap("job")),
    Operation("action.delete", "operate", lambda c, w: c.action.delete("job")),
    Operation("worker.drain", "operate", lambda c, w: c.worker.drain("w1")),
    Operation("worker.deregister", "operate", lambda c, w: c.worker.deregister("w1")),
    Operation(
        "stream.trim", "operate", lambda c, w: c.stream.trim("orders", StreamTrimOptions(max_len=1))
    ),
    Operation(
        "stream.replay_dead_letters",
        "operate",
        lambda c, w: c.stream.replay_dead_letters("orders", "g"),
    ),
    Operation("queue.dlq_requeue", "operate", lambda c, w: c.queue.dlq_requeue("q", [w.dead_seq])),
    Operation(
        "stream.reclaim_gone_owners",
        "operate",
        lambda c, w: c.stream.reclaim_gone_owners("orders", "g"),
    ),
    Operation(
        "queue.reclaim_gone_owners", "operate", lambda c, w: c.queue.reclaim_gone_owners("q")
    ),
    Operation("slots.reclaim_gone", "operate", lambda c, w: c.slots.reclaim_gone("job")),
    # Working.
    Operation("worker.register", "work", lambda c, w: c.worker.register("w2", ["job"])),
    Operation("worker.heartbeat", "work", lambda c, w: c.worker.heartbeat("w1")),
    Operation("claim and complete", "work", _claim_and_complete),
    Operation("stream.group_join", "work", lambda c, w: c.stream.group_join("orders", "g", "c2")),
    Operation("group_read and ack", "work", _read_and_ack),
    Operation(
        "stream.group_claim",
        "work",
        lambda c, w: c.stream.group_claim("orders", "g", "c2", 0, StreamID.MIN, 10),
    ),
    Operation("queue.dequeue and ack", "work", _dequeue_and_ack),
    Operation("slots.acquire and release", "work", _acquire_and_release),
]
READS = [o for o in OPERATIONS if o.level == "read"]
WRITES = [o for o in OPERATIONS if o.level != "read"]


async def outcome(server: RedisServer, url: str, world: World, operation: Operation) -> str:
    """What ``operation`` did as the user of ``url`` on ``world``'s namespace: "works",
    "works, wrote nothing", "refused" (PermissionDeniedError, nothing of the namespace
    written), or what went wrong otherwise."""
    before = snapshot(server, world.namespace)
    try:
        async with FloClient(url, namespace=world.namespace) as client:
            await asyncio.wait_for(operation.run(client, world), 20)
    except PermissionDeniedError:
        changed = _changed(before, snapshot(server, world.namespace))
        return f"refused after writing {changed}" if changed else "refused"
    except Exception as exc:
        return f"failed: {type(exc).__name__}: {exc}"
    return (
        "works" if _changed(before, snapshot(server, world.namespace)) else "works, wrote nothing"
    )


def _changed(before: dict[bytes, bytes | None], after: dict[bytes, bytes | None]) -> list[bytes]:
    return sorted(k for k in {*before, *after} if before.get(k) != after.get(k))


def expect_own(role: str, operation: Operation, got: str) -> bool:
    if operation.level in NEEDS[role]:
        return got.startswith("works")
    if role == "read-only":  # it writes nothing: refused before anything is written
        return got in ("refused", "works, wrote nothing")
    return got == "refused" or got.startswith("works")  # not its need: never half done


@pytest.fixture(scope="module")
def other(server: RedisServer) -> Iterator[World]:
    """Namespace B: populated once, read-only for every test here (its snapshot must
    never change)."""
    world = asyncio.run(build_world(server.url, f"b-{uuid.uuid4().hex[:8]}"))
    yield world


@pytest.mark.parametrize("role", list(ROLES))
@pytest.mark.slow
async def test_each_role_does_what_it_needs_in_its_namespace(
    server: RedisServer, role: str
) -> None:
    """The role matrix, own namespace: each operation on a namespace of its own (a
    fresh world), as a user of the role over that namespace (admin: over all)."""
    results: dict[str, str] = {}
    shared: World | None = None
    for operation in OPERATIONS:
        if operation.level == "read" and shared is not None:
            world = shared  # reads change nothing: one world for all of them
        else:
            world = await build_world(server.url, f"a-{uuid.uuid4().hex[:8]}")
            if operation.level == "read":
                shared = world
        url = role_url(server, role, None if role == "admin" else world.namespace)
        results[operation.name] = await outcome(server, url, world, operation)
    wrong = {
        name: got
        for name, got in results.items()
        if not expect_own(role, next(o for o in OPERATIONS if o.name == name), got)
    }
    assert not wrong, f"{role}: {wrong}"


@pytest.mark.parametrize("role", SCOPED)
@pytest.mark.slow
async def test_a_user_of_one_namespace_reaches_nothing_of_another(
    server: RedisServer, role: str, other: World
) -> None:
    """The role matrix, other namespace: every operation of the public API, refused
    before anything of namespace B is written."""
    url = role_url(server, role, f"a-{uuid.uuid4().hex[:8]}")
    results = {o.name: await outcome(server, url, other, o) for o in OPERATIONS}
    wrong = {name: got for name, got in results.items() if got != "refused"}
    assert not wrong, f"{role}: {wrong}"


def _raw(conn: redis.Redis, *args: object) -> str:
    """What Redis did with a raw command: "refused" by the ACL, else "answered" (an
    error of another kind included: it was looked at)."""
    try:
        conn.execute_command(*args)
    except redis.exceptions.ResponseError as exc:
        return "refused" if is_denied(exc) else f"answered: {exc}"
    return "answered"


def _probes(key: bytes, kind: bytes) -> list[tuple[object, ...]]:
    """Raw commands on ``key`` (of Redis type ``kind``): reads and writes the roles are
    granted, so that only the key patterns stand between them and B."""
    reads: dict[bytes, list[tuple[object, ...]]] = {
        b"hash": [("HGETALL", key), ("HGET", key, "x"), ("HKEYS", key)],
        b"zset": [("ZRANGE", key, 0, -1), ("ZSCORE", key, "x"), ("ZCARD", key)],
        b"stream": [("XRANGE", key, "-", "+"), ("XLEN", key), ("XINFO", "STREAM", key)],
    }
    writes: dict[bytes, list[tuple[object, ...]]] = {
        b"hash": [("HSET", key, "x", "1"), ("HDEL", key, "x")],
        b"zset": [("ZADD", key, 0, "x"), ("ZREM", key, "x")],
        b"stream": [("XADD", key, "*", "p", "x")],
    }
    scripted = [
        ("EVAL", "return redis.call('EXISTS', KEYS[1])", 1, key),
        ("EVAL", "return redis.call('EXISTS', ARGV[1])", 0, key),  # a key not declared
        ("EVAL", "return redis.call('DEL', KEYS[1])", 1, key),
    ]
    return [*reads.get(kind, []), *writes.get(kind, []), ("EXISTS", key), ("DEL", key), *scripted]


@pytest.mark.parametrize("role", SCOPED)
async def test_raw_commands_reach_nothing_of_another_namespace(
    server: RedisServer, role: str, other: World
) -> None:
    """Raw commands on every key and channel of namespace B, and the commands that list
    the key space or its channels, as a user of A: all refused; B unchanged."""
    before = snapshot(server, other.namespace)
    conn = user_conn(role_url(server, role, f"a-{uuid.uuid4().hex[:8]}"))
    with redis.Redis.from_url(server.url) as admin:
        kinds = {k: admin.type(k) for k in before if b"{" in k}
    answered = []
    for key, kind in kinds.items():
        for probe in _probes(key, kind):
            if _raw(conn, *probe) != "refused":
                answered.append(probe)
    tags = {action_keys(other.namespace, "job").tag}
    channels = [action_keys(other.namespace, "job").wake, action_keys(other.namespace, "job").ended]
    for tag in tags:
        for made in (owner_channel, notice_channel, handoff_channel):
            channels.append(made(tag, other.owner))
    for channel in channels:
        for probe in (("SPUBLISH", channel, "x"), ("PUBLISH", channel, "x")):
            if _raw(conn, *probe) != "refused":
                answered.append(probe)
        pubsub = conn.pubsub()
        for subscribe in (pubsub.ssubscribe, pubsub.subscribe):
            try:
                subscribe(channel)
                reply = pubsub.get_message(timeout=2)
            except redis.exceptions.ResponseError:
                reply = None
            if reply is not None and reply.get("type") in ("ssubscribe", "subscribe"):
                answered.append((subscribe.__name__, channel))
        pubsub.close()
    for probe in (
        ("SCAN", 0),
        ("KEYS", "*"),
        ("RANDOMKEY",),
        ("DBSIZE",),
        ("PUBSUB", "SHARDCHANNELS"),
        ("PUBSUB", "CHANNELS"),
        ("ZRANGE", "flo:namespaces", 0, -1),
        ("FUNCTION", "DUMP"),
        ("CLIENT", "LIST"),
        ("MONITOR",),
    ):
        if _raw(conn, *probe) != "refused":
            answered.append(probe)
    conn.close()
    assert answered == []
    assert snapshot(server, other.namespace) == before


@pytest.mark.parametrize("role", SCOPED)
async def test_a_namespaced_user_cannot_list_the_namespaces(server: RedisServer, role: str) -> None:
    namespace = f"a-{uuid.uuid4().hex[:8]}"
    async with FloClient(role_url(server, role, namespace), namespace=namespace) as client:
        with pytest.raises(PermissionDeniedError):
            await client.namespaces()
    async with FloClient(role_url(server, "admin"), namespace=namespace) as admin:
        assert namespace not in await admin.namespaces()


async def test_the_workers_run_as_the_worker_role(server: RedisServer) -> None:
    """An ActionWorker, a StreamWorker and a queue consumer, as worker-role users of
    their namespace, with a producer-role user invoking, appending and enqueueing."""
    ns = f"a-{uuid.uuid4().hex[:8]}"
    seen: list[bytes] = []

    async def handle(ctx: StreamContext) -> None:
        seen.append(ctx.payload)

    async with (
        FloClient(role_url(server, "worker", ns), namespace=ns) as wclient,
        FloClient(role_url(server, "producer", ns), namespace=ns) as pclient,
    ):
        worker = wclient.new_action_worker(block_ms=500)

        @worker.action("resize")
        async def resize(ctx: ActionContext) -> bytes:
            return b"done " + ctx.payload

        streams = wclient.new_stream_worker(
            stream="orders", group="billing", handler=handle, block_ms=500
        )
        tasks = [asyncio.create_task(worker.start()), asyncio.create_task(streams.start())]
        try:
            await eventually(lambda: pclient.action.list(), lambda page: bool(page.actions))
            run = await pclient.action.invoke("resize", b"x")
            done = await pclient.action.wait(run.run_id, timeout_ms=20_000)
            assert (done.status, done.output) == (RunStatus.COMPLETED, b"done x")
            await pclient.stream.append("orders", b"o1")
            await eventually(lambda: asyncio.sleep(0, seen), lambda s: s == [b"o1"])
            await pclient.queue.enqueue("jobs", b"m")
            taken = await wclient.queue.dequeue("jobs", 1)
            await wclient.queue.ack("jobs", [m.seq for m in taken.messages])
        finally:
            worker.stop()
            streams.stop()
            for task in tasks:
                await asyncio.wait_for(task, 30)


@pytest.mark.parametrize("role", SCOPED)
async def test_a_worker_of_another_namespace_is_refused_and_writes_nothing(
    server: RedisServer, role: str, other: World
) -> None:
    before = snapshot(server, other.namespace)
    url = role_url(server, role, f"a-{uuid.uuid4().hex[:8]}")
    async with FloClient(url, namespace=other.namespace) as client:
        worker = client.new_action_worker(block_ms=200)
        worker.action("job")(lambda ctx: b"stolen")
        with pytest.raises(PermissionDeniedError):
            await asyncio.wait_for(worker.start(), 30)
        streams = client.new_stream_worker(
            stream="orders", group="g", handler=lambda ctx: None, block_ms=200
        )
        with pytest.raises(PermissionDeniedError):
            await asyncio.wait_for(streams.start(), 30)
    assert snapshot(server, other.namespace) == before


@pytest.mark.parametrize("role", ["producer", "operator", "read-only"])
async def test_only_a_worker_may_hold_liveness(server: RedisServer, role: str) -> None:
    """Subscribing a liveness channel would keep a gone worker's work from coming back:
    no role but worker (and admin) may, even in its own namespace."""
    ns = f"a-{uuid.uuid4().hex[:8]}"
    async with FloClient(role_url(server, role, ns), namespace=ns) as client:
        worker = client.new_action_worker(block_ms=200)
        worker.action("job")(lambda ctx: b"")
        with pytest.raises(PermissionDeniedError):
            await asyncio.wait_for(worker.start(), 30)


CLI = {
    "read-only": [
        ["status"],
        ["runs", "list", "job", "--state", "failed"],
        ["runs", "show", "{running}"],
        ["runs", "find", "job", "boom"],
        ["workers", "list"],
    ],
    "operator": [
        ["runs", "cancel", "{running}", "--yes"],
        ["runs", "requeue", "job", "--yes"],
        ["workers", "drain", "w1", "--yes"],
    ],
}


@pytest.mark.parametrize("role", ["read-only", "operator"])
async def test_the_cli_runs_as_its_role(server: RedisServer, role: str) -> None:
    ns = f"a-{uuid.uuid4().hex[:8]}"
    world = await build_world(server.url, ns)
    url = role_url(server, role, ns)
    for args in CLI[role]:
        filled = [a.format(running=world.running) for a in args]
        result = await asyncio.to_thread(
            CliRunner().invoke, main, [*filled, "--url", url, "--namespace", ns]
        )
        assert result.exit_code == 0, (args, result.output)


# FUNCTION and SCRIPT subcommands, with what each role may run: only admin loads or
# deletes a library; every role may list them (the check of the shipped library).
LIBRARY_COMMANDS: list[tuple[object, ...]] = [
    ("FUNCTION", "LOAD", "#!lua name=probe\nredis.register_function('probe', function() end)"),
    ("FUNCTION", "DELETE", "probe"),
    ("FUNCTION", "FLUSH"),
    ("FUNCTION", "RESTORE", b"\xf5"),
    ("FUNCTION", "DUMP"),
    ("FUNCTION", "KILL"),
    ("FUNCTION", "STATS"),
    ("FUNCTION", "LIST"),
    ("FUNCTION", "HELP"),
    ("SCRIPT", "LOAD", "return 1"),
    ("SCRIPT", "FLUSH"),
    ("SCRIPT", "KILL"),
    ("SCRIPT", "EXISTS", "0" * 40),
    ("SCRIPT", "DEBUG", "NO"),
    ("SCRIPT", "HELP"),
]
MAY = {"admin": {"FUNCTION LOAD", "FUNCTION DELETE", "FUNCTION LIST"}}


@pytest.mark.parametrize("role", list(ROLES))
def test_each_role_tries_every_function_and_script_subcommand(
    server: RedisServer, role: str
) -> None:
    conn = user_conn(role_url(server, role, None if role == "admin" else "shop"))
    allowed = set()
    for command in LIBRARY_COMMANDS:
        if _raw(conn, *command) != "refused":
            allowed.add(f"{command[0]} {command[1]}")
    conn.close()
    with redis.Redis.from_url(server.url) as admin, contextlib.suppress(redis.ResponseError):
        admin.function_delete("probe")
    assert allowed == MAY.get(role, {"FUNCTION LIST"})


def documented_lines(text: str) -> dict[tuple[str, ...], str]:
    """``flo-redis acl ...`` commands shown in a doc, each with the line shown under it."""
    found = re.findall(r"^\$ flo-redis (acl [^\n]+)\n(ACL SETUSER [^\n]+)$", text, re.MULTILINE)
    return {tuple(args.split()): line for args, line in found}


def test_the_docs_hold_the_lines_flo_redis_acl_prints() -> None:
    shown = documented_lines(ACL_PAGE.read_text())
    assert {args[1] for args in shown} == set(ROLES)
    assert {args[1] for args in shown if "--namespace" in args} == set(SCOPED)
    for args, line in shown.items():
        printed = CliRunner().invoke(main, list(args))
        assert printed.exit_code == 0, printed.output
        assert printed.output.strip() == line, args
    for args, line in documented_lines(THREAT_MODEL.read_text()).items():
        assert CliRunner().invoke(main, list(args)).output.strip() == line


def test_acl_refuses_a_namespace_for_admin_and_an_unknown_role() -> None:
    assert CliRunner().invoke(main, ["acl", "admin", "--namespace", "shop"]).exit_code == 2
    assert CliRunner().invoke(main, ["acl", "root"]).exit_code == 2
    line = setuser_line("worker", "a*b", user="w")
    assert "~flo:*{a\\\\*b:*" in line  # quoted for redis-cli: a glob-escaped star


@pytest.mark.slow
async def test_an_operator_serves_a_dashboard_that_makes_changes(server: RedisServer) -> None:
    """A dashboard started with --write, as an operator narrowed to its namespace: it
    logs in (its session in Redis), drains a worker, and logs out; a read-only user
    serves it read-only."""
    ns = f"a-{uuid.uuid4().hex[:8]}"
    world = await build_world(server.url, ns)
    token = "a-long-enough-write-token"
    async with FloClient(role_url(server, "operator", ns), namespace=ns) as client:
        dash = await start_dashboard(client, port=0, token=token)
        try:
            jar = aiohttp.CookieJar(unsafe=True)
            async with aiohttp.ClientSession(cookie_jar=jar) as http:
                async with http.post(dash.url + "login", data={"token": token, "next": "/"}) as r:
                    body = await r.text()
                    assert r.status == 200 and "write access" in body, body
                csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', body)
                assert csrf is not None
                form = {"id": "w1", "csrf": csrf.group(1), "next": "/workers"}
                async with http.post(dash.url + "worker/drain", data=form) as r:
                    assert r.status == 200, await r.text()
        finally:
            await dash.close()
        workers = (await client.worker.list()).workers
        assert [w.status.name for w in workers if w.worker_id == "w1"] == ["DRAINING"]
    async with FloClient(role_url(server, "read-only", ns), namespace=ns) as reader:
        dash = await start_dashboard(reader, port=0)
        try:
            async with aiohttp.ClientSession() as http:
                for page in ("", f"run?id={world.running}", "find?name=job&q=boom"):
                    async with http.get(dash.url + page) as r:
                        assert r.status == 200, (page, await r.text())
        finally:
            await dash.close()
