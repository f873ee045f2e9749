"""The worker registry: register, heartbeat, health, drain, counters, paging, long polls."""

from __future__ import annotations

import asyncio

import msgpack
import pytest
import redis.asyncio as aioredis
from polling import eventually, watched

from flo_redis import (
    ActionRegisterOptions,
    BlockTooLongError,
    FloClient,
    NotFoundError,
    RunStatus,
    ServerError,
    ValidationError,
    WorkerAwaitOptions,
    WorkerCompleteOptions,
    WorkerInfo,
    WorkerListOptions,
    WorkerRegisterOptions,
    WorkerStatus,
    WorkerType,
)
from flo_redis._wire.keys import action_keys, namespace_keys
from flo_redis.types import Reason

NOW = WorkerAwaitOptions(block_ms=0)


async def info_of(client: FloClient, worker_id: str) -> WorkerInfo | None:
    found = [w for w in (await client.worker.list()).workers if w.worker_id == worker_id]
    return found[0] if found else None


async def status_of(client: FloClient, worker_id: str) -> WorkerStatus | None:
    info = await info_of(client, worker_id)
    return None if info is None else info.status


# --- registration -----------------------------------------------------------------


async def test_register_makes_an_active_worker(client: FloClient) -> None:
    await client.worker.register(
        "w1", ["job"], WorkerRegisterOptions(concurrency=7, machine_id="m-py")
    )
    info = await info_of(client, "w1")
    assert info is not None
    assert info.worker_type == WorkerType.ACTION
    assert info.status == WorkerStatus.ACTIVE
    assert info.max_concurrency == 7
    assert info.machine_id == "m-py"
    assert info.current_load == 0
    assert (info.tasks_completed, info.tasks_failed) == (0, 0)
    assert info.last_heartbeat_ms >= info.registered_at_ms > 0
    assert info.task_types == ["job"]


async def test_re_register_replaces_the_record(client: FloClient) -> None:
    await client.action.register("job")
    await client.worker.register("w1", ["job"], WorkerRegisterOptions(concurrency=3))
    await client.action.invoke("job", b"x")
    task = (await client.worker.await_task("w1", ["job"], NOW)).task
    assert task is not None
    await client.worker.complete("w1", "job", task.task_id, b"")
    await client.worker.register(
        "w1", ["job", "other"], WorkerRegisterOptions(concurrency=5, metadata='{"a": 1}')
    )
    info = await info_of(client, "w1")
    assert info is not None
    assert (info.max_concurrency, info.tasks_completed, info.metadata) == (5, 0, '{"a": 1}')
    assert info.task_types == ["job", "other"]
    assert len((await client.worker.list()).workers) == 1


async def test_register_refuses_metadata_that_is_not_json(client: FloClient) -> None:
    with pytest.raises(ValidationError):
        await client.worker.register("w1", ["job"], WorkerRegisterOptions(metadata="{nope"))
    assert await info_of(client, "w1") is None


async def test_heartbeat_of_an_unknown_worker_is_not_found(client: FloClient) -> None:
    with pytest.raises(NotFoundError):
        await client.worker.heartbeat("ghost")


async def test_heartbeat_records_the_load(client: FloClient) -> None:
    await client.worker.register("w1", ["job"])
    before = await info_of(client, "w1")
    await client.worker.heartbeat("w1", current_load=4)
    after = await info_of(client, "w1")
    assert before is not None and after is not None
    assert after.current_load == 4
    assert after.last_heartbeat_ms >= before.last_heartbeat_ms


async def test_deregister_removes_the_worker(client: FloClient) -> None:
    await client.worker.register("w1", ["job"])
    await client.worker.deregister("w1")
    assert await info_of(client, "w1") is None
    with pytest.raises(NotFoundError):
        await client.worker.deregister("w1")
    with pytest.raises(NotFoundError):
        await client.worker.heartbeat("w1")


# --- health -----------------------------------------------------------------------


