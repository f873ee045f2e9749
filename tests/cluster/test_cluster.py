"""The same code on a real local 3-master Redis Cluster: actions in different slots, a
worker serving queues on three nodes, partitioned streams, plain queues (client.queue)
on three nodes, wake-ups, ``NOSCRIPT`` after
``SCRIPT FLUSH`` on every node, and a queue's slot moved to another node mid-run (and a
call sent again while its slot is half moved)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from polling import eventually, finished, running, watched
from redis.asyncio.cluster import RedisCluster as ClusterClient
from redis.crc import key_slot
from redis_server import RedisCluster

from flo_redis import (
    ActionContext,
    ActionRegisterOptions,
    DequeueOptions,
    EnqueueOptions,
    FloClient,
    RetryPolicy,
    RunStatus,
    StreamAppendOptions,
    StreamContext,
    StreamGroupAckOptions,
    StreamGroupReadOptions,
    StreamReadOptions,
    WorkerAwaitOptions,
)
from flo_redis._session.notices import tell
from flo_redis._wire.gateway import RUN_CANCEL
from flo_redis._wire.keys import action_keys, handoff_channel, queue_keys, stream_keys
from flo_redis._wire.replies import handed
from flo_redis.actions.claims import claim
from flo_redis.actions.runs import cancel_reply
from flo_redis.actions.schedules import fire_due
from flo_redis.sync import SyncFloClient

pytestmark = pytest.mark.cluster


@pytest.fixture
async def cclient(cluster_url: str) -> AsyncIterator[FloClient]:
    async with FloClient(cluster_url, namespace=f"c-{uuid.uuid4().hex[:10]}") as c:
        yield c


async def node_of(craw: ClusterClient, key: str) -> str:
    await craw.initialize()
    node = craw.get_node_from_key(key)
    assert node is not None
    return str(node.name)


async def names_on_distinct_nodes(
    craw: ClusterClient, namespace: str, n: int, keys_of: type[object] | None = None
) -> list[str]:
    """``n`` action names whose queues live on ``n`` different nodes."""
    found: dict[str, str] = {}
    for i in range(1000):
        name = f"job{i}"
        node = await node_of(craw, action_keys(namespace, name).runs)
        found.setdefault(node, name)
        if len(found) == n:
            return list(found.values())
    raise AssertionError("the cluster has fewer nodes than asked for")


# --- connecting -----------------------------------------------------------------------


async def test_the_client_connects_by_url_or_option(cluster_url: str) -> None:
    async with FloClient(cluster_url) as by_url:
        assert by_url.is_cluster
        assert isinstance(by_url.redis, ClusterClient)
    plain = cluster_url.replace("redis+cluster://", "redis://")
    async with FloClient(plain, cluster=True) as by_option:
        assert by_option.is_cluster
        assert len(by_option.redis.get_primaries()) >= 3  # type: ignore[union-attr]


async def test_a_burst_beyond_a_nodes_connections_is_sent_again_not_failed(
    cluster_url: str, namespace: str
) -> None:
    """redis-py's cluster pool does not wait for a free connection: a command that finds
    a node's all busy is refused unsent. Reads (status, what ``wait`` reads) and script
    calls so refused are sent again as the retry policy says, so a burst far above the
    connections (as hundreds of waits at once) is answered, slower, not failed."""
    patient = RetryPolicy(max_attempts=50, initial_backoff_ms=5, max_backoff_ms=50)
    async with FloClient(
        cluster_url, namespace=namespace, max_connections=1, retry=patient
    ) as client:
        await client.action.register("job")
        first = (await client.action.invoke("job", b"")).run_id
        reads = [client.action.status(first) for _ in range(200)]
        invokes = [client.action.invoke("job", b"") for _ in range(100)]
        answers = await asyncio.gather(*reads, *invokes)
        assert all(a.status == RunStatus.PENDING for a in answers[:200])  # type: ignore[union-attr]
        assert len({a.run_id for a in answers[200:]}) == 100
        assert (await client.action.counts("job")).pending == 101


async def test_waits_beyond_a_nodes_connections_read_again_and_return_each_runs_end(
    cluster_url: str, namespace: str
) -> None:
    """A wait's status read refused unsent (every connection busy) once the retry policy
    is spent is read again while the wait's time lasts: a hundred waits at once through
    one connection per node, with no resend at all, each return their run's end."""
    once = RetryPolicy(max_attempts=1)
    async with (
        FloClient(cluster_url, namespace=namespace) as steering,
        FloClient(cluster_url, namespace=namespace, max_connections=1, retry=once) as client,
    ):
        await steering.action.register("job")
        run_ids = [(await steering.action.invoke("job", b"")).run_id for _ in range(100)]
        waits = [asyncio.ensure_future(client.action.wait(r, timeout_ms=30_000)) for r in run_ids]
        await asyncio.sleep(0.2)
        for run_id in run_ids:
            await steering.action.cancel(run_id)
        ended = await asyncio.gather(*waits)
        assert [s.run_id for s in ended] == run_ids
        assert {s.status for s in ended} == {RunStatus.CANCELLED}


