"""A run that waits for every run of one ``invoke_many`` (docs/flows.md, "Fan-in"): it
waits for their group as a whole, and behaves exactly as if it waited for each run.

One state and one index entry for the group, not one per run; a run's end is one change
of its group's record, and the group's one message tells the runs waiting for it how the
members stand. These tests go through the scripts step by step: the join becomes ready
once after the last member ends, follows a member's failure by its policy (naming the
member), comes back when that member is retried and completes, lists its parents run by
run, is listed among each member's dependents, and leaves nothing behind."""

from __future__ import annotations

from typing import Any

import pytest
from graph_steps import settle, setup, take

from flo_redis import (
    ActionInvokeOptions,
    ConflictError,
    FloClient,
    RunStatus,
    WorkerFailOptions,
)
from flo_redis._wire.keys import action_keys
from flo_redis.actions import graph
from flo_redis.actions.graph import deps_request
from flo_redis.types import Dependency


async def finish(client: FloClient, action: str, n: int, fail: set[str] | None = None) -> list[str]:
    """Take ``n`` runs of ``action`` and complete each (fail those in ``fail``)."""
    ended = []
    for _ in range(n):
        task = await take(client, action)
        assert task is not None, f"no run of {action} ready"
        if fail and task.task_id in fail:
            opts = WorkerFailOptions(retry=False)
            await client.worker.fail("w", action, task.task_id, "boom", opts)
        else:
            await client.worker.complete("w", action, task.task_id, b"ok")
        ended.append(task.task_id)
    return ended


async def fan_out(client: FloClient, n: int) -> list[str]:
    """A root run of "a" and ``n`` runs of "b" invoked together to wait for it: theirs."""
    root = (await client.action.invoke("a", b"r")).run_id
    opts = ActionInvokeOptions(depends_on=[root])
    made = await client.action.invoke_many("b", [b"x"] * n, opts)
    return [r.run_id for r in made]


async def join_on(client: FloClient, members: list[str], on_failure: Any = "fail") -> str:
    deps = [Dependency(m, on_failure) for m in members]
    return (await client.action.invoke("c", b"j", ActionInvokeOptions(depends_on=deps))).run_id


async def joined(client: FloClient, n: int) -> tuple[list[str], str]:
    """``n`` runs of one group, waiting for a root of "a", and a join on them; the root
    completed and its end carried, so the runs are ready."""
    await setup(client, "a", "b", "c", max_retries=0)
    members = await fan_out(client, n)
    join = await join_on(client, members)
    await finish(client, "a", 1)
    await settle(client, "a", "b", "c")
    return members, join


async def test_a_join_on_every_run_of_two_groups_waits_for_the_groups(
    client: FloClient, raw: Any
) -> None:
    await setup(client, "a", "b", "c", max_retries=0)
    members = await fan_out(client, 1500)  # two calls: groups of 1,000 and 500
    join = await join_on(client, members)
    await settle(client, "a", "b", "c")
    keys = action_keys(client.namespace, "c")
    entries = await raw.zrange(keys.graph_idx, 0, -1)
    assert len(entries) == 2  # one per group, not one per run
    status = await client.action.status(join)
    assert (status.status, status.parents, status.waiting_on) == (RunStatus.PENDING, 1500, 1500)
    await finish(client, "a", 1)
    await settle(client, "a", "b", "c")
    await finish(client, "b", 1499)
    await settle(client, "a", "b", "c")
    assert (await client.action.status(join)).waiting_on == 1
    assert await take(client, "c") is None
    page = await client.action.dependencies(join, count=1000)
    assert [p.run_id for p in page.items] == members[:1000]  # invoke order, in its place
    told = {p.status for p in page.items}
    assert told <= {RunStatus.COMPLETED, None} and RunStatus.COMPLETED in told
    await finish(client, "b", 1)
    await settle(client, "a", "b", "c")
    task = await take(client, "c")
    assert task is not None and task.task_id == join
    assert await take(client, "c") is None  # ready once
    listed, after = [], None
    while True:  # pages of 400, one ending inside the first group
        page = await client.action.dependencies(join, after, count=400)
        listed += page.items
        after = page.after
        if after is None:
            break
    assert [p.run_id for p in listed] == members
    assert {p.status for p in listed} == {RunStatus.COMPLETED}
    assert all(p.found and p.on_failure == "fail" for p in listed)
    for member in (members[0], members[1234]):
        assert (await client.action.status(member)).has_dependents
        assert (await client.action.dependents(member)).items == [join]


async def test_a_members_failure_fails_the_join_and_its_retry_brings_it_back(
    client: FloClient,
) -> None:
    members, join = await joined(client, 3)
    await finish(client, "b", 3, fail={members[1]})
    await settle(client, "a", "b", "c")
    status = await client.action.status(join)
    assert status.status == RunStatus.FAILED
    assert status.error_message == f"parent {members[1]} ended FAILED"
    await client.action.requeue(members[1])
    await finish(client, "b", 1)
    await settle(client, "a", "b", "c")
    status = await client.action.status(join)
    assert (status.status, status.waiting_on, status.error_message) == (RunStatus.PENDING, 0, None)
    task = await take(client, "c")
    assert task is not None and task.task_id == join


