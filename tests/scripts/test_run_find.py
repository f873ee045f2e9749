"""Finding runs (``action.find``, ``lua/action_find.lua``) and reading one run with its
input (``action.details``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis
from redis_server import RedisServer

from flo_redis import (
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    WorkerAwaitOptions,
    WorkerFailOptions,
)
from flo_redis._wire.gateway import ACTION_FIND
from flo_redis._wire.keys import action_keys
from flo_redis.actions.finding import FIND_STEP, MAX_SCAN
from flo_redis.errors import BadRequestError, NotFoundError, ValidationError
from flo_redis.types import RunStatus

NOW = WorkerAwaitOptions(block_ms=0)
BIG = 20_000
SLOW_US = 50_000


async def failed_runs(client: FloClient, errors: list[str], action: str = "job") -> list[str]:
    """One run per error message, each failed for good with it; their ids in order."""
    ids = []
    for i, error in enumerate(errors):
        run = await client.action.invoke(action, f'{{"n": {i}}}'.encode())
        [claimed] = await client.worker.await_tasks("w1", [action], 1, NOW)
        assert claimed.run_id == run.run_id
        await client.worker.fail(
            "w1", action, run.run_id, error, WorkerFailOptions(retry=False, traceback=f"tb {i}")
        )
        ids.append(run.run_id)
    return ids


@pytest.fixture
async def job(client: FloClient) -> FloClient:
    await client.action.register("job", options=ActionRegisterOptions(max_retries=1))
    await client.worker.register("w1", ["job"])
    return client


async def test_details_give_the_input_and_idempotency_key(job: FloClient) -> None:
    run = await job.action.invoke(
        "job", b'{"user": "ann"}', ActionInvokeOptions(idempotency_key="order-7")
    )
    details = await job.action.details(run.run_id)
    assert details.input == b'{"user": "ann"}'
    assert details.idempotency_key == "order-7"
    assert details.status == await job.action.status(run.run_id)
    [claimed] = await job.worker.await_tasks("w1", ["job"], 1, NOW)
    await job.worker.complete("w1", "job", claimed.run_id, b"done")
    completed = await job.action.details(run.run_id)
    # A completed run's input is deleted when it completes; its output stays.
    assert (completed.status.status, completed.input) == (RunStatus.COMPLETED, None)
    assert completed.status.output == b"done"
    with pytest.raises(NotFoundError):
        await job.action.details("job:999999999")


async def test_a_run_id_and_an_idempotency_key_are_found_exactly(job: FloClient) -> None:
    keyed = await job.action.invoke("job", b"a", ActionInvokeOptions(idempotency_key="order-1"))
    plain = await job.action.invoke("job", b"b")
    by_id = await job.action.find("job", plain.run_id)
    assert [(f.run.run_id, f.by) for f in by_id.runs] == [(plain.run_id, "run id")]
    by_key = await job.action.find("job", "order-1")
    assert [(f.run.run_id, f.by) for f in by_key.runs] == [(keyed.run_id, "idempotency key")]
    # A run id of another action is not a run of this one.
    await job.action.register("other")
    assert (await job.action.find("other", plain.run_id)).runs == ()


async def test_error_text_is_found_in_any_case_failed_runs_newest_first(job: FloClient) -> None:
    ids = await failed_runs(
        job, ["KeyError: 'image'", "ValueError: too large", "keyerror: 'size'", "boom"]
    )
    found = await job.action.find("job", "KEYERROR")
    assert [(f.run.run_id, f.by) for f in found.runs] == [(ids[2], "error"), (ids[0], "error")]
    assert found.cursor is None and found.examined == 4
    assert found.runs[0].run.error_traceback == "tb 2"
    # Text only in the input or the traceback is no match: the error message is searched.
    assert (await job.action.find("job", '"n"')).runs == ()
    assert (await job.action.find("job", "tb 1")).runs == ()


async def test_a_retry_waiting_with_its_error_is_found_too(job: FloClient) -> None:
    await job.action.register(
        "job",
        options=ActionRegisterOptions(
            max_retries=3, retry_backoff_ms=600_000, retry_backoff_max_ms=600_000
        ),
    )
    run = await job.action.invoke("job", b"x")
    await job.worker.await_tasks("w1", ["job"], 1, NOW)
    await job.worker.fail("w1", "job", run.run_id, "connection refused")
    found = await job.action.find("job", "refused")
    assert [f.run.run_id for f in found.runs] == [run.run_id]
    assert found.runs[0].run.due_at_ms is not None  # waiting for its retry


async def test_a_long_search_goes_on_from_its_cursor_without_repeats(job: FloClient) -> None:
    errors = [f"timeout talking to shard {i}" if i % 3 == 0 else f"other {i}" for i in range(40)]
    ids = await failed_runs(job, errors)
    wanted = [run_id for run_id, e in zip(ids, errors, strict=True) if "shard" in e][::-1]
    seen: list[str] = []
    cursor = None
    calls = 0
    while True:
        page = await job.action.find("job", "shard", limit=3, cursor=cursor, scan=7)
        assert len(page.runs) <= 3 and page.examined <= 7
        seen += [f.run.run_id for f in page.runs]
        calls += 1
        if page.cursor is None:
            break
        cursor = page.cursor
    assert seen == wanted
    assert calls > 5


async def test_runs_that_come_and_go_during_a_search_are_not_repeated(job: FloClient) -> None:
    ids = await failed_runs(job, [f"boom {i}" for i in range(10)])
    first = await job.action.find("job", "boom", limit=4)
    assert [f.run.run_id for f in first.runs] == ids[::-1][:4]
    more = await failed_runs(job, ["boom late"])  # a newer failure: before the cursor
    await job.action.requeue(first.runs[-1].run.run_id)  # the cursor's run leaves the set
    rest = await job.action.find("job", "boom", limit=100, cursor=first.cursor)
    found = [f.run.run_id for f in rest.runs]
    assert found[:6] == ids[::-1][4:]
    assert more[0] not in found  # failed after the search passed its place
    # The re-queued run waits with its last error: the search finds it again there.
    assert found[6:] == [first.runs[-1].run.run_id]


async def test_a_search_is_refused_before_anything_is_sent(job: FloClient) -> None:
    for query in ("", "x" * 257, 7):
        with pytest.raises(ValidationError):
            await job.action.find("job", query)  # type: ignore[arg-type]
    for cursor in (b"nowhere", b"failed 1e3 job:1", b"failed", b"pending -1 job:2"):
        if cursor == b"failed":
            await job.action.find("job", "x", cursor=cursor)  # the start of a state: valid
            continue
        with pytest.raises(ValidationError):
            await job.action.find("job", "x", cursor=cursor)
    with pytest.raises(ValidationError):
        await job.action.find("job", "x", scan=0)
    with pytest.raises(NotFoundError, match="not registered"):
        await job.action.find("nope", "x")


async def test_the_script_refuses_a_step_out_of_range(
    job: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    keys = action_keys(namespace, "job")
    with pytest.raises(BadRequestError, match="step"):
        await ACTION_FIND(job.session, keys, ["failed", "", "", 1001, b"x", 1])
    reply = await ACTION_FIND(job.session, keys, ["failed", "", "", FIND_STEP, b"x", 1])
    assert (reply.examined, reply.more, reply.rows) == (0, False, ())


async def test_a_record_that_does_not_decode_is_no_match(
    job: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    [good, bad] = await failed_runs(job, ["boom one", "boom two"])
    await raw.hset(action_keys(namespace, "job").runs, bad, b"boom \xc1 not msgpack")
    found = await job.action.find("job", "boom")
    assert [f.run.run_id for f in found.runs] == [good]


async def test_only_the_error_message_is_searched_whatever_the_record_holds(
    job: FloClient,
) -> None:
    long_error = "x" * 300 + " Needle at the end"  # a str16 in the record
    [failed] = await failed_runs(job, [long_error])
    # A completed run whose output holds the bytes of the key "err" and the text after.
    run = await job.action.invoke("job", b"in")
    await job.worker.await_tasks("w1", ["job"], 1, NOW)
    await job.worker.complete("w1", "job", run.run_id, b"\xa3err\xa6needle")
    found = await job.action.find("job", "NEEDLE")
    assert [f.run.run_id for f in found.runs] == [failed]
    assert found.examined == 2


@pytest.fixture(scope="module")
def slowlog_url() -> Iterator[str]:
    """A server of this module's own that logs every call over SLOW_US."""
    server = RedisServer(extra=("--slowlog-log-slower-than", str(SLOW_US))).start()
    assert server.process is not None
    with contextlib.suppress(PermissionError):  # the script's own time, not its neighbours'
        os.setpriority(os.PRIO_PROCESS, server.process.pid, -10)
    try:
        yield server.url
    finally:
        server.stop()