# --- actions --------------------------------------------------------------------------


async def test_a_cluster_of_one_primary_is_served_by_both_clients() -> None:
    """A one-shard cluster (a managed cluster's smallest): redis-py answers a command to
    every primary with that one node's reply alone, not a reply per node."""
    one = await asyncio.to_thread(RedisCluster(masters=1).start)
    try:
        async with FloClient(one.url, namespace="one") as client:
            await client.action.register("job")
            run_id = (await client.action.invoke("job", b"")).run_id
            with SyncFloClient(one.url, namespace="one") as sync:
                assert sync.action.status(run_id).status == RunStatus.PENDING
                other = sync.action.invoke("job", b"").run_id
            assert (await client.action.status(other)).status == RunStatus.PENDING
    finally:
        one.stop()


async def test_invoke_claim_complete_across_slots(cclient: FloClient, craw: ClusterClient) -> None:
    names = await names_on_distinct_nodes(craw, cclient.namespace, 3)
    for name in names:
        await cclient.action.register(name)
    await cclient.worker.register("w1", names)
    run_ids = [(await cclient.action.invoke(n, n.encode())).run_id for n in names]
    claimed = await cclient.worker.await_tasks("w1", names, 10, WorkerAwaitOptions(block_ms=0))
    assert sorted(c.assignment().task_id for c in claimed) == sorted(run_ids)
    for c in claimed:
        task = c.assignment()
        await cclient.worker.complete("w1", task.task_type, task.task_id, b"ok")
    for run_id in run_ids:
        assert (await finished(cclient, run_id, timeout=30)).status == RunStatus.COMPLETED
    listed = await cclient.action.list()
    assert sorted(a.name for a in listed.actions) == sorted(names)


async def test_schedules_are_steered_and_fired_on_three_nodes(
    cclient: FloClient, craw: ClusterClient
) -> None:
    names = await names_on_distinct_nodes(craw, cclient.namespace, 3)
    for name in names:
        await cclient.action.register(name)
        await cclient.action.schedule(name, "0 3 * * *", input=name.encode())
        paused = await cclient.action.pause_schedule(name)
        run_id = await cclient.action.trigger_schedule(name)
        assert (await cclient.action.status(run_id)).status == RunStatus.PENDING
        resumed = await cclient.action.resume_schedule(name)
        assert resumed.next_due_ms == paused.next_due_ms and resumed.triggered_run_id == run_id
        # Due long ago: fired once (missed, once) and on to the next 03:00.
        await craw.zadd(action_keys(cclient.namespace, name).schedule_due, {name: 1_000})
        assert await fire_due(cclient.session, name) == 1
    listed = await cclient.action.schedules()
    assert sorted(s.name for s in listed) == sorted(names)
    assert all(s.last_due_ms == 1_000 and s.last_run_id for s in listed)
    for name in names:
        await cclient.action.unschedule(name)
    assert await cclient.action.schedules() == []


async def test_an_await_returns_promptly_after_an_invoke(
    cclient: FloClient, craw: ClusterClient
) -> None:
    names = await names_on_distinct_nodes(craw, cclient.namespace, 3)
    for name in names:
        await cclient.action.register(name)
    await cclient.worker.register("w1", names)
    for name in names:
        waiting = asyncio.create_task(
            cclient.worker.await_task("w1", names, WorkerAwaitOptions(block_ms=20_000))
        )
        await watched(craw, action_keys(cclient.namespace, name).wake)  # the poll is parked
        run_id = (await cclient.action.invoke(name, b"x")).run_id
        # Woken by the wake-up, not by the 20 s deadline.
        task = (await asyncio.wait_for(waiting, 10)).task
        assert task is not None and task.task_id == run_id
        await cclient.worker.complete("w1", name, run_id, b"")


