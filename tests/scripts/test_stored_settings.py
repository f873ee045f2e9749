"""Settings stored in Redis that do not parse (written by hand, or by another version)
never turn into a Lua error.

An action's definition hash holding garbage: invokes are refused with a typed error that
says to register it again, claims hand nothing out (a worker serving the action
registers it again, and work flows), a run already out still completes, and
``action.list`` shows the action. A consumer group's or the namespace's settings holding
garbage read as their defaults.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
import redis.asyncio as aioredis
from polling import eventually

from flo_redis import (
    ActionContext,
    ActionRegisterOptions,
    FloClient,
    NotFoundError,
    RunStatus,
    StreamGroupReadOptions,
    WorkerAwaitOptions,
    WorkerCompleteOptions,
)
from flo_redis._wire.keys import action_keys, namespace_keys, stream_keys
from flo_redis.types import Reason

GARBAGE = ["abc", "nan", "inf", "-5", "1e300", "1.5", "", "4294967296"]
NO_WAIT = WorkerAwaitOptions(block_ms=0)


@pytest.mark.parametrize("field", ["timeout_ms", "max_retries", "backoff_ms", "rate_max"])
@pytest.mark.parametrize("garbage", GARBAGE)
async def test_an_action_whose_settings_do_not_parse_is_refused_typed(
    client: FloClient, raw: aioredis.Redis, field: str, garbage: str
) -> None:
    await client.action.register("job")
    await client.worker.register("w", ["job"])
    held = await client.action.invoke("job", b"held")
    (run,) = await client.worker.await_tasks("w", ["job"], 1, NO_WAIT)
    waiting = await client.action.invoke("job", b"waiting")
    await raw.hset(action_keys(client.namespace, "job").definition, field, garbage)

    if field == "max_retries":  # what an invoke reads before it writes
        with pytest.raises(NotFoundError, match="stored settings that do not parse") as caught:
            await client.action.invoke("job", b"x")
        assert caught.value.reason == Reason.NOT_FOUND
    else:
        # An invoke reads the rest only to hand its run out: it queues the run, and no
        # claim takes it until the action is registered again.
        await client.action.invoke("job", b"x")
    # A claim hands nothing out, and says nothing is wrong beyond "not registered".
    assert await client.worker.await_tasks("w", ["job"], 5, NO_WAIT) == []
    # What is already out ends as it should.
    await client.worker.complete(
        "w", "job", run.run_id, b"done", WorkerCompleteOptions(token=run.token)
    )
    assert (await client.action.status(held.run_id)).status == RunStatus.COMPLETED
    # Listed, with the default the scripts read it as.
    (info,) = (await client.action.list()).actions
    assert info.name == "job"
    # Registered again: work flows.
    await client.action.register("job")
    taken = await client.worker.await_tasks("w", ["job"], 5, NO_WAIT)
    assert waiting.run_id in {t.run_id for t in taken}


async def test_list_warns_about_a_setting_that_does_not_parse(
    client: FloClient, raw: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    await client.action.register("job", options=ActionRegisterOptions(timeout_ms=5000))
    await raw.hset(action_keys(client.namespace, "job").definition, "timeout_ms", "abc")
    with caplog.at_level(logging.WARNING, logger="flo_redis.actions"):
        (info,) = (await client.action.list()).actions
    assert info.timeout_ms == ActionRegisterOptions().timeout_ms
    assert "timeout_ms = b'abc' does not parse" in caplog.text


@pytest.mark.slow
async def test_a_worker_registers_again_an_action_whose_settings_do_not_parse(
    client: FloClient, raw: aioredis.Redis
) -> None:
    worker = client.new_action_worker(concurrency=2, block_ms=200)

    @worker.action("job", ActionRegisterOptions(timeout_ms=7000))
    async def job(ctx: ActionContext) -> bytes:
        return b"ok"

    task = asyncio.create_task(worker.start())
    try:
        definition = action_keys(client.namespace, "job").definition
        await eventually(lambda: raw.exists(definition))
        await raw.hset(definition, "timeout_ms", "nan")
        # Its next claim finds the settings unreadable; it registers the action again.
        await eventually(lambda: raw.hget(definition, "timeout_ms"), lambda v: v == b"7000")
        run = await client.action.invoke("job", b"x")
        status = await client.action.wait(run.run_id, timeout_ms=30_000)
        assert status.status == RunStatus.COMPLETED
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)


@pytest.mark.parametrize("field", ["ack_timeout_ms", "max_deliver"])
@pytest.mark.parametrize("garbage", GARBAGE)
async def test_group_settings_that_do_not_parse_read_as_the_defaults(
    client: FloClient, raw: aioredis.Redis, field: str, garbage: str
) -> None:
    await client.stream.group_join("s", "g", "c")
    await client.stream.append("s", b"a")
    await raw.hset(stream_keys(client.namespace, "s").group("g").config, field, garbage)
    read = await client.stream.group_read("s", "g", "c", StreamGroupReadOptions(block_ms=0))
    assert [r.payload for r in read.records] == [b"a"]
    await client.stream.group_nack("s", "g", [read.records[0].id])
    again = await client.stream.group_read("s", "g", "c", StreamGroupReadOptions(block_ms=0))
    assert [(r.payload, r.delivery_count) for r in again.records] == [(b"a", 2)]
    settings = await client.stream.group_settings("s", "g")
    assert (settings.ack_timeout_ms, settings.max_deliver) == (30_000, 10)


@pytest.mark.parametrize("field", ["heartbeat_timeout_ms", "remove_after_ms"])
@pytest.mark.parametrize("garbage", GARBAGE)
async def test_worker_settings_that_do_not_parse_read_as_the_defaults(
    client: FloClient, raw: aioredis.Redis, field: str, garbage: str
) -> None:
    await client.action.register("job")
    await client.worker.register("w", ["job"])
    await raw.hset(namespace_keys(client.namespace).config, field, garbage)
    await client.action.invoke("job", b"x")
    (task,) = await client.worker.await_tasks("w", ["job"], 1, NO_WAIT)
    await client.worker.heartbeat("w", 1)
    listed = await client.worker.list()
    assert [w.worker_id for w in listed.workers] == ["w"]
    assert task.payload == b"x"
