"""Forgeries by users who may publish and call scripts but hold no run: a cancel notice
sent by hand, reclaims naming made-up liveness channels, a cancel or a park naming a
channel that is not the owner's, a liveness channel kept subscribed by another user.
None of them stops, strands or steals a live worker's work (docs/threat-model.md)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import msgpack
import pytest
import redis
from polling import eventually
from roles_world import role_url, user_conn

from flo_redis import (
    ActionContext,
    ActionRegisterOptions,
    FloClient,
    PermissionDeniedError,
    RunStatus,
    WorkerAwaitOptions,
)
from flo_redis._session.notices import cancel_notice
from flo_redis._wire.gateway import ACTION_CLAIM, ACTION_RECLAIM, ALL, RUN_CANCEL, SLOT_RECLAIM
from flo_redis._wire.keys import (
    HandoffChannel,
    OwnerChannel,
    action_keys,
    handoff_channel,
    notice_channel,
    owner_channel,
)
from flo_redis._wire.lua import LuaScript
from flo_redis._wire.runner import SCRIPTS
from flo_redis._wire.status import Status
from flo_redis.testing import RedisServer


@dataclass
class Held:
    """A run held by a live worker (a worker-role client of namespace ``ns``), whose
    handler waits for ``release``."""

    ns: str
    worker: FloClient
    run_id: str
    owner: str
    token: int
    release: asyncio.Event
    cancelled: asyncio.Event
    task: asyncio.Task[None]


@contextlib.asynccontextmanager
async def held_run(server: RedisServer) -> AsyncIterator[Held]:
    ns = f"f-{uuid.uuid4().hex[:8]}"
    release, cancelled = asyncio.Event(), asyncio.Event()
    async with FloClient(role_url(server, "worker", ns), namespace=ns) as client:
        worker = client.new_action_worker(block_ms=500)

        @worker.action("job", ActionRegisterOptions(timeout_ms=600_000, max_retries=3))
        async def job(ctx: ActionContext) -> bytes:
            try:
                await release.wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return b"done"

        task = asyncio.create_task(worker.start())
        try:
            await eventually(lambda: client.action.list(), lambda page: bool(page.actions))
            run_id = (await client.action.invoke("job", b"x")).run_id
            status = await eventually(
                lambda: client.action.status(run_id), lambda s: s.status == RunStatus.RUNNING
            )
            assert status.token is not None
            yield Held(ns, client, run_id, client.owner_id, status.token, release, cancelled, task)
        finally:
            release.set()
            worker.stop()
            await asyncio.wait_for(task, 30)


async def finishes_unharmed(held: Held) -> None:
    """The held run is still its worker's, under its token; released, it completes on
    its first attempt."""
    status = await held.worker.action.status(held.run_id)
    assert (status.status, status.token) == (RunStatus.RUNNING, held.token)
    held.release.set()
    done = await held.worker.action.wait(held.run_id, timeout_ms=20_000)
    assert (done.status, done.output, done.attempt) == (RunStatus.COMPLETED, b"done", 1)
    assert not held.cancelled.is_set()


DENIED = r"(?i)permission|can't run"


def run_script(conn: redis.Redis, script: LuaScript, keys: list[str], args: list[object]) -> list:
    """``script`` sent by hand, with the KEYS and ARGV a forger chose."""
    reply: list = conn.eval(script.source, len(keys), *keys, *args)
    return reply


async def test_a_forged_cancel_notice_does_not_stop_the_handler(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    async with held_run(server) as held:
        producer = user_conn(role_url(server, "producer", held.ns))
        keys = action_keys(held.ns, "job")
        record = msgpack.unpackb(producer.hget(keys.runs, held.run_id), raw=False)
        owner, token = record["o"], record["t"]  # what anyone who may read the run learns
        with caplog.at_level(logging.WARNING, logger="flo_redis.notices"):
            heard = producer.spublish(
                notice_channel(keys.tag, owner), cancel_notice(token, held.run_id)
            )
            assert heard == 1  # the worker's notice subscription got it
            await eventually(
                lambda: asyncio.sleep(0, caplog.text), lambda text: "not confirmed" in text
            )
        producer.close()
        await finishes_unharmed(held)


async def test_a_real_cancel_is_confirmed_and_stops_the_handler(server: RedisServer) -> None:
    async with held_run(server) as held:
        url = role_url(server, "producer", held.ns)
        async with FloClient(url, namespace=held.ns) as producer:
            await producer.action.cancel(held.run_id)
        await asyncio.wait_for(held.cancelled.wait(), 20)
        status = await held.worker.action.status(held.run_id)
        assert status.status == RunStatus.CANCELLED


# Channels a reclaim could be told are an owner's: today's suffix check took each.
MADE_UP = {
    "x:<owner>": lambda ns, owner: f"x:{owner}",
    "another queue's": lambda ns, owner: owner_channel(action_keys(ns, "other").tag, owner),
    "a longer name": lambda ns, owner: owner_channel(action_keys(ns, "job").tag, f"z:{owner}"),
}


@pytest.mark.parametrize("made_up", list(MADE_UP))
@pytest.mark.parametrize("forger", ["default", "producer"])
async def test_a_reclaim_naming_a_made_up_liveness_channel_is_refused(
    server: RedisServer, made_up: str, forger: str
) -> None:
    """Nobody subscribes a made-up channel: believed, it would judge a live worker gone.
    As Redis's default user (every key and command) the script refuses it; as a
    producer of the namespace, the key patterns refuse what is not of the namespace
    before the script runs, and the script the rest."""
    async with held_run(server) as held:
        keys = action_keys(held.ns, "job")
        channel = MADE_UP[made_up](held.ns, held.owner)
        conn = user_conn(server.url if forger == "default" else role_url(server, forger, held.ns))
        args = [0, 100, msgpack.packb([held.owner])]  # grace 0: gone at the first look
        script = SCRIPTS["action_reclaim"]
        for _ in range(2):
            try:
                reply = run_script(conn, script, ACTION_RECLAIM.keys(keys, [channel]), args)
            except redis.exceptions.NoPermissionError:
                assert forger != "default" and made_up == "x:<owner>"
            else:
                assert reply[0] == Status.OUT_OF_RANGE
        conn.close()
        await finishes_unharmed(held)


async def test_a_slot_reclaim_naming_a_made_up_liveness_channel_is_refused(
    server: RedisServer,
) -> None:
    ns = f"f-{uuid.uuid4().hex[:8]}"
    async with FloClient(role_url(server, "worker", ns), namespace=ns) as holder:
        await holder.action.register("job", options=ActionRegisterOptions(max_concurrency=1))
        slot = await holder.slots.acquire("job")
        assert slot is not None
        keys = action_keys(ns, "job")
        forged = OwnerChannel(owner_channel(keys.tag, f"z:{holder.owner_id}"))
        args = [slot.index, holder.owner_id, 0]
        forger = user_conn(role_url(server, "operator", ns))
        reply = run_script(forger, SCRIPTS["slot_reclaim"], SLOT_RECLAIM.keys((keys, forged)), args)
        forger.close()
        assert reply[0] == Status.OUT_OF_RANGE
        assert [h.owner for h in await holder.slots.holders("job")] == [holder.owner_id]
        await holder.slots.release(slot)  # still its own, under its token


@pytest.mark.slow
async def test_a_cancel_cannot_publish_on_a_liveness_channel(server: RedisServer) -> None:
    async with held_run(server) as held:
        keys = action_keys(held.ns, "job")
        live = owner_channel(keys.tag, held.owner)
        with redis.Redis.from_url(server.url) as admin:  # any user: the script refuses
            listener = admin.pubsub()
            listener.ssubscribe(live)
            assert listener.get_message(timeout=5)["type"] == "ssubscribe"
            args = [held.run_id, held.owner]
            reply = run_script(admin, SCRIPTS["run_cancel"], RUN_CANCEL.keys(keys, [live]), args)
            assert reply[0] == Status.OUT_OF_RANGE
            assert listener.get_message(timeout=0.5) is None  # nothing on the liveness channel
            listener.close()
        await finishes_unharmed(held)


async def test_a_claim_cannot_park_a_poller_on_another_owners_channel(server: RedisServer) -> None:
    async with held_run(server) as held:
        keys = action_keys(held.ns, "job")
        victim = HandoffChannel(owner_channel(keys.tag, held.owner))  # its liveness channel
        forger_owner = f"forger-{uuid.uuid4().hex[:6]}"
        args = ["w-forger", forger_owner, "", 1, "forger#1", 100, 30_000, "", 1000]
        claim = SCRIPTS["action_claim"]
        with redis.Redis.from_url(server.url) as admin:
            reply = run_script(admin, claim, ACTION_CLAIM.keys((keys, victim)), args)
            assert reply[0] == Status.OUT_OF_RANGE
            assert admin.zscore(keys.parked, "forger") is None
            # Its own hand-off channel, and it parks.
            own = HandoffChannel(handoff_channel(keys.tag, forger_owner))
            parked = run_script(admin, claim, ACTION_CLAIM.keys((keys, own)), args)
            assert parked[0] == Status.OK and admin.zscore(keys.parked, "forger") is not None
        await finishes_unharmed(held)


@pytest.mark.parametrize("role", ["producer", "operator", "read-only"])
@pytest.mark.slow
async def test_no_role_but_worker_can_keep_a_gone_workers_liveness(
    server: RedisServer, role: str
) -> None:
    """A worker dies holding a run; another user subscribes its liveness channel to
    keep the run from coming back: refused, and the run is redelivered."""
    ns = f"f-{uuid.uuid4().hex[:8]}"
    async with FloClient(role_url(server, "worker", ns), namespace=ns) as gone:
        await gone.action.register("job", options=ActionRegisterOptions(timeout_ms=600_000))
        await gone.worker.register("w1", ["job"])
        run_id = (await gone.action.invoke("job", b"x")).run_id
        task = (await gone.worker.await_task("w1", ["job"], WorkerAwaitOptions(block_ms=0))).task
        assert task is not None and task.task_id == run_id
        live = owner_channel(action_keys(ns, "job").tag, gone.owner_id)
    forger = user_conn(role_url(server, role, ns)).pubsub()
    with pytest.raises(redis.exceptions.ResponseError, match=DENIED):
        forger.ssubscribe(live)
        forger.get_message(timeout=5)
    forger.close()
    async with FloClient(role_url(server, role, ns), namespace=ns) as other:
        worker = other.new_action_worker()
        worker.action("job")(lambda ctx: b"")
        with pytest.raises(PermissionDeniedError):
            await asyncio.wait_for(worker.start(), 30)  # nor through a worker of its own
    async with FloClient(role_url(server, "worker", ns), namespace=ns) as client:
        worker = client.new_action_worker(block_ms=200)
        worker.action("job")(lambda ctx: b"again")
        running = asyncio.create_task(worker.start())
        try:  # a worker's reaper takes the run back: its owner is gone
            done = await client.action.wait(run_id, timeout_ms=30_000)
            assert (done.status, done.output) == (RunStatus.COMPLETED, b"again")
        finally:
            worker.stop()
            await asyncio.wait_for(running, 30)


@pytest.mark.slow
async def test_a_read_only_user_changes_nothing_with_a_runs_token(server: RedisServer) -> None:
    async with held_run(server) as held:
        keys = action_keys(held.ns, "job")
        reader = user_conn(role_url(server, "read-only", held.ns))
        complete = ALL["run_complete"]
        args = [held.run_id, held.token, "w-forger", b"forged", ""]
        with pytest.raises(redis.exceptions.ResponseError, match=DENIED):
            run_script(reader, complete.lua, complete.keys(keys), args)
        notice = cancel_notice(held.token, held.run_id)
        with pytest.raises(redis.exceptions.ResponseError, match=DENIED):
            reader.spublish(notice_channel(keys.tag, held.owner), notice)
        reader.close()
        await finishes_unharmed(held)