async def test_a_cancelled_member_cancels_the_join_and_ignore_runs_it_anyway(
    client: FloClient,
) -> None:
    await setup(client, "a", "b", "c", max_retries=0)
    members = await fan_out(client, 3)
    strict = await join_on(client, members)
    lenient = await join_on(client, members, "ignore")
    await client.action.cancel(members[2])
    await finish(client, "a", 1)
    await settle(client, "a", "b", "c")
    status = await client.action.status(strict)
    assert status.status == RunStatus.CANCELLED
    assert status.error_message == f"parent {members[2]} ended CANCELLED"
    assert (await client.action.status(lenient)).waiting_on == 2
    await finish(client, "b", 2)
    await settle(client, "a", "b", "c")
    task = await take(client, "c")
    assert task is not None and task.task_id == lenient
    page = await client.action.dependencies(lenient)
    assert [(p.run_id, p.status) for p in page.items] == [
        (members[0], RunStatus.COMPLETED),
        (members[1], RunStatus.COMPLETED),
        (members[2], RunStatus.CANCELLED),
    ]


async def test_a_join_invoked_after_its_members_ended_is_told_at_once(client: FloClient) -> None:
    await setup(client, "a", "b", "c", max_retries=0)
    members = await fan_out(client, 4)
    await finish(client, "a", 1)
    await settle(client, "a", "b")
    await finish(client, "b", 4, fail={members[3]})
    await settle(client, "a", "b")
    join = await join_on(client, members, "run")
    await settle(client, "a", "b", "c")
    status = await client.action.status(join)
    assert (status.status, status.waiting_on) == (RunStatus.PENDING, 0)
    task = await take(client, "c")
    assert task is not None and task.task_id == join
    results = await client.action.dependencies(join)
    assert [p.status for p in results.items][-1] == RunStatus.FAILED


async def joined_and_ended(client: FloClient, n: int) -> tuple[list[str], str]:
    """``n`` runs of one group and a join on them; the root and the runs completed."""
    members, join = await joined(client, n)
    await finish(client, "b", n)
    await settle(client, "a", "b", "c")
    return members, join


async def test_a_join_cannot_wait_again_for_a_run_its_group_holds(client: FloClient) -> None:
    members, join = await joined_and_ended(client, 2)
    task = await take(client, "c")
    assert task is not None and task.task_id == join
    keys = action_keys(client.namespace, "c")
    with pytest.raises(ConflictError):  # as a handler returning WaitFor does
        deps = deps_request([members[1]], None)
        await graph.suspend(client.session, keys, join, task.token, "w", deps)


async def test_the_ends_of_a_groups_members_are_one_message_due_a_few_ms_on(
    client: FloClient, raw: Any
) -> None:
    # Each member's end is counted in its group's record; the group's one message is
    # due GROUP_TELL_MS after the first end not yet told (later ends leave it there),
    # so a forwarder tells many ends in one step. A forward by hand carries it at once.
    members, join = await joined(client, 5)
    keys = action_keys(client.namespace, "b")
    assert await raw.zcard(keys.outbox) == 0
    seconds, micros = await raw.time()
    before_ms = seconds * 1000 + micros // 1000
    await finish(client, "b", 4)
    [(message, due)] = await raw.zrange(keys.outbox, 0, -1, withscores=True)
    group = f"{members[0]}+5".encode()
    assert message == b"G\0" + group
    assert before_ms + graph.GROUP_TELL_MS <= due <= before_ms + 2 * graph.GROUP_TELL_MS + 1000
    assert await client.action.forward("b") == 1  # due within the window: carried now
    assert (await client.action.status(join)).waiting_on == 1
    await finish(client, "b", 1)
    await settle(client, "a", "b", "c")
    task = await take(client, "c")
    assert task is not None and task.task_id == join


async def test_a_finished_fan_in_leaves_no_graph_entry(client: FloClient, raw: Any) -> None:
    _, join = await joined_and_ended(client, 3)
    await finish(client, "c", 1)
    assert (await client.action.status(join)).status == RunStatus.COMPLETED
    for action in ("c", "b", "a"):
        await client.action.purge(action, "completed")
        await settle(client, "a", "b", "c")
    for action in ("a", "b", "c"):
        keys = action_keys(client.namespace, action)
        assert await raw.exists(keys.graph, keys.graph_idx, keys.outbox, keys.waiting) == 0


async def test_a_group_with_a_member_requeued_is_waited_for_run_by_run(
    client: FloClient, raw: Any
) -> None:
    # A member re-queued after it failed is waited for anew, as by a run invoked on it
    # alone; its group counts its last end, so the join names the runs one by one.
    await setup(client, "a", "b", "c", max_retries=0)
    members = await fan_out(client, 3)
    await finish(client, "a", 1)
    await settle(client, "a", "b")
    await finish(client, "b", 3, fail={members[0]})
    await client.action.requeue(members[0])
    join = await join_on(client, members)
    await settle(client, "a", "b", "c")
    keys = action_keys(client.namespace, "c")
    assert len(await raw.zrange(keys.graph_idx, 0, -1)) == 3  # one per run
    status = await client.action.status(join)
    assert (status.status, status.waiting_on) == (RunStatus.PENDING, 1)
    await finish(client, "b", 1)
    await settle(client, "a", "b", "c")
    task = await take(client, "c")
    assert task is not None and task.task_id == join