@pytest.mark.slow
async def test_a_silent_worker_turns_unhealthy_then_is_removed(client: FloClient) -> None:
    await client.worker.configure(heartbeat_timeout_ms=200, remove_after_ms=800)
    await client.action.register("job")
    await client.worker.register("w1", ["job"])
    await client.action.invoke("job", b"x")

    await eventually(lambda: status_of(client, "w1"), lambda s: s == WorkerStatus.UNHEALTHY)
    with pytest.raises(ServerError) as info:
        await client.worker.await_task("w1", ["job"], NOW)
    assert info.value.reason == Reason.WORKER_UNHEALTHY

    await client.worker.heartbeat("w1")
    assert await status_of(client, "w1") == WorkerStatus.ACTIVE
    task = (await client.worker.await_task("w1", ["job"], NOW)).task
    assert task is not None

    await eventually(lambda: status_of(client, "w1"), lambda s: s is None)
    with pytest.raises(NotFoundError):
        await client.worker.heartbeat("w1")
    with pytest.raises(NotFoundError):
        await client.worker.await_task("w1", ["job"], NOW)


@pytest.mark.slow
async def test_a_heartbeat_past_the_removal_delay_is_not_found(client: FloClient) -> None:
    await client.worker.configure(heartbeat_timeout_ms=100, remove_after_ms=300)
    await client.worker.register("w1", ["job"])
    start = await client.server_time_ms()
    await eventually(client.server_time_ms, lambda now: now > start + 600)
    with pytest.raises(NotFoundError):
        await client.worker.heartbeat("w1")
    await client.worker.register("w1", ["job"])  # what the SDK does then
    assert await status_of(client, "w1") == WorkerStatus.ACTIVE


async def test_configure_validates(client: FloClient) -> None:
    with pytest.raises(ValidationError):
        await client.worker.configure(heartbeat_timeout_ms=1000, remove_after_ms=500)
    with pytest.raises(ValidationError):
        await client.worker.configure(heartbeat_timeout_ms=99)
    with pytest.raises(ValidationError):
        await client.worker.configure(remove_after_ms=0)
    await client.worker.configure(heartbeat_timeout_ms=1000, remove_after_ms=2000)
    with pytest.raises(ValidationError):
        await client.worker.configure(remove_after_ms=999)  # below the stored timeout


async def test_health_settings_are_per_namespace(client: FloClient, namespace: str) -> None:
    other = f"{namespace}-other"
    await client.worker.configure(heartbeat_timeout_ms=100, remove_after_ms=60_000)
    await client.worker.register("w1", ["job"])
    await client.worker.register("w1", ["job"], WorkerRegisterOptions(namespace=other))
    await eventually(lambda: status_of(client, "w1"), lambda s: s == WorkerStatus.UNHEALTHY)
    [info] = (await client.worker.list(WorkerListOptions(namespace=other))).workers
    assert info.status == WorkerStatus.ACTIVE


# --- drain ------------------------------------------------------------------------


async def test_drain_refuses_polls_but_accepts_reports(client: FloClient) -> None:
    await client.action.register("job")
    await client.worker.register("w1", ["job"])
    run_ids = [(await client.action.invoke("job", b"x")).run_id for _ in range(3)]
    a = (await client.worker.await_task("w1", ["job"], NOW)).task
    b = (await client.worker.await_task("w1", ["job"], NOW)).task
    assert a is not None and b is not None

    await client.worker.drain("w1")
    assert await status_of(client, "w1") == WorkerStatus.DRAINING
    with pytest.raises(ServerError) as info:
        await client.worker.await_task("w1", ["job"], NOW)
    assert info.value.reason == Reason.WORKER_DRAINING

    await client.worker.touch("w1", "job", a.task_id)
    await client.worker.complete("w1", "job", a.task_id, b"done")
    await client.worker.fail("w1", "job", b.task_id, "boom")
    await client.worker.heartbeat("w1", current_load=0)
    assert await status_of(client, "w1") == WorkerStatus.DRAINING
    assert (await client.action.status(run_ids[0])).output == b"done"

    with pytest.raises(NotFoundError):
        await client.worker.drain("ghost")
    await client.worker.register("w1", ["job"])  # registering again ends the drain
    assert await status_of(client, "w1") == WorkerStatus.ACTIVE


