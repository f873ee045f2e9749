"""client.action.wait: the run's final status as soon as it ends, woken by the script."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis
from cli_command import Command
from polling import eventually, running, watched

from flo_redis import (
    ActionContext,
    ActionRegisterOptions,
    FloClient,
    NotFoundError,
    RunStatus,
    ValidationError,
    WaitTimeoutError,
    WorkerFailOptions,
)
from flo_redis._wire.keys import action_keys
from flo_redis.sync import SyncFloClient
from flo_redis.worker.progress import report_progress


async def take(client: FloClient, action: str) -> str:
    """Register worker w1 and take one run of ``action``; its run id."""
    await client.worker.register("w1", [action])
    [run] = await client.worker.await_tasks("w1", [action], 1)
    return run.run_id


async def test_wait_returns_when_the_run_completes(client: FloClient, raw: aioredis.Redis) -> None:
    await client.action.register("resize")
    run_id = (await client.action.invoke("resize", b"{}")).run_id
    waiter = asyncio.create_task(client.action.wait(run_id, timeout_ms=60_000))
    await watched(raw, action_keys(client.namespace, "resize").ended)
    assert not waiter.done()
    await client.worker.complete("w1", "resize", await take(client, "resize"), b"done")
    status = await asyncio.wait_for(waiter, 30)
    assert (status.status, status.output) == (RunStatus.COMPLETED, b"done")


async def test_wait_returns_when_the_run_fails_for_good(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.action.register("resize", options=ActionRegisterOptions(max_retries=2))
    run_id = (await client.action.invoke("resize", b"{}")).run_id
    waiter = asyncio.create_task(client.action.wait(run_id, timeout_ms=60_000))
    await client.worker.fail("w1", "resize", await take(client, "resize"), "again")  # retried
    await watched(raw, action_keys(client.namespace, "resize").ended)
    assert not waiter.done()
    await client.worker.fail(
        "w1", "resize", await take(client, "resize"), "gone", WorkerFailOptions(retry=False)
    )
    status = await asyncio.wait_for(waiter, 30)
    assert (status.status, status.error_message, status.attempt) == (RunStatus.FAILED, "gone", 2)


@pytest.mark.slow
async def test_wait_returns_when_the_lease_of_the_last_attempt_expires(client: FloClient) -> None:
    once = ActionRegisterOptions(timeout_ms=200, max_retries=1)
    await client.action.register("slow", options=once)
    run_id = (await client.action.invoke("slow", b"")).run_id
    await take(client, "slow")
    waiter = asyncio.create_task(client.action.wait(run_id, timeout_ms=60_000))
    await asyncio.sleep(0.5)  # the 200 ms lease runs out: the time is the behaviour here
    await client.action.reap("slow")  # what every worker's reaper does
    status = await asyncio.wait_for(waiter, 30)
    assert status.status == RunStatus.TIMED_OUT


async def test_wait_on_an_ended_run_returns_at_once(client: FloClient) -> None:
    await client.action.register("resize")
    run_id = (await client.action.invoke("resize", b"")).run_id
    await client.worker.complete("w1", "resize", await take(client, "resize"), b"x")
    assert (await client.action.wait(run_id, timeout_ms=0)).status == RunStatus.COMPLETED


@pytest.mark.slow
async def test_wait_raises_a_typed_timeout_with_the_status_then(client: FloClient) -> None:
    await client.action.register("resize")
    run_id = (await client.action.invoke("resize", b"")).run_id
    with pytest.raises(WaitTimeoutError, match="did not end within 300 ms") as info:
        await client.action.wait(run_id, timeout_ms=300)
    assert isinstance(info.value, TimeoutError)
    assert info.value.status.status == RunStatus.PENDING


async def test_wait_refuses_bad_arguments(client: FloClient) -> None:
    await client.action.register("resize")
    with pytest.raises(ValidationError, match="timeout_ms"):
        await client.action.wait("resize:1", timeout_ms=-1)
    with pytest.raises(NotFoundError):
        await client.action.wait("resize:999", timeout_ms=100)


async def test_ends_are_published_only_while_someone_waits(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.action.register("resize")
    channel = action_keys(client.namespace, "resize").ended
    pubsub = raw.pubsub()
    try:
        await pubsub.ssubscribe(channel)
        await pubsub.get_message(timeout=5)  # the subscribe confirmation
        run_id = (await client.action.invoke("resize", b"")).run_id
        await client.worker.complete("w1", "resize", await take(client, "resize"), b"x")
        message = await pubsub.get_message(timeout=5)
        assert message is not None and message["data"] == run_id.encode()
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]


async def test_a_finished_wait_leaves_the_channel_so_ends_are_no_longer_published(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.action.register("resize")
    channel = action_keys(client.namespace, "resize").ended
    run_id = (await client.action.invoke("resize", b"")).run_id
    with pytest.raises(WaitTimeoutError):
        await client.action.wait(run_id, timeout_ms=100)

    async def listeners() -> int:
        [_, count] = await raw.execute_command("PUBSUB", "SHARDNUMSUB", channel)
        return int(count)

    assert await eventually(listeners, lambda n: n == 0) == 0


async def test_wait_on_a_cluster_is_woken_on_the_node_of_each_queue(cluster_url: str) -> None:
    async with FloClient(cluster_url, namespace=f"c-{uuid.uuid4().hex[:10]}") as client:
        names = [f"job-{i}" for i in range(6)]  # queues spread over the nodes
        runs = {}
        for name in names:
            await client.action.register(name)
            runs[name] = (await client.action.invoke(name, b"")).run_id
        waiters = [
            asyncio.create_task(client.action.wait(runs[n], timeout_ms=60_000)) for n in names
        ]
        await asyncio.sleep(0.2)
        await client.worker.register("w1", names)
        for run in await client.worker.await_tasks("w1", names, len(names)):
            await client.worker.complete("w1", run.action, run.run_id, run.action.encode())
        done = await asyncio.wait_for(asyncio.gather(*waiters), 30)
    assert [(s.status, s.output) for s in done] == [
        (RunStatus.COMPLETED, n.encode()) for n in names
    ]


# --- an end nobody waited on, then a wait: the same under FCALL and EVALSHA -------------


async def subscribed(raw: aioredis.Redis, channel: str) -> None:
    """Until someone (the wait under test) listens on ``channel``, and a moment more, in
    which the wait reads the run (it subscribes first): what happens next reaches it as
    a message. (On a very slow machine the read may come later; the test then passes
    without having told the message from the read.)"""
    await watched(raw, channel)
    await asyncio.sleep(0.3)  # the read after the subscribe: not observable from outside


async def end_completed(client: FloClient, action: str, run_id: str) -> None:
    await client.worker.complete("w1", action, await take(client, action), b"done")


async def end_failed(client: FloClient, action: str, run_id: str) -> None:
    failed = WorkerFailOptions(retry=False)
    await client.worker.fail("w1", action, await take(client, action), "gone", failed)


async def end_cancelled(client: FloClient, action: str, run_id: str) -> None:
    await client.action.cancel(run_id)


async def end_timed_out(client: FloClient, action: str, run_id: str) -> None:
    await take(client, action)

    async def reaped() -> RunStatus:
        await client.action.reap(action)  # what every worker's reaper does
        return (await client.action.status(run_id)).status

    await eventually(reaped, lambda s: s == RunStatus.TIMED_OUT)


ENDS = {
    "completed": (end_completed, RunStatus.COMPLETED),
    "failed": (end_failed, RunStatus.FAILED),
    "cancelled": (end_cancelled, RunStatus.CANCELLED),
    "timed-out": (end_timed_out, RunStatus.TIMED_OUT),
}


@pytest.mark.parametrize("how", sorted(ENDS))
@pytest.mark.slow
async def test_a_wait_hears_its_run_end_after_an_end_nobody_waited_on(
    client: FloClient, raw: aioredis.Redis, how: str
) -> None:
    end, final = ENDS[how]
    once = ActionRegisterOptions(timeout_ms=200, max_retries=1)  # its lease ends it
    await client.action.register("job", options=once if how == "timed-out" else None)
    channel = action_keys(client.namespace, "job").ended
    first = (await client.action.invoke("job", b"")).run_id
    await end(client, "job", first)  # nobody waits on the queue
    second = (await client.action.invoke("job", b"")).run_id
    waiter = asyncio.create_task(client.action.wait(second, timeout_ms=60_000))
    await subscribed(raw, channel)
    await end(client, "job", second)
    status = await asyncio.wait_for(waiter, 30)  # woken by the end, not by its deadline
    assert (status.run_id, status.status) == (second, final)


@pytest.mark.slow
async def test_on_progress_hears_a_report_after_one_nobody_heard(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.action.register("job")
    channel = action_keys(client.namespace, "job").ended
    await client.worker.register("w1", ["job"])

    async def held() -> tuple[str, int]:
        [run] = await client.worker.await_tasks("w1", ["job"], 1)
        return run.run_id, run.token

    first = (await client.action.invoke("job", b"")).run_id
    _, token = await held()
    await report_progress(client.session, "w1", "job", first, token, b"half")  # nobody hears it
    await client.worker.complete("w1", "job", first, b"done")

    second = (await client.action.invoke("job", b"")).run_id
    _, token = await held()
    heard: list[bytes | None] = []
    waiter = asyncio.create_task(
        client.action.wait(second, 60_000, on_progress=lambda s: heard.append(s.progress))
    )
    await subscribed(raw, channel)
    await report_progress(client.session, "w1", "job", second, token, b"half")

    async def heard_so_far() -> list[bytes | None]:
        return heard

    await eventually(heard_so_far, lambda h: b"half" in h, timeout=30)
    await client.worker.complete("w1", "job", second, b"done")
    assert (await asyncio.wait_for(waiter, 30)).status == RunStatus.COMPLETED


# The reported case, through each way a user waits: a worker runs each run for 0.2 s; one
# run is invoked and ends with nobody waiting, then the next is waited on: the wait's
# timeout is WAIT_S, and it must return within half of it (woken by the end, not at its
# deadline).
SHORT_RUN_S = 0.2
WAIT_S = 60.0


@contextlib.asynccontextmanager
async def short_runs(client: FloClient) -> AsyncIterator[None]:
    """A worker that runs each run of "job" for 0.2 s, after one run ended unwatched."""
    await client.action.register("job")
    worker = client.new_action_worker(block_ms=500)

    @worker.action("job")
    async def job(ctx: ActionContext) -> bytes:
        await asyncio.sleep(SHORT_RUN_S)
        return b"done"

    async with running(worker):
        unwatched = (await client.action.invoke("job", b"")).run_id
        await eventually(
            lambda: client.action.status(unwatched),
            lambda s: s.status == RunStatus.COMPLETED,
            timeout=30,
        )
        yield


@pytest.mark.slow
async def test_a_short_run_waited_on_after_an_unwatched_one_returns_with_its_end(
    client: FloClient,
) -> None:
    async with short_runs(client):
        run_id = (await client.action.invoke("job", b"")).run_id
        waited = client.action.wait(run_id, timeout_ms=int(WAIT_S * 1000))
        status = await asyncio.wait_for(waited, WAIT_S / 2)
        assert status.status == RunStatus.COMPLETED


@pytest.mark.slow
async def test_the_blocking_wait_after_an_unwatched_run_returns_with_its_end(
    client: FloClient, redis_url: str
) -> None:
    with SyncFloClient(redis_url, namespace=client.namespace) as flo:
        async with short_runs(client):

            def invoke_and_wait() -> RunStatus:
                run_id = flo.action.invoke("job", b"").run_id
                return flo.action.wait(run_id, timeout_ms=int(WAIT_S * 1000)).status

            waited = asyncio.to_thread(invoke_and_wait)
            assert await asyncio.wait_for(waited, WAIT_S / 2) == RunStatus.COMPLETED


def cli_env(redis_url: str, namespace: str) -> dict[str, str]:
    return {"FLO_REDIS_URL": redis_url, "FLO_REDIS_NAMESPACE": namespace}


@pytest.mark.slow
async def test_invoke_wait_on_the_command_line_after_an_unwatched_run_returns_with_its_end(
    client: FloClient, redis_url: str, command: Callable[..., Command]
) -> None:
    async with short_runs(client):
        cli = command("invoke", "job", "--data", "{}", "--wait", "--timeout", str(WAIT_S),
                      env=cli_env(redis_url, client.namespace))  # fmt: skip
        code = await asyncio.to_thread(cli.wait, WAIT_S / 2)
        assert code == 0, cli.output()
        assert cli.output().strip().endswith("done")


# --- a wait that times out names the state the run is in then -----------------------------


@pytest.mark.parametrize("blocking", [False, True], ids=["asyncio", "blocking"])
@pytest.mark.slow
async def test_a_timed_out_wait_names_the_state_at_its_deadline(
    client: FloClient, raw: aioredis.Redis, redis_url: str, blocking: bool
) -> None:
    await client.action.register("job")
    channel = action_keys(client.namespace, "job").ended
    run_id = (await client.action.invoke("job", b"")).run_id
    with SyncFloClient(redis_url, namespace=client.namespace) as flo:
        if blocking:
            waiter = asyncio.ensure_future(asyncio.to_thread(flo.action.wait, run_id, 3000))
        else:
            waiter = asyncio.ensure_future(client.action.wait(run_id, timeout_ms=3000))
        await subscribed(raw, channel)  # and it has read the run: PENDING
        await take(client, "job")  # RUNNING from now on
        with pytest.raises(WaitTimeoutError, match=r"\(it is RUNNING\)") as info:
            await asyncio.wait_for(waiter, 30)
    assert info.value.status.status == RunStatus.RUNNING


@pytest.mark.slow
async def test_invoke_wait_on_the_command_line_names_the_state_at_its_deadline(
    client: FloClient, raw: aioredis.Redis, redis_url: str, command: Callable[..., Command]
) -> None:
    await client.action.register("job")
    channel = action_keys(client.namespace, "job").ended
    cli = command("invoke", "job", "--data", "{}", "--wait", "--timeout", "3",
                  env=cli_env(redis_url, client.namespace))  # fmt: skip
    await subscribed(raw, channel)  # and the command has read the run: PENDING
    await take(client, "job")  # RUNNING from now on
    assert await asyncio.to_thread(cli.wait, 30) == 2, cli.output()
    assert "not finished after 3 s (it is RUNNING)" in cli.output()
