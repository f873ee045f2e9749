"""Owner liveness: dead workers' runs come back in about a second, frozen workers keep
their leases until their deadlines, blips within the grace change nothing, lost claim
replies are replayed, and concurrency slots refuse every wrong reclaim or release.

The fault tests run real worker processes (``worker_proc.py``) and SIGKILL / SIGSTOP them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import TypeVar

import msgpack
import pytest
import redis.asyncio as aioredis
from polling import eventually, registered, running
from proxy import Proxy
from redis.crc import key_slot
from redis_server import RedisCluster as RedisClusterNodes
from redis_server import RedisServer, cluster_client

from flo_redis import (
    ActionContext,
    ActionRegisterOptions,
    ActionType,
    FloClient,
    RunStatus,
    WorkerAwaitOptions,
)
from flo_redis._session.liveness import DEFAULT_GRACE_MS, Liveness, connection_name
from flo_redis._session.liveness_stats import liveness_stats
from flo_redis._session.reclaim import reclaim_gone_owners, reclaim_owners
from flo_redis._wire.codec import pack
from flo_redis._wire.gateway import ACTION_RECLAIM
from flo_redis._wire.keys import action_keys, owner_channel
from flo_redis._wire.runner import SCRIPTS
from flo_redis._wire.status import Status
from flo_redis.actions.claims import claim
from flo_redis.actions.concurrency import SlotOperations
from flo_redis.errors import ConflictError, NotConnectedError, NotFoundError, ValidationError
from flo_redis.worker import ActionWorker

HERE = Path(__file__).resolve().parents[1] / "support"
T = TypeVar("T")
GONE = "owner gone: worker process died"


# --- helpers ---------------------------------------------------------------------------


@contextlib.contextmanager
def worker_process(
    url: str, namespace: str, action: str, concurrency: int, timeout_ms: int
) -> Iterator[subprocess.Popen[bytes]]:
    """A real worker process whose handlers hold their runs until the gate opens."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "worker_proc.py"),
            url,
            namespace,
            action,
            "hold",
            str(concurrency),
            str(timeout_ms),
        ],
        cwd=HERE,
    )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait(10)


async def held_by(client: FloClient, run_ids: list[str], worker_id: str) -> None:
    async def probe() -> list[tuple[RunStatus, str | None]]:
        return [(s.status, s.worker_id) for s in [await client.action.status(r) for r in run_ids]]

    await eventually(probe, lambda v: all(s == RunStatus.RUNNING and w == worker_id for s, w in v))


async def all_completed(client: FloClient, run_ids: list[str]) -> None:
    async def probe() -> list[RunStatus]:
        return [(await client.action.status(r)).status for r in run_ids]

    await eventually(probe, lambda v: all(s == RunStatus.COMPLETED for s in v), timeout=30)


@contextlib.asynccontextmanager
async def in_process_worker(
    client: FloClient, action: str, timeout_ms: int, seen: list[tuple[str, int, float]]
) -> AsyncIterator[ActionWorker]:
    """Another worker (in this process) that completes what it gets with b"B"."""
    worker = client.new_action_worker(worker_id="catcher", concurrency=16, block_ms=1000)

    async def handler(ctx: ActionContext) -> bytes:
        seen.append((ctx.task_id, ctx.attempt, time.monotonic()))
        return b"B"

    worker.register_action(action, handler, ActionRegisterOptions(timeout_ms=timeout_ms))
    async with running(worker, ready=registered):
        yield worker


async def owner_of(raw: aioredis.Redis, namespace: str, action: str, run_id: str) -> str:
    record = msgpack.unpackb(await raw.hget(action_keys(namespace, action).runs, run_id))
    owner = record["o"]
    return owner.decode() if isinstance(owner, bytes) else str(owner)


async def reconnecting(call: Awaitable[T]) -> T | None:
    """``call``'s answer, or None if the connection it used was dropped (a restart)."""
    try:
        return await call
    except NotConnectedError:
        return None


