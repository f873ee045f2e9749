"""Runs that depend on runs, step by step through the scripts (docs/flows.md): a child
waits for its parents, becomes ready once, follows each parent's failure by its policy,
comes back when a failed parent is retried and completes, and leaves nothing behind."""

from __future__ import annotations

from typing import Any

import pytest
from graph_steps import settle, setup, take

from flo_redis import (
    ActionInvokeOptions,
    ConflictError,
    FloClient,
    NotFoundError,
    RunStatus,
    ValidationError,
    WorkerFailOptions,
)
from flo_redis._wire.keys import action_keys
from flo_redis.actions import graph
from flo_redis.actions.graph import deps_request
from flo_redis.types import Dependency


async def run_one(client: FloClient, action: str, result: bytes = b"ok") -> str:
    task = await take(client, action)
    assert task is not None, f"no run of {action} ready"
    await client.worker.complete("w", action, task.task_id, result)
    await client.action.forward(action)
    return task.task_id


async def fail_one(client: FloClient, action: str) -> str:
    task = await take(client, action)
    assert task is not None, f"no run of {action} ready"
    await client.worker.fail("w", action, task.task_id, "boom", WorkerFailOptions(retry=False))
    await client.action.forward(action)
    return task.task_id


async def invoke(client: FloClient, action: str, *parents: str | Dependency) -> str:
    opts = ActionInvokeOptions(depends_on=list(parents))
    return (await client.action.invoke(action, b"in", opts)).run_id


async def test_a_child_waits_for_every_parent_then_runs_once(client: FloClient) -> None:
    await setup(client, "a", "b")
    p1 = (await client.action.invoke("a", b"1")).run_id
    p2 = (await client.action.invoke("a", b"2")).run_id
    child = await invoke(client, "b", p1, p2)
    status = await client.action.status(child)
    assert (status.status, status.parents, status.waiting_on) == (RunStatus.PENDING, 2, 2)
    assert await take(client, "b") is None  # not ready: both parents run
    await run_one(client, "a", b"r1")
    assert (await client.action.status(child)).waiting_on == 1
    assert await take(client, "b") is None
    await run_one(client, "a", b"r2")
    assert (await client.action.status(child)).waiting_on == 0
    task = await take(client, "b")
    assert task is not None and task.task_id == child
    assert await take(client, "b") is None  # exactly once
    for parent in (p1, p2):
        assert (await client.action.status(parent)).has_dependents
        assert (await client.action.dependents(parent)).items == [child]
    page = await client.action.dependencies(child)
    assert [(p.run_id, p.status) for p in page.items] == [
        (p1, RunStatus.COMPLETED),
        (p2, RunStatus.COMPLETED),
    ]


async def test_a_parent_that_ended_before_the_child_is_told_at_its_invoke(
    client: FloClient,
) -> None:
    await setup(client, "a", "b")
    parent = (await client.action.invoke("a", b"1")).run_id
    await run_one(client, "a")
    child = await invoke(client, "b", parent)
    task = await take(client, "b")
    assert task is not None and task.task_id == child


async def test_failure_policies(client: FloClient) -> None:
    await setup(client, "a", "b")
    parent = (await client.action.invoke("a", b"1")).run_id
    failing = await invoke(client, "b", parent)
    ignoring = await invoke(client, "b", Dependency(parent, "ignore"))
    running = await invoke(client, "b", Dependency(parent, "run"))
    await fail_one(client, "a")
    status = await client.action.status(failing)
    assert status.status == RunStatus.FAILED
    assert status.error_message == f"parent {parent} ended FAILED"
    ready = {(await take(client, "b")).task_id, (await take(client, "b")).task_id}  # type: ignore[union-attr]
    assert ready == {ignoring, running}


async def test_a_cancelled_parent_cancels_its_children_and_theirs(client: FloClient) -> None:
    await setup(client, "a", "b", "c")
    parent = (await client.action.invoke("a", b"1")).run_id
    child = await invoke(client, "b", parent)
    grandchild = await invoke(client, "c", child)
    await client.action.cancel(parent)
    await client.action.forward("b")
    assert (await client.action.status(child)).status == RunStatus.CANCELLED
    assert (await client.action.status(grandchild)).status == RunStatus.CANCELLED


