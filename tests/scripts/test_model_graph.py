"""A model that proves it: random histories of runs that depend on runs across three
actions, against real Redis, checked against a pure Python model of the documented
semantics (``ActionInvokeOptions.depends_on``, :mod:`flo_redis.types.graph`).

Steps: invoke a run with parents (existing runs, each with a random ``on_failure``;
sometimes a run id no run has), or two or three runs together with the same parents
(``invoke_many``: they wait as one group), a run waiting for every run of such a group
(it waits for the group as a whole), take a ready run and complete it or fail it for good,
cancel a waiting or ready run, re-queue a failed run, forward an action's outbox — any
number of times, or not at all: messages may lie in the outboxes as long as they like.

The model holds what must be true once forwarding catches up: a run waits while a parent
has not ended (as it was told: a parent re-queued stays ended until it ends again); a
parent's failure (FAILED, CANCELLED, or no such run) ends a child of the ``fail`` policy
FAILED (CANCELLED for a cancelled parent), naming that parent, and the end cascades;
``ignore`` / ``run`` children run regardless; a child ended by parents gets a fresh set
of attempts once none of its ``fail`` parents is failed (re-queued and completed). The
``settle`` step forwards every outbox until nothing moves, then checks each run: its
status; a waiting run in ``waiting`` and never claimable, a ready one claimable once;
``parents``, ``waiting_on``, ``has_dependents``; the error naming a failing parent;
``dependencies()`` / ``dependents()`` paged through with small counts, edge for edge.
Between settles, every run taken must be one the model has ready, once per set of
attempts. Where the semantics leave a choice (two failing parents, one cancelled and one
failed: the child ends by the one it heard of first) the model allows each, but the
error must name a failing parent and the status agree with it. ``FLO_MODEL_EXAMPLES`` /
``FLO_MODEL_STEPS`` as in ``tests/support/model_machine.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule
from model_machine import ClientMachine, run_model

from flo_redis import (
    ActionInvokeOptions,
    ActionRegisterOptions,
    ConflictError,
    FloClient,
    RunStatus,
    WorkerAwaitOptions,
    WorkerFailOptions,
)
from flo_redis._wire.keys import ActionKeys, action_keys
from flo_redis.types import Dependency, GraphPage
from flo_redis.types.graph import OnFailure

pytestmark = pytest.mark.slow  # a Hypothesis model: many steps against Redis

ACTIONS = ("a", "b", "c")
POLICIES: tuple[OnFailure, ...] = ("fail", "ignore", "run")
MAX_RUNS = 14
HOUR_MS = 3_600_000
NOW = WorkerAwaitOptions(block_ms=0)
FAILING = frozenset({RunStatus.FAILED, RunStatus.CANCELLED})
SETTLE_PASSES = 30  # forwarding passes over every outbox before it must be quiet
Ended = frozenset[RunStatus]


@dataclass
class Run:
    """The model of one run. ``own``: what the run itself did in its current set of
    attempts (pending: not taken yet). ``ended``: how it last ended, as its children are
    told (None: never; a set: the ends the documented semantics allow). ``views``: how
    each parent ended as this run was told (None: not ended when it registered, and no
    end since; an unknown parent: FAILED, for good)."""

    action: str
    parents: list[tuple[str, OnFailure]]
    views: dict[str, Ended | None]
    own: str = "pending"  # pending | completed | failed | cancelled
    ended: Ended | None = None
    failing: list[str] = field(default_factory=list)  # fail-policy parents that end it
    requeued: bool = False  # a re-queued run keeps its last error while it runs again
    heard: dict[str, set[RunStatus]] = field(default_factory=dict)  # ends told while ended


class GraphModel:
    def __init__(self) -> None:
        self.runs: dict[str, Run] = {}  # in invoke order: parents before children
        self.unknown: set[str] = set()

    def ended_by_parents(self, run: Run) -> bool:
        return run.own == "pending" and bool(run.failing)

    def waiting_on(self, run: Run) -> int:
        return sum(1 for p, _ in run.parents if p not in self.unknown and run.views[p] is None)

    def ready(self, run: Run) -> bool:
        return run.own == "pending" and not run.failing and self.waiting_on(run) == 0

    def waiting(self, run: Run) -> bool:
        return run.own == "pending" and not run.failing and self.waiting_on(run) > 0

    def end(self, run_id: str, ends: Ended) -> None:
        """``run_id`` ends: each of its children is told, and the news cascades."""
        self.runs[run_id].ended = ends
        self.tell(run_id)
        self.propagate()

    def tell(self, run_id: str) -> None:
        for child in self.children(run_id):
            self.runs[child].views[run_id] = self.runs[run_id].ended

    def propagate(self) -> None:
        """Every end told to every child, in invoke order (a parent is older than its
        children, so one pass carries a cascade through)."""
        for run_id, run in self.runs.items():
            if run.own != "pending":
                continue
            failing = []
            for parent, policy in run.parents:
                seen = run.views[parent]
                if policy == "fail" and seen is not None and seen <= FAILING:
                    failing.append(parent)
            if failing:
                ends: set[RunStatus] = set()
                for p in failing:
                    ends |= run.views[p] or frozenset()
                # Still ended by parents: it may keep the end it had (it heard one first).
                was = run.ended
                run.ended = frozenset(ends if not run.failing else (was or frozenset()) | ends)
                if run.ended != was or not run.failing:
                    self.tell(run_id)
                for p in failing:
                    run.heard.setdefault(p, set()).update(run.views[p] or ())
            else:
                run.heard.clear()
            run.failing = failing  # none left: it is back, with a fresh set of attempts

    def children(self, parent: str) -> list[str]:
        return sorted(r for r, run in self.runs.items() if any(p == parent for p, _ in run.parents))


class GraphMachine(ClientMachine):
    def __init__(self, redis_url: str) -> None:
        super().__init__(redis_url, "graph")
        self.model = GraphModel()
        self.keys: dict[str, ActionKeys] = {a: action_keys(self.namespace, a) for a in ACTIONS}
        self.dirty = False  # messages may lie in an outbox since the last settle
        self.groups: list[list[str]] = []  # the runs of each invoke_many, in order
        for action in ACTIONS:
            opts = ActionRegisterOptions(timeout_ms=HOUR_MS)
            self.run(self.client.action.register(action, options=opts))
        self.run(self.client.worker.register("w", list(ACTIONS)))

    # --- steps ---------------------------------------------------------------------

    @precondition(lambda self: len(self.model.runs) < MAX_RUNS)
    @rule(action=st.sampled_from(ACTIONS), data=st.data(), unknown=st.booleans())
    def invoke(self, action: str, data: st.DataObject, unknown: bool) -> None:
        deps, views = self._parents(data, unknown)
        opts = ActionInvokeOptions(depends_on=[Dependency(p, pol) for p, pol in deps])
        run_id = self.run(self.client.action.invoke(action, b"in", opts)).run_id
        assert run_id not in self.model.runs
        self.model.runs[run_id] = Run(action, deps, views)
        self.model.propagate()
        self.dirty = True

    @precondition(lambda self: len(self.model.runs) < MAX_RUNS)
    @rule(
        action=st.sampled_from(ACTIONS), n=st.integers(2, 3), data=st.data(), unknown=st.booleans()
    )
    def invoke_many(self, action: str, n: int, data: st.DataObject, unknown: bool) -> None:
        """Runs invoked together with the same parents: they wait as one group."""
        deps, views = self._parents(data, unknown)
        opts = ActionInvokeOptions(depends_on=[Dependency(p, pol) for p, pol in deps])
        made = self.run(self.client.action.invoke_many(action, [b"in"] * n, opts))
        for result in made:
            assert result.run_id not in self.model.runs
            self.model.runs[result.run_id] = Run(action, list(deps), dict(views))
        if deps:
            self.groups.append([r.run_id for r in made])
        self.model.propagate()
        self.dirty = True

    @precondition(lambda self: len(self.model.runs) < MAX_RUNS and self.groups)
    @rule(action=st.sampled_from(ACTIONS), data=st.data(), many=st.booleans())
    def invoke_after_a_group(self, action: str, data: st.DataObject, many: bool) -> None:
        """A run (or two invoked together) waiting for every run of an earlier group
        under one policy, and perhaps for more: it waits for the group as a whole."""
        members = data.draw(st.sampled_from(self.groups))
        policy = data.draw(st.sampled_from(POLICIES))
        deps, views = self._parents(data, False, [(m, policy) for m in members])
        opts = ActionInvokeOptions(depends_on=[Dependency(p, pol) for p, pol in deps])
        inputs = [b"in"] * (2 if many else 1)
        made = self.run(self.client.action.invoke_many(action, inputs, opts))
        for result in made:
            assert result.run_id not in self.model.runs
            self.model.runs[result.run_id] = Run(action, list(deps), dict(views))
        if many:
            self.groups.append([r.run_id for r in made])
        self.model.propagate()
        self.dirty = True

    def _parents(
        self,
        data: st.DataObject,
        unknown: bool,
        given: list[tuple[str, OnFailure]] | None = None,
    ) -> tuple[list[tuple[str, OnFailure]], dict[str, Ended | None]]:
        """Parents for a new run (existing runs; sometimes a run id no run has; ``given``
        and perhaps one more) and how the invoke will have found each ended."""
        known = list(self.model.runs)
        if given is not None:
            others = [p for p in known if p not in dict(given)]
            more = data.draw(st.lists(st.sampled_from(others), max_size=1)) if others else []
            deps = given + [(p, data.draw(st.sampled_from(POLICIES))) for p in more]
        else:
            parents = (
                data.draw(st.lists(st.sampled_from(known), unique=True, max_size=3))
                if known
                else []
            )
            deps = [(p, data.draw(st.sampled_from(POLICIES))) for p in parents]
        if unknown and data.draw(st.integers(0, 3)) == 0:
            ghost = f"{data.draw(st.sampled_from(ACTIONS))}:{900_000 + len(self.model.unknown)}"
            self.model.unknown.add(ghost)
            deps.append((ghost, data.draw(st.sampled_from(POLICIES))))
        # The invoke registered the run on each parent at once (it forwards its own
        # outbox): it knows a parent as ended if the parent's queue had it ended then (a
        # parent that came back since, the news not carried yet, counts as ended), or
        # will be told of the end the model has for it.
        views: dict[str, Ended | None] = {}
        for p, _ in deps:
            if p in self.model.unknown:
                views[p] = frozenset({RunStatus.FAILED})
                continue
            now = self.run(self.client.action.status(p)).status
            views[p] = None if now in (RunStatus.PENDING, RunStatus.RUNNING) else frozenset({now})
            parent = self.model.runs[p]
            expected = None if parent.own == "pending" and not parent.failing else parent.ended
            agrees = (
                views[p] is None if expected is None else views[p] is not None and now in expected
            )
            assert agrees or self.dirty, (p, now, parent)  # news on its way only
            if expected is not None:
                views[p] = expected  # the parent's end is on its way to it, if not there
        return deps, views

    @rule(action=st.sampled_from(ACTIONS), complete=st.booleans())
    def take(self, action: str, complete: bool) -> None:
        task = self.run(self.client.worker.await_task("w", [action], NOW)).task
        if task is None:
            return
        run = self.model.runs.get(task.task_id)
        # A waiting child is never claimable; a ready run is taken once per set of attempts.
        assert run is not None and self.model.ready(run), (task.task_id, run)
        if complete:
            self.run(self.client.worker.complete("w", action, task.task_id, b"out"))
            run.own = "completed"
            self.model.end(task.task_id, frozenset({RunStatus.COMPLETED}))
        else:
            fail = WorkerFailOptions(retry=False)
            self.run(self.client.worker.fail("w", action, task.task_id, "boom", fail))
            run.own = "failed"
            self.model.end(task.task_id, frozenset({RunStatus.FAILED}))
        self.dirty = True

    @precondition(lambda self: any(r.own == "pending" for r in self.model.runs.values()))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        """Cancel a run the model has waiting or ready. Redis may not have been told yet
        that its failed parent came back and completed: then it is still ended there,
        the cancel is refused, and the run comes back when the news arrives."""
        live = [r for r, run in self.model.runs.items() if run.own == "pending" and not run.failing]
        if not live:
            return
        run_id = data.draw(st.sampled_from(live))
        try:
            self.run(self.client.action.cancel(run_id))
        except ConflictError:
            status = self.run(self.client.action.status(run_id)).status
            assert self.dirty and status in FAILING, (run_id, status)
            return
        run = self.model.runs[run_id]
        run.own = "cancelled"
        self.model.end(run_id, frozenset({RunStatus.CANCELLED}))
        self.dirty = True

    @precondition(lambda self: any(r.own == "failed" for r in self.model.runs.values()))
    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        failed = [r for r, run in self.model.runs.items() if run.own == "failed"]
        run_id = data.draw(st.sampled_from(failed))
        self.run(self.client.action.requeue(run_id))
        run = self.model.runs[run_id]
        run.own, run.requeued = "pending", True  # ready; its children still know it FAILED
        self.model.propagate()
        self.dirty = True

    @rule(action=st.sampled_from(ACTIONS), times=st.integers(1, 3))
    def forward(self, action: str, times: int) -> None:
        for _ in range(times):
            self.run(self.client.action.forward(action))

    @rule(count=st.integers(1, 3))
    def settle(self, count: int) -> None:
        self._settle()
        self._check(count)

    # --- what must hold ------------------------------------------------------------

    @invariant()
    def what_a_run_did_itself_shows_at_once(self) -> None:
        want = {"completed": RunStatus.COMPLETED, "failed": RunStatus.FAILED}
        want["cancelled"] = RunStatus.CANCELLED
        for run_id, run in self.model.runs.items():
            if run.own in want:
                assert self.run(self.client.action.status(run_id)).status == want[run.own], run_id

    def teardown(self) -> None:
        try:
            self.settle(count=2)  # the history ends: forwarding catches up at last
        finally:
            super().teardown()

    def _settle(self) -> None:
        for _ in range(SETTLE_PASSES):
            moved = sum(self.run(self.client.action.forward(a)) for a in ACTIONS)
            if moved == 0:
                break
        else:
            raise AssertionError(f"the outboxes still move after {SETTLE_PASSES} passes")
        for action in ACTIONS:
            assert self.run(self.raw.zcard(self.keys[action].outbox)) == 0, action
        self.dirty = False

    def _pages(self, run_id: str, count: int, dependents: bool) -> list[object]:
        items: list[object] = []
        after: str | None = None
        for _ in range(MAX_RUNS + 2):
            read = self.client.action.dependents if dependents else self.client.action.dependencies
            page: GraphPage = self.run(read(run_id, after, count))
            assert len(page.items) <= count
            items += page.items
            after = page.after
            if after is None:
                return items
        raise AssertionError(f"pages of {run_id} do not end")

    def _check(self, count: int) -> None:
        m = self.model
        for run_id, run in m.runs.items():
            st_ = self.run(self.client.action.status(run_id))
            keys = self.keys[run.action]
            in_waiting = self.run(self.raw.zscore(keys.waiting, run_id)) is not None
            claimable = self.run(self.raw.zscore(keys.pending, run_id)) is not None
            where = (run_id, run, st_.status, st_.error_message)
            if m.ended_by_parents(run):
                assert run.ended is not None and st_.status in run.ended, where
                self._check_named_parent(run_id, run, st_.status, st_.error_message)
            elif run.own == "pending":
                assert st_.status == RunStatus.PENDING, where
                assert run.requeued or st_.error_message is None, where
                assert in_waiting == m.waiting(run), where
                assert claimable == m.ready(run), where  # a waiting child never is
            elif run.own == "failed":
                assert st_.error_message == "boom", where
            if run.own != "pending" or run.failing:
                assert not in_waiting and not claimable, where
            assert st_.parents == len(run.parents), where
            assert st_.waiting_on == m.waiting_on(run), (where, st_.waiting_on)
            children = m.children(run_id)
            assert st_.has_dependents == bool(children), where
            # In the index's order: the runs of a group together, in invoke order.
            listed = self._pages(run_id, count, dependents=True)
            assert sorted(listed) == children and len(set(listed)) == len(listed), where
            got = [
                (p.run_id, p.on_failure, p.status, p.found)
                for p in self._pages(run_id, count, dependents=False)  # type: ignore[attr-defined]
            ]
            # In id order, but the runs of a group waited for as a whole together.
            assert sorted(g[:2] for g in got) == sorted(run.parents), (where, got)
            for pid, _, status, found in got:
                assert found == (pid not in m.unknown), (where, pid)
                seen = None if pid in m.unknown else run.views[pid]
                if seen is None:
                    assert status is None, (where, pid, status)
                else:
                    assert status in seen, (where, pid, status, seen)

    def _check_named_parent(
        self, run_id: str, run: Run, status: RunStatus, error: str | None
    ) -> None:
        """A run ended by a parent names a parent that failed it, and ends as that
        parent did: CANCELLED for a cancelled parent, else FAILED."""
        named = [p for p in run.failing if error is not None and error.startswith(f"parent {p} ")]
        assert named, (run_id, error, run.failing)
        parent = named[0]
        if parent in self.model.unknown:
            assert error == f"parent {parent} not found", (run_id, error)
            assert status == RunStatus.FAILED, (run_id, status)
            return
        assert error in {f"parent {parent} ended {s.name}" for s in FAILING}, (run_id, error)
        told = error.rsplit(" ", 1)[1] if error else ""
        assert RunStatus[told] in run.heard[parent], (run_id, error, run.heard)  # as told
        assert (status == RunStatus.CANCELLED) == (told == "CANCELLED"), (run_id, status, error)


def test_run_dependencies_follow_their_model(redis_url: str) -> None:
    run_model(lambda: GraphMachine(redis_url))


@pytest.mark.cluster
def test_run_dependencies_follow_their_model_across_a_clusters_slots(cluster_url: str) -> None:
    """The same histories on the 3-master cluster: the three actions' queues lie in
    slots of their own, most often on different masters, so each script goes to its
    queue's master by SHA and every edge between queues crosses slots."""
    run_model(lambda: GraphMachine(cluster_url))


