"""Reports a failover took with it, sent again by the live worker that made them.

The replica trails its primary by :data:`LAG_S` (its replication stream goes through a
proxy that delivers it that late), so a complete or an ack the primary answered just
before it is SIGKILLed never reaches the replica that is then promoted. The new primary
still shows the run held, the record delivered, by a live worker: without more, the run
would wait out its lease (a minute here) and run again, the record its ack timeout. The
worker's liveness connection breaks with the primary, and once it stands again on the
new primary the worker sends again what the old one answered just before: the run ends
completed with its handler's result, run once; the record is acked, delivered once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

import pytest
import redis.asyncio as aioredis
from cluster_replicas import ReplicatedPair
from polling import FINISHED, eventually, registered, running
from redis.exceptions import ResponseError

from flo_redis import (
    ActionContext,
    ActionRegisterOptions,
    FloClient,
    NotConnectedError,
    NotFoundError,
    RunStatus,
    StreamContext,
    StreamGroupJoinOptions,
)
from flo_redis._wire.keys import stream_keys
from flo_redis.sync import SyncFloClient

pytestmark = pytest.mark.slow

T = TypeVar("T")

#: How late the replica receives its primary's writes.
LAG_S = 0.3
#: A lease far longer than the test: a run that comes back did so by the resend.
LEASE = ActionRegisterOptions(timeout_ms=60_000)


@pytest.fixture
async def pair() -> AsyncIterator[ReplicatedPair]:
    async with ReplicatedPair.started(lag_s=LAG_S) as started:
        yield started


async def test_a_complete_the_failover_lost_is_sent_again(pair: ReplicatedPair) -> None:
    namespace = f"replay-{uuid.uuid4().hex[:8]}"
    ran: list[str] = []
    done = asyncio.Event()
    async with FloClient(pair.url, namespace=namespace) as client:
        await client.action.register("job", options=LEASE)
        worker = client.new_action_worker(concurrency=2)

        @worker.action("job")
        async def job(ctx: ActionContext) -> bytes:
            ran.append(ctx.task_id)
            await done.wait()
            return b"done:" + ctx.input()

        async with running(worker, ready=registered):
            run_id = (await client.action.invoke("job", b"x")).run_id
            replica = SyncFloClient(f"redis://127.0.0.1:{pair.replica.port}", namespace=namespace)
            # The claim has reached the replica before the handler returns.
            await eventually(
                lambda: _status(replica, run_id),
                lambda status: status == RunStatus.RUNNING,
                what="the claim on the replica",
            )
            done.set()
            await eventually(
                lambda: client.action.status(run_id),
                lambda s: s.status == RunStatus.COMPLETED,
                interval=0.005,
                what="the complete answered by the primary",
            )
            pair.kill_primary()
            # The complete never reached the replica: it went down with the primary.
            assert _status(replica, run_id) == RunStatus.RUNNING
            replica.close()
            pair.fail_over()
            status = await eventually(
                lambda: _answered(client.action.status(run_id)),
                lambda s: s is not None and s.status in FINISHED,
                timeout=20,
                what="the run finished on the new primary",
            )
        assert status.status == RunStatus.COMPLETED
        assert status.output == b"done:x"
        assert ran == [run_id]  # run once: neither its lease nor liveness brought it back


async def _answered(call: Awaitable[T]) -> T | None:
    """What ``call`` answers; None when it found no connection to Redis (the first call
    on a connection made before the failover is refused as lost)."""
    try:
        return await call
    except NotConnectedError:
        return None


def _status(client: SyncFloClient, run_id: str) -> RunStatus | None:
    """The run's status as ``client``'s server knows it; None while it knows no such run."""
    try:
        return client.action.status(run_id).status
    except NotFoundError:
        return None


async def test_an_ack_the_failover_lost_is_sent_again(pair: ReplicatedPair) -> None:
    namespace = f"replay-{uuid.uuid4().hex[:8]}"
    seen: list[str] = []
    done = asyncio.Event()
    async with FloClient(pair.url, namespace=namespace) as client:
        # An ack timeout of a minute: a redelivery in the test is not its doing.
        await client.stream.group_join(
            "events", "g", "setup", StreamGroupJoinOptions(ack_timeout_ms=60_000)
        )

        async def handle(ctx: StreamContext) -> None:
            seen.append(str(ctx.stream_id))
            await done.wait()

        worker = client.new_stream_worker(stream="events", group="g", handler=handle)
        async with running(worker):
            await client.stream.append("events", b"one")
            await eventually(lambda: list(seen), lambda s: len(s) == 1, what="record delivered")
            # The delivery has reached the replica before the handler returns.
            log = stream_keys(namespace, "events").log
            async with aioredis.Redis(port=pair.replica.port) as replica:

                async def pending_there() -> int:
                    try:
                        return int((await replica.xpending(log, "g"))["pending"])
                    except ResponseError:  # NOGROUP: the group has not reached it yet
                        return 0

                await eventually(pending_there, lambda n: n == 1, what="delivered on the replica")
                done.set()
                await eventually(
                    lambda: client.stream.group_pending("events", "g"),
                    lambda pending: not pending,
                    interval=0.005,
                    what="the ack answered by the primary",
                )
                pair.kill_primary()
                # The ack never reached the replica: the record is delivered there.
                assert await pending_there() == 1
            pair.fail_over()
            await eventually(
                lambda: _answered(client.stream.group_pending("events", "g")),
                lambda pending: pending == [],
                timeout=20,
                what="nothing pending on the new primary",
            )
        assert len(seen) == 1  # handled once: neither its ack timeout nor liveness
