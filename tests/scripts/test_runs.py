"""A run's life end to end: attempts, retries, leases, touch, fencing, labels, batches."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis.asyncio as aioredis
from polling import eventually

from flo_redis import (
    ActionInvokeOptions,
    ActionRegisterOptions,
    BadRequestError,
    ConflictError,
    FloClient,
    NotFoundError,
    RunStatus,
    TaskAssignment,
    WorkerAwaitOptions,
    WorkerCompleteOptions,
    WorkerFailOptions,
    WorkerRegisterOptions,
    WorkerTouchOptions,
)
from flo_redis._wire.keys import action_keys
from flo_redis.types import Reason, StatusCode

NOW = WorkerAwaitOptions(block_ms=0)


async def setup(client: FloClient, action: str = "job", **options: Any) -> None:
    await client.action.register(action, options=ActionRegisterOptions(**options))
    await client.worker.register("w1", [action])
    await client.worker.register("w2", [action])


async def take(client: FloClient, worker: str = "w1", action: str = "job") -> TaskAssignment:
    task = (await client.worker.await_task(worker, [action], NOW)).task
    assert task is not None, f"{worker} got no run of {action}"
    return task


async def nothing_for(client: FloClient, worker: str = "w1", action: str = "job") -> bool:
    return (await client.worker.await_task(worker, [action], NOW)).task is None


async def take_when_ready(
    client: FloClient, worker: str = "w1", action: str = "job"
) -> TaskAssignment:
    """Wait (a long poll, bounded) for a run that becomes ready later (expiry, backoff)."""
    task = (
        await client.worker.await_task(worker, [action], WorkerAwaitOptions(block_ms=20_000))
    ).task
    assert task is not None, f"{worker} got no run of {action} within 20 s"
    return task


async def worker_info(client: FloClient, worker_id: str) -> Any:
    [info] = [w for w in (await client.worker.list()).workers if w.worker_id == worker_id]
    return info


def assert_stale(exc: BaseException) -> None:
    assert isinstance(exc, ConflictError)
    assert exc.status_code == StatusCode.CONFLICT
    assert exc.reason == Reason.STALE_REPORT


# --- attempts and retries ---------------------------------------------------------


async def test_attempts_count_from_one_and_max_retries_is_attempts_in_all(
    client: FloClient,
) -> None:
    await setup(client, max_retries=3)
    run_id = (await client.action.invoke("job", b"in")).run_id
    for attempt in (1, 2, 3):
        task = await take(client)
        assert (task.task_id, task.attempt, task.payload, task.task_type) == (
            run_id,
            attempt,
            b"in",
            "job",
        )
        status = await client.action.status(run_id)
        assert (status.status, status.attempt, status.worker_id) == (
            RunStatus.RUNNING,
            attempt,
            "w1",
        )
        assert status.started_at_ms is not None
        await client.worker.fail("w1", "job", run_id, f"boom {attempt}")
    status = await client.action.status(run_id)
    assert (status.status, status.attempt, status.error_message) == (
        RunStatus.FAILED,
        3,
        "boom 3",
    )
    assert status.completed_at_ms is not None
    assert await nothing_for(client)


async def test_retry_requeues_with_error_recorded(client: FloClient) -> None:
    await setup(client, max_retries=2)
    run_id = (await client.action.invoke("job", b"x")).run_id
    await take(client)
    await client.worker.fail("w1", "job", run_id, "transient")
    status = await client.action.status(run_id)
    assert (status.status, status.error_message, status.started_at_ms) == (
        RunStatus.PENDING,
        "transient",
        None,
    )


@pytest.mark.parametrize("max_retries", [0, 1])
async def test_zero_or_one_attempts_make_the_first_failure_final(
    client: FloClient, max_retries: int
) -> None:
    await setup(client, max_retries=max_retries)
    run_id = (await client.action.invoke("job", b"x")).run_id
    await take(client)
    await client.worker.fail("w1", "job", run_id, "boom")
    assert (await client.action.status(run_id)).status == RunStatus.FAILED


async def test_fail_without_retry_is_final(client: FloClient) -> None:
    await setup(client, max_retries=5)
    run_id = (await client.action.invoke("job", b"x")).run_id
    await take(client)
    await client.worker.fail("w1", "job", run_id, "bad input", WorkerFailOptions(retry=False))
    status = await client.action.status(run_id)
    assert (status.status, status.attempt, status.error_message) == (
        RunStatus.FAILED,
        1,
        "bad input",
    )
    assert await nothing_for(client)
    assert [r.run_id for r in await client.action.failed("job")] == [run_id]


async def test_complete_sets_output_time_worker_and_clears_error(client: FloClient) -> None:
    await setup(client, max_retries=3)
    run_id = (await client.action.invoke("job", b"x")).run_id
    await take(client, "w1")
    await client.worker.fail("w1", "job", run_id, "first try failed")
    await take(client, "w2")
    await client.worker.complete(
        "w2", "job", run_id, b'{"ok":1}', WorkerCompleteOptions(outcome="approved")
    )
    status = await client.action.status(run_id)
    assert status.status == RunStatus.COMPLETED
    assert status.output == b'{"ok":1}'
    assert status.completed_at_ms is not None and status.started_at_ms is not None
    assert status.completed_at_ms >= status.started_at_ms
    assert status.worker_id == "w2"
    assert status.error_message is None
    assert status.attempt == 2
    assert status.outcome == "approved"


@pytest.mark.slow
async def test_retry_backoff_delays_the_next_attempt(client: FloClient) -> None:
    await setup(client, max_retries=3, retry_backoff_ms=1500)
    run_id = (await client.action.invoke("job", b"x")).run_id
    await take(client)
    await client.worker.fail("w1", "job", run_id, "later")
    failed_at = await client.server_time_ms()
    assert await nothing_for(client)
    assert (await client.action.status(run_id)).status == RunStatus.PENDING
    task = await take_when_ready(client)
    assert (task.task_id, task.attempt) == (run_id, 2)
    started = (await client.action.status(run_id)).started_at_ms
    assert started is not None and started >= failed_at + 1000


# --- leases -----------------------------------------------------------------------


@pytest.mark.slow
async def test_an_expired_lease_is_taken_back_and_run_again(client: FloClient) -> None:
    await setup(client, timeout_ms=300, max_retries=2)
    run_id = (await client.action.invoke("job", b"x")).run_id
    first = await take(client, "w1")
    second = await take_when_ready(client, "w2")
    assert (second.task_id, second.attempt) == (run_id, 2)
    assert second.token > first.token
    status = await client.action.status(run_id)
    assert (status.status, status.worker_id) == (RunStatus.RUNNING, "w2")


@pytest.mark.slow
async def test_an_expired_lease_on_the_last_attempt_ends_timed_out(client: FloClient) -> None:
    await setup(client, timeout_ms=300, max_retries=1)
    run_id = (await client.action.invoke("job", b"x")).run_id
    await take(client)

    async def status() -> RunStatus:
        await client.action.reap("job")
        return (await client.action.status(run_id)).status

    await eventually(status, lambda s: s == RunStatus.TIMED_OUT)
    assert [r.run_id for r in await client.action.failed("job")] == [run_id]
    assert await nothing_for(client)


async def test_a_lease_of_an_action_without_a_timeout_never_ends(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await setup(client, timeout_ms=0)
    run_id = (await client.action.invoke("job", b"x")).run_id
    await take(client)
    leases = action_keys(client.namespace, "job").leases
    assert await raw.zscore(leases, run_id) == 2**52  # the deadline standing for "never"
    await client.action.reap("job")
    assert (await client.action.status(run_id)).status == RunStatus.RUNNING


@pytest.mark.slow
async def test_touch_extends_the_lease(client: FloClient) -> None:
    await setup(client, timeout_ms=300)
    run_id = (await client.action.invoke("job", b"x")).run_id
    task = await take(client)
    start = await client.server_time_ms()
    await client.worker.touch(
        "w1", "job", run_id, WorkerTouchOptions(extend_ms=60_000, token=task.token)
    )
    # Well past the original 300 ms deadline, the run is still held by w1.
    await eventually(client.server_time_ms, lambda now: now > start + 900)
    assert await nothing_for(client, "w2")
    await client.action.reap("job")
    status = await client.action.status(run_id)
    assert (status.status, status.attempt, status.worker_id) == (RunStatus.RUNNING, 1, "w1")
    await client.worker.complete("w1", "job", run_id, b"done", WorkerCompleteOptions())


async def test_touch_over_an_hour_is_out_of_range(client: FloClient) -> None:
    await setup(client)
    run_id = (await client.action.invoke("job", b"x")).run_id
    await take(client)
    with pytest.raises(BadRequestError) as info:
        await client.worker.touch("w1", "job", run_id, WorkerTouchOptions(extend_ms=3_600_001))
    assert info.value.reason == Reason.OUT_OF_RANGE
    await client.worker.touch("w1", "job", run_id, WorkerTouchOptions(extend_ms=3_600_000))


# --- fencing ----------------------------------------------------------------------


@pytest.mark.slow
async def test_reports_from_a_replaced_holder_are_stale_and_change_nothing(
    client: FloClient,
) -> None:
    await setup(client, timeout_ms=300, max_retries=3)
    run_id = (await client.action.invoke("job", b"x")).run_id
    old = await take(client, "w1")
    new = await take_when_ready(client, "w2")
    assert new.token != old.token
    before = await client.action.status(run_id)

    for report in (
        client.worker.complete(
            "w1", "job", run_id, b"late", WorkerCompleteOptions(token=old.token)
        ),
        client.worker.fail("w1", "job", run_id, "late", WorkerFailOptions(token=old.token)),
        client.worker.touch("w1", "job", run_id, WorkerTouchOptions(token=old.token)),
        # flo's token-less reports: the worker id decides, and w1 no longer holds it.
        client.worker.complete("w1", "job", run_id, b"late"),
        client.worker.fail("w1", "job", run_id, "late"),
        client.worker.touch("w1", "job", run_id),
    ):
        with pytest.raises(ConflictError) as info:
            await report
        assert_stale(info.value)
    assert await client.action.status(run_id) == before
    assert (await worker_info(client, "w1")).tasks_completed == 0

    await client.worker.touch("w2", "job", run_id)  # token-less, current holder
    await client.worker.complete("w2", "job", run_id, b"done")
    status = await client.action.status(run_id)
    assert (status.status, status.output, status.worker_id) == (RunStatus.COMPLETED, b"done", "w2")


async def test_token_less_reports_from_the_holder_work(client: FloClient) -> None:
    await setup(client)
    run_id = (await client.action.invoke("job", b"x")).run_id
    await take(client, "w1")
    with pytest.raises(ConflictError) as info:
        await client.worker.complete("w2", "job", run_id, b"not mine")
    assert_stale(info.value)
    await client.worker.touch("w1", "job", run_id)
    await client.worker.complete("w1", "job", run_id, b"mine")
    assert (await client.action.status(run_id)).output == b"mine"


async def test_an_identical_resend_of_complete_is_ok_and_applied_once(
    client: FloClient,
) -> None:
    await setup(client)
    run_id = (await client.action.invoke("job", b"x")).run_id
    task = await take(client)
    opts = WorkerCompleteOptions(token=task.token)
    await client.worker.complete("w1", "job", run_id, b"result", opts)
    first = await client.action.status(run_id)
    await client.worker.complete("w1", "job", run_id, b"result", opts)
    await client.worker.complete("w1", "job", run_id, b"result")  # token-less resend too
    assert await client.action.status(run_id) == first
    info = await worker_info(client, "w1")
    assert (info.tasks_completed, info.current_load) == (1, 0)

    with pytest.raises(ConflictError) as exc:
        await client.worker.complete("w1", "job", run_id, b"another result", opts)
    assert_stale(exc.value)
    with pytest.raises(ConflictError) as exc:
        await client.worker.complete(
            "w1", "job", run_id, b"result", WorkerCompleteOptions(outcome="other", token=task.token)
        )
    assert_stale(exc.value)
    with pytest.raises(ConflictError) as exc:
        await client.worker.fail(
            "w1", "job", run_id, "too late", WorkerFailOptions(token=task.token)
        )
    assert_stale(exc.value)
    assert await client.action.status(run_id) == first


async def test_an_identical_resend_of_fail_is_ok_and_applied_once(client: FloClient) -> None:
    await setup(client, max_retries=3)
    run_id = (await client.action.invoke("job", b"x")).run_id
    task = await take(client)
    opts = WorkerFailOptions(token=task.token)
    await client.worker.fail("w1", "job", run_id, "boom", opts)
    await client.worker.fail("w1", "job", run_id, "boom", opts)
    status = await client.action.status(run_id)
    assert (status.status, status.attempt) == (RunStatus.PENDING, 1)
    assert (await worker_info(client, "w1")).tasks_failed == 1
    assert (await take(client)).attempt == 2


@pytest.mark.slow
async def test_complete_after_another_worker_completed_is_stale(client: FloClient) -> None:
    await setup(client, timeout_ms=300)
    run_id = (await client.action.invoke("job", b"x")).run_id
    old = await take(client, "w1")
    await take_when_ready(client, "w2")
    await client.worker.complete("w2", "job", run_id, b"by w2")
    with pytest.raises(ConflictError) as info:
        await client.worker.complete(
            "w1", "job", run_id, b"by w2", WorkerCompleteOptions(token=old.token)
        )
    assert_stale(info.value)
    assert (await client.action.status(run_id)).worker_id == "w2"


async def test_reports_for_unknown_runs_are_not_found(client: FloClient) -> None:
    await setup(client)
    await setup(client, "other")
    other_run = (await client.action.invoke("other", b"x")).run_id
    await take(client, "w1", "other")
    for run_id in ("job:999", other_run):
        with pytest.raises(NotFoundError):
            await client.worker.complete("w1", "job", run_id, b"")
        with pytest.raises(NotFoundError):
            await client.worker.fail("w1", "job", run_id, "x")
        with pytest.raises(NotFoundError):
            await client.worker.touch("w1", "job", run_id)
    assert (await client.action.status(other_run)).status == RunStatus.RUNNING


# --- labels -----------------------------------------------------------------------


async def labelled_setup(client: FloClient) -> None:
    await client.action.register("gpu-job")
    await client.worker.register(
        "gpu", ["gpu-job"], WorkerRegisterOptions(metadata='{"gpu": true, "zone": "eu"}')
    )
    await client.worker.register("plain", ["gpu-job"])
    await client.worker.register(
        "counted", ["gpu-job"], WorkerRegisterOptions(metadata=json.dumps({"n": 1, "x": 1.0}))
    )


async def invoke_labelled(client: FloClient, labels: dict[str, Any] | None) -> str:
    opts = ActionInvokeOptions(labels=labels)
    return (await client.action.invoke("gpu-job", b"x", opts)).run_id


@pytest.mark.parametrize(
    ("labels", "takers"),
    [
        ({"gpu": True}, {"gpu"}),
        ({"gpu": True, "zone": "eu"}, {"gpu"}),
        ({"gpu": 1}, set()),
        ({"gpu": "true"}, set()),
        ({"gpu": True, "zone": "us"}, set()),
        ({"gpu": [True]}, set()),
        ({"gpu": {"a": 1}}, set()),
        ({"n": 1}, {"counted"}),
        ({"n": 1.0}, set()),
        ({"x": 1.0}, {"counted"}),
        ({"x": 1}, set()),
        ({"missing": True}, set()),
        (None, {"gpu", "plain", "counted"}),
    ],
)
async def test_labels_route_runs_by_flo_rules(
    client: FloClient, labels: dict[str, Any] | None, takers: set[str]
) -> None:
    await labelled_setup(client)
    got = set()
    invoked = set()
    for worker in ("gpu", "plain", "counted"):
        invoked.add(await invoke_labelled(client, labels))
        task = (await client.worker.await_task(worker, ["gpu-job"], NOW)).task
        if task is not None:
            assert task.task_id in invoked
            got.add(worker)
            await client.worker.complete(worker, "gpu-job", task.task_id, b"")
    assert got == takers


async def test_a_non_matching_run_does_not_block_matching_ones_behind_it(
    client: FloClient,
) -> None:
    await labelled_setup(client)
    blocked = [await invoke_labelled(client, {"gpu": False}) for _ in range(5)]
    wanted = await invoke_labelled(client, {"gpu": True})
    plain = await invoke_labelled(client, None)
    assert (await take(client, "gpu", "gpu-job")).task_id == wanted
    assert (await take(client, "gpu", "gpu-job")).task_id == plain
    assert await nothing_for(client, "gpu", "gpu-job")
    assert await nothing_for(client, "plain", "gpu-job")
    for run_id in blocked:
        assert (await client.action.status(run_id)).status == RunStatus.PENDING


# --- concurrency, batches, poll replay ---------------------------------------------


async def test_max_concurrency_caps_running_runs_across_workers(client: FloClient) -> None:
    await setup(client, max_concurrency=2)
    run_ids = [(await client.action.invoke("job", b"x")).run_id for _ in range(4)]
    a = await take(client, "w1")
    b = await take(client, "w2")
    assert await nothing_for(client, "w1")
    assert await nothing_for(client, "w2")
    assert len(await client.worker.await_tasks("w1", ["job"], 10, NOW)) == 0
    await client.worker.complete("w1", "job", a.task_id, b"")
    c = await take(client, "w2")
    assert await nothing_for(client, "w1")
    running = [r for r in run_ids if (await client.action.status(r)).status == RunStatus.RUNNING]
    assert sorted(running) == sorted([b.task_id, c.task_id])


async def test_batch_claim_hands_out_up_to_max_tasks_with_distinct_tokens(
    client: FloClient,
) -> None:
    await setup(client)
    run_ids = [(await client.action.invoke("job", str(i).encode())).run_id for i in range(60)]
    batch = await client.worker.await_tasks("w1", ["job"], 50, NOW)
    assert len(batch) == 50
    assert [c.run_id for c in batch] == run_ids[:50]  # FIFO
    assert [c.payload for c in batch] == [str(i).encode() for i in range(50)]
    assert len({c.token for c in batch}) == 50
    assert all(c.attempt == 1 for c in batch)
    rest = await client.worker.await_tasks("w1", ["job"], 50, NOW)
    assert [c.run_id for c in rest] == run_ids[50:]
    assert (await worker_info(client, "w1")).current_load == 60


async def test_a_retried_poll_id_gets_the_same_runs_back(client: FloClient) -> None:
    await setup(client)
    for _ in range(5):
        await client.action.invoke("job", b"x")
    opts = WorkerAwaitOptions(block_ms=0, poll_id="poll-1")
    first = await client.worker.await_tasks("w1", ["job"], 3, opts)
    again = await client.worker.await_tasks("w1", ["job"], 3, opts)  # as if the reply was lost
    assert len(first) == 3
    assert [(c.run_id, c.token) for c in again] == [(c.run_id, c.token) for c in first]
    other = await client.worker.await_tasks(
        "w1", ["job"], 3, WorkerAwaitOptions(block_ms=0, poll_id="poll-2")
    )
    assert len(other) == 2
    assert not {c.run_id for c in other} & {c.run_id for c in first}


async def test_a_pollers_memo_is_replaced_by_its_next_poll(
    client: FloClient, raw: aioredis.Redis
) -> None:

    await setup(client)
    await client.action.invoke_many("job", [b"x"] * 30)
    polls = action_keys(client.namespace, "job").polls
    held = []
    for n in range(10):  # one poller, ten polls, each reply received
        opts = WorkerAwaitOptions(block_ms=0, poll_id=f"poller-a#{n}")
        held.append(await client.worker.await_tasks("w1", ["job"], 2, opts))
    assert await raw.hlen(polls) == 1  # memos grow with pollers, not with claims
    # The latest poll, retried as if its reply was lost, gets the same runs back...
    latest = WorkerAwaitOptions(block_ms=0, poll_id="poller-a#9")
    again = await client.worker.await_tasks("w1", ["job"], 2, latest)
    assert [(c.run_id, c.token) for c in again] == [(c.run_id, c.token) for c in held[9]]
    # ...an earlier one (its reply arrived: the poller moved on) claims afresh.
    early = WorkerAwaitOptions(block_ms=0, poll_id="poller-a#3")
    fresh = await client.worker.await_tasks("w1", ["job"], 2, early)
    assert not {c.run_id for c in fresh} & {c.run_id for batch in held for c in batch}
    # An empty poll of the poller drops its memo.
    await client.action.delete("job")
    await setup(client)
    await client.action.invoke("job", b"x")
    await client.worker.await_tasks("w1", ["job"], 1, WorkerAwaitOptions(block_ms=0, poll_id="p#1"))
    assert await raw.hlen(polls) == 1
    await client.worker.await_tasks("w1", ["job"], 1, WorkerAwaitOptions(block_ms=0, poll_id="p#2"))
    assert await raw.hlen(polls) == 0


async def test_a_poll_without_an_id_keeps_no_memo(client: FloClient, raw: aioredis.Redis) -> None:

    await setup(client)
    await client.action.invoke_many("job", [b"x"] * 5)
    for _ in range(5):
        await client.worker.await_task("w1", ["job"], WorkerAwaitOptions(block_ms=0))
    assert await raw.hlen(action_keys(client.namespace, "job").polls) == 0


async def test_a_poll_id_whose_runs_are_finished_claims_afresh(client: FloClient) -> None:
    await setup(client)
    for _ in range(2):
        await client.action.invoke("job", b"x")
    opts = WorkerAwaitOptions(block_ms=0, poll_id="poll-1")
    [first] = await client.worker.await_tasks("w1", ["job"], 1, opts)
    await client.worker.complete("w1", "job", first.run_id, b"")
    [second] = await client.worker.await_tasks("w1", ["job"], 1, opts)
    assert second.run_id != first.run_id
    # A blocking poll reusing the id is not stuck on the finished hand-out either.
    await client.worker.complete("w1", "job", second.run_id, b"")
    run_id = (await client.action.invoke("job", b"x")).run_id
    again = await client.worker.await_tasks(
        "w1", ["job"], 1, WorkerAwaitOptions(block_ms=20_000, poll_id="poll-1")
    )
    assert [c.run_id for c in again] == [run_id]


async def test_runs_behind_a_full_window_of_unmatched_labels_are_still_reached(
    client: FloClient,
) -> None:
    from flo_redis.actions.claims import LABEL_SCAN

    await client.action.register("mixed")
    await client.worker.register("plain", ["mixed"])
    gpu_only = ActionInvokeOptions(labels={"gpu": True})
    await client.action.invoke_many("mixed", [b"gpu"] * (LABEL_SCAN + 1), gpu_only)
    plain = (await client.action.invoke("mixed", b"plain")).run_id
    got = await client.worker.await_task("plain", ["mixed"], WorkerAwaitOptions(block_ms=0))
    assert got.task is not None and got.task.task_id == plain


async def test_a_claim_looks_past_the_runs_it_cannot_take_within_the_head(
    client: FloClient,
) -> None:
    """A claim first reads as many runs as it wants; runs it may not take (labels it
    lacks) at the head do not make it come back short while matching ones wait behind
    them in the same window, and the runs it skipped stay queued, in order."""
    await client.action.register("mixed")
    await client.worker.register("plain", ["mixed"])
    gpu_only = ActionInvokeOptions(labels={"gpu": True})
    gpu = await client.action.invoke_many("mixed", [b"gpu"] * 3, gpu_only)
    plain = await client.action.invoke_many("mixed", [f"{i}".encode() for i in range(5)])
    taken = await client.worker.await_tasks("plain", ["mixed"], 3, WorkerAwaitOptions(block_ms=0))
    assert [t.run_id for t in taken] == [r.run_id for r in plain[:3]]
    await client.worker.register("gpu", ["mixed"], WorkerRegisterOptions(metadata='{"gpu": true}'))
    held = await client.worker.await_tasks("gpu", ["mixed"], 10, WorkerAwaitOptions(block_ms=0))
    assert [t.run_id for t in held] == [r.run_id for r in gpu] + [r.run_id for r in plain[3:]]
