"""What each worker holds now (``flo_redis.actions.held``): read from the queues' own
records of who holds what, and what a worker records of its process when it registers."""

from __future__ import annotations

import os
import socket

import pytest

from flo_redis import FloClient, WorkerAwaitOptions, WorkerRegisterOptions
from flo_redis.actions.held import MAX_LISTED, held_runs
from flo_redis.actions.worker_registry import flo_redis_version
from flo_redis.errors import ValidationError
from flo_redis.ops.discovery import all_workers

NOW = WorkerAwaitOptions(block_ms=0)


async def _claim(client: FloClient, worker_id: str, action: str, n: int) -> list[str]:
    got = await client.worker.await_tasks(worker_id, [action], n, NOW)
    return [t.run_id for t in got]


async def test_a_worker_records_its_version_host_and_pid(client: FloClient) -> None:
    await client.worker.register("w1", ["job"], WorkerRegisterOptions(concurrency=2))
    (info,) = await all_workers(client)
    assert info.version == flo_redis_version()
    assert info.host == socket.gethostname()
    assert info.pid == os.getpid()
    assert info.owner_id == client.owner_id


async def test_held_runs_lists_each_workers_runs_with_start_and_deadline(
    client: FloClient,
) -> None:
    await client.action.register("job")
    await client.action.register("other")
    await client.worker.register("w1", ["job", "other"], WorkerRegisterOptions(concurrency=5))
    await client.worker.register("w2", ["job"], WorkerRegisterOptions(concurrency=5))
    for _ in range(3):
        await client.action.invoke("job", b"x")
    await client.action.invoke("other", b"y")
    mine = await _claim(client, "w1", "job", 2) + await _claim(client, "w1", "other", 1)
    theirs = await _claim(client, "w2", "job", 1)
    now_ms = await client.server_time_ms()

    found = await held_runs(client.session, await all_workers(client))

    w1, w2 = found["w1"], found["w2"]
    assert (w1.held, w1.complete, w1.more) == (3, True, 0)
    assert sorted(r.run_id for r in w1.runs) == sorted(mine)
    assert {r.action for r in w1.runs} == {"job", "other"}
    assert [r.run_id for r in w2.runs] == theirs
    for run in w1.runs + w2.runs:
        assert 0 < run.started_at_ms <= now_ms
        assert run.deadline_ms is not None and run.deadline_ms > run.started_at_ms
        assert run.attempt == 1 and run.token > 0 and not run.offered


async def test_a_finished_run_is_no_longer_held(client: FloClient) -> None:
    await client.action.register("job")
    await client.worker.register("w1", ["job"], WorkerRegisterOptions(concurrency=5))
    await client.action.invoke("job", b"x")
    await client.action.invoke("job", b"x")
    first, second = await _claim(client, "w1", "job", 2)
    await client.worker.complete("w1", "job", first, b"done")

    runs = (await held_runs(client.session, await all_workers(client)))["w1"]

    assert runs.held == 1
    assert [r.run_id for r in runs.runs] == [second]


async def test_the_list_is_capped_and_says_how_many_more(client: FloClient) -> None:
    await client.action.register("job")
    await client.worker.register("w1", ["job"], WorkerRegisterOptions(concurrency=20))
    for _ in range(7):
        await client.action.invoke("job", b"x")
    await _claim(client, "w1", "job", 7)

    runs = (await held_runs(client.session, await all_workers(client), limit=3))["w1"]

    assert (runs.held, len(runs.runs), runs.more) == (7, 3, 4)
    started = [r.started_at_ms for r in runs.runs]
    assert started == sorted(started)


async def test_a_worker_holding_nothing_is_answered_empty(client: FloClient) -> None:
    await client.action.register("job")
    await client.worker.register("idle", ["job"], WorkerRegisterOptions(concurrency=2))

    runs = (await held_runs(client.session, await all_workers(client)))["idle"]

    assert (runs.held, runs.complete, runs.runs) == (0, True, ())


async def test_a_limit_out_of_range_is_refused_before_anything_is_read(
    client: FloClient,
) -> None:
    with pytest.raises(ValidationError, match="limit"):
        await held_runs(client.session, [], limit=MAX_LISTED + 1)