@pytest.mark.slow
async def test_drain_wins_over_unhealthy(client: FloClient) -> None:
    await client.worker.configure(heartbeat_timeout_ms=100, remove_after_ms=60_000)
    await client.worker.register("w1", ["job"])
    await client.worker.drain("w1")
    start = await client.server_time_ms()
    await eventually(client.server_time_ms, lambda now: now > start + 300)
    assert await status_of(client, "w1") == WorkerStatus.DRAINING


# --- liveness -----------------------------------------------------------------------


async def test_a_worker_is_alive_while_the_client_that_registered_it_is(
    client: FloClient, redis_url: str, namespace: str
) -> None:
    async with FloClient(redis_url, namespace=namespace) as other:
        await other.worker.register("w-active", ["job"])
        await other.worker.register("w-drained", ["job"])
        await other.worker.drain("w-drained")
        listed = (await client.worker.list()).workers
        assert [(w.worker_id, w.alive, w.status) for w in listed] == [
            ("w-active", True, WorkerStatus.ACTIVE),
            ("w-drained", True, WorkerStatus.DRAINING),
        ]
    # Its client closed: gone as soon as Redis dropped the connection, long before any
    # heartbeat is missed. A gone worker is never ACTIVE; one told to drain still
    # reads DRAINING.
    listed = await eventually(lambda: client.worker.list(), lambda page: not page.workers[0].alive)
    assert [(w.worker_id, w.alive, w.status) for w in listed.workers] == [
        ("w-active", False, WorkerStatus.UNHEALTHY),
        ("w-drained", False, WorkerStatus.DRAINING),
    ]
    # Registered again by a live client: alive again.
    await client.worker.register("w-active", ["job"])
    info = await info_of(client, "w-active")
    assert info is not None and (info.alive, info.status) == (True, WorkerStatus.ACTIVE)


