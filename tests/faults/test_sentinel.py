"""Redis Sentinel: clients reach the primary through ``redis+sentinel://`` URLs and follow
a failover. The primary is ``SIGKILL``-ed, the sentinels promote its replica, and a
running worker, an asyncio client, the blocking client and the exporter all carry on on
the new primary: invokes land, wake-ups arrive, a run held by a live worker is not
taken back. When no sentinel answers, or none knows the service, the error says so.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from dashboard_pages import parsed
from exporter_scrape import sample, scrape, serving
from polling import eventually
from sentinel import SentinelGroup
from tls_certs import make_authority

from flo_redis import ActionContext, ActionRegisterOptions, FloClient, RunStatus
from flo_redis._wire.keys import action_keys
from flo_redis.dashboard import start_dashboard
from flo_redis.errors import ConnectionFailedError, is_connection_error
from flo_redis.sync import SyncFloClient
from flo_redis.testing import free_port

pytestmark = pytest.mark.slow

LEASE = ActionRegisterOptions(timeout_ms=300_000)


@pytest.fixture
def group() -> Iterator[SentinelGroup]:
    group = SentinelGroup().start()
    try:
        yield group
    finally:
        group.discard()


@pytest.fixture
def guarded() -> Iterator[SentinelGroup]:
    """Passwords on the data nodes and, apart, on the sentinels."""
    group = SentinelGroup(password="data pw", sentinel_password="sentinel-pw").start()
    try:
        yield group
    finally:
        group.discard()


async def _round_trip(url: str, namespace: str) -> None:
    async with FloClient(url, namespace=namespace) as client:
        await client.action.register("job")
        run_id = (await client.action.invoke("job", b"x")).run_id
        assert (await client.action.status(run_id)).status == RunStatus.PENDING


async def test_a_client_reaches_the_primary_through_the_sentinels(
    group: SentinelGroup, namespace: str
) -> None:
    await _round_trip(group.url, namespace)
    with group.data_client(group.primary) as primary:  # type: ignore[arg-type]
        assert primary.exists(f"flo:{namespace}:{{job}}:meta") or primary.dbsize() > 0


async def test_passwords_for_the_data_nodes_and_the_sentinels(
    guarded: SentinelGroup, namespace: str
) -> None:
    await _round_trip(guarded.url, namespace)
    as_user = guarded.url_with(query="sentinel_username=default&sentinel_password=sentinel-pw")
    await _round_trip(as_user, namespace)
    with pytest.raises(ConnectionFailedError, match="sentinel_password"):
        await _round_trip(guarded.url_with(query=""), namespace)


async def test_one_sentinel_down_and_one_never_there(group: SentinelGroup, namespace: str) -> None:
    group.sentinels[0].stop()
    ports = [free_port(), *(s.port for s in group.sentinels)]
    await _round_trip(group.url_with(ports=ports), namespace)


async def test_an_unknown_service_is_named(group: SentinelGroup, namespace: str) -> None:
    url = group.url.replace(f"/{group.service}", "/elsewhere")
    with pytest.raises(ConnectionFailedError, match="no service named 'elsewhere'") as refused:
        await _round_trip(url, namespace)
    assert "they monitor: flo" in str(refused.value)


async def test_no_sentinel_answering_is_named(namespace: str) -> None:
    url = f"redis+sentinel://127.0.0.1:{free_port()},127.0.0.1:{free_port()}/flo"
    with pytest.raises(ConnectionFailedError, match="no Redis Sentinel answered") as refused:
        await _round_trip(url, namespace)
    assert "hosts and ports" in str(refused.value)
    with (
        SyncFloClient(url, namespace=namespace) as sync,
        pytest.raises(ConnectionFailedError, match="no Redis Sentinel answered"),
    ):
        sync.action.invoke("job", b"x")


@dataclass
class Holding:
    """A worker of ``client`` that holds run ``held`` until ``release`` is set; how many
    times it ran each run is in ``handled``."""

    client: FloClient
    held: str
    release: asyncio.Event
    handled: collections.Counter[str]


@contextlib.asynccontextmanager
async def holding(client: FloClient) -> AsyncIterator[Holding]:
    """A worker parked on 30 s polls, holding one run."""
    worker = client.new_action_worker(concurrency=10, block_ms=30_000)
    handled: collections.Counter[str] = collections.Counter()
    release = asyncio.Event()

    @worker.action("job", LEASE)
    async def job(ctx: ActionContext) -> bytes:
        handled[ctx.task_id] += 1
        if ctx.payload == b"held":
            await release.wait()
        return ctx.payload

    await client.action.register("job", options=LEASE)
    task = asyncio.create_task(worker.start())
    try:
        held = (await client.action.invoke("job", b"held")).run_id
        await eventually(lambda: handled[held] == 1)
        yield Holding(client, held, release, handled)
    finally:
        worker.stop()
        await task


async def carries_on(run: Holding, group: SentinelGroup) -> None:
    """After a failover: the worker's wake-up and liveness channels are subscribed on the
    new primary; runs invoked then are each done once, by a worker parked on a 30 s poll
    long before it ends (the wake-up came through); the held run stays with its live
    worker for three reclaim graces, then finishes once."""
    client = run.client
    began = time.monotonic()

    def step(what: str) -> None:  # printed, so a failure or a timeout shows where it stood
        port = group.primary.port if group.primary else None
        print(f"{time.monotonic() - began:6.2f} s: {what} (primary on port {port})")

    wake = action_keys(client.namespace, "job").wake
    await eventually(lambda: _subscribers(group, wake), lambda n: n > 0, timeout=20)
    step("wake-ups subscribed on the primary")
    await eventually(lambda: _subscribers(group, "*:live:*"), lambda n: n > 0)
    step("liveness subscribed on the primary")
    after = [(await client.action.invoke("job", b"%d" % i)).run_id for i in range(5)]
    for run_id in after:
        done = await eventually(
            lambda run_id=run_id: client.action.status(run_id), _completed, timeout=20
        )
        assert done.attempt == 1 and run.handled[run_id] == 1
        step(f"{run_id} completed")
    await asyncio.sleep(3 * client.liveness_grace_ms / 1000)
    running = await client.action.status(run.held)
    assert running.status == RunStatus.RUNNING and running.attempt == 1
    run.release.set()
    done = await eventually(lambda: client.action.status(run.held), _completed)
    assert done.attempt == 1 and run.handled[run.held] == 1


async def test_a_worker_carries_on_after_the_primary_is_killed(
    guarded: SentinelGroup, namespace: str
) -> None:
    async with FloClient(guarded.url, namespace=namespace) as client, holding(client) as run:
        await asyncio.to_thread(guarded.replicated)
        await asyncio.to_thread(guarded.kill_primary)
        await carries_on(run, guarded)


async def test_tls_to_the_sentinels_and_the_data_nodes(tmp_path: Path, namespace: str) -> None:
    group = SentinelGroup(tls=make_authority(tmp_path), password="pw").start()
    try:
        assert group.url.startswith("rediss+sentinel://")
        async with FloClient(group.url, namespace=namespace) as client, holding(client) as run:
            await asyncio.to_thread(group.replicated)
            await asyncio.to_thread(group.kill_primary)
            await carries_on(run, group)
        plain = group.url_with(scheme="redis+sentinel", query="")
        with pytest.raises(ConnectionFailedError, match="no Redis Sentinel answered"):
            await _round_trip(plain, namespace)  # the sentinels speak TLS there
    finally:
        group.discard()


async def test_a_worker_leaves_a_live_primary_demoted_by_the_sentinels(
    group: SentinelGroup, namespace: str
) -> None:
    async with FloClient(group.url, namespace=namespace) as client, holding(client) as run:
        await asyncio.to_thread(group.replicated)
        old = group.primary
        # The old primary keeps running, as a replica; the sentinels close its clients'
        # connections as they demote it.
        await asyncio.to_thread(group.failover)
        await carries_on(run, group)
        with group.data_client(old) as demoted:  # type: ignore[arg-type]
            assert demoted.info("replication")["role"] == "slave"


async def test_the_sync_client_and_the_exporter_follow_a_failover(
    group: SentinelGroup, namespace: str
) -> None:
    with SyncFloClient(group.url, namespace=namespace) as sync:
        async with FloClient(group.url, namespace=namespace) as client:
            await client.action.register("job")
        first = (await asyncio.to_thread(sync.action.invoke, "job", b"1")).run_id
        await asyncio.to_thread(group.replicated)

        await asyncio.to_thread(group.kill_primary)

        # Its pooled connection went with the old primary: the next call connects again,
        # to the new one (a call in flight when it died would be reported lost).
        second = await eventually(
            lambda: asyncio.to_thread(_try_invoke, sync), lambda r: r is not None, timeout=20
        )
        with group.data_client(group.primary) as primary:  # type: ignore[arg-type]
            assert primary.info("replication")["role"] == "master"
        status = await asyncio.to_thread(sync.action.status, first)
        assert status.status == RunStatus.PENDING
        assert (await asyncio.to_thread(sync.action.status, second)).status == RunStatus.PENDING

    async with serving(group.url, namespace) as url:
        samples = await asyncio.to_thread(scrape, url)
        assert sample(samples, "flo_redis_exporter_up") == 1
        pending = sample(
            samples, "flo_redis_queue_runs", namespace=namespace, action="job", state="pending"
        )
        assert pending == 2


async def test_a_client_follows_a_second_failover_back_to_the_first_node(
    group: SentinelGroup, namespace: str
) -> None:
    async with FloClient(group.url, namespace=namespace) as client:
        await client.action.register("job")
        first = group.primary
        runs = [(await client.action.invoke("job", b"0")).run_id]
        for _ in range(2):
            await asyncio.to_thread(group.replicated)
            await asyncio.to_thread(group.kill_primary)
            runs.append(await eventually(lambda: _try_invoke_async(client), bool, timeout=20))
            await asyncio.to_thread(group.rejoin, group.down[0])
        assert group.primary is first
        for run_id in runs:
            assert (await client.action.status(run_id)).status == RunStatus.PENDING


async def _try_invoke_async(client: FloClient) -> str | None:
    try:
        return (await client.action.invoke("job", b"after")).run_id
    except Exception as exc:
        if is_connection_error(exc):
            return None
        raise


def _try_invoke(sync: SyncFloClient) -> str | None:
    try:
        return sync.action.invoke("job", b"2").run_id
    except Exception as exc:
        if isinstance(exc, ConnectionFailedError) or is_connection_error(exc):
            return None
        raise


def _subscribers(group: SentinelGroup, channel: str) -> int:
    """How many subscribe to the shard ``channel`` on the current primary (with a
    pattern: how many such channels have subscribers)."""
    with group.data_client(group.primary) as primary:  # type: ignore[arg-type]
        if "*" in channel:
            return len(primary.execute_command("PUBSUB", "SHARDCHANNELS", channel))
        return int(primary.execute_command("PUBSUB", "SHARDNUMSUB", channel)[1])


def _completed(status: object) -> bool:
    return getattr(status, "status", None) == RunStatus.COMPLETED


async def test_the_dashboard_and_the_exporter_carry_on_across_a_failover(
    group: SentinelGroup, namespace: str
) -> None:
    """Both serving before the primary dies, both answering from the new one after: the
    dashboard's client and the exporter's reconnect through the sentinels, and what
    they show is the new primary's (a run invoked there counts)."""
    async with FloClient(group.url, namespace=namespace) as client:
        await client.action.register("job")
        await client.action.invoke("job", b"before")
        dashboard = await start_dashboard(client, port=0)
        try:
            async with serving(group.url, namespace) as metrics, aiohttp.ClientSession() as http:

                async def pending() -> float | None:
                    samples = await asyncio.to_thread(scrape, metrics)
                    labels = {"namespace": namespace, "action": "job", "state": "pending"}
                    return sample(samples, "flo_redis_queue_runs", **labels)

                async def page() -> str | None:
                    with contextlib.suppress(aiohttp.ClientError):
                        async with http.get(f"{dashboard.url}action?name=job") as response:
                            if response.status == 200:
                                return " ".join(parsed(await response.text())[1].split())
                    return None

                assert await pending() == 1
                before = await page()
                assert before is not None and "Action job 1 pending" in before
                await asyncio.to_thread(group.replicated)
                await asyncio.to_thread(group.kill_primary)
                await eventually(
                    lambda: _try_invoke_async(client), lambda r: r is not None, timeout=20
                )
                assert await eventually(pending, lambda n: n == 2, timeout=20) == 2
                # The run invoked on the new primary is counted, beside the first.
                await eventually(page, lambda t: t is not None and "Action job 2 pending" in t)
        finally:
            await dashboard.close()