async def subscribers(raw: aioredis.Redis, channel: str) -> int:
    reply = await raw.execute_command("PUBSUB", "SHARDNUMSUB", channel)
    return int(reply[1])


async def dies(client: FloClient, raw: aioredis.Redis, action: str) -> None:
    """Close ``client`` (as a killed process would lose its connections) and wait until
    Redis has dropped its liveness subscription."""
    await client.close()
    channel = owner_channel(action_keys(client.namespace, action).tag, client.owner_id)
    await eventually(lambda: subscribers(raw, channel), lambda c: c == 0, timeout=5)


# --- fault tests with real worker processes ----------------------------------------------


@pytest.mark.slow
async def test_sigkilled_worker_runs_are_redelivered_within_about_a_second(
    client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    """Lease timeout 5 minutes: only liveness can explain a redelivery within seconds."""
    action, n, timeout_ms = "resize", 8, 300_000
    await client.action.register(
        action, ActionType.USER, ActionRegisterOptions(timeout_ms=timeout_ms)
    )
    run_ids = [(await client.action.invoke(action, b"%d" % i)).run_id for i in range(n)]
    seen: list[tuple[str, int, float]] = []
    with worker_process(redis_url, namespace, action, n, timeout_ms) as proc:
        await held_by(client, run_ids, f"proc-{proc.pid}")
        async with in_process_worker(client, action, timeout_ms, seen):
            await asyncio.sleep(0.3)  # the catcher is polling and reaping
            killed_at = time.monotonic()
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            # Within all_completed's 30 s: by liveness, long before the 5 minute lease.
            await all_completed(client, run_ids)
            done_at = time.monotonic()
    first = min(t for _, _, t in seen) - killed_at
    print(
        f"\nSIGKILL -> first redelivery {first * 1000:.0f} ms, "
        f"all {n} completed {(done_at - killed_at) * 1000:.0f} ms "
        f"(grace {DEFAULT_GRACE_MS} ms, lease timeout {timeout_ms} ms)"
    )
    assert sorted(r for r, _, _ in seen) == sorted(run_ids)  # each delivered once more
    for run_id in run_ids:
        status = await client.action.status(run_id)
        assert status.output == b"B"
        assert status.attempt == 2  # the dead worker's attempt counted
    stats = await liveness_stats(client, action)
    assert stats.reclaimed_owner_gone == n
    assert stats.reclaimed_deadline == 0
    assert stats.owners_suspected >= 1
    assert stats.owners_gone >= 1
    assert await raw.zcard(action_keys(namespace, action).owned) == 0  # nothing held


@pytest.mark.slow
async def test_sigstopped_worker_keeps_its_leases_until_their_deadline(
    client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    action, n, timeout_ms = "frozen", 4, 2000
    await client.action.register(
        action, ActionType.USER, ActionRegisterOptions(timeout_ms=timeout_ms)
    )
    run_ids = [(await client.action.invoke(action, b"x")).run_id for _ in range(n)]
    keys = action_keys(namespace, action)
    seen: list[tuple[str, int, float]] = []
    with worker_process(redis_url, namespace, action, n, timeout_ms) as proc:
        worker_id = f"proc-{proc.pid}"
        await held_by(client, run_ids, worker_id)
        os.kill(proc.pid, signal.SIGSTOP)
        deadlines = {r: int(await raw.zscore(keys.leases, r) or 0) for r in run_ids}
        async with in_process_worker(client, action, timeout_ms, seen):
            # Past the grace (and several reaper rounds), before the deadline: untouched.
            await asyncio.sleep(DEFAULT_GRACE_MS / 1000 + 0.3)
            now_ms = await client.server_time_ms()
            if now_ms < min(deadlines.values()):
                for run_id in run_ids:
                    status = await client.action.status(run_id)
                    assert status.status == RunStatus.RUNNING
                    assert (status.worker_id, status.attempt) == (worker_id, 1)
            stats = await liveness_stats(client, action)
            assert stats.owners_suspected == 0  # a frozen process still looks alive
            assert stats.reclaimed_owner_gone == 0
            await all_completed(client, run_ids)
        # The frozen worker wakes up and reports: every late complete is refused.
        os.kill(proc.pid, signal.SIGCONT)
        await raw.set(f"{namespace}:gate", 1)
        await eventually(
            lambda: liveness_stats(client, action), lambda s: s.stale_refused == n, timeout=30
        )
    for run_id in run_ids:
        status = await client.action.status(run_id)
        assert status.output == b"B"
        assert status.attempt == 2
        assert status.started_at_ms is not None
        assert status.started_at_ms >= deadlines[run_id]  # taken only after the deadline
    stats = await liveness_stats(client, action)
    assert (stats.reclaimed_owner_gone, stats.reclaimed_deadline) == (0, n)


@pytest.mark.slow
async def test_liveness_blip_within_the_grace_keeps_the_leases(
    client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    action, n, timeout_ms = "blip", 4, 300_000
    await client.action.register(
        action, ActionType.USER, ActionRegisterOptions(timeout_ms=timeout_ms)
    )
    run_ids = [(await client.action.invoke(action, b"x")).run_id for _ in range(n)]
    keys = action_keys(namespace, action)
    seen: list[tuple[str, int, float]] = []
    with worker_process(redis_url, namespace, action, n, timeout_ms) as proc:
        worker_id = f"proc-{proc.pid}"
        await held_by(client, run_ids, worker_id)
        owner = await owner_of(raw, namespace, action, run_ids[0])
        channel = owner_channel(keys.tag, owner)
        name = connection_name(owner)
        listing = await raw.client_list()
        [live_conn] = [c for c in listing if c.get("name") == name]
        async with in_process_worker(client, action, timeout_ms, seen):
            # Cut the liveness connection and, before the worker can resubscribe, run a
            # reclaim: the owner is seen absent and becomes a suspect.
            script_keys = ACTION_RECLAIM.keys(keys, tail=[channel])
            async with raw.pipeline(transaction=False) as pipe:
                pipe.execute_command("CLIENT", "KILL", "ID", live_conn["id"])
                pipe.eval(
                    ACTION_RECLAIM.lua.source,
                    len(script_keys),
                    *script_keys,
                    DEFAULT_GRACE_MS,
                    100,
                    pack([owner]),
                )
                killed, reply = await pipe.execute()
            assert killed
            assert int(reply[0]) == Status.OK
            assert int(reply[1]) == 0
            assert int(reply[2]) > 0  # suspected, grace running
            # The worker subscribes again at once; after the grace nothing was taken.
            await eventually(lambda: subscribers(raw, channel), lambda c: c == 1, timeout=5)
            await asyncio.sleep(DEFAULT_GRACE_MS / 1000 + 0.5)
            stats = await liveness_stats(client, action)
            assert stats.owners_suspected >= 1
            assert stats.suspicions_cleared >= 1
            assert stats.reclaimed_owner_gone == 0
            for run_id in run_ids:
                status = await client.action.status(run_id)
                assert (status.status, status.worker_id, status.attempt) == (
                    RunStatus.RUNNING,
                    worker_id,
                    1,
                )
            await raw.set(f"{namespace}:gate", 1)
            await all_completed(client, run_ids)
        for run_id in run_ids:
            status = await client.action.status(run_id)
            assert status.output == str(proc.pid).encode()  # finished by the original worker
            assert status.attempt == 1
    assert seen == []


@pytest.mark.slow
async def test_a_redis_restart_does_not_make_live_owners_look_gone() -> None:
    """Every connection drops with the restart; the data survives (AOF). The worker
    subscribes again at once and keeps its runs through the other worker's reclaims."""
    server = RedisServer(appendonly=True, extra=("--appendfsync", "always")).start()
    namespace, action, n, timeout_ms = f"t-{uuid.uuid4().hex[:8]}", "restart", 3, 300_000
    seen: list[tuple[str, int, float]] = []
    try:
        async with FloClient(server.url, namespace=namespace) as client:
            await client.action.register(
                action, ActionType.USER, ActionRegisterOptions(timeout_ms=timeout_ms)
            )
            run_ids = [(await client.action.invoke(action, b"x")).run_id for _ in range(n)]
            with worker_process(server.url, namespace, action, n, timeout_ms) as proc:
                worker_id = f"proc-{proc.pid}"
                await held_by(client, run_ids, worker_id)
                async with in_process_worker(client, action, timeout_ms, seen):
                    await asyncio.to_thread(server.restart)
                    await asyncio.sleep(DEFAULT_GRACE_MS / 1000 + 0.5)
                    stats = await eventually(lambda: reconnecting(liveness_stats(client, action)))
                    assert stats is not None and stats.reclaimed_owner_gone == 0
                    for run_id in run_ids:
                        status = await client.action.status(run_id)
                        assert (status.status, status.worker_id, status.attempt) == (
                            RunStatus.RUNNING,
                            worker_id,
                            1,
                        )
                    gate = aioredis.Redis.from_url(server.url)
                    await gate.set(f"{namespace}:gate", 1)
                    await gate.aclose()
                    await all_completed(client, run_ids)
                for run_id in run_ids:
                    status = await client.action.status(run_id)
                    assert (status.output, status.attempt) == (str(proc.pid).encode(), 1)
        assert seen == []
    finally:
        server.stop()


async def test_a_claim_whose_reply_is_cut_is_replayed_on_retry(
    raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    proxy = await Proxy.to(redis_url)
    try:
        async with FloClient(proxy.url, namespace=namespace) as client:
            action = "cut"
            await client.action.register(action, ActionType.USER)
            first = (await client.action.invoke(action, b"1")).run_id
            second = (await client.action.invoke(action, b"2")).run_id
            await client.worker.register("w1", [action])
            keys = action_keys(namespace, action)
            await client.liveness.hold(keys.tag)
            await raw.script_load(SCRIPTS["action_claim"].source)
            proxy.drop_reply_after(SCRIPTS["action_claim"].sha.encode())
            with pytest.raises(NotConnectedError):
                await claim(client.session, keys, "w1", b"", 1, "poll-1")
            assert proxy.dropped_replies == 1
            lost = await client.action.status(first)
            assert lost.status == RunStatus.RUNNING  # the claim ran; its answer was lost
            again = await claim(client.session, keys, "w1", b"", 1, "poll-1")
            assert [(r.run_id, r.token) for r in again.runs] == [(first, lost.token)]
            other = await claim(client.session, keys, "w1", b"", 1, "poll-2")
            assert [r.run_id for r in other.runs] == [second]
    finally:
        await proxy.stop()


async def test_a_silent_liveness_connection_is_replaced(
    raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    """A partition sends no reset: an unanswered PING makes the owner subscribe again."""
    proxy = await Proxy.to(redis_url)
    through_proxy = aioredis.Redis.from_url(proxy.url)
    live = Liveness(f"silent-{namespace}", lambda: through_proxy, ping_every_s=0.2)
    tag = action_keys(namespace, "quiet").tag
    channel = owner_channel(tag, live.owner)
    try:
        await live.hold(tag)
        assert await subscribers(raw, channel) == 1
        [before] = [c for c in await raw.client_list() if c["name"] == connection_name(live.owner)]
        accepted = proxy.accepted
        proxy.stall_all()
        await eventually(lambda: asyncio.sleep(0, proxy.accepted), lambda n: n > accepted)
        await eventually(lambda: subscribers(raw, channel), lambda c: c == 1)

        async def ids() -> list[str]:
            named = connection_name(live.owner)
            return [c["id"] for c in await raw.client_list() if c["name"] == named]

        assert await eventually(ids, lambda v: v != [before["id"]] and len(v) == 1)
        assert live.is_held(tag)
    finally:
        await live.close()
        await through_proxy.aclose()
        await proxy.stop()


# --- the reclaim script ------------------------------------------------------------------


async def claim_as(client: FloClient, worker_id: str, action: str, n: int) -> list[str]:
    await client.worker.register(worker_id, [action])
    runs = await client.worker.await_tasks(worker_id, [action], n, WorkerAwaitOptions(block_ms=0))
    return [r.run_id for r in runs]


async def test_a_gone_owner_is_suspected_then_reclaimed_after_the_grace(
    client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    action = "gone"
    await client.action.register(action, ActionType.USER, ActionRegisterOptions(max_retries=2))
    run_ids = [(await client.action.invoke(action, b"x")).run_id for _ in range(2)]
    dead = FloClient(redis_url, namespace=namespace)
    await dead.connect()
    assert sorted(await claim_as(dead, "dead", action, 2)) == sorted(run_ids)
    alive = await reclaim_owners(client.session, action, [dead.owner_id], grace_ms=200)
    assert (alive.reclaimed, alive.wait_ms) == (0, -1)  # subscribed: alive, untouched
    await dies(dead, raw, action)  # the process is gone: its liveness connection closes
    first = await reclaim_gone_owners(client.session, action, grace_ms=200)
    assert first.reclaimed == 0
    assert 0 < first.wait_ms <= 200
    assert (await liveness_stats(client, action)).suspects == 1
    await asyncio.sleep(0.25)
    second = await reclaim_gone_owners(client.session, action, grace_ms=200)
    assert second.reclaimed == 2
    for run_id in run_ids:
        status = await client.action.status(run_id)
        assert status.status == RunStatus.PENDING
        assert status.attempt == 1
        assert status.error_message == GONE
    stats = await liveness_stats(client, action)
    assert (stats.reclaimed_owner_gone, stats.owners, stats.suspects) == (2, 0, 0)
    # The second attempt is the last one: a second death ends the run FAILED.
    dead2 = FloClient(redis_url, namespace=namespace)
    await dead2.connect()
    assert len(await claim_as(dead2, "dead2", action, 2)) == 2
    await dies(dead2, raw, action)
    assert (await reclaim_gone_owners(client.session, action, grace_ms=0)).reclaimed == 2
    for run_id in run_ids:
        status = await client.action.status(run_id)
        assert (status.status, status.attempt, status.error_message) == (
            RunStatus.FAILED,
            2,
            GONE,
        )


async def test_reclaim_takes_only_runs_whose_owner_is_exactly_the_gone_one(
    client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    action = "exact"
    await client.action.register(action, ActionType.USER, ActionRegisterOptions(timeout_ms=100))
    run_id = (await client.action.invoke(action, b"x")).run_id
    dead = FloClient(redis_url, namespace=namespace)
    await dead.connect()
    assert await claim_as(dead, "dead", action, 1) == [run_id]
    await asyncio.sleep(0.15)  # the lease runs out; a live worker takes the run over
    live = FloClient(redis_url, namespace=namespace)
    await live.connect()
    try:
        assert await claim_as(live, "live", action, 1) == [run_id]
        await dies(dead, raw, action)
        result = await reclaim_owners(client.session, action, [dead.owner_id], grace_ms=0)
        assert result.reclaimed == 0  # the run names the live owner now
        status = await client.action.status(run_id)
        assert (status.status, status.worker_id, status.attempt) == (RunStatus.RUNNING, "live", 2)
        assert await owner_of(raw, namespace, action, run_id) == live.owner_id
        # Naming a live owner takes nothing either, whatever the caller believes.
        taken = await reclaim_owners(client.session, action, [live.owner_id], grace_ms=0)
        assert taken.reclaimed == 0
    finally:
        await live.close()
        await dead.close()


async def test_a_gone_owner_does_not_hold_the_actions_capacity(
    client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    action = "capped"
    await client.action.register(
        action, ActionType.USER, ActionRegisterOptions(max_concurrency=1, timeout_ms=300_000)
    )
    first = (await client.action.invoke(action, b"1")).run_id
    second = (await client.action.invoke(action, b"2")).run_id
    dead = FloClient(redis_url, namespace=namespace)
    await dead.connect()
    assert await claim_as(dead, "dead", action, 2) == [first]  # capacity 1
    assert await claim_as(client, "live", action, 1) == []  # all capacity held
    await dies(dead, raw, action)
    assert (await reclaim_gone_owners(client.session, action, grace_ms=0)).reclaimed == 1
    # The capacity is free again; the taken-back run waits behind the other one.
    assert await claim_as(client, "live", action, 1) == [second]
    status = await client.action.status(first)
    assert (status.status, status.attempt, status.error_message) == (RunStatus.PENDING, 1, GONE)


async def test_reclaim_is_bounded_by_its_batch(
    client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    action = "batched"
    await client.action.register(action, ActionType.USER)
    for _ in range(5):
        await client.action.invoke(action, b"x")
    dead = FloClient(redis_url, namespace=namespace)
    await dead.connect()
    assert len(await claim_as(dead, "dead", action, 5)) == 5
    await dies(dead, raw, action)
    steps = []
    while True:
        result = await reclaim_owners(client.session, action, [dead.owner_id], grace_ms=0, batch=2)
        steps.append(result.reclaimed)
        if not result.more:
            break
    assert steps == [2, 2, 1]
    assert (await liveness_stats(client, action)).owners == 0


async def test_reclaim_refuses_bad_arguments_and_unknown_actions(client: FloClient) -> None:
    with pytest.raises(NotFoundError):
        await reclaim_owners(client.session, "nope", ["someone"])
    await client.action.register("args", ActionType.USER)
    from flo_redis.errors import ValidationError

    with pytest.raises(ValidationError):  # refused before anything is sent
        await reclaim_owners(client.session, "args", ["someone"], grace_ms=-1)
    # An owner paired with another owner's channel is refused, not believed.
    keys = action_keys(client.namespace, "args")
    reply = await ACTION_RECLAIM(
        client.session, keys, [0, 10, pack(["someone"])], tail=[owner_channel(keys.tag, "other")]
    )
    assert reply.status == Status.OUT_OF_RANGE


# --- concurrency slots ---------------------------------------------------------------------


@contextlib.asynccontextmanager
async def owners(redis_url: str, namespace: str, n: int) -> AsyncIterator[list[FloClient]]:
    clients = [FloClient(redis_url, namespace=namespace) for _ in range(n)]
    for c in clients:
        await c.connect()
    try:
        yield clients
    finally:
        for c in clients:
            await c.close()


async def test_slot_reclaim_takes_only_the_dead_owners_slot(
    client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    action = "slots"
    await client.action.register(action, ActionType.USER, ActionRegisterOptions(max_concurrency=2))
    async with owners(redis_url, namespace, 2) as (a, b):
        slot_a = await SlotOperations(a.session).acquire(action)
        slot_b = await SlotOperations(b.session).acquire(action)
        assert slot_a is not None and slot_b is not None
        assert await SlotOperations(client.session).acquire(action) is None  # all held, all alive
        await dies(a, raw, action)
        ops = SlotOperations(client.session)
        assert await ops.reclaim(action, slot_a.index, a.owner_id, grace_ms=200) is False
        await asyncio.sleep(0.25)
        assert await ops.reclaim(action, slot_a.index, a.owner_id, grace_ms=200) is True
        held = await ops.holders(action)
        assert [(s.index, s.owner, s.token) for s in held] == [
            (slot_b.index, b.owner_id, slot_b.token)
        ]
        stats = await liveness_stats(client, action)
        assert (stats.slots_held, stats.slot_reclaimed_owner_gone) == (1, 1)


async def test_slot_reclaim_refuses_a_wrong_expected_owner(
    client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    action = "slots-wrong"
    await client.action.register(action, ActionType.USER, ActionRegisterOptions(max_concurrency=1))
    async with owners(redis_url, namespace, 2) as (a, b):
        slot = await SlotOperations(a.session).acquire(action)
        assert slot is not None
        await dies(b, raw, action)  # b is gone, but it is not the holder
        with pytest.raises(ConflictError):
            await SlotOperations(client.session).reclaim(action, slot.index, b.owner_id, grace_ms=0)
        [held] = await SlotOperations(client.session).holders(action)
        assert (held.owner, held.token) == (a.owner_id, slot.token)


async def test_slot_reclaim_refuses_a_live_peers_slot(
    client: FloClient, redis_url: str, namespace: str
) -> None:
    action = "slots-live"
    await client.action.register(action, ActionType.USER, ActionRegisterOptions(max_concurrency=1))
    async with owners(redis_url, namespace, 1) as (a,):
        slot = await SlotOperations(a.session).acquire(action)
        assert slot is not None
        with pytest.raises(ConflictError) as refused:
            await SlotOperations(client.session).reclaim(action, slot.index, a.owner_id, grace_ms=0)
        assert "alive" in str(refused.value)
        [held] = await SlotOperations(client.session).holders(action)
        assert (held.owner, held.token) == (a.owner_id, slot.token)
        # A frozen holder looks alive; only the slot's lease deadline frees it.
        await SlotOperations(a.session).release(slot)
        short = await SlotOperations(a.session).acquire(action, lease_ms=100)
        assert short is not None
        await asyncio.sleep(0.15)
        assert await SlotOperations(client.session).reclaim(action, short.index, a.owner_id) is True
        assert (await liveness_stats(client, action)).slot_reclaimed_deadline == 1


async def test_slot_refuses_a_late_release_by_a_replaced_owner(
    client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    action = "slots-late"
    await client.action.register(action, ActionType.USER, ActionRegisterOptions(max_concurrency=1))
    async with owners(redis_url, namespace, 2) as (old, new):
        slot = await SlotOperations(old.session).acquire(action)
        assert slot is not None
        await old.liveness.close()  # looks dead (e.g. a long partition) ...
        channel = owner_channel(action_keys(namespace, action).tag, old.owner_id)
        await eventually(lambda: subscribers(raw, channel), lambda c: c == 0, timeout=5)
        assert await SlotOperations(new.session).acquire(action) is None  # ... only suspected yet
        await asyncio.sleep(DEFAULT_GRACE_MS / 1000 + 0.05)
        replacement = await SlotOperations(new.session).acquire(action)  # reclaims, then takes it
        assert replacement is not None and replacement.index == slot.index
        assert replacement.token > slot.token
        with pytest.raises(ConflictError):
            await SlotOperations(old.session).release(slot)  # ... and comes back too late
        [held] = await SlotOperations(client.session).holders(action)
        assert (held.owner, held.token) == (new.owner_id, replacement.token)
        await SlotOperations(new.session).release(replacement)
        await SlotOperations(new.session).release(replacement)  # a resend is answered OK
        assert await SlotOperations(client.session).holders(action) == []
        stats = await liveness_stats(client, action)
        assert stats.slot_release_refused == 1
        assert stats.slot_reclaimed_owner_gone == 1


# --- Redis Cluster -----------------------------------------------------------------------


@pytest.mark.cluster
async def test_liveness_and_reclaim_on_a_cluster_node_per_queue(cluster_url: str) -> None:
    """Each queue's owner channel is subscribed on the node owning the queue's slot, and
    the reclaim script reads the count there (the channel is in its KEYS)."""
    namespace = f"c-{uuid.uuid4().hex[:10]}"
    craw = cluster_client(cluster_url)
    await craw.initialize()
    names: dict[str, str] = {}
    for i in range(1000):
        node = craw.get_node_from_key(action_keys(namespace, f"job{i}").runs)
        assert node is not None
        names.setdefault(node.name, f"job{i}")
        if len(names) == 3:
            break
    actions = sorted(names.values())
    try:
        async with FloClient(cluster_url, namespace=namespace) as client:
            for action in actions:
                await client.action.register(action, ActionType.USER)
                await client.action.invoke(action, b"x")
            holder = FloClient(cluster_url, namespace=namespace)
            await holder.connect()
            await holder.worker.register("holder", actions)
            taken = await holder.worker.await_tasks(
                "holder", actions, 3, WorkerAwaitOptions(block_ms=0)
            )
            assert len(taken) == 3
            named = connection_name(holder.owner_id)
            per_node = [
                sum(1 for c in await craw.client_list(target_nodes=n) if c["name"] == named)
                for n in craw.get_primaries()
            ]
            assert per_node == [1, 1, 1]  # one liveness connection on each node
            for action in actions:  # alive: nothing is taken
                taken = await reclaim_gone_owners(client.session, action, grace_ms=0)
                assert taken.reclaimed == 0
            await holder.close()

            async def reclaim_all() -> list[int]:
                for action in actions:
                    await reclaim_gone_owners(client.session, action, grace_ms=0)
                stats = [await liveness_stats(client, a) for a in actions]
                return [s.reclaimed_owner_gone for s in stats]

            assert await eventually(reclaim_all, lambda n: n == [1, 1, 1]) == [1, 1, 1]
    finally:
        await craw.aclose()


@pytest.mark.cluster
@pytest.mark.slow
async def test_a_slot_move_does_not_make_a_live_owner_look_gone(
    cluster_url: str, cluster_nodes: RedisClusterNodes
) -> None:
    """Moving a queue's slot unsubscribes its shard subscribers; the owner subscribes
    again on the slot's new node within the grace and keeps its runs."""
    namespace = f"c-{uuid.uuid4().hex[:10]}"
    action = "moving-owner"
    keys = action_keys(namespace, action)
    slot = key_slot(keys.runs.encode())
    async with FloClient(cluster_url, namespace=namespace) as client:
        await client.action.register(
            action, ActionType.USER, ActionRegisterOptions(timeout_ms=300_000)
        )
        run_ids = [(await client.action.invoke(action, b"x")).run_id for _ in range(3)]
        holder = FloClient(cluster_url, namespace=namespace)
        await holder.connect()
        try:
            assert sorted(await claim_as(holder, "holder", action, 3)) == sorted(run_ids)
            channel = owner_channel(keys.tag, holder.owner_id)
            source = cluster_nodes.owner_port(slot)
            target = next(p for p in cluster_nodes.ports if p != source)
            await asyncio.to_thread(cluster_nodes.move_slot, slot, target)

            async def count_on_target() -> int:
                reply = cluster_nodes.cli(target, "pubsub", "shardnumsub", channel)
                return int(reply.split()[-1])

            await eventually(count_on_target, lambda c: c == 1, timeout=10)
            await asyncio.sleep(DEFAULT_GRACE_MS / 1000 + 0.2)
            for _ in range(2):
                assert (await reclaim_gone_owners(client.session, action)).reclaimed == 0
            for run_id in run_ids:
                status = await client.action.status(run_id)
                assert (status.status, status.worker_id, status.attempt) == (
                    RunStatus.RUNNING,
                    "holder",
                    1,
                )
        finally:
            await holder.close()


async def test_the_client_exposes_stats_slots_and_its_grace(
    client: FloClient, redis_url: str, namespace: str
) -> None:
    assert client.liveness_grace_ms == DEFAULT_GRACE_MS
    with pytest.raises(ValidationError):
        FloClient(redis_url, liveness_grace_ms=-1)
    quick = FloClient(redis_url, namespace=namespace, liveness_grace_ms=300)
    assert quick.sibling().liveness_grace_ms == 300  # a worker's own client keeps it
    await client.action.register(
        "exposed", ActionType.USER, ActionRegisterOptions(max_concurrency=1)
    )
    slot = await client.slots.acquire("exposed")
    assert slot is not None
    stats = await client.action.stats("exposed")
    assert (stats.slots_held, stats.reclaimed_owner_gone) == (1, 0)
    await client.slots.release(slot)
    assert (await client.action.stats("exposed")).slots_held == 0
