"""Runs that depend on runs, as workers meet them (docs/flows.md): the workers' own
forwarders carry every step, a child reads its parents' results, and a diamond of
actions runs each run once, in order."""

from __future__ import annotations

import json

import pytest
from polling import eventually, registered, running

from flo_redis import ActionContext, ActionInvokeOptions, FloClient, RunStatus
from flo_redis.types import Dependency
from flo_redis.worker import forwarder


async def test_a_diamond_runs_in_order_and_the_join_reads_every_parent(
    client: FloClient,
) -> None:
    worker = client.new_action_worker(block_ms=500, concurrency=8)
    order: list[str] = []
    seen: dict[str, object] = {}

    @worker.action("split")
    async def split(ctx: ActionContext) -> bytes:
        order.append("split")
        return b"10"

    @worker.action("square")
    async def square(ctx: ActionContext) -> bytes:
        page = await ctx.parents()
        order.append("square")
        return str(int(page.items[0].output) ** 2).encode()

    @worker.action("join")
    async def join(ctx: ActionContext) -> bytes:
        page = await ctx.parents(count=1)
        outputs = [r.output for r in page.items]
        while page.after is not None:
            page = await ctx.parents(after=page.after, count=1)
            outputs += [r.output for r in page.items]
        seen["outputs"] = outputs
        order.append("join")
        return json.dumps(sum(int(o) for o in outputs)).encode()

    async with running(worker, ready=registered):
        top = (await client.action.invoke("split", b"")).run_id
        after_top = ActionInvokeOptions(depends_on=[top])
        left = (await client.action.invoke("square", b"", after_top)).run_id
        right = (await client.action.invoke("square", b"", after_top)).run_id
        join_run = (
            await client.action.invoke("join", b"", ActionInvokeOptions(depends_on=[left, right]))
        ).run_id
        status = await client.action.wait(join_run, 15_000)
    assert status.status == RunStatus.COMPLETED and status.output == b"200"
    assert order == ["split", "square", "square", "join"]
    assert seen["outputs"] == [b"100", b"100"]
    for run_id in (top, left, right, join_run):
        assert (await client.action.status(run_id)).attempt == 1


async def test_a_failing_parent_fails_its_child_but_not_one_that_runs_anyway(
    client: FloClient,
) -> None:
    worker = client.new_action_worker(block_ms=500)

    @worker.action("broken")
    async def broken(ctx: ActionContext) -> bytes:
        raise RuntimeError("no luck")

    @worker.action("after")
    async def after(ctx: ActionContext) -> bytes:
        page = await ctx.parents()
        return json.dumps([(r.status.name, r.error_message) for r in page.items]).encode()

    async with running(worker, ready=registered):
        parent = (await client.action.invoke("broken", b"")).run_id
        failing = (
            await client.action.invoke("after", b"", ActionInvokeOptions(depends_on=[parent]))
        ).run_id
        anyway = (
            await client.action.invoke(
                "after", b"", ActionInvokeOptions(depends_on=[Dependency(parent, "run")])
            )
        ).run_id
        failed = await client.action.wait(failing, 15_000)
        ran = await client.action.wait(anyway, 15_000)
    assert failed.status == RunStatus.FAILED
    assert failed.error_message == f"parent {parent} ended FAILED"
    assert ran.status == RunStatus.COMPLETED
    assert json.loads(ran.output or b"") == [["FAILED", "RuntimeError: no luck"]]


async def test_a_child_invoked_while_no_worker_runs_is_released_by_the_upkeep(
    client: FloClient,
) -> None:
    await client.action.register("first")
    await client.action.register("second")
    parent = (await client.action.invoke("first", b"")).run_id
    child = (
        await client.action.invoke("second", b"", ActionInvokeOptions(depends_on=[parent]))
    ).run_id
    worker = client.new_action_worker(block_ms=500)

    @worker.action("first")
    async def first(ctx: ActionContext) -> bytes:
        return b"1"

    @worker.action("second")
    async def second(ctx: ActionContext) -> bytes:
        return b"2"

    async with running(worker, ready=registered):
        status = await client.action.wait(child, 15_000)
    assert status.status == RunStatus.COMPLETED
    await eventually(lambda: client.action.status(parent), lambda s: s.has_dependents)


async def test_a_handler_waits_for_runs_it_made_and_resumes_with_their_results(
    client: FloClient,
) -> None:
    worker = client.new_action_worker(block_ms=500, concurrency=4)
    calls: list[int] = []

    @worker.action("map")
    async def map_part(ctx: ActionContext) -> bytes:
        return str(int(ctx.input()) * 10).encode()

    @worker.action("reduce")
    async def reduce(ctx: ActionContext) -> object:
        page = await ctx.parents()
        calls.append(len(page.items))
        if not page.items:  # first call: make the parts, wait for them, slot given back
            parts = await client.action.invoke_many("map", [b"1", b"2", b"3"])
            return ctx.wait_for([p.run_id for p in parts])
        return sum(int(p.output or b"0") for p in page.items)

    async with running(worker, ready=registered):
        run_id = (await client.action.invoke("reduce", b"")).run_id
        status = await client.action.wait(run_id, 15_000)
    assert status.status == RunStatus.COMPLETED and status.output == b"60"
    assert calls == [0, 3]  # called again once the parts ended, with their results
    assert status.attempt == 1  # waiting spent no attempt
    assert status.parents == 3


async def test_a_fan_in_is_told_as_its_groups_tally_falls_due_not_at_the_upkeep(
    client: FloClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A member's end makes its group's one message due a few milliseconds on, nudging
    # the forwarders only when it was not due that soon already: the forwarder must come
    # back for it then. The upkeep an hour away cannot do it for them.
    monkeypatch.setattr(forwarder, "UPKEEP_S", 3600.0)
    worker = client.new_action_worker(block_ms=500, concurrency=8)

    @worker.action("root")
    async def root(ctx: ActionContext) -> bytes:
        return b""

    @worker.action("leaf")
    async def leaf(ctx: ActionContext) -> bytes:
        return b"1"

    @worker.action("join")
    async def join(ctx: ActionContext) -> bytes:
        return str(len((await ctx.parents(count=1000)).items)).encode()

    async with running(worker, ready=registered):
        top = (await client.action.invoke("root", b"")).run_id
        made = await client.action.invoke_many(
            "leaf", [b""] * 200, ActionInvokeOptions(depends_on=[top])
        )
        leaves = [r.run_id for r in made]
        after_leaves = ActionInvokeOptions(depends_on=leaves)
        join_run = (await client.action.invoke("join", b"", after_leaves)).run_id
        status = await client.action.wait(join_run, 15_000)
    assert (status.status, status.output) == (RunStatus.COMPLETED, b"200")
