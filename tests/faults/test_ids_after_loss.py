"""Ids and fencing tokens never repeat, even after Redis lost data: a restart without
persistence, a flush, a failover to a replica that lags (``lua/lib/ids.lua``). A report
from before the loss is refused and changes nothing, an id from before answers
``NotFoundError``, and what is made after gets ids and tokens never handed out before."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import msgpack
import pytest
import redis.asyncio as aioredis
from cluster_replicas import replicated
from polling import eventually
from redis_server import RedisServer, cluster_client

from flo_redis import (
    AckOptions,
    ActionContext,
    ActionRegisterOptions,
    ConflictError,
    FloClient,
    NotConnectedError,
    NotFoundError,
    Reason,
    RunStatus,
    WorkerAwaitOptions,
    WorkerCompleteOptions,
    WorkerTouchOptions,
)
from flo_redis._wire.keys import action_keys, queue_keys
from flo_redis._wire.replies import Claimed

NOW = WorkerAwaitOptions(block_ms=0)
LOSSES = ["restart", "flushall"]
T = TypeVar("T")


async def lose_data(server: RedisServer, loss: str) -> None:
    """The module's server (tests/conftest.py) runs without persistence: a restart comes
    back empty, as a flush leaves it."""
    if loss == "restart":
        server.restart()
        return
    raw = aioredis.Redis.from_url(server.url)
    try:
        await raw.flushall()
    finally:
        await raw.aclose()


async def served(call: Callable[[], Awaitable[T]]) -> T:
    """``call()``, once Redis serves it again: after a restart, a call on a connection
    made before fails once, with NotConnectedError."""

    async def attempt() -> tuple[bool, T | None]:
        try:
            return True, await call()
        except NotConnectedError:
            return False, None

    _, value = await eventually(attempt, lambda outcome: outcome[0], timeout=30)
    return value  # type: ignore[return-value]


async def claim(client: FloClient, worker: str, n: int) -> list[Claimed]:
    return await client.worker.await_tasks(worker, ["job"], n, NOW)


async def ready(client: FloClient) -> None:
    """The action and worker w1 registered (again, after a loss)."""
    await served(lambda: client.action.register("job"))
    await client.worker.register("w1", ["job"])


async def invoke(client: FloClient, payload: bytes) -> str:
    return (await client.action.invoke("job", payload)).run_id


async def complete(client: FloClient, run: Claimed, output: bytes) -> None:
    options = WorkerCompleteOptions(token=run.token)
    await client.worker.complete("w1", "job", run.run_id, output, options)


@pytest.mark.parametrize("loss", LOSSES)
async def test_a_report_from_before_the_loss_is_refused_and_later_runs_are_new(
    server: RedisServer, loss: str, namespace: str
) -> None:
    async with FloClient(server.url, namespace=namespace) as client:
        await ready(client)
        before = [await invoke(client, b"before") for _ in range(3)]
        held = await claim(client, "w1", 3)
        for run in held[:2]:
            await complete(client, run, b"done before")
        late = held[2]  # still running on w1 when Redis loses its data

        await lose_data(server, loss)
        await ready(client)
        after = [await invoke(client, b"after") for _ in range(3)]
        taken = await claim(client, "w1", 3)

        assert not set(after) & set(before)
        assert min(r.token for r in taken) > max(r.token for r in held)  # never backwards
        # The late holder's reports name a run that no longer exists.
        with pytest.raises(NotFoundError):
            touch = WorkerTouchOptions(token=late.token)
            await client.worker.touch("w1", "job", late.run_id, touch)
        with pytest.raises(NotFoundError):
            await complete(client, late, b"late")
        for run_id in before:
            with pytest.raises(NotFoundError):
                await client.action.status(run_id)
        for run in taken:  # the runs made after work as ever, each with its own output
            await complete(client, run, run.run_id.encode())
        for run_id in after:
            status = await client.action.status(run_id)
            assert (status.status, status.output) == (RunStatus.COMPLETED, run_id.encode())


async def test_a_worker_mid_run_across_a_restart_is_refused_and_new_runs_are_worked(
    server: RedisServer, namespace: str
) -> None:
    options = ActionRegisterOptions(timeout_ms=60_000)
    async with FloClient(server.url, namespace=namespace) as client:
        worker = client.new_action_worker(concurrency=4, block_ms=1000)
        handled: collections.Counter[str] = collections.Counter()
        started = asyncio.Event()
        release = asyncio.Event()

        @worker.action("job", options)
        async def job(ctx: ActionContext) -> bytes:
            handled[ctx.task_id] += 1
            if ctx.payload == b"held":
                started.set()
                await release.wait()
            return ctx.task_id.encode()

        task = asyncio.create_task(worker.start())
        try:
            await client.action.register("job", options=options)
            held = await invoke(client, b"held")
            await asyncio.wait_for(started.wait(), 15)

            server.restart()

            # The worker registers the action again; as many runs as before and more.
            async def invoke_after() -> str | None:
                try:
                    return await invoke(client, b"after")
                except Exception:  # not registered again yet, or the connection dropped
                    return None

            after = [await eventually(invoke_after, timeout=30)]
            after += [await invoke(client, b"after") for _ in range(4)]
            assert held not in after
            for run_id in after:
                done = await eventually(
                    lambda r=run_id: client.action.status(r),
                    lambda s: s.status == RunStatus.COMPLETED,
                    timeout=30,
                )
                assert (done.output, done.attempt) == (run_id.encode(), 1)

            release.set()  # the held run's complete arrives after the loss: refused
            await eventually(lambda: asyncio.sleep(0, handled[held]), lambda n: n == 1)
            with pytest.raises(NotFoundError):
                await client.action.status(held)
            for run_id in after:  # and it did not land on a run made after
                assert (await client.action.status(run_id)).output == run_id.encode()
            assert [handled[r] for r in after] == [1] * 5
        finally:
            release.set()
            worker.stop()
            await asyncio.wait_for(task, 30)


@pytest.mark.parametrize("loss", LOSSES)
async def test_queue_messages_after_the_loss_get_new_seqs(
    server: RedisServer, loss: str, namespace: str
) -> None:
    async with FloClient(server.url, namespace=namespace) as client:
        first = await client.queue.enqueue("q", b"before")
        (late,) = (await client.queue.dequeue("q", 1)).messages

        await lose_data(server, loss)

        second = await served(lambda: client.queue.enqueue("q", b"after"))
        (now,) = (await client.queue.dequeue("q", 1)).messages
        assert second != first and now.seq == second and now.payload == b"after"
        # The consumer's ack from before the loss names a message that is gone: refused,
        # and the message delivered after is still held.
        with pytest.raises(NotFoundError):
            await client.queue.ack("q", [late.seq], AckOptions(tokens={late.seq: 1}))
        await client.queue.ack("q", [now.seq], AckOptions(tokens={now.seq: now.delivery_count}))
        # Order within a priority still holds for what is enqueued after.
        seqs = [await client.queue.enqueue("q", str(i).encode()) for i in range(5)]
        got = (await client.queue.dequeue("q", 5)).messages
        assert [m.seq for m in got] == seqs == sorted(seqs)


async def test_messages_queued_by_an_older_version_keep_their_place(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    # An older version numbered messages 1, 2, ... and ordered them by that seq alone.
    keys = queue_keys(namespace, "q")
    for seq in (1, 2):
        record = msgpack.packb({"p": 0, "t": 0, "d": 0, "m": 0})
        await raw.hset(keys.msgs, str(seq), record)
        await raw.hset(keys.bodies, str(seq), f"old{seq}".encode())
        await raw.zadd(keys.ready, {str(seq): seq})
    await raw.hset(keys.meta, "seq", 2)
    new = await client.queue.enqueue("q", b"new")
    assert new > 2
    got = (await client.queue.dequeue("q", 3)).messages
    assert [m.payload for m in got] == [b"old1", b"old2", b"new"]
    await client.queue.nack("q", [1])  # and a message of theirs nacked keeps its place
    assert [m.payload for m in (await client.queue.dequeue("q", 1)).messages] == [b"old1"]


@pytest.mark.parametrize("loss", LOSSES)
async def test_slot_tokens_after_the_loss_are_new(
    server: RedisServer, loss: str, namespace: str
) -> None:
    async with FloClient(server.url, namespace=namespace) as client:
        await ready(client)
        old = await client.slots.acquire("job", capacity=1)
        assert old is not None

        await lose_data(server, loss)
        await ready(client)
        new = await client.slots.acquire("job", capacity=1)
        assert new is not None and new.index == old.index and new.token > old.token
        # The release the holder from before sends late gives back nothing it holds now.
        with pytest.raises(ConflictError):
            await client.slots.release(old)
        assert [h.token for h in await client.slots.holders("job")] == [new.token]
        await client.slots.release(new)


# --- a failover to a replica that lags ---------------------------------------------


@pytest.fixture
async def lagging() -> AsyncIterator[tuple[RedisServer, RedisServer]]:
    primary = RedisServer().start()
    replica = RedisServer(extra=("--replicaof", "127.0.0.1", str(primary.port))).start()
    r = aioredis.Redis(port=replica.port)
    try:
        await eventually(r.info, lambda info: info.get("master_link_status") == "up")
        yield primary, replica
    finally:
        await r.aclose()
        for server in (replica, primary):
            server.discard()


async def test_a_failover_to_a_replica_that_lags_repeats_no_id_or_token(
    lagging: tuple[RedisServer, RedisServer], namespace: str
) -> None:
    primary, replica = lagging
    async with FloClient(primary.url, namespace=namespace) as on_old:
        await ready(on_old)
        await invoke(on_old, b"warm")
        (warm,) = await claim(on_old, "w1", 1)  # the replica has counters to resume
        await complete(on_old, warm, b"warm")
        shared = await invoke(on_old, b"shared")  # the replica has it
        p = aioredis.Redis(port=primary.port)
        r = aioredis.Redis(port=replica.port)
        try:
            assert await replicated(p) == 1
            # The replica is cut off and promoted; what the old primary does from here on
            # is lost to it.
            await r.execute_command("REPLICAOF", "NO", "ONE")
            await eventually(lambda: r.execute_command("ROLE"), lambda role: role[0] == b"master")
        finally:
            await p.aclose()
            await r.aclose()
        (lost_claim,) = await claim(on_old, "w1", 1)
        lost_run = await invoke(on_old, b"lost")
        # A failover takes at least the time to notice the primary is gone, far more
        # than the 10 ms a counter may trail the clock (lua/lib/ids.lua).
        await asyncio.sleep(0.05)

    async with FloClient(replica.url, namespace=namespace) as on_new:
        await on_new.worker.register("w2", ["job"])
        made_after = [await invoke(on_new, b"after") for _ in range(3)]
        assert lost_run not in made_after
        taken = await on_new.worker.await_tasks("w2", ["job"], 4, NOW)
        again = next(run for run in taken if run.run_id == shared)
        assert again.token > lost_claim.token  # tokens never go backwards
        # The worker that claimed it on the old primary reports late: refused as stale,
        # while the new holder's complete lands.
        with pytest.raises(ConflictError) as info:
            await on_new.worker.complete(
                "w1", "job", shared, b"late", WorkerCompleteOptions(token=lost_claim.token)
            )
        assert info.value.reason == Reason.STALE_REPORT
        await on_new.worker.complete(
            "w2", "job", shared, b"new", WorkerCompleteOptions(token=again.token)
        )
        status = await on_new.action.status(shared)
        assert (status.status, status.output) == (RunStatus.COMPLETED, b"new")


# --- a cluster: one queue's data lost on the node that holds it ----------------------


@pytest.mark.cluster
async def test_ids_after_a_queue_lost_its_data_are_new_on_a_cluster(
    cluster_url: str, namespace: str
) -> None:
    raw = cluster_client(cluster_url)
    try:
        async with FloClient(cluster_url, namespace=namespace) as client:
            names = [f"job{i}" for i in range(3)]  # spread over the cluster's slots
            before: dict[str, list[str]] = {}
            for name in names:
                await client.action.register(name)
                before[name] = [(await client.action.invoke(name, b"x")).run_id for _ in range(3)]
                keys = action_keys(namespace, name)
                await raw.delete(keys.meta, *keys.all_data_keys())  # as a flush leaves it
            for name in names:
                await client.action.register(name)
                after = [(await client.action.invoke(name, b"y")).run_id for _ in range(3)]
                assert not set(after) & set(before[name])
                for run_id in before[name]:
                    with pytest.raises(NotFoundError):
                        await client.action.status(run_id)
                assert (await client.action.status(after[0])).status == RunStatus.PENDING
    finally:
        await raw.aclose()