async def test_a_record_that_names_no_process_reads_alive_unknown(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.worker.register("w1", ["job"])
    keys = namespace_keys(client.namespace)
    record = msgpack.unpackb(await raw.hget(keys.workers, "w1"))
    del record["ow"]  # as an older flo-redis wrote it
    await raw.hset(keys.workers, "w1", msgpack.packb(record))
    info = await info_of(client, "w1")
    assert info is not None and (info.alive, info.status) == (None, WorkerStatus.ACTIVE)


# --- counters ---------------------------------------------------------------------


async def test_counters_follow_claims_completes_and_fails(client: FloClient) -> None:
    await client.action.register("job", options=ActionRegisterOptions(max_retries=1))
    await client.worker.register("w1", ["job"])
    for _ in range(4):
        await client.action.invoke("job", b"x")
    batch = await client.worker.await_tasks("w1", ["job"], 4, NOW)
    assert len(batch) == 4
    info = await info_of(client, "w1")
    assert info is not None and info.current_load == 4
    await client.worker.complete("w1", "job", batch[0].run_id, b"")
    await client.worker.complete("w1", "job", batch[1].run_id, b"")
    await client.worker.fail("w1", "job", batch[2].run_id, "boom")
    info = await info_of(client, "w1")
    assert info is not None
    assert (info.tasks_completed, info.tasks_failed, info.current_load) == (2, 1, 1)


# --- list -------------------------------------------------------------------------


async def test_list_pages_in_id_order(client: FloClient) -> None:
    ids = [f"w-{i:02d}" for i in range(7)]
    for worker_id in reversed(ids):
        await client.worker.register(worker_id, ["job"])
    seen: list[str] = []
    cursors: list[bytes] = []
    cursor: bytes | None = None
    while True:
        page = await client.worker.list(WorkerListOptions(limit=3, cursor=cursor))
        assert 0 < len(page.workers) <= 3
        seen.extend(w.worker_id for w in page.workers)
        if page.cursor is None:
            break
        cursors.append(page.cursor)
        cursor = page.cursor
    assert seen == ids
    assert cursors == sorted(cursors) and len(cursors) == 2

    exact = await client.worker.list(WorkerListOptions(limit=7))
    assert [w.worker_id for w in exact.workers] == ids and exact.cursor is None


@pytest.mark.parametrize("limit", [0, -1, 1025, True])
async def test_list_limit_out_of_range(client: FloClient, limit: int) -> None:
    with pytest.raises(ValidationError):
        await client.worker.list(WorkerListOptions(limit=limit))


async def test_list_cursor_too_long(client: FloClient) -> None:
    with pytest.raises(ValidationError):
        await client.worker.list(WorkerListOptions(cursor=b"x" * 4097))


# --- await_task block_ms ----------------------------------------------------------


async def test_block_ms_zero_answers_at_once(client: FloClient) -> None:
    await client.action.register("job")
    await client.worker.register("w1", ["job"])
    assert (await client.worker.await_task("w1", ["job"], NOW)).task is None


@pytest.mark.parametrize(
    ("block_ms", "error"),
    [(300_001, BlockTooLongError), (-1, ValidationError), (True, ValidationError)],
)
async def test_block_ms_out_of_range(
    client: FloClient, block_ms: int, error: type[Exception]
) -> None:
    await client.worker.register("w1", ["job"])
    with pytest.raises(error):
        await client.worker.await_task("w1", ["job"], WorkerAwaitOptions(block_ms=block_ms))


async def test_a_long_poll_returns_as_soon_as_a_run_arrives(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.action.register("job")
    await client.worker.register("w1", ["job"])
    poll = asyncio.create_task(
        client.worker.await_task("w1", ["job"], WorkerAwaitOptions(block_ms=120_000))
    )
    await watched(raw, action_keys(client.namespace, "job").wake)
    assert not poll.done()
    run_id = (await client.action.invoke("job", b"x")).run_id
    task = (await asyncio.wait_for(poll, 30)).task  # long before its 120 s block_ms
    assert task is not None and task.task_id == run_id


@pytest.mark.slow
async def test_a_long_poll_with_nothing_returns_none_after_block_ms(client: FloClient) -> None:
    await client.action.register("job")
    await client.worker.register("w1", ["job"])
    loop = asyncio.get_running_loop()
    start = loop.time()
    result = await client.worker.await_task("w1", ["job"], WorkerAwaitOptions(block_ms=500))
    assert result.task is None
    assert loop.time() - start >= 0.45  # a lower bound: a loaded machine only lengthens it


async def test_a_long_poll_over_several_actions(client: FloClient, raw: aioredis.Redis) -> None:
    for name in ("a", "b", "c"):
        await client.action.register(name)
    await client.worker.register("w1", ["a", "b", "c"])
    poll = asyncio.create_task(
        client.worker.await_task("w1", ["a", "b", "c"], WorkerAwaitOptions(block_ms=20_000))
    )
    await watched(raw, action_keys(client.namespace, "c").wake)
    run_id = (await client.action.invoke("c", b"x")).run_id
    task = (await asyncio.wait_for(poll, 30)).task
    assert task is not None and (task.task_id, task.task_type) == (run_id, "c")


async def test_await_with_an_unregistered_worker_is_not_found(client: FloClient) -> None:
    await client.action.register("job")
    with pytest.raises(NotFoundError):
        await client.worker.await_task("ghost", ["job"], NOW)


@pytest.mark.slow
async def test_reports_are_not_delayed_behind_a_long_poll_of_the_same_client(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.action.register("job")
    await client.action.register("idle")
    await client.worker.register("w", ["job", "idle"])
    await client.action.invoke("job", b"x")
    task = (await client.worker.await_task("w", ["job"], WorkerAwaitOptions(block_ms=0))).task
    assert task is not None
    # A long poll on the same client waits for an action nobody invokes ...
    poll = asyncio.create_task(
        client.worker.await_task("w", ["idle"], WorkerAwaitOptions(block_ms=30_000))
    )
    await watched(raw, action_keys(client.namespace, "idle").wake)
    # ... while the complete goes through at once (no connection is held by the poll).
    await asyncio.wait_for(
        client.worker.complete(
            "w", "job", task.task_id, b"done", WorkerCompleteOptions(token=task.token)
        ),
        timeout=10,
    )
    assert not poll.done()
    assert (await client.action.status(task.task_id)).status == RunStatus.COMPLETED
    client.interrupt()
    assert (await asyncio.wait_for(poll, 10)).task is None
