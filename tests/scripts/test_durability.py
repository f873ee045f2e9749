"""Durability levels: a write at ``replicated`` returns once a replica has it, and one
that no replica acknowledged in time raises NotDurableError although the primary has
it; ``fsynced`` needs WAITAOF (Redis 7.2+, Valkey); a level per client, per call and
per worker; bad levels refused before anything is written.

Every test runs on a real primary with one real replica (``support/replicas.py``); a
replica that acknowledges nothing is one stopped with SIGSTOP.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator

import pytest
import redis
from polling import eventually, finished, running
from replicas import ReplicaSet

from flo_redis import (
    ActionContext,
    Durability,
    DurabilityUnsupportedError,
    FloClient,
    NotDurableError,
    RunStatus,
    StreamGroupAckOptions,
    StreamGroupReadOptions,
    ValidationError,
    WorkerAwaitOptions,
    WorkerCompleteOptions,
)
from flo_redis._wire.keys import action_keys
from flo_redis.actions import CompleteItem
from flo_redis.sync import SyncFloClient
from flo_redis.types import DequeueOptions
from flo_redis.worker.observe import WorkerObserver

QUICK = Durability.replicated(1, timeout_ms=200)  # a frozen replica fails it quickly


@pytest.fixture(scope="module")
def pair() -> Iterator[ReplicaSet]:
    servers = ReplicaSet(replicas=1).start()
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture
async def durable(pair: ReplicaSet, namespace: str) -> AsyncIterator[FloClient]:
    """A client whose writes wait for the replica (up to 5 s: it is never frozen here)."""
    level = Durability.replicated(1, timeout_ms=5000)
    async with FloClient(pair.url, namespace=namespace, durability=level) as client:
        yield client


@pytest.fixture
async def plain(pair: ReplicaSet, namespace: str) -> AsyncIterator[FloClient]:
    async with FloClient(pair.url, namespace=namespace) as client:
        yield client


def on_replica(pair: ReplicaSet) -> redis.Redis:
    return redis.Redis(port=pair.replica.port, socket_timeout=5)


def server_has_waitaof(url: str) -> bool:
    conn = redis.Redis.from_url(url)
    try:
        version = str(conn.info("server")["redis_version"])
    finally:
        conn.close()
    return tuple(int(x) for x in re.findall(r"\d+", version)[:2]) >= (7, 2)


async def claimed(client: FloClient) -> tuple[str, str]:
    """A run of a new action "resize", invoked and taken by worker "w1": its id twice
    (as invoked, as taken)."""
    await client.action.register("resize")
    run = await client.action.invoke("resize", b"in")
    await client.worker.register("w1", ["resize"])
    task = (await client.worker.await_task("w1", ["resize"], WorkerAwaitOptions(block_ms=0))).task
    assert task is not None
    return run.run_id, task.task_id


async def test_replicated_writes_are_on_the_replica_when_they_return(
    durable: FloClient, pair: ReplicaSet
) -> None:
    run_id, task_id = await claimed(durable)
    assert task_id == run_id
    await durable.worker.complete("w1", "resize", task_id, b"out")
    appended = await durable.stream.append("events", b"e1")
    await durable.stream.group_join("events", "g", "c1")
    read = await durable.stream.group_read("events", "g", "c1", StreamGroupReadOptions(count=1))
    assert [r.id for r in read.records] == [appended.id]
    await durable.stream.group_ack("events", "g", [appended.id])
    seq = await durable.queue.enqueue("jobs", b"j1")
    taken = await durable.queue.dequeue("jobs", 1, DequeueOptions(block_ms=0))
    await durable.queue.ack("jobs", [m.seq for m in taken.messages])
    assert [m.seq for m in taken.messages] == [seq]
    # Each returned after the replica acknowledged it: it is there now, without waiting.
    status = await durable.action.status(run_id)
    assert status.status == RunStatus.COMPLETED
    replica = on_replica(pair)
    try:
        assert replica.hexists(action_keys(durable.namespace, "resize").runs, run_id)
    finally:
        replica.close()


def waits_sent(pair: ReplicaSet) -> int:
    """How many WAITs the primary has run since its statistics were last reset."""
    with redis.Redis(port=pair.primary.port, socket_timeout=5) as conn:
        stats = conn.info("commandstats")
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


async def test_only_the_durable_writes_wait_and_primary_adds_nothing(
    durable: FloClient, plain: FloClient, pair: ReplicaSet
) -> None:
    with redis.Redis(port=pair.primary.port) as conn:
        conn.config_resetstat()
    run_id, task_id = await claimed(plain)  # register, invoke, claim at PRIMARY
    await plain.worker.complete("w1", "resize", task_id, b"out")
    await plain.action.status(run_id)
    assert waits_sent(pair) == 0
    run = await durable.action.invoke("resize", b"again")  # one WAIT
    task = (await durable.worker.await_task("w1", ["resize"], WorkerAwaitOptions(block_ms=0))).task
    assert task is not None and task.task_id == run.run_id
    await durable.worker.touch("w1", "resize", task.task_id)
    await durable.action.status(run.run_id)
    await durable.action.runs("resize")
    await durable.worker.complete("w1", "resize", task.task_id, b"out")  # one WAIT
    assert waits_sent(pair) == 2


async def test_a_write_no_replica_acknowledged_raises_not_durable_and_is_applied(
    plain: FloClient, pair: ReplicaSet
) -> None:
    await plain.action.register("resize")
    with pair.frozen():
        with pytest.raises(NotDurableError) as caught:
            await plain.action.invoke("resize", b"in", durability=QUICK)
        run_ids = [r.run_id for r in (await plain.action.runs("resize")).runs]
    err = caught.value
    assert (err.operation, err.wanted, err.reached, err.timeout_ms) == ("invoke", 1, 0, 200)
    assert err.fsynced is None
    assert "WAS applied on the primary" in str(err) and "0 of 1 replicas" in str(err)
    assert "idempotency key" in str(err)
    assert len(run_ids) == 1  # the primary has the run


async def test_every_durable_write_raises_not_durable_without_a_replica(
    plain: FloClient, pair: ReplicaSet
) -> None:
    run_id, task_id = await claimed(plain)
    await plain.stream.group_join("events", "g", "c1")
    first = await plain.stream.append("events", b"e0")
    await plain.stream.group_read("events", "g", "c1", StreamGroupReadOptions(count=1))
    await plain.queue.enqueue("jobs", b"j0")
    taken = await plain.queue.dequeue("jobs", 1, DequeueOptions(block_ms=0))
    with pair.frozen():
        writes = {
            "complete": plain.worker.complete(
                "w1", "resize", task_id, b"out", WorkerCompleteOptions(), durability=QUICK
            ),
            "stream append": plain.stream.append("events", b"e1", durability=QUICK),
            "group ack": plain.stream.group_ack(
                "events", "g", [first.id], StreamGroupAckOptions(), durability=QUICK
            ),
            "enqueue": plain.queue.enqueue("jobs", b"j1", durability=QUICK),
            "queue ack": plain.queue.ack("jobs", [m.seq for m in taken.messages], durability=QUICK),
            "invoke_many": plain.action.invoke_many("resize", [b"m1", b"m2"], durability=QUICK),
        }
        for operation, write in writes.items():
            with pytest.raises(NotDurableError) as caught:
                await write
            assert caught.value.operation == operation
        # The batch calls a worker makes: the complete of another run, the ack of another.
        await plain.stream.append("events", b"e2")
        read = await plain.stream.group_read("events", "g", "c1", StreamGroupReadOptions(count=10))
        items = [(record.id, None) for record in read.records]
        with pytest.raises(NotDurableError, match="group ack"):
            await plain.stream.group_ack_many("events", "g", items, durability=QUICK)
        another = await plain.worker.await_task("w1", ["resize"], WorkerAwaitOptions(block_ms=0))
        assert another.task is not None
        item = CompleteItem(another.task.task_id, b"out")
        with pytest.raises(NotDurableError, match="complete"):
            await plain.worker.complete_many("w1", "resize", [item], durability=QUICK)
    # Each was applied on the primary all the same.
    assert (await plain.action.status(run_id)).status == RunStatus.COMPLETED
    assert len((await plain.stream.read("events")).records) == 3
    assert (await plain.stream.group_pending("events", "g")) == []
    assert (await plain.action.status(item.task_id)).status == RunStatus.COMPLETED


async def test_a_call_level_overrides_the_clients(
    durable: FloClient, plain: FloClient, pair: ReplicaSet
) -> None:
    await plain.action.register("resize")
    with pair.frozen():
        # The client waits for a replica; this call does not.
        await durable.action.invoke("resize", b"a", durability=Durability.PRIMARY)
        await durable.stream.append("events", b"e", durability="primary")
        # The client does not wait; this call does.
        with pytest.raises(NotDurableError):
            await plain.action.invoke("resize", b"b", durability=QUICK)
    # Reads never wait, at any level.
    assert len((await durable.action.runs("resize")).runs) == 2


async def test_a_level_names_a_default_of_each_kind(pair: ReplicaSet, namespace: str) -> None:
    async with FloClient(pair.url, namespace=namespace, durability="replicated") as client:
        assert client.settings.durability == Durability.replicated(1, 1000)
        await client.action.register("resize")
        await client.action.invoke("resize", b"a")


@pytest.mark.parametrize(
    "make",
    [
        lambda: Durability.replicated(0),
        lambda: Durability.replicated(-1),
        lambda: Durability.replicated(1, timeout_ms=0),
        lambda: Durability.replicated(1, timeout_ms=-5),
        lambda: Durability.replicated(1, timeout_ms=10**9),
        lambda: Durability.replicated(True),
        lambda: Durability.replicated(1.5),  # type: ignore[arg-type]
        lambda: Durability.fsynced(-1),
        lambda: Durability.fsynced(0, timeout_ms=0),
        lambda: Durability("eventually"),
        lambda: Durability("primary", 1),
    ],
)
def test_a_level_out_of_range_is_refused_when_made(make: object) -> None:
    with pytest.raises(ValidationError, match=r"(?i)durability"):
        make()  # type: ignore[operator]


async def test_a_bad_level_is_refused_before_anything_is_written(
    plain: FloClient, pair: ReplicaSet, namespace: str
) -> None:
    with pytest.raises(ValidationError, match="durability must be a Durability"):
        FloClient(pair.url, namespace=namespace, durability="sometimes")
    await plain.action.register("resize")
    for bad in ("always", 2, None.__class__):
        with pytest.raises(ValidationError):
            await plain.action.invoke("resize", b"a", durability=bad)  # type: ignore[arg-type]
        with pytest.raises(ValidationError):
            await plain.stream.append("events", b"e", durability=bad)  # type: ignore[arg-type]
    assert (await plain.action.runs("resize")).runs == ()
    with pytest.raises(ValidationError):
        plain.new_action_worker(durability="later")


async def test_fsynced_is_refused_before_anything_is_sent_without_waitaof(
    plain: FloClient, pair: ReplicaSet, namespace: str
) -> None:
    if server_has_waitaof(pair.url):
        pytest.skip("this server has WAITAOF (the next test covers it)")
    await plain.action.register("resize")
    with pytest.raises(DurabilityUnsupportedError) as caught:
        await plain.action.invoke("resize", b"a", durability=Durability.fsynced())
    message = str(caught.value)
    assert "WAITAOF" in message and "Redis 7.0" in message and "Redis 7.2" in message
    assert "Durability.replicated" in message  # what to do instead
    assert (await plain.action.runs("resize")).runs == ()
    # As a client's level, it is refused when the client connects.
    fsynced = FloClient(pair.url, namespace=namespace, durability="fsynced")
    with pytest.raises(DurabilityUnsupportedError):
        await fsynced.connect()
    await fsynced.close()


async def test_fsynced_waits_for_the_fsync_where_the_server_has_waitaof(
    plain: FloClient, pair: ReplicaSet, namespace: str
) -> None:
    if not server_has_waitaof(pair.url):
        pytest.skip("WAITAOF needs Redis 7.2+ or Valkey (FLO_REDIS_TEST_SERVER=valkey)")
    # Without appendonly the level cannot be reached: the write is applied, and said so.
    await plain.action.register("resize")
    with pytest.raises(NotDurableError, match="appendonly"):
        await plain.action.invoke("resize", b"a", durability="fsynced")
    servers = ReplicaSet(replicas=1, appendonly=True).start()
    try:
        level = Durability.fsynced(replicas=1, timeout_ms=5000)
        async with FloClient(servers.url, namespace=namespace, durability=level) as client:
            await client.action.register("resize")
            await client.action.invoke("resize", b"a")
            with servers.frozen(), pytest.raises(NotDurableError) as caught:
                await client.action.invoke(
                    "resize", b"b", durability=Durability.fsynced(1, timeout_ms=200)
                )
        assert caught.value.fsynced is True and caught.value.reached == 0
        assert "was fsynced on the primary" in str(caught.value)
    finally:
        servers.stop()


def test_the_blocking_client_waits_for_its_level(pair: ReplicaSet, namespace: str) -> None:
    async def register() -> None:
        async with FloClient(pair.url, namespace=namespace) as client:
            await client.action.register("resize")

    asyncio.run(register())
    with SyncFloClient(pair.url, namespace=namespace, durability="replicated") as flo:
        run = flo.action.invoke("resize", b"a")
        assert flo.action.status(run.run_id).status == RunStatus.PENDING
        with pair.frozen():
            with pytest.raises(NotDurableError) as caught:
                flo.action.invoke("resize", b"b", durability=QUICK)
            flo.action.invoke("resize", b"c", durability="primary")
    assert caught.value.operation == "invoke"


class Completes(WorkerObserver):
    """Counts the completes the store accepted at the worker's level, and those sent
    again."""

    count = resent = 0

    def run_completed(self, action: str, outcome: str) -> None:
        self.count += 1

    def report_resent(self, report: str) -> None:
        self.resent += report == "complete"


async def test_a_worker_completes_at_its_level_and_resends_until_the_replica_has_it(
    plain: FloClient, pair: ReplicaSet
) -> None:
    await plain.action.register("resize")
    worker = plain.new_action_worker(durability=QUICK, block_ms=200)
    worker.observer = told = Completes()
    handled = asyncio.Event()

    @worker.action("resize")
    async def resize(ctx: ActionContext) -> bytes:
        handled.set()
        return b"done"

    async with running(worker):
        first = await plain.action.invoke("resize", b"a")
        assert (await finished(plain, first.run_id)).status == RunStatus.COMPLETED
        await eventually(lambda: told.count, lambda n: n == 1, interval=0)
        with pair.frozen():
            handled.clear()
            second = await plain.action.invoke("resize", b"b")
            await asyncio.wait_for(handled.wait(), 15)
            # The complete is on the primary, but not acknowledged: the worker resends.
            await eventually(
                lambda: plain.action.status(second.run_id),
                lambda s: s.status == RunStatus.COMPLETED,
            )
            await eventually(lambda: told.resent, what="the complete sent again")
            assert told.count == 1  # not answered at its level yet
        # Once the replica is back, a resend is answered (the worker is told the run
        # completed then) and the worker goes on.
        await eventually(lambda: told.count, lambda n: n == 2, what="the resend answered")
        third = await plain.action.invoke("resize", b"c")
        assert (await finished(plain, third.run_id)).status == RunStatus.COMPLETED
