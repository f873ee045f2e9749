"""Scripts as Redis Functions (lua/README.md, "Functions"): one library per version of the
scripts, loaded by the first client that finds it missing, and calls by SHA for a client
that may not call or load functions, or a call Redis refuses as out of memory."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from script_state import library_functions
from test_acl import documented

from flo_redis import ActionRegisterOptions, FloClient, PermissionDeniedError, RunStatus
from flo_redis._scripts import LIBRARY, SCRIPTS
from flo_redis.sync import SyncFloClient
from flo_redis.testing import RedisServer


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
    for name in ("fcall", "evalsha", "eval", "function|load"):
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


async def test_scripts_run_as_functions_of_one_library(
    server: RedisServer, admin: aioredis.Redis
) -> None:
    await run_one(server.url)
    counted = await calls(admin)
    assert counted["fcall"] > 0
    assert counted["evalsha"] == 0 and counted["eval"] == 0
    assert counted["function|load"] == 1  # the server had none: loaded once
    assert await library_functions(admin) == {script.function for script in SCRIPTS.values()}


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


async def test_the_readme_rights_with_fcall_run_every_script_as_a_function(
    server: RedisServer, admin: aioredis.Redis
) -> None:
    # The README's worker rights hold FUNCTION LOAD (+@write); +fcall adds the calls.
    await run_one(
        user_url(server, "resetkeys", "resetchannels", *documented("flo-worker"), "+fcall")
    )
    counted = await calls(admin)
    assert counted["fcall"] > 0 and counted["function|load"] == 1
    assert counted["evalsha"] == 0 and counted["eval"] == 0


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
