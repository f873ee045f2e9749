"""Counts, runs by state and bulk steering, held against a known history of runs."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from histories import claim, history

from flo_redis import (
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    NotFoundError,
    RunStatus,
    ValidationError,
)
from flo_redis._wire.keys import action_keys
from flo_redis.actions.inspect import RunState


@pytest.mark.slow
async def test_counts_match_a_known_history(client: FloClient) -> None:
    h = await history(client)
    c = await client.action.counts("job")
    assert (c.pending, c.delayed, c.running, c.completed, c.failed, c.timed_out) == (
        3, 2, 1, 3, 2, 1,
    )  # fmt: skip
    assert c.waiting == 5
    assert len(c.completed_per_minute) == len(c.failed_per_minute) == 60
    assert c.completed_last_hour == 3
    assert c.failed_last_hour == 3  # two failed for good, one timed out
    assert c.next_due_ms is not None and c.next_due_ms > c.at_ms + 500_000
    assert (c.action, c.namespace) == ("job", client.namespace)
    assert h["running"] == h["ready"][6]


@pytest.mark.slow
async def test_runs_pages_each_state_in_its_order(client: FloClient) -> None:
    h = await history(client)
    pending = await client.action.runs("job", "pending")
    assert [r.run_id for r in pending.runs] == h["waiting"]
    assert pending.cursor is None
    assert all(r.status == RunStatus.PENDING and r.due_at_ms is None for r in pending.runs)
    delayed = await client.action.runs("job", RunState.DELAYED)
    assert sorted(r.run_id for r in delayed.runs) == sorted(h["delayed"])
    assert all(r.status == RunStatus.PENDING and r.due_at_ms for r in delayed.runs)
    running = await client.action.runs("job", "running")
    assert [(r.run_id, r.status) for r in running.runs] == [(h["running"], RunStatus.RUNNING)]
    completed = await client.action.runs("job", "completed")
    assert {r.run_id for r in completed.runs} == set(h["completed"])
    assert [r.completed_at_ms for r in completed.runs] == sorted(
        (r.completed_at_ms for r in completed.runs), reverse=True
    )
    failed = await client.action.runs("job", "failed")
    assert failed.runs[-1].run_id == h["expired"]  # newest first: it ended first
    assert {r.run_id: r.status for r in failed.runs} == {
        h["expired"]: RunStatus.TIMED_OUT,
        **{run_id: RunStatus.FAILED for run_id in h["failed"]},
    }
    assert {r.error_message for r in failed.runs if r.status == RunStatus.FAILED} == {"boom"}


async def test_a_delayed_run_says_when_it_is_due(client: FloClient) -> None:
    await client.action.register("job")
    run_id = (await client.action.invoke("job", b"x", ActionInvokeOptions(delay_ms=60_000))).run_id
    status = await client.action.status(run_id)
    assert status.status == RunStatus.PENDING
    assert status.due_at_ms is not None
    assert status.due_at_ms - status.created_at_ms == 60_000
    ready = (await client.action.invoke("job", b"y")).run_id
    assert (await client.action.status(ready)).due_at_ms is None


async def test_a_run_waiting_out_its_retry_backoff_is_delayed(client: FloClient) -> None:
    await client.action.register(
        "job",
        options=ActionRegisterOptions(
            max_retries=3, retry_backoff_ms=600_000, retry_backoff_max_ms=600_000
        ),
    )
    await client.worker.register("w1", ["job"])
    run_id = (await client.action.invoke("job", b"x")).run_id
    await claim(client, 1)
    await client.worker.fail("w1", "job", run_id, "try again")
    c = await client.action.counts("job")
    assert (c.pending, c.delayed, c.running, c.failed) == (0, 1, 0, 0)
    status = await client.action.status(run_id)
    assert status.due_at_ms is not None and status.due_at_ms >= c.at_ms + 590_000


async def test_paging_keeps_order_while_runs_leave(client: FloClient) -> None:
    await client.action.register("job")
    await client.worker.register("w1", ["job"])
    ids = [r.run_id for r in await client.action.invoke_many("job", [b"x"] * 25)]
    first = await client.action.runs("job", "pending", limit=10)
    assert [r.run_id for r in first.runs] == ids[:10]
    assert first.cursor is not None
    await claim(client, 10)  # the cursor's run leaves the pending set
    second = await client.action.runs("job", "pending", limit=10, cursor=first.cursor)
    assert [r.run_id for r in second.runs] == ids[10:20]
    third = await client.action.runs("job", "pending", limit=10, cursor=second.cursor)
    assert [r.run_id for r in third.runs] == ids[20:]
    assert third.cursor is None


@pytest.mark.slow
async def test_bulk_requeue_and_purge(client: FloClient) -> None:
    h = await history(client)
    done = await client.action.requeue_failed("job", batch=2)
    assert (done.count, done.calls) == (3, 2)
    c = await client.action.counts("job")
    assert (c.pending, c.failed, c.timed_out) == (6, 0, 0)
    for run_id in [h["expired"], *h["failed"]]:
        status = await client.action.status(run_id)
        assert (status.status, status.attempt) == (RunStatus.PENDING, 0)
    purged = await client.action.purge("job", "completed")
    assert purged.count == 3
    with pytest.raises(NotFoundError):
        await client.action.status(h["completed"][0])
    assert (await client.action.purge("job", RunState.DELAYED)).count == 2
    assert (await client.action.purge("job", "pending")).count == 6
    c = await client.action.counts("job")
    assert (c.pending, c.delayed, c.running, c.completed, c.failed) == (0, 0, 1, 0, 0)


@pytest.mark.slow
async def test_purging_failed_runs_keeps_the_timed_out_count_true(client: FloClient) -> None:
    await history(client)
    assert (await client.action.purge("job", "failed")).count == 3
    c = await client.action.counts("job")
    assert (c.failed, c.timed_out) == (0, 0)


@pytest.mark.slow
async def test_delete_forgets_the_counters(client: FloClient) -> None:
    await history(client)
    await client.action.delete("job")
    await client.action.register("job")
    c = await client.action.counts("job")
    assert (c.failed, c.timed_out, c.completed_last_hour, c.failed_last_hour) == (0, 0, 0, 0)


async def test_bad_input_is_refused_before_anything_is_sent(client: FloClient) -> None:
    with pytest.raises(NotFoundError, match="register it first"):
        await client.action.counts("nope")
    await client.action.register("job")
    with pytest.raises(ValidationError, match="not one of"):
        await client.action.runs("job", "lost")
    with pytest.raises(ValidationError, match="running runs cannot be purged"):
        await client.action.purge("job", "running")
    with pytest.raises(ValidationError, match="batch"):
        await client.action.requeue_failed("job", batch=0)
    with pytest.raises(ValidationError, match="cursor"):
        await client.action.runs("job", cursor=b"garbage")
    with pytest.raises(NotFoundError):
        await client.action.purge("nope", "failed")


async def test_counts_touch_only_the_queue_keys(client: FloClient, raw: aioredis.Redis) -> None:
    """No SCAN/KEYS: the counts and pages are read from the queue's own sets."""
    await client.action.register("job")
    await client.action.invoke_many("job", [b"x"] * 3)
    before = await raw.info("commandstats")
    await client.action.counts("job")
    await client.action.runs("job")
    after = await raw.info("commandstats")
    for command in ("cmdstat_scan", "cmdstat_keys"):
        assert before.get(command) == after.get(command)


@pytest.mark.slow
async def test_runs_buried_before_the_timed_out_count_never_make_it_negative(
    client: FloClient, raw: aioredis.Redis
) -> None:
    h = await history(client)
    await raw.hdel(action_keys(client.namespace, "job").meta, "n:timed_out")  # an older store
    c = await client.action.counts("job")
    assert (c.failed, c.timed_out) == (3, 0)
    await client.action.requeue(h["expired"])
    await client.action.requeue(h["failed"][0])
    c = await client.action.counts("job")
    assert (c.failed, c.timed_out) == (1, 0)
    assert (await client.action.purge("job", "failed")).count == 1
    c = await client.action.counts("job")
    assert (c.failed, c.timed_out) == (0, 0)
