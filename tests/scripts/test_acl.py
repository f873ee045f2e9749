"""The worker and producer roles (``flo-redis acl``; README, "Redis ACL"): users with
exactly those rights work, over every namespace or narrowed to one; a user lacking any
one of them gets PermissionDeniedError naming what to grant. (Every role over the whole
API: test_roles.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import pytest
import redis
from polling import eventually

from flo_redis import (
    ActionContext,
    ActionRegisterOptions,
    FloClient,
    PermissionDeniedError,
    RunStatus,
    StreamContext,
)
from flo_redis._wire.keys import action_keys
from flo_redis.ops.roles import rules
from flo_redis.sync import SyncFloClient
from flo_redis.testing import RedisServer

# Rights whose refusal a worker or producer shows in the flows below. Not the script
# commands each of two ways may send (FCALL with FUNCTION LIST, else EVALSHA and EVAL:
# either suffices), nor SUNSUBSCRIBE (without it a waiter stays subscribed until its
# connection closes; everything still works).
SHOWN = {
    "+evalsha",
    "+time",
    "+info",
    "+spublish",
    "+ssubscribe",
    "+client|setname",
    "+ping",
    "+hset",
    "+zadd",
}
# A producer's cancel tells those waiting on the run only with it (lib/ended.lua asks
# PUBSUB SHARDNUMSUB first, and a refusal means nobody is told); invoking, waiting and
# reading work without it. A worker's reclaim needs it.
WORKER_SHOWN = SHOWN | {"+pubsub|shardnumsub"}


def lacking(role: str, shown: set[str]) -> list[str]:
    """The rights of ``role`` whose absence the flows show: its key patterns, the
    channel patterns of actions (the flows wait for runs; a worker's one pattern covers
    every channel) and the commands of ``shown`` it holds."""
    return [r for r in rules(role) if r[0] == "~" or r in ("&flo:*", "&flo:a:*") or r in shown]


def user_url(server: RedisServer, rights: list[str] | tuple[str, ...]) -> str:
    name = f"u{uuid.uuid4().hex[:8]}"
    admin = redis.Redis.from_url(server.url)
    try:
        admin.execute_command("ACL", "SETUSER", name, "reset", "on", ">pw", *rights)
        admin.script_flush()  # as on a fresh server: scripts are loaded with EVAL first
    finally:
        admin.close()
    return server.url.replace("redis://", f"redis://{name}:pw@")


def without(role: str, *rights: str) -> list[str]:
    """``role``'s rights but ``rights``; a user lacking EVALSHA also lacks FCALL, so
    that the refusal shows (either call suffices)."""
    dropped = {*rights, "+fcall"} if "+evalsha" in rights else set(rights)
    return [r for r in rules(role) if r not in dropped]


async def work_and_wait(
    worker_url: str, producer_url: str, namespace: str, settle_s: float = 0.0
) -> None:
    """A worker (as one user) and a producer (as another) run one action end to end (its
    first attempt fails and is retried), with the asyncio and the blocking client, then
    the worker keeps working ``settle_s`` more; the first refusal is raised."""
    async with (
        FloClient(worker_url, namespace=namespace) as wclient,
        FloClient(producer_url, namespace=namespace) as pclient,
    ):
        worker = wclient.new_action_worker(block_ms=500)

        @worker.action("resize", ActionRegisterOptions(max_retries=2))
        async def resize(ctx: ActionContext) -> bytes:
            if ctx.attempt == 1:
                raise RuntimeError("first attempt")
            return b"done"

        working = asyncio.create_task(worker.start())

        async def produce() -> None:
            await pclient.action.register("resize", options=ActionRegisterOptions(max_retries=2))
            run_id = (await pclient.action.invoke("resize", b"{}")).run_id
            status = await pclient.action.wait(run_id, timeout_ms=20_000)
            assert (status.status, status.output) == (RunStatus.COMPLETED, b"done")

            def blocking() -> RunStatus:
                with SyncFloClient(producer_url, namespace=namespace) as flo:
                    run = flo.action.invoke("resize", b"{}")
                    assert flo.action.status(run.run_id).run_id == run.run_id
                    return flo.action.wait(run.run_id, timeout_ms=20_000).status

            assert await asyncio.to_thread(blocking) == RunStatus.COMPLETED
            await asyncio.wait({working}, timeout=settle_s)

        producing = asyncio.create_task(produce())
        try:
            done, _ = await asyncio.wait(
                {working, producing}, timeout=60, return_when=asyncio.FIRST_COMPLETED
            )
            if working in done:
                working.result()  # a worker stops early only when refused: raise it
            producing.result()
        finally:
            producing.cancel()
            with contextlib.suppress(BaseException):
                await producing
            worker.stop()
            with contextlib.suppress(PermissionDeniedError):
                await asyncio.wait_for(working, 30)


def expect_named(refusal: PermissionDeniedError, right: str) -> None:
    if right[0] in "~&":
        kind = "key" if right[0] == "~" else "channel"
        assert refusal.right.startswith(f"{kind} access"), (right, str(refusal))
    else:
        assert right in refusal.right, (right, str(refusal))
    assert "flo-redis acl" in str(refusal)


async def test_the_roles_rights_are_enough(server: RedisServer) -> None:
    worker = user_url(server, rules("worker"))
    producer = user_url(server, rules("producer"))
    await work_and_wait(worker, producer, "acl-ok")


async def test_the_roles_rights_narrowed_to_a_namespace_are_enough(server: RedisServer) -> None:
    worker = user_url(server, rules("worker", "acl-shop"))
    producer = user_url(server, rules("producer", "acl-shop"))
    await work_and_wait(worker, producer, "acl-shop")


@pytest.mark.parametrize(
    "right",
    [  # a worker lacking +ping takes seconds to be told
        pytest.param(r, marks=pytest.mark.slow) if r == "+ping" else r
        for r in lacking("worker", WORKER_SHOWN)
    ],
)
async def test_a_worker_lacking_a_right_is_told_which(server: RedisServer, right: str) -> None:
    rights = without("worker", right)
    # A refused keep-alive PING shows only once the liveness connection has been quiet.
    settle_s = 15.0 if right == "+ping" else 0.0
    namespace = f"acl-w-{uuid.uuid4().hex[:6]}"
    with pytest.raises(PermissionDeniedError) as info:
        await work_and_wait(user_url(server, rights), server.url, namespace, settle_s)
    expect_named(info.value, right)


@pytest.mark.parametrize("right", lacking("producer", SHOWN))
async def test_a_producer_lacking_a_right_is_told_which(server: RedisServer, right: str) -> None:
    rights = without("producer", right)
    with pytest.raises(PermissionDeniedError) as info:
        await work_and_wait(server.url, user_url(server, rights), f"acl-p-{uuid.uuid4().hex[:6]}")
    expect_named(info.value, right)


async def test_the_roles_rights_run_streams_too(server: RedisServer) -> None:
    worker_url = user_url(server, rules("worker", "acl-s"))
    producer_url = user_url(server, rules("producer", "acl-s"))
    seen: list[bytes] = []

    async def handle(ctx: StreamContext) -> None:
        seen.append(ctx.payload)

    async with (
        FloClient(worker_url, namespace="acl-s") as wclient,
        FloClient(producer_url, namespace="acl-s") as pclient,
    ):
        for i in range(3):
            await pclient.stream.append("orders", f"order-{i}".encode())
        worker = wclient.new_stream_worker(
            stream="orders", group="billing", handler=handle, block_ms=500
        )
        task = asyncio.create_task(worker.start())
        try:
            await eventually(lambda: asyncio.sleep(0, len(seen)), lambda n: n == 3)
            await eventually(
                lambda: wclient.stream.group_pending("orders", "billing"), lambda p: p == []
            )
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)
    assert sorted(seen) == [b"order-0", b"order-1", b"order-2"]


async def test_a_stream_worker_lacking_a_right_is_told_which(server: RedisServer) -> None:
    async with FloClient(
        user_url(server, without("worker", "+evalsha")), namespace="acl-s2"
    ) as client:
        worker = client.new_stream_worker(
            stream="orders", group="billing", handler=lambda ctx: None, block_ms=500
        )
        with pytest.raises(PermissionDeniedError) as info:
            await asyncio.wait_for(worker.start(), 30)
    assert info.value.right == "+evalsha"


@pytest.mark.parametrize("right", ["+hset", "+hdel"])
async def test_a_registration_refused_for_a_right_leaves_the_one_it_would_replace(
    server: RedisServer, right: str
) -> None:
    # A script is not undone by a refusal halfway: the registration replaces the stored
    # settings in place, refused before its first write, never deleting them first.
    namespace = f"acl-r-{uuid.uuid4().hex[:6]}"
    definition = action_keys(namespace, "resize").definition
    async with FloClient(server.url, namespace=namespace) as admin:
        options = ActionRegisterOptions(max_retries=5, description="resizes")
        await admin.action.register("resize", options=options)
    with redis.Redis.from_url(server.url) as raw:
        before = raw.hgetall(definition)
    async with FloClient(user_url(server, without("producer", right)), namespace=namespace) as c:
        with pytest.raises(PermissionDeniedError) as info:
            await c.action.register("resize", options=ActionRegisterOptions(max_retries=2))
    expect_named(info.value, right)
    with redis.Redis.from_url(server.url) as raw:
        assert raw.hgetall(definition) == before
    async with FloClient(server.url, namespace=namespace) as admin:  # and with every right
        await admin.action.register("resize", options=ActionRegisterOptions(max_retries=2))
        (info_,) = [a for a in (await admin.action.list()).actions if a.name == "resize"]
    assert (info_.max_retries, info_.description) == (2, None)