@pytest.mark.slow
async def test_a_search_of_20k_failed_runs_is_short_script_calls(slowlog_url: str) -> None:
    traceback = 'Traceback (most recent call last):\n  File "app.py", line 1\n' * 40
    async with FloClient(slowlog_url, namespace="find") as client:
        await client.action.register("job", options=ActionRegisterOptions(max_retries=1))
        await client.worker.register("w1", ["job"])
        await client.action.invoke_many("job", [b"{}"] * BIG)
        done = 0
        while done < BIG:
            runs = await client.worker.await_tasks("w1", ["job"], 1000, NOW)
            failing = WorkerFailOptions(retry=False, traceback=traceback)
            await asyncio.gather(
                *(
                    client.worker.fail("w1", "job", r.run_id, f"ValueError: row {i}", failing)
                    for i, r in enumerate(runs, done)
                )
            )
            done += len(runs)
        conn = aioredis.Redis.from_url(slowlog_url)
        try:
            await conn.slowlog_reset()
            found = await client.action.find("job", "ROW 7777", scan=MAX_SCAN)
            assert [f.run.error_message for f in found.runs] == ["ValueError: row 7777"]
            assert (found.examined, found.cursor) == (BIG, None)
            assert await conn.slowlog_get(128) == []
        finally:
            await conn.aclose()