async def test_a_failed_parent_retried_and_completed_brings_its_children_back(
    client: FloClient,
) -> None:
    await setup(client, "a", "b")
    parent = (await client.action.invoke("a", b"1")).run_id
    child = await invoke(client, "b", parent)
    await fail_one(client, "a")
    assert (await client.action.status(child)).status == RunStatus.FAILED
    await client.action.requeue(parent)
    await run_one(client, "a")
    status = await client.action.status(child)
    assert (status.status, status.attempt, status.error_message) == (RunStatus.PENDING, 0, None)
    task = await take(client, "b")
    assert task is not None and task.task_id == child


async def test_an_unknown_parent_fails_its_child(client: FloClient) -> None:
    await setup(client, "a", "b")
    child = await invoke(client, "b", "a:99999999")
    status = await client.action.status(child)
    assert status.status == RunStatus.FAILED
    assert status.error_message == "parent a:99999999 not found"


async def test_bad_dependencies_are_refused_before_anything_is_written(client: FloClient) -> None:
    await setup(client, "a", "b")
    parent = (await client.action.invoke("a", b"1")).run_id
    with pytest.raises(ValidationError, match="twice"):
        await invoke(client, "b", parent, parent)
    with pytest.raises(NotFoundError):
        await invoke(client, "b", "not a run id")
    with pytest.raises(ValueError, match="on_failure"):
        Dependency(parent, "maybe")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="flow_key"):
        await client.action.invoke("b", b"", ActionInvokeOptions(depends_on=[parent], flow_key="k"))
    assert (await client.action.counts("b")).pending == 0  # type: ignore[attr-defined]


async def test_invoke_many_makes_every_run_wait_for_the_same_parents(client: FloClient) -> None:
    await setup(client, "a", "b")
    parent = (await client.action.invoke("a", b"1")).run_id
    opts = ActionInvokeOptions(depends_on=[parent])
    children = [r.run_id for r in await client.action.invoke_many("b", [b"x"] * 1500, opts)]
    assert await take(client, "b") is None
    counts = await client.action.counts("b")  # type: ignore[attr-defined]
    assert (counts.awaiting_parents, counts.pending) == (1500, 0)
    listed: list[str] = []
    after = None
    while True:  # runs invoked together are listed together, in the order invoked
        page = await client.action.dependents(parent, after, count=400)
        listed += page.items
        if (after := page.after) is None:
            break
    assert listed == children
    await run_one(client, "a")
    # The parent's end is one message to each group of children (1,000 and 500); each
    # group's queue takes it to its members a page at a time.
    while await client.action.forward("a") + await client.action.forward("b"):
        pass
    counts = await client.action.counts("b")  # type: ignore[attr-defined]
    assert (counts.awaiting_parents, counts.pending) == (0, 1500)
    taken = set()
    while (task := await take(client, "b")) is not None:
        taken.add(task.task_id)
    assert taken == set(children)


async def test_runs_invoked_together_fail_come_back_and_run_as_one(client: FloClient) -> None:
    # 1,000 runs of one invoke_many wait as one group: a parent's end reaches each of them
    # (in one call), as it would each run invoked alone.
    await setup(client, "a", "b")
    done = (await client.action.invoke("a", b"1")).run_id
    await run_one(client, "a")
    parent = (await client.action.invoke("a", b"2")).run_id
    deps = [Dependency(done), Dependency(parent)]
    made = await client.action.invoke_many("b", [b"x"] * 1000, ActionInvokeOptions(depends_on=deps))
    members = [r.run_id for r in made]
    await settle(client, "a", "b")
    for member in (members[0], members[-1]):
        status = await client.action.status(member)
        assert (status.status, status.parents, status.waiting_on) == (RunStatus.PENDING, 2, 1)
        page = await client.action.dependencies(member)
        assert [(p.run_id, p.status) for p in page.items] == sorted(
            [(done, RunStatus.COMPLETED), (parent, None)]
        )
    await fail_one(client, "a")
    await settle(client, "a", "b")
    counts = await client.action.counts("b")  # type: ignore[attr-defined]
    assert (counts.awaiting_parents, counts.failed) == (0, 1000)
    status = await client.action.status(members[-1])
    assert status.status == RunStatus.FAILED
    assert status.error_message == f"parent {parent} ended FAILED"
    await client.action.requeue(parent)
    await run_one(client, "a")
    await settle(client, "a", "b")
    counts = await client.action.counts("b")  # type: ignore[attr-defined]
    assert (counts.failed, counts.pending) == (0, 1000)
    status = await client.action.status(members[500])
    assert (status.status, status.waiting_on, status.error_message) == (RunStatus.PENDING, 0, None)
    taken = set()
    while (task := await take(client, "b")) is not None:
        taken.add(task.task_id)
    assert taken == set(members)  # each once


