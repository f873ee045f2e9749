"""Run progress: a handler's progress value lands on its run, in its status, the CLI and
the dashboard, wakes ``wait`` watchers, and is fenced like every report."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
import redis.asyncio as aioredis
from cli_runner import cli
from dashboard_pages import get
from processes import cancel_worker

from flo_redis import (
    ActionRegisterOptions,
    ActionRunStatus,
    ConflictError,
    FloClient,
    RunStatus,
    WorkerAwaitOptions,
    WorkerFailOptions,
)
from flo_redis.actions.results import JSON
from flo_redis.dashboard import start_dashboard
from flo_redis.errors import ValidationError, ValueTooLargeError
from flo_redis.types import Reason
from flo_redis.worker.progress import MAX_PROGRESS_BYTES, encode_progress, report_progress

NOW = WorkerAwaitOptions(block_ms=0)


@pytest.mark.slow
async def test_a_wait_watcher_hears_progress_and_the_status_cli_and_dashboard_show_it(
    client: FloClient, redis_url: str, namespace: str, raw: aioredis.Redis
) -> None:
    await client.action.register("job", options=ActionRegisterOptions(timeout_ms=30_000))
    run_id = (await client.action.invoke("job", b"progress")).run_id
    heard: list[bytes | None] = []
    first = asyncio.Event()

    async def on_progress(status: ActionRunStatus) -> None:
        heard.append(status.progress)
        first.set()

    waiter = asyncio.create_task(
        client.action.wait(run_id, timeout_ms=60_000, on_progress=on_progress)
    )
    with cancel_worker(redis_url, namespace, 30_000):
        await asyncio.wait_for(first.wait(), 30)
        assert heard == [b'{"done": 50}']
        status = await client.action.status(run_id)
        assert (status.status, status.progress) == (RunStatus.RUNNING, b'{"done": 50}')
        assert status.progress_at_ms is not None and status.progress_at_ms >= status.created_at_ms
        shown = await asyncio.to_thread(cli, redis_url, namespace, "runs", "show", run_id)
        assert "progress (json" in shown.output and '"done": 50' in shown.output
        dashboard = await start_dashboard(client, port=0)
        try:
            async with aiohttp.ClientSession() as browser:
                code, body = await get(browser, dashboard.url + f"run?id={run_id}")
            assert code == 200 and "progress" in body and "{&#34;done&#34;: 50}" in body
        finally:
            await dashboard.close()
        await raw.set(f"{namespace}:gate:{run_id}", 1)
        done = await waiter
    assert (done.status, done.progress) == (RunStatus.COMPLETED, b'{"done": 100}')
    assert heard[0] == b'{"done": 50}' and heard[-1] == b'{"done": 100}'


async def test_a_stale_holders_progress_is_refused_and_changes_nothing(client: FloClient) -> None:
    await client.action.register("job", options=ActionRegisterOptions(max_retries=3))
    await client.worker.register("w1", ["job"])
    run_id = (await client.action.invoke("job", b"in")).run_id
    first = (await client.worker.await_task("w1", ["job"], NOW)).task
    assert first is not None
    await report_progress(client.session, "w1", "job", run_id, first.token, b"10%")
    await client.worker.fail("w1", "job", run_id, "again", WorkerFailOptions(token=first.token))
    second = (await client.worker.await_task("w1", ["job"], NOW)).task
    assert second is not None and second.token != first.token
    with pytest.raises(ConflictError) as refused:
        await report_progress(client.session, "w1", "job", run_id, first.token, b"99%")
    assert refused.value.reason == Reason.STALE_REPORT
    assert (await client.action.status(run_id)).progress == b"10%"
    await report_progress(client.session, "w1", "job", run_id, second.token, b"20%")
    assert (await client.action.status(run_id)).progress == b"20%"
    await client.action.cancel(run_id)
    with pytest.raises(ConflictError):
        await report_progress(client.session, "w1", "job", run_id, second.token, b"30%")
    assert (await client.action.status(run_id)).progress == b"20%"


def test_a_progress_value_is_small_and_encodable() -> None:
    assert encode_progress({"done": 3, "of": 10}, JSON) == b'{"done": 3, "of": 10}'
    assert encode_progress(b"x" * MAX_PROGRESS_BYTES, JSON) == b"x" * MAX_PROGRESS_BYTES
    with pytest.raises(ValueTooLargeError, match="at most 1024"):
        encode_progress("x" * MAX_PROGRESS_BYTES, JSON)
    with pytest.raises(ValidationError, match="cannot be encoded"):
        encode_progress({1, 2}, JSON)
