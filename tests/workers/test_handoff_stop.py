"""A stopping ActionWorker leaves no park behind (lua/README.md, "Hand-off": gone, frozen,
stopping): a run invoked after it stopped taking work goes to another worker with its
attempt unspent, even when the stop meets a failover's write pause or a park claim whose
reply was lost. Its poller ends every park it may hold, sending that claim again while
Redis does not answer, and leaves its hand-off channels, so a park it could not end is
refused by the subscriber check."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from polling import eventually, running
from proxy import Proxy

from flo_redis import ActionContext, ActionRegisterOptions, FloClient, RunStatus
from flo_redis._wire.keys import ActionKeys, action_keys, handoff_channel
from flo_redis._wire.lua import load_all

OPTIONS = ActionRegisterOptions(timeout_ms=60_000, max_retries=1)


class Slow:
    """A worker of action ``job``, two slots: a run with input ``slow`` holds one until
    :meth:`release`, so the worker stays alive (finishing it) after it was told to stop,
    parked in the queue with its other slot until then."""

    def __init__(self, client: FloClient) -> None:
        self.worker = client.new_action_worker(concurrency=2, block_ms=30_000)
        self.started: list[str] = []
        self._release = asyncio.Event()

        @self.worker.action("job", OPTIONS)
        async def job(ctx: ActionContext) -> bytes:
            self.started.append(ctx.task_id)
            if ctx.payload == b"slow":
                await self._release.wait()
            return b"done"

    def release(self) -> None:
        self._release.set()

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[asyncio.Task[None]]:
        """The worker's ``start()``, running inside; stopped (its slow run released)
        and awaited on leaving."""
        async with running(self.worker) as task:
            try:
                yield task
            finally:
                self.worker.stop()
                self.release()


async def parked_with_a_slow_run(raw: aioredis.Redis, client: FloClient, slow: Slow) -> str:
    """Hand ``slow``'s worker a slow run and wait until it parked with its other slot."""
    keys = action_keys(client.namespace, "job")
    await eventually(lambda: raw.zcard(keys.parked))
    run_id = (await client.action.invoke("job", b"slow")).run_id
    await eventually(lambda: asyncio.sleep(0, run_id in slow.started))
    await eventually(lambda: raw.zcard(keys.parked))
    return run_id


async def no_park_left(raw: aioredis.Redis, keys: ActionKeys) -> None:
    """No poller is parked in ``keys``' queue, nor holds a park's memo there: the stopped
    worker's poller ended its park itself (a park refused by a hand-off keeps its memo)."""

    async def left() -> tuple[int, int]:
        return await raw.zcard(keys.parked), await raw.hlen(keys.polls)

    await eventually(left, lambda counts: counts == (0, 0), timeout=10)


async def taken_by_another_worker(client: FloClient, run_id: str) -> None:
    """A new worker runs ``run_id`` (waiting unclaimed) on its first attempt."""
    other = Slow(client)
    async with other.serving():
        done = await eventually(
            lambda: client.action.status(run_id), lambda s: s.status == RunStatus.COMPLETED
        )
    assert (done.attempt, done.worker_id) == (1, other.worker.config.worker_id)
    assert other.started == [run_id]


async def test_a_stopping_worker_leaves_its_handoff_channels_while_handlers_finish(
    client: FloClient, raw: aioredis.Redis
) -> None:
    # A channel subscribed with nobody listening would pass the scripts' subscriber
    # check: a run handed there would be recorded RUNNING and never started.
    await client.action.register("job", options=OPTIONS)
    keys = action_keys(client.namespace, "job")
    slow = Slow(client)
    async with slow.serving() as task:
        await parked_with_a_slow_run(raw, client, slow)
        channel = handoff_channel(keys.tag, slow.worker.session.owner_id)

        async def subscribers() -> int:
            reply = await raw.execute_command("PUBSUB", "SHARDNUMSUB", channel)
            return int(reply[1])

        assert await subscribers() == 1
        slow.worker.stop()
        await eventually(subscribers, lambda n: n == 0, timeout=10)
        await no_park_left(raw, keys)
        assert not task.done()  # still finishing its slow run
        fast = (await client.action.invoke("job", b"fast")).run_id
        assert (await client.action.status(fast)).status == RunStatus.PENDING


@pytest.mark.slow
async def test_a_stop_during_a_write_pause_leaves_no_park(
    client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    await client.action.register("job", options=OPTIONS)
    keys = action_keys(namespace, "job")
    # A command answers within 1 s or fails: the pause outlasts the stopping poller's
    # first claim to end its park.
    async with FloClient(redis_url, namespace=namespace, timeout_ms=1000) as quick:
        slow = Slow(quick)
        async with slow.serving() as task:
            slow_run = await parked_with_a_slow_run(raw, client, slow)
            # Writes (scripts among them) wait 2.5 s, as while a replica takes over.
            await raw.execute_command("CLIENT", "PAUSE", 2500, "WRITE")
            slow.worker.stop()
            await raw.incr(f"{namespace}:pause-over")  # a write: answered after the pause
            fast = (await client.action.invoke("job", b"fast")).run_id
            assert (await client.action.status(fast)).status == RunStatus.PENDING
            await no_park_left(raw, keys)
            await taken_by_another_worker(client, fast)
            assert fast not in slow.started
            slow.release()
            await asyncio.wait_for(task, 30)
    assert (await client.action.status(slow_run)).status == RunStatus.COMPLETED


@pytest.mark.slow
async def test_a_stop_after_a_park_claims_reply_was_lost_leaves_no_park(
    client: FloClient, raw: aioredis.Redis, redis_url: str, namespace: str
) -> None:
    await client.action.register("job", options=OPTIONS)
    keys = action_keys(namespace, "job")
    proxy = await Proxy.to(redis_url)
    try:
        async with FloClient(proxy.url, namespace=namespace) as via_proxy:
            slow = Slow(via_proxy)
            worker = slow.worker
            failed = worker._poll_failed

            async def stop_on_failure(exc: Exception) -> bool:
                worker.stop()  # during the backoff before the poll is sent again
                return await failed(exc)

            worker._poll_failed = stop_on_failure  # type: ignore[method-assign]
            async with slow.serving() as task:
                slow_run = await parked_with_a_slow_run(raw, client, slow)
                # The poller's next claim ends its park and parks it again; its reply is
                # lost (the connection is cut), so the poll fails and the worker stops.
                proxy.drop_reply_after(load_all()["action_claim"].sha.encode())
                await raw.execute_command("SPUBLISH", keys.wake, "1")
                await eventually(lambda: asyncio.sleep(0, proxy.dropped_replies))
                await no_park_left(raw, keys)
                fast = (await client.action.invoke("job", b"fast")).run_id
                assert (await client.action.status(fast)).status == RunStatus.PENDING
                await taken_by_another_worker(client, fast)
                assert fast not in slow.started
                slow.release()
                await asyncio.wait_for(task, 30)
        assert (await client.action.status(slow_run)).status == RunStatus.COMPLETED
    finally:
        await proxy.stop()