async def test_an_invoke_hands_a_run_to_a_parked_poller_on_each_node(
    cclient: FloClient, craw: ClusterClient
) -> None:
    # The park, the hand-off and the poller's channel all live in the queue's slot.
    names = await names_on_distinct_nodes(craw, cclient.namespace, 3)
    for name in names:
        await cclient.action.register(name)
    for name in names:
        keys = action_keys(cclient.namespace, name)
        channel = handoff_channel(keys.tag, cclient.owner_id)
        async with cclient.waker.listening([channel], release=True) as listener:
            await listener.arm()
            parked = await claim(cclient.session, keys, "w1", b"", 1, "p#0", 10_000)
            assert parked.runs == ()
            run_id = (await cclient.action.invoke(name, b"x")).run_id
            assert await listener.wait(15)
            assert listener.message is not None
            message = handed(listener.message, name)
            assert message.run is not None and message.run.run_id == run_id
            assert (await cclient.action.status(run_id)).status == RunStatus.RUNNING


async def test_plain_queues_on_three_nodes(cclient: FloClient, craw: ClusterClient) -> None:
    """client.queue on every node: priorities, a blocking dequeue woken by an enqueue,
    nack and redelivery, ack, dead letters and requeue, liveness reclaim."""
    found: dict[str, str] = {}
    for i in range(1000):
        node = await node_of(craw, queue_keys(cclient.namespace, f"q{i}").msgs)
        found.setdefault(node, f"q{i}")
        if len(found) == 3:
            break
    assert len(found) == 3
    q = cclient.queue
    for name in found.values():
        low = await q.enqueue(name, b"low", EnqueueOptions(priority=9))
        high = await q.enqueue(name, b"high")
        got = (await q.dequeue(name, 5)).messages
        assert [(m.seq, m.payload) for m in got] == [(high, b"high"), (low, b"low")]
        await q.nack(name, [low])
        await q.ack(name, [high])
        waiting = asyncio.create_task(q.dequeue(name, 5, DequeueOptions(block_ms=60_000)))
        again = (await asyncio.wait_for(waiting, 30)).messages
        assert [(m.seq, m.delivery_count) for m in again] == [(low, 2)]
        waiting = asyncio.create_task(
            q.dequeue(name, 1, DequeueOptions(block_ms=60_000, max_deliveries=1))
        )
        await watched(craw, queue_keys(cclient.namespace, name).wake)  # parked on it
        fresh = await q.enqueue(name, b"fresh")
        (msg,) = (await asyncio.wait_for(waiting, 30)).messages  # woken long before 60 s
        assert msg.seq == fresh
        await q.nack(name, [fresh])  # its only delivery: dead-lettered
        assert [m.seq for m in (await q.dlq_list(name)).messages] == [fresh]
        await q.dlq_requeue(name, [fresh])
        assert [m.seq for m in (await q.peek(name, 5)).messages] == [fresh]
        assert (await q.reclaim_gone_owners(name)).reclaimed == 0
        await q.ack(name, [low])


async def test_one_action_worker_serves_queues_on_three_nodes(
    cclient: FloClient, craw: ClusterClient
) -> None:
    names = await names_on_distinct_nodes(craw, cclient.namespace, 3)
    worker = cclient.new_action_worker(block_ms=1000, concurrency=8)
    for name in names:

        async def handle(ctx: ActionContext, name: str = name) -> bytes:
            return name.encode() + b":" + ctx.payload

        worker.register_action(name, handle)
    async with running(worker):
        await eventually(lambda: cclient.action.list(), lambda r: len(r.actions) == 3)
        run_ids = [
            (await cclient.action.invoke(names[i % 3], str(i).encode())).run_id for i in range(30)
        ]
        for run_id in run_ids:
            assert (await finished(cclient, run_id, timeout=30)).status == RunStatus.COMPLETED