async def test_a_run_of_a_group_may_wait_for_more_parents_of_its_own(client: FloClient) -> None:
    await setup(client, "a", "b")
    parent = (await client.action.invoke("a", b"1")).run_id
    opts = ActionInvokeOptions(depends_on=[parent])
    first, second = [r.run_id for r in await client.action.invoke_many("b", [b"x"] * 2, opts)]
    await run_one(client, "a")
    await settle(client, "a", "b")
    task = await take(client, "b")
    assert task is not None and task.task_id == first
    more = (await client.action.invoke("a", b"2")).run_id
    keys = action_keys(client.namespace, "b")

    async def wait_for(*parents: str) -> None:  # as a handler returning WaitFor does
        deps = deps_request(list(parents), None)
        await graph.suspend(client.session, keys, first, task.token, "w", deps)

    with pytest.raises(ConflictError):  # its group waits for that one already
        await wait_for(parent)
    await wait_for(more)
    status = await client.action.status(first)
    assert (status.status, status.parents, status.waiting_on) == (RunStatus.PENDING, 2, 1)
    page = await client.action.dependencies(first)
    assert sorted(p.run_id for p in page.items) == sorted([parent, more])
    assert (await client.action.dependents(more)).items == [first]
    await run_one(client, "a")
    await settle(client, "a", "b")
    ready = {t.task_id for t in [await take(client, "b"), await take(client, "b")] if t}
    assert ready == {first, second}


async def test_a_forgotten_group_leaves_no_graph_entry(client: FloClient, raw: Any) -> None:
    await setup(client, "a", "b")
    parent = (await client.action.invoke("a", b"1")).run_id
    opts = ActionInvokeOptions(depends_on=[parent])
    await client.action.invoke_many("b", [b"x"] * 3, opts)
    await run_one(client, "a")
    await settle(client, "a", "b")
    for _ in range(3):
        await run_one(client, "b")
    await client.action.purge("b", "completed")
    await settle(client, "a", "b")
    keys = action_keys(client.namespace, "b")
    assert await raw.exists(keys.graph, keys.graph_idx, keys.outbox, keys.waiting) == 0


async def test_a_groups_newer_change_takes_over_from_one_half_carried(
    client: FloClient, raw: Any
) -> None:
    # A parent's end reaches the 1,000 runs of one group (a call's share) at once and
    # leaves those of the other to a message of the groups' queue; a second parent's end
    # before that message is carried replaces it, and every run ends as the newer change
    # says.
    await setup(client, "a", "b")
    first = (await client.action.invoke("a", b"1")).run_id
    second = (await client.action.invoke("a", b"2")).run_id
    opts = ActionInvokeOptions(depends_on=[first, second])
    members = [r.run_id for r in await client.action.invoke_many("b", [b"x"] * 2000, opts)]
    await settle(client, "a", "b")
    await run_one(client, "a")  # the first parent completes; "b" is not forwarded yet
    keys = action_keys(client.namespace, "b")
    sweeps = [m for m in await raw.zrange(keys.outbox, 0, -1) if m.startswith(b"w\x00")]
    assert len(sweeps) == 1  # the other group, to carry
    waiting_on = {(await client.action.status(m)).waiting_on for m in (members[0], members[-1])}
    assert waiting_on == {1, 2}  # one group took the change in, the other not yet
    await fail_one(client, "a")  # the second fails: a newer change
    now = [m for m in await raw.zrange(keys.outbox, 0, -1) if m.startswith(b"w\x00")]
    assert len(now) == 1 and now != sweeps  # the older message replaced
    await settle(client, "a", "b")
    counts = await client.action.counts("b")  # type: ignore[attr-defined]
    assert (counts.awaiting_parents, counts.failed) == (0, 2000)
    for member in (members[0], members[-1]):
        status = await client.action.status(member)
        assert (status.status, status.waiting_on) == (RunStatus.FAILED, 0)
        assert status.error_message == f"parent {second} ended FAILED"
