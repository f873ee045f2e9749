"""client.action end to end: register, invoke, status, list, delete, delays, retention."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from polling import eventually

from flo_redis import (
    ActionInvokeOptions,
    ActionListOptions,
    ActionRegisterOptions,
    ActionStatusOptions,
    ConflictError,
    FloClient,
    NamespaceTooLargeError,
    NotFoundError,
    RunStatus,
    TaskAssignment,
    ValidationError,
    ValueTooLargeError,
    WorkerAwaitOptions,
    WorkerFailOptions,
)
from flo_redis._wire.keys import action_keys
from flo_redis.types import Reason, StatusCode

NOW = WorkerAwaitOptions(block_ms=0)


async def take(client: FloClient, action: str, worker: str = "w1") -> TaskAssignment | None:
    """Register ``worker`` (if needed) and take one run of ``action`` without waiting."""
    await client.worker.register(worker, [action])
    return (await client.worker.await_task(worker, [action], NOW)).task


async def keys_of(raw: aioredis.Redis, namespace: str) -> list[bytes]:
    return sorted(await raw.keys(f"*{namespace}*"))


# --- register / list --------------------------------------------------------------


async def test_register_last_wins_and_list_shows_it(client: FloClient) -> None:
    await client.action.register("resize", options=ActionRegisterOptions(timeout_ms=1000))
    await client.action.register(
        "resize", options=ActionRegisterOptions(timeout_ms=2000, max_retries=5)
    )
    [info] = (await client.action.list()).actions
    assert (info.name, info.timeout_ms, info.max_retries) == ("resize", 2000, 5)


async def test_list_pages_with_cursor_and_filters_by_prefix(client: FloClient) -> None:
    names = ["a1", "a2", "a3", "a4", "a5", "b1"]
    for name in reversed(names):
        await client.action.register(name)
    seen: list[str] = []
    cursor: bytes | None = None
    while True:
        page = await client.action.list(ActionListOptions(limit=2, cursor=cursor))
        assert len(page.actions) <= 2
        seen.extend(a.name for a in page.actions)
        if page.cursor is None:
            break
        cursor = page.cursor
    assert seen == names

    first = await client.action.list(ActionListOptions(limit=3, prefix="a"))
    assert [a.name for a in first.actions] == ["a1", "a2", "a3"]
    rest = await client.action.list(ActionListOptions(limit=3, prefix="a", cursor=first.cursor))
    assert [a.name for a in rest.actions] == ["a4", "a5"]
    assert rest.cursor is None
    only_b = await client.action.list(ActionListOptions(prefix="b"))
    assert [a.name for a in only_b.actions] == ["b1"]


# --- invoke / status --------------------------------------------------------------


async def test_invoke_creates_a_pending_run(client: FloClient) -> None:
    await client.action.register("resize")
    run_id = (await client.action.invoke("resize", b"img")).run_id
    status = await client.action.status(run_id)
    assert status.run_id == run_id
    assert status.status == RunStatus.PENDING
    assert status.attempt == 0
    assert status.worker_id is None
    assert status.started_at_ms is None and status.completed_at_ms is None
    assert status.created_at_ms > 0


async def test_invoke_unregistered_action_is_not_found(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    with pytest.raises(NotFoundError) as info:
        await client.action.invoke("nope", b"x")
    assert info.value.status_code == StatusCode.NOT_FOUND
    assert "register it first" in str(info.value)
    assert await keys_of(raw, namespace) == []


async def test_status_of_unknown_or_malformed_run(client: FloClient) -> None:
    await client.action.register("resize")
    with pytest.raises(NotFoundError):
        await client.action.status("resize:999")
    with pytest.raises(NotFoundError):
        await client.action.status("never-registered:1")
    for bad in ("no-colon", "resize:abc", ":5", ""):
        with pytest.raises(NotFoundError):
            await client.action.status(bad)


async def test_per_call_namespace_overrides(client: FloClient, namespace: str) -> None:
    other = f"{namespace}-other"
    await client.action.register("resize", options=ActionRegisterOptions(namespace=other))
    with pytest.raises(NotFoundError):
        await client.action.invoke("resize", b"x")
    run_id = (
        await client.action.invoke("resize", b"x", ActionInvokeOptions(namespace=other))
    ).run_id
    with pytest.raises(NotFoundError):
        await client.action.status(run_id)
    status = await client.action.status(run_id, ActionStatusOptions(namespace=other))
    assert status.status == RunStatus.PENDING


# --- delete -----------------------------------------------------------------------


async def test_delete_removes_the_action_and_its_runs(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    await client.action.register("resize")
    run_id = (await client.action.invoke("resize", b"x")).run_id
    await client.action.delete("resize")
    with pytest.raises(NotFoundError):
        await client.action.status(run_id)
    with pytest.raises(NotFoundError):
        await client.action.invoke("resize", b"x")
    assert (await client.action.list()).actions == []
    keys = action_keys(namespace, "resize")
    assert await raw.exists(*keys.all_data_keys()) == 0
    with pytest.raises(NotFoundError):
        await client.action.delete("resize")


async def test_delete_unknown_action_is_not_found(client: FloClient) -> None:
    with pytest.raises(NotFoundError):
        await client.action.delete("never")


async def test_run_ids_are_not_reused_after_delete(client: FloClient) -> None:
    await client.action.register("resize")
    first = (await client.action.invoke("resize", b"x")).run_id
    await client.action.delete("resize")
    await client.action.register("resize")
    second = (await client.action.invoke("resize", b"x")).run_id
    assert first != second


# --- validation before anything is written ----------------------------------------


@pytest.mark.parametrize(
    "name",
    ["", "a{b", "a}b", "tab\there", "nul\x00", "del\x7f", "x" * 256, "é" * 128],
)
async def test_invalid_action_names_are_refused_before_writing(
    client: FloClient, raw: aioredis.Redis, namespace: str, name: str
) -> None:
    with pytest.raises(ValidationError):
        await client.action.register(name)
    with pytest.raises(ValidationError):
        await client.action.invoke(name, b"x")
    with pytest.raises(ValidationError):
        await client.worker.register("w1", [name])
    assert await keys_of(raw, namespace) == []


@pytest.mark.parametrize("bad", ["", "a:b", "a{b", "a}b", "new\nline"])
async def test_invalid_namespaces_are_refused_before_writing(
    client: FloClient, raw: aioredis.Redis, namespace: str, bad: str
) -> None:
    with pytest.raises(ValidationError):
        await client.action.register("resize", options=ActionRegisterOptions(namespace=bad))
    with pytest.raises(ValidationError):
        await client.action.invoke("resize", b"x", ActionInvokeOptions(namespace=bad))
    with pytest.raises(ValidationError):
        FloClient("redis://localhost:1", namespace=bad)
    assert await keys_of(raw, namespace) == []
    if bad:
        assert await raw.keys(f"*{{{bad}*") == []  # no key tagged with the bad namespace


async def test_oversized_namespace_is_namespace_too_large(client: FloClient) -> None:
    with pytest.raises(NamespaceTooLargeError):
        await client.action.register("resize", options=ActionRegisterOptions(namespace="n" * 256))
    with pytest.raises(NamespaceTooLargeError):
        FloClient("redis://localhost:1", namespace="n" * 256)


async def test_oversized_input_is_refused_before_writing(
    redis_url: str, raw: aioredis.Redis, namespace: str
) -> None:
    async with FloClient(redis_url, namespace=namespace, max_payload_bytes=1024) as small:
        await small.action.register("resize")
        before = await keys_of(raw, namespace)
        with pytest.raises(ValueTooLargeError):
            await small.action.invoke("resize", b"x" * 1025)
        assert await keys_of(raw, namespace) == before
        await small.action.invoke("resize", b"x" * 1024)


async def test_per_action_payload_limit(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    await client.action.register("resize", options=ActionRegisterOptions(max_payload_bytes=100))
    keys = action_keys(namespace, "resize")
    with pytest.raises(ValueTooLargeError) as info:
        await client.action.invoke("resize", b"x" * 101)
    assert "100" in str(info.value)
    assert await raw.hlen(keys.runs) == 0
    assert await raw.zcard(keys.pending) == 0
    assert await raw.hget(keys.meta, "seq") is None
    await client.action.invoke("resize", b"x" * 100)
    assert await raw.hlen(keys.runs) == 1


# --- delayed runs -----------------------------------------------------------------


@pytest.mark.slow
async def test_delayed_run_is_handed_out_only_when_due(client: FloClient) -> None:
    await client.action.register("later")
    run_id = (await client.action.invoke("later", b"x", ActionInvokeOptions(delay_ms=1500))).run_id
    assert await take(client, "later") is None
    assert (await client.action.status(run_id)).status == RunStatus.PENDING
    task = (
        await client.worker.await_task("w1", ["later"], WorkerAwaitOptions(block_ms=20_000))
    ).task
    assert task is not None and task.task_id == run_id
    assert (await client.action.status(run_id)).started_at_ms is not None


@pytest.mark.slow
async def test_run_at_ms_is_handed_out_only_when_due(client: FloClient) -> None:
    await client.action.register("later")
    due = await client.server_time_ms() + 1500
    run_id = (await client.action.invoke("later", b"x", ActionInvokeOptions(run_at_ms=due))).run_id
    assert await take(client, "later") is None
    task = (
        await client.worker.await_task("w1", ["later"], WorkerAwaitOptions(block_ms=20_000))
    ).task
    assert task is not None and task.task_id == run_id
    started = (await client.action.status(run_id)).started_at_ms
    assert started is not None and started >= due


async def test_run_at_in_the_past_is_ready_now(client: FloClient) -> None:
    await client.action.register("later")
    run_id = (await client.action.invoke("later", b"x", ActionInvokeOptions(run_at_ms=1))).run_id
    task = await take(client, "later")
    assert task is not None and task.task_id == run_id


# --- idempotency ------------------------------------------------------------------


async def test_idempotency_key_returns_the_same_run(client: FloClient) -> None:
    await client.action.register("charge")
    opts = ActionInvokeOptions(idempotency_key="order-17")
    first = (await client.action.invoke("charge", b"a", opts)).run_id
    second = (await client.action.invoke("charge", b"b", opts)).run_id
    other = (
        await client.action.invoke("charge", b"c", ActionInvokeOptions(idempotency_key="o-18"))
    ).run_id
    assert first == second != other
    task = await take(client, "charge")
    assert task is not None and (task.task_id, task.payload) == (first, b"a")
    task = await take(client, "charge")
    assert task is not None and task.task_id == other
    assert await take(client, "charge") is None


# --- retention, failed runs, requeue ----------------------------------------------


async def test_completed_runs_beyond_retention_count_are_removed(client: FloClient) -> None:
    await client.action.register("job", options=ActionRegisterOptions(retention_count=3))
    run_ids = []
    for i in range(5):
        run_id = (await client.action.invoke("job", str(i).encode())).run_id
        task = await take(client, "job")
        assert task is not None and task.task_id == run_id
        await client.worker.complete("w1", "job", run_id, b"ok")
        run_ids.append(run_id)
    for run_id in run_ids[:2]:
        with pytest.raises(NotFoundError):
            await client.action.status(run_id)
    for run_id in run_ids[2:]:
        status = await client.action.status(run_id)
        assert (status.status, status.output) == (RunStatus.COMPLETED, b"ok")


async def test_retention_forgets_the_idempotency_keys_of_the_runs_it_removes(
    client: FloClient,
) -> None:
    await client.action.register("job", options=ActionRegisterOptions(retention_count=2))

    async def run(key: str | None, output: bytes = b"ok") -> str:
        opts = ActionInvokeOptions(idempotency_key=key) if key else None
        run_id = (await client.action.invoke("job", b"x", opts)).run_id
        task = await take(client, "job")
        assert task is not None and task.task_id == run_id
        await client.worker.complete("w1", "job", run_id, output)
        return run_id

    forgotten = await run("a")
    # An output holding the bytes a key "ik" is packed as: decoded, found to have none.
    await run(None, b"\xa2ik")
    kept = await run("b")
    with pytest.raises(NotFoundError):
        await client.action.status(forgotten)
    again = await client.action.invoke("job", b"x", ActionInvokeOptions(idempotency_key="a"))
    assert again.run_id != forgotten
    same = await client.action.invoke("job", b"x", ActionInvokeOptions(idempotency_key="b"))
    assert same.run_id == kept


async def test_failed_runs_are_kept_listed_and_requeueable(client: FloClient) -> None:
    await client.action.register(
        "job", options=ActionRegisterOptions(max_retries=1, retention_count=1)
    )
    run_ids = [(await client.action.invoke("job", b"x")).run_id for _ in range(3)]
    for _ in run_ids:
        task = await take(client, "job")
        assert task is not None
        await client.worker.fail("w1", "job", task.task_id, "boom")
    failed = await client.action.failed("job")
    assert [r.run_id for r in failed] == run_ids
    assert all(r.status == RunStatus.FAILED and r.error_message == "boom" for r in failed)
    for run_id in run_ids:  # retention_count applies to completed runs, not failed ones
        assert (await client.action.status(run_id)).status == RunStatus.FAILED

    await client.action.requeue(run_ids[0])
    status = await client.action.status(run_ids[0])
    assert (status.status, status.attempt) == (RunStatus.PENDING, 0)
    assert [r.run_id for r in await client.action.failed("job")] == run_ids[1:]
    task = await take(client, "job")
    assert task is not None and (task.task_id, task.attempt) == (run_ids[0], 1)
    await client.worker.fail("w1", "job", task.task_id, "again", WorkerFailOptions(retry=True))
    assert (await client.action.status(run_ids[0])).status == RunStatus.FAILED


async def test_requeue_of_a_run_that_has_not_failed_is_a_conflict(client: FloClient) -> None:
    await client.action.register("job")
    run_id = (await client.action.invoke("job", b"x")).run_id
    with pytest.raises(ConflictError) as info:
        await client.action.requeue(run_id)
    assert info.value.status_code == StatusCode.CONFLICT
    assert info.value.reason != Reason.STALE_REPORT
    task = await take(client, "job")
    assert task is not None
    with pytest.raises(ConflictError):
        await client.action.requeue(run_id)
    await client.worker.complete("w1", "job", run_id, b"")
    with pytest.raises(ConflictError):
        await client.action.requeue(run_id)
    with pytest.raises(NotFoundError):
        await client.action.requeue("job:999")


@pytest.mark.slow
async def test_reap_moves_expired_and_due_runs_without_a_poll(client: FloClient) -> None:
    await client.action.register("job", options=ActionRegisterOptions(timeout_ms=300))
    run_id = (await client.action.invoke("job", b"x")).run_id
    assert await take(client, "job") is not None

    async def reaped() -> RunStatus:
        await client.action.reap("job")
        return (await client.action.status(run_id)).status

    await eventually(reaped, lambda s: s == RunStatus.PENDING)