async def test_a_worker_on_three_nodes_is_told_of_each_cancel(
    cclient: FloClient, craw: ClusterClient
) -> None:
    names = await names_on_distinct_nodes(craw, cclient.namespace, 3)
    # Leases of ten minutes and no touches: only a notice can tell the handlers.
    options = ActionRegisterOptions(timeout_ms=600_000)
    worker = cclient.new_action_worker(block_ms=1000, concurrency=8)
    cancelled: dict[str, bool] = {}
    for name in names:

        async def hold(ctx: ActionContext) -> bytes:
            try:
                await asyncio.Event().wait()
            finally:
                cancelled[ctx.task_id] = ctx.cancelled
            return b""

        worker.register_action(name, hold, options)
    async with running(worker):
        await eventually(lambda: cclient.action.list(), lambda r: len(r.actions) == 3)
        run_ids = [(await cclient.action.invoke(name, b"x")).run_id for name in names]
        for run_id in run_ids:
            await eventually(
                lambda run_id=run_id: cclient.action.status(run_id),
                lambda s: s.status == RunStatus.RUNNING,
            )
            await cclient.action.cancel(run_id)
        await eventually(lambda: asyncio.sleep(0, dict(cancelled)), lambda c: len(c) == 3)
        assert cancelled == dict.fromkeys(run_ids, True)
        # A cancel that named no holder (the run was claimed between its two steps):
        # the client tells the holder the script names, on the holder's node too.
        again = (await cclient.action.invoke(names[1], b"x")).run_id
        await eventually(
            lambda: cclient.action.status(again), lambda s: s.status == RunStatus.RUNNING
        )
        keys = action_keys(cclient.namespace, names[1])
        reply = await RUN_CANCEL(cclient.session, keys, [again, ""])
        assert (reply.holder, reply.told) == (worker.client.owner_id, False)
        notice = cancel_reply(reply, keys, again)
        assert notice is not None
        await tell(cclient.redis, notice)
        await eventually(lambda: asyncio.sleep(0, dict(cancelled)), lambda c: again in c)
        assert cancelled[again] is True


async def test_scripts_survive_script_flush_on_every_node(
    cclient: FloClient, craw: ClusterClient, cluster_nodes: RedisCluster
) -> None:
    names = await names_on_distinct_nodes(craw, cclient.namespace, 3)
    for name in names:
        await cclient.action.register(name)
    await cclient.worker.register("w1", names)
    await cclient.stream.create("s", partitions=3)
    for port in cluster_nodes.ports:
        cluster_nodes.cli(port, "script", "flush")
    run_ids = [(await cclient.action.invoke(n, b"x")).run_id for n in names]
    for port in cluster_nodes.ports:
        cluster_nodes.cli(port, "script", "flush")
    claimed = await cclient.worker.await_tasks("w1", names, 10, WorkerAwaitOptions(block_ms=0))
    assert sorted(c.assignment().task_id for c in claimed) == sorted(run_ids)
    for port in cluster_nodes.ports:
        cluster_nodes.cli(port, "script", "flush")
    for c in claimed:
        task = c.assignment()
        await cclient.worker.complete("w1", task.task_type, task.task_id, b"ok")
    for _ in range(3):
        await cclient.stream.append("s", b"x")
    for port in cluster_nodes.ports:
        cluster_nodes.cli(port, "script", "flush")
    assert len((await cclient.stream.group_read("s", "g", "c")).records) == 3


async def test_calls_after_every_node_cut_its_idle_connections_all_succeed(
    cclient: FloClient, craw: ClusterClient, cluster_nodes: RedisCluster
) -> None:
    """What a node's restart does to a client (its idle connections closed by the server):
    the next calls on every node go through, none fails as "connection closed"."""
    names = await names_on_distinct_nodes(craw, cclient.namespace, 3)
    for name in names:
        await cclient.action.register(name)
    # Calls in flight at once leave several idle connections to each node.
    await asyncio.gather(*(cclient.action.invoke(n, b"x") for n in names for _ in range(4)))
    for port in cluster_nodes.ports:
        cluster_nodes.cli(port, "client", "kill", "type", "normal", "skipme", "yes")
    await asyncio.sleep(0.05)
    runs = [await cclient.action.invoke(n, b"after") for n in names for _ in range(6)]
    for run in runs:
        assert (await cclient.action.status(run.run_id)).status == RunStatus.PENDING