@pytest.mark.parametrize("policy", POLICIES)
async def test_an_end_carried_after_a_requeue_is_not_told_to_a_child_registered_since(
    client: FloClient, policy: OnFailure
) -> None:
    """The smallest history the model found: a parent with a child fails, is re-queued
    before its outbox is forwarded, and a second child registers on it, running again.
    That child has been told of no end of the parent: once the old end is carried it
    still waits for the parent (and is not failed, nor made ready, by it)."""
    for action in ("a", "b"):
        await client.action.register(action)
    await client.worker.register("w", ["a", "b"])
    parent = (await client.action.invoke("a", b"")).run_id
    first = ActionInvokeOptions(depends_on=[Dependency(parent, "ignore")])
    await client.action.invoke("b", b"", first)
    task = (await client.worker.await_task("w", ["a"], NOW)).task
    assert task is not None and task.task_id == parent
    await client.worker.fail("w", "a", parent, "boom", WorkerFailOptions(retry=False))
    await client.action.requeue(parent)  # runs again; its FAILED end still in a's outbox
    second = ActionInvokeOptions(depends_on=[Dependency(parent, policy)])
    child = (await client.action.invoke("b", b"", second)).run_id
    await client.action.forward("a")
    assert (await client.action.status(parent)).status == RunStatus.PENDING
    status = await client.action.status(child)
    assert (status.status, status.waiting_on, status.error_message) == (RunStatus.PENDING, 1, None)
    assert (await client.action.dependencies(child)).items[0].status is None


