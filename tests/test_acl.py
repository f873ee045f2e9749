"""The README's Redis ACL: a worker and a producer with exactly those rights work; a user
lacking any one of them gets PermissionDeniedError naming what to grant."""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from pathlib import Path

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
from flo_redis.sync import SyncFloClient
from flo_redis.testing import RedisServer

README = Path(__file__).resolve().parent.parent / "README.md"
# Without it a waiter cannot leave a channel (it stays subscribed until the connection
# closes); everything still works, so a user lacking it is not refused.
OPTIONAL = {"+sunsubscribe"}
# A producer's cancel tells those waiting on the run only with it (lib/ended.lua asks
# PUBSUB SHARDNUMSUB first, and a refusal means nobody is told); invoking, waiting and
# reading work without it.
PRODUCER_OPTIONAL = {"+pubsub|shardnumsub"}


def documented(user: str) -> list[str]:
    """The rights the README's ``ACL SETUSER <user>`` line grants (after the password)."""
    line = re.search(rf"^ACL SETUSER {user} on >\S+ (.+)$", README.read_text(), re.MULTILINE)
    assert line is not None, f"README has no ACL SETUSER line for {user}"
    return line.group(1).split()


def lacking(rights: list[str], optional: set[str] = OPTIONAL) -> list[str]:
    return [r for r in rights if r[0] in "+~&" and r not in optional]


def user_url(server: RedisServer, rights: list[str]) -> str:
    name = f"u{uuid.uuid4().hex[:8]}"
    admin = redis.Redis.from_url(server.url)
    try:
        admin.execute_command("ACL", "SETUSER", name, "on", ">pw", *rights)
        admin.script_flush()  # as on a fresh server: scripts are loaded with EVAL first
    finally:
        admin.close()
    return server.url.replace("redis://", f"redis://{name}:pw@")


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
    if right.startswith("+@"):
        assert refusal.right.startswith("+"), refusal  # the command of that category
    else:
        assert right in refusal.right, (right, str(refusal))
    assert "README" in str(refusal)


async def test_the_documented_rights_are_enough(server: RedisServer) -> None:
    worker = user_url(server, documented("flo-worker"))
    producer = user_url(server, documented("flo-producer"))
    await work_and_wait(worker, producer, "acl-ok")


@pytest.mark.parametrize("right", lacking(documented("flo-worker")))
async def test_a_worker_lacking_a_right_is_told_which(server: RedisServer, right: str) -> None:
    rights = [r for r in documented("flo-worker") if r != right]
    # A refused keep-alive PING shows only once the liveness connection has been quiet.
    settle_s = 15.0 if right == "+ping" else 0.0
    namespace = f"acl-w-{uuid.uuid4().hex[:6]}"
    with pytest.raises(PermissionDeniedError) as info:
        await work_and_wait(user_url(server, rights), server.url, namespace, settle_s)
    expect_named(info.value, right)


@pytest.mark.parametrize("right", lacking(documented("flo-producer"), OPTIONAL | PRODUCER_OPTIONAL))
async def test_a_producer_lacking_a_right_is_told_which(server: RedisServer, right: str) -> None:
    rights = [r for r in documented("flo-producer") if r != right]
    with pytest.raises(PermissionDeniedError) as info:
        await work_and_wait(server.url, user_url(server, rights), f"acl-p-{uuid.uuid4().hex[:6]}")
    expect_named(info.value, right)


async def test_the_documented_rights_run_streams_too(server: RedisServer) -> None:
    worker_url = user_url(server, documented("flo-worker"))
    producer_url = user_url(server, documented("flo-producer"))
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
    rights = [r for r in documented("flo-worker") if r != "+evalsha"]
    async with FloClient(user_url(server, rights), namespace="acl-s2") as client:
        worker = client.new_stream_worker(
            stream="orders", group="billing", handler=lambda ctx: None, block_ms=500
        )
        with pytest.raises(PermissionDeniedError) as info:
            await asyncio.wait_for(worker.start(), 30)
    assert info.value.right == "+evalsha"