# --- partitioned streams ----------------------------------------------------------------


async def spread_stream(craw: ClusterClient, namespace: str, partitions: int) -> str:
    """A stream name whose partitions live on ``partitions`` different nodes."""
    for i in range(1000):
        name = f"events{i}"
        nodes = {
            await node_of(craw, stream_keys(namespace, name, p).log) for p in range(partitions)
        }
        if len(nodes) == partitions:
            return name
    raise AssertionError("no stream name spreads over the nodes")


async def test_a_partitioned_stream_spreads_over_the_nodes(
    cclient: FloClient, craw: ClusterClient
) -> None:
    stream = await spread_stream(craw, cclient.namespace, 3)
    assert await cclient.stream.create(stream, partitions=3) == 3
    for i in range(30):
        await cclient.stream.append(
            stream, str(i).encode(), StreamAppendOptions(partition_key=f"k{i % 5}")
        )
    info = await cclient.stream.info(stream)
    assert (info.count, info.partition_count) == (30, 3)
    recs = (await cclient.stream.read(stream)).records
    assert sorted(int(r.payload) for r in recs) == list(range(30))
    per_key: dict[int, list[int]] = {}
    for r in sorted(recs, key=lambda r: (r.partition, r.id.as_tuple())):
        per_key.setdefault(int(r.payload) % 5, []).append(int(r.payload))
    assert all(v == sorted(v) for v in per_key.values())  # one key: in order
    got = []
    while batch := (
        await cclient.stream.group_read(stream, "g", "c1", StreamGroupReadOptions(count=7))
    ).records:
        got += batch
    assert sorted(int(r.payload) for r in got) == list(range(30))
    assert len(await cclient.stream.group_pending(stream, "g")) == 30
    for r in got:
        await cclient.stream.group_ack(
            stream, "g", [r.id], StreamGroupAckOptions(partition=r.partition, token=1)
        )
    assert await cclient.stream.group_pending(stream, "g") == []


async def test_a_group_read_wakes_for_an_append_on_any_node(
    cclient: FloClient, craw: ClusterClient
) -> None:
    stream = await spread_stream(craw, cclient.namespace, 3)
    await cclient.stream.create(stream, partitions=3)
    await cclient.stream.group_join(stream, "g", "c1")
    for p in range(3):
        waiting = asyncio.create_task(
            cclient.stream.group_read(stream, "g", "c1", StreamGroupReadOptions(block_ms=20_000))
        )
        for partition in range(3):
            await watched(craw, stream_keys(cclient.namespace, stream, partition).wake)
        appended = await cclient.stream.append(stream, f"p{p}".encode())
        recs = (await asyncio.wait_for(waiting, 10)).records
        assert [(r.payload, r.partition) for r in recs] == [(f"p{p}".encode(), appended.partition)]
    plain = (await cclient.stream.read(stream, StreamReadOptions(partition=1))).records
    assert [r.partition for r in plain] == [1]


async def test_a_one_off_listener_on_three_nodes_subscribes_and_releases(
    cclient: FloClient, craw: ClusterClient
) -> None:
    names = await names_on_distinct_nodes(craw, cclient.namespace, 3)
    channels = [f"{action_keys(cclient.namespace, n).tag}:test:done" for n in names]

    async def subscribers(channel: str) -> int:
        node = craw.get_node_from_key(channel)
        # Asked of the node itself: redis-py 8.2's cluster-level reply merge for
        # SHARDNUMSUB expects pairs the node-level reply does not give.
        reply = await node.execute_command("PUBSUB", "SHARDNUMSUB", channel)
        return int(reply[1])

    async with cclient.waker.listening(channels, release=True) as listener:
        await listener.arm()
        assert [await subscribers(c) for c in channels] == [1, 1, 1]
        for i, channel in enumerate(channels):
            await listener.arm()
            await craw.execute_command("SPUBLISH", channel, str(i).encode())
            assert await listener.wait(15)
            assert listener.message == str(i).encode()
    for channel in channels:
        await eventually(lambda c=channel: subscribers(c), lambda n: n == 0)


