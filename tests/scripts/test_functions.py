"""Scripts as Redis Functions (lua/README.md, "Functions"): one library per version of the
scripts, loaded by the first client that finds it missing, and calls by SHA for a client
that may not call or load functions, or a call Redis refuses as out of memory."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from roles_world import role_url
from script_state import library_functions

from flo_redis import (
    ActionRegisterOptions,
    FloClient,
    PermissionDeniedError,
    RunStatus,
    ValidationError,
)
from flo_redis._wire.functions import SCRIPTS_ENV
from flo_redis._wire.keys import action_keys
from flo_redis._wire.runner import LIBRARY, SCRIPTS
from flo_redis.sync import SyncFloClient
from flo_redis.testing import RedisServer


@pytest.fixture(autouse=True)
def functions_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about Functions: they run so in every pass of the suite, the
    FLO_REDIS_SCRIPTS=evalsha one too."""
    monkeypatch.delenv(SCRIPTS_ENV, raising=False)


@pytest.fixture
async def admin(server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    conn = aioredis.Redis.from_url(server.url)
    await conn.function_flush()
    await conn.script_flush()
    await conn.config_resetstat()
    try:
        yield conn
    finally:
        await conn.config_set("maxmemory", 0)
        await conn.aclose()


async def calls(admin: aioredis.Redis) -> dict[str, int]:
    """Calls and refusals of the commands that run scripts, since the last reset."""
    stats: dict[str, Any] = await admin.info("commandstats")
    out = {}
    for name in ("fcall", "evalsha", "eval", "function|load", "function|list"):
        entry = stats.get(f"cmdstat_{name}", {})
        out[name] = int(entry.get("calls", 0))
        out[f"{name} refused"] = int(entry.get("rejected_calls", 0))
    return out


def user_url(server: RedisServer, *rights: str) -> str:
    name = f"u{uuid.uuid4().hex[:8]}"
    with redis.Redis.from_url(server.url) as conn:
        conn.execute_command("ACL", "SETUSER", name, "on", ">pw", "~*", "&*", *rights)
    return server.url.replace("redis://", f"redis://{name}:pw@")


async def run_one(url: str) -> None:
    """Register, invoke, claim and complete one run: the scripts a producer and a
    worker send."""
    async with FloClient(url, namespace=f"fn-{uuid.uuid4().hex[:6]}") as client:
        await client.action.register("job", options=ActionRegisterOptions())
        run = await client.action.invoke("job", b"x")
        worker = client.new_action_worker(block_ms=200)
        done = asyncio.Event()

        async def job(ctx: Any) -> bytes:
            done.set()
            return b"ok"

        worker.action("job")(job)
        task = asyncio.create_task(worker.start())
        await asyncio.wait_for(done.wait(), 10)
        worker.stop()
        await asyncio.wait_for(task, 10)
        assert (await client.action.status(run.run_id)).status == RunStatus.COMPLETED


@pytest.mark.slow
async def test_scripts_run_as_functions_of_one_library(
    server: RedisServer, admin: aioredis.Redis
) -> None:
    await run_one(server.url)
    counted = await calls(admin)
    assert counted["fcall"] > 0
    assert counted["evalsha"] == 0 and counted["eval"] == 0
    assert counted["function|load"] == 1  # the server had none: loaded once
    assert await library_functions(admin) == {script.function for script in SCRIPTS.values()}


@pytest.mark.slow
async def test_calls_that_find_the_library_missing_together_load_it_once(
    server: RedisServer, admin: aioredis.Redis
) -> None:
    async with FloClient(server.url, namespace="fn") as client:
        await client.action.register("job")
        await admin.function_flush()  # as a restart without persistence
        await admin.config_resetstat()
        runs = await asyncio.gather(*(client.action.invoke("job", b"%d" % i) for i in range(20)))
        assert len({run.run_id for run in runs}) == 20
        for run in runs:
            assert (await client.action.status(run.run_id)).status == RunStatus.PENDING
    counted = await calls(admin)
    assert counted["function|load"] == 1
    assert counted["evalsha"] == 0


@pytest.mark.slow
async def test_a_user_without_fcall_calls_by_sha(
    server: RedisServer, admin: aioredis.Redis
) -> None:
    await run_one(user_url(server, "+@all", "-fcall"))
    counted = await calls(admin)
    assert counted["fcall"] == 0
    assert counted["fcall refused"] >= 1  # once per client, then by SHA
    assert counted["evalsha"] > counted["fcall refused"]


async def test_a_user_refused_function_load_calls_by_sha(
    server: RedisServer, admin: aioredis.Redis
) -> None:
    await run_one(user_url(server, "+@all", "-function|load"))
    counted = await calls(admin)
    assert counted["function|load refused"] >= 1
    assert counted["function|load"] == 0
    assert counted["evalsha"] > 0
    assert await admin.function_list(library=LIBRARY.name) == []


async def test_the_blocking_client_calls_functions_and_loads_them(
    server: RedisServer, admin: aioredis.Redis
) -> None:
    async with FloClient(server.url, namespace="fn-sync") as producer:
        await producer.action.register("job")
    await admin.function_flush()
    await admin.config_resetstat()
    with SyncFloClient(server.url, namespace="fn-sync") as client:
        run = client.action.invoke("job", b"x")
        assert client.action.status(run.run_id).status == RunStatus.PENDING
    with redis.Redis.from_url(server.url) as conn:
        stats = conn.info("commandstats")
        assert stats["cmdstat_function|load"]["calls"] == 1
        assert stats["cmdstat_fcall"]["calls"] >= 1
        assert "cmdstat_evalsha" not in stats
    with SyncFloClient(user_url(server, "+@all", "-fcall"), namespace="fn-sync") as client:
        run = client.action.invoke("job", b"y")
        assert client.action.status(run.run_id).status == RunStatus.PENDING


async def test_a_read_refused_as_out_of_memory_is_answered_by_sha(
    server: RedisServer, admin: aioredis.Redis
) -> None:
    async with FloClient(server.url, namespace="fn-oom") as client:
        await client.action.register("job")
        await client.action.invoke("job", b"x")
        await admin.config_set("maxmemory", 1)  # every write is now refused
        # A function that may write is refused before it starts; the same script by SHA
        # only reads, so it answers.
        counts = await client.action.counts("job")
        assert counts.pending == 1
        await admin.config_set("maxmemory", 0)
        run = await client.action.invoke("job", b"y")  # functions again
        assert (await client.action.status(run.run_id)).status == RunStatus.PENDING
    counted = await calls(admin)
    assert counted["fcall refused"] >= 1
    assert counted["evalsha"] >= 1


async def test_the_roles_call_the_library_an_admin_loaded_as_functions(
    server: RedisServer, admin: aioredis.Redis
) -> None:
    async with FloClient(role_url(server, "admin"), namespace="fn-admin") as client:
        await client.action.register("job")  # its first call loads the library
    assert await admin.function_list(library=LIBRARY.name)
    await admin.config_resetstat()
    await run_one(role_url(server, "worker"))
    async with FloClient(role_url(server, "producer"), namespace="fn-admin") as producer:
        run = await producer.action.invoke("job", b"x")
        assert (await producer.action.status(run.run_id)).status == RunStatus.PENDING
    counted = await calls(admin)
    assert counted["fcall"] > 0 and counted["function|load"] == 0
    assert counted["evalsha"] == 0 and counted["eval"] == 0


async def test_a_role_that_may_not_load_the_library_calls_by_sha(
    server: RedisServer, admin: aioredis.Redis
) -> None:
    await run_one(role_url(server, "worker"))
    counted = await calls(admin)
    assert counted["function|load refused"] >= 1 and counted["fcall"] == 0
    assert counted["evalsha"] > 0
    assert await admin.function_list(library=LIBRARY.name) == []


def tampered(extra: str) -> str:
    """The shipped library with ``extra`` as the first line of action_invoke."""
    function = SCRIPTS["action_invoke"].function
    head = f"redis.register_function('{function}', function(KEYS, ARGV)\n"
    assert head in LIBRARY.source
    return LIBRARY.source.replace(head, head + extra + "\n")


async def test_a_tampered_library_is_refused_and_never_called(
    server: RedisServer, admin: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # An admin loads the library with one line more in action_invoke: it copies each
    # input to the action's definition, where another user could read it.
    await admin.function_load(tampered("redis.call('HSET', KEYS[1], 'stolen', ARGV[2])"))
    await admin.config_resetstat()
    async with FloClient(role_url(server, "admin"), namespace="fn-owner") as owner:
        await owner.action.register("job")
    with caplog.at_level(logging.ERROR, logger="flo_redis.requests"):
        async with FloClient(role_url(server, "producer"), namespace="fn-owner") as client:
            run = await client.action.invoke("job", b"secret")
            assert (await client.action.status(run.run_id)).status == RunStatus.PENDING
    assert await admin.hget(action_keys("fn-owner", "job").definition, "stolen") is None
    counted = await calls(admin)
    assert counted["fcall"] == 0 and counted["evalsha"] > 0
    assert any("not the one this version" in r.getMessage() for r in caplog.records)


async def test_functions_of_the_library_held_by_another_library_are_never_called(
    server: RedisServer, admin: aioredis.Redis
) -> None:
    # The shipped functions' names, registered by a library of another name: an FCALL
    # by name would run them. The client finds no library of its own name, and its load
    # is refused (the names are taken): it calls by SHA.
    source = tampered("redis.call('HSET', KEYS[1], 'stolen', ARGV[2])")
    await admin.function_load(source.replace(f"name={LIBRARY.name}", "name=other", 1))
    await admin.config_resetstat()
    async with FloClient(server.url, namespace="fn-other") as client:
        await client.action.register("job")
        await client.action.invoke("job", b"secret")
    assert await admin.hget(action_keys("fn-other", "job").definition, "stolen") is None
    assert (await calls(admin))["fcall"] == 0


async def test_the_library_is_checked_on_every_new_connection(
    server: RedisServer, admin: aioredis.Redis
) -> None:
    async with FloClient(server.url, namespace="fn-check") as client:
        await client.action.register("job")
        checked = (await calls(admin))["function|list"]
        assert checked >= 1
        await client.action.invoke("job", b"x")
        assert (await calls(admin))["function|list"] == checked  # once per connection
        await admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        # The library is swapped while the client is away; its next connection checks.
        await admin.function_load(tampered("redis.call('HSET', KEYS[1], 'x', 1)"), replace=True)
        with contextlib.suppress(Exception):
            await client.action.invoke("job", b"y")  # a call on a killed connection
        await client.action.invoke("job", b"z")
        assert (await calls(admin))["function|list"] > checked
        assert await admin.hget(action_keys("fn-check", "job").definition, "x") is None


async def test_a_refusal_from_inside_a_function_names_the_right_to_grant(
    server: RedisServer, admin: aioredis.Redis
) -> None:
    async with FloClient(server.url, namespace="fn-acl") as owner:
        await owner.action.register("job")
    async with FloClient(user_url(server, "+@all", "-time"), namespace="fn-acl") as client:
        with pytest.raises(PermissionDeniedError) as refused:
            await client.action.invoke("job", b"x")
    assert refused.value.right == "+time"
    assert (await calls(admin))["fcall"] >= 1  # refused inside the function, not by SHA


async def test_flo_redis_scripts_evalsha_calls_every_script_by_sha(
    server: RedisServer, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SCRIPTS_ENV, "evalsha")
    await run_one(server.url)
    async with FloClient(server.url, namespace="fn-sha") as producer:
        await producer.action.register("job")
    with SyncFloClient(server.url, namespace="fn-sha") as client:
        run = client.action.invoke("job", b"x")
        assert client.action.status(run.run_id).status == RunStatus.PENDING
    counted = await calls(admin)
    assert counted["fcall"] == 0 and counted["fcall refused"] == 0
    assert counted["function|load"] == 0  # the server holds no library of ours
    assert counted["evalsha"] > 0
    assert await admin.function_list(library=LIBRARY.name) == []


@pytest.mark.parametrize("value", ["functions", "FUNCTIONS", ""])
async def test_flo_redis_scripts_functions_is_the_default(
    server: RedisServer, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(SCRIPTS_ENV, value)
    await run_one(server.url)
    counted = await calls(admin)
    assert counted["fcall"] > 0 and counted["evalsha"] == 0


async def test_a_flo_redis_scripts_value_of_neither_kind_is_refused_up_front(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SCRIPTS_ENV, "eval")
    with pytest.raises(ValidationError, match=r"FLO_REDIS_SCRIPTS='eval'.*'functions'.*'evalsha'"):
        async with FloClient(server.url, namespace="fn-bad") as client:
            await client.action.register("job")
    with (
        pytest.raises(ValidationError, match="FLO_REDIS_SCRIPTS"),
        SyncFloClient(server.url, namespace="fn-bad") as blocking,
    ):
        blocking.action.invoke("job", b"x")