async def test_a_child_still_ended_by_a_parent_names_that_parent(client: FloClient) -> None:
    """The smallest history the model found: a child of two ``fail`` parents, one failed
    and one cancelled, ends by the failed one; that one is re-queued and completes. The
    child stays ended, by the parent still cancelled: its error names that parent (and
    it is CANCELLED, as a child of a cancelled parent is), not the one that completed."""
    for action in ("a", "b"):
        await client.action.register(action)
    await client.worker.register("w", ["a", "b"])
    failed = (await client.action.invoke("b", b"")).run_id
    cancelled = (await client.action.invoke("b", b"")).run_id
    task = (await client.worker.await_task("w", ["b"], NOW)).task
    assert task is not None and task.task_id == failed
    await client.worker.fail("w", "b", failed, "boom", WorkerFailOptions(retry=False))
    await client.action.cancel(cancelled)
    opts = ActionInvokeOptions(depends_on=[failed, cancelled])
    child = (await client.action.invoke("a", b"", opts)).run_id
    assert (await client.action.status(child)).error_message == f"parent {failed} ended FAILED"
    await client.action.requeue(failed)
    task = (await client.worker.await_task("w", ["b"], NOW)).task
    assert task is not None and task.task_id == failed
    await client.worker.complete("w", "b", failed, b"ok")
    await client.action.forward("b")
    status = await client.action.status(child)
    assert status.error_message == f"parent {cancelled} ended CANCELLED"
    assert status.status == RunStatus.CANCELLED