async def test_a_stream_worker_on_three_partitions(cclient: FloClient, craw: ClusterClient) -> None:
    stream = await spread_stream(craw, cclient.namespace, 3)
    await cclient.stream.create(stream, partitions=3)
    seen: list[int] = []

    async def handle(ctx: StreamContext) -> None:
        seen.append(int(ctx.payload))

    worker = cclient.new_stream_worker(stream=stream, group="g", handler=handle, block_ms=2000)
    async with running(worker):
        for i in range(60):
            await cclient.stream.append(
                stream, str(i).encode(), StreamAppendOptions(partition_key=str(i))
            )
        await eventually(lambda: asyncio.sleep(0, len(seen)), lambda n: n >= 60, timeout=30)
        await eventually(lambda: cclient.stream.group_pending(stream, "g"), lambda p: p == [])
    assert sorted(seen) == list(range(60))


# --- resharding -----------------------------------------------------------------------


async def test_a_queue_slot_moves_to_another_node_while_a_worker_runs(
    cclient: FloClient, craw: ClusterClient, cluster_nodes: RedisCluster
) -> None:
    name = "moving"
    keys = action_keys(cclient.namespace, name)
    slot = key_slot(keys.runs.encode())
    done: list[bytes] = []

    async def handle(ctx: ActionContext) -> bytes:
        await asyncio.sleep(0.002)
        done.append(ctx.payload)
        return ctx.payload

    worker = cclient.new_action_worker(block_ms=30_000, concurrency=4)
    worker.register_action(name, handle)
    async with running(worker):
        await eventually(lambda: cclient.action.list(), lambda r: len(r.actions) == 1)
        source = cluster_nodes.owner_port(slot)
        target = next(p for p in cluster_nodes.ports if p != source)
        run_ids = [(await cclient.action.invoke(name, str(i).encode())).run_id for i in range(100)]
        move = asyncio.create_task(asyncio.to_thread(cluster_nodes.move_slot, slot, target))
        while not move.done():
            run_ids.append((await cclient.action.invoke(name, b"during")).run_id)
            await asyncio.sleep(0.005)
        await move
        assert cluster_nodes.owner_port(slot) == target
        for run_id in run_ids:
            assert (await finished(cclient, run_id, timeout=30)).status == RunStatus.COMPLETED
        # The worker is idle in a 30 s long poll now; wake-ups must come from the slot's
        # new node (its subscription there is made again after the move).
        for _ in range(3):
            await asyncio.sleep(0.3)
            run_id = (await cclient.action.invoke(name, b"after")).run_id
            run_ids.append(run_id)
            status = await finished(cclient, run_id, timeout=10)
            assert status.status == RunStatus.COMPLETED
    assert len(done) >= len(run_ids)
    assert len(set(run_ids)) == len(run_ids)


async def test_a_call_refused_while_its_slot_is_half_moved_is_sent_again(
    cluster_url: str, cluster_nodes: RedisCluster
) -> None:
    # Mid-migration, a script whose keys are not all on one side answers TRYAGAIN; once
    # redis-py stops retrying, the call did not run, so the client's retry policy sends
    # it again until the move is done, and it runs once.
    patient = RetryPolicy(max_attempts=50, initial_backoff_ms=100, max_backoff_ms=200)
    namespace = f"c-{uuid.uuid4().hex[:10]}"
    async with FloClient(cluster_url, namespace=namespace, retry=patient) as client:
        await client.action.register("moving")
        first = await client.action.invoke("moving", b"before")
        slot = key_slot(action_keys(namespace, "moving").runs.encode())
        source = cluster_nodes.owner_port(slot)
        target = next(p for p in cluster_nodes.ports if p != source)
        await asyncio.to_thread(cluster_nodes.begin_move, slot, source, target)
        try:
            call = asyncio.create_task(client.action.invoke("moving", b"during"))
            await asyncio.sleep(1.5)  # past redis-py's own retries of TRYAGAIN
            assert not call.done()
        finally:
            await asyncio.to_thread(cluster_nodes.finish_move, slot, source, target)
        during = await call
        runs = await client.action.runs("moving")
    assert cluster_nodes.owner_port(slot) == target
    assert sorted(r.run_id for r in runs.runs) == sorted([first.run_id, during.run_id])
