"""A model that proves it: random histories of an action queue, against real Redis, each
step checked against a pure Python model of what the queue must hold.

Steps: invoke (now or delayed), claim by one of several owner processes, complete, fail
(retried or final), touch, a lease running out, time passing for delayed runs, an owner
process dying and its runs being reclaimed, a failed run re-queued, and late reports from
holders whose lease was taken back. Hand-offs are offers (lua/lib/offer.lua): an owner's
poller parks and is handed the next run invoked; the offer is accepted (by the accept,
a touch, a report, or the poller's next park naming it as received) or its window runs
out, which puts it back at its place in the queue with its attempt unspent. After every
step, for every run: the status and the attempt count equal the model's; a running run
has exactly the model's holder (owner and token) and is in that owner's index; no run is
lost; offers expired are counted. Claims take the ready runs in queue order. Every stale
report is refused and changes nothing; a resent complete is answered as success and
changes nothing.

Time is advanced the way the scripts read it — against Redis's clock: to let a lease run
out or a delayed run fall due, the test moves that one deadline into the past in the
queue's own sorted set (``leases`` / ``delayed``), then lets the queue's upkeep run, as
the clock passing that deadline would. Offers are made with the longest window (60 s), so
an offer runs out only when a step says so, never because a loaded machine was slow
between steps.

``FLO_MODEL_EXAMPLES`` / ``FLO_MODEL_STEPS`` as in ``tests/support/model_machine.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    invariant,
    precondition,
    rule,
)
from model_machine import ClientMachine, run_model
from polling import eventually

from flo_redis import (
    ActionInvokeOptions,
    ActionRegisterOptions,
    ConflictError,
    FloClient,
    RunStatus,
    WorkerAwaitOptions,
    WorkerCompleteOptions,
    WorkerFailOptions,
    WorkerTouchOptions,
)
from flo_redis._session.reclaim import reclaim_gone_owners
from flo_redis._wire.keys import action_keys, handoff_channel, owner_channel
from flo_redis.actions.claims import claim

pytestmark = pytest.mark.slow  # a Hypothesis model: many steps against Redis

ACTION = "job"
MAX_ATTEMPTS = 2
HOUR_MS = 3_600_000
MINUTE_MS = 60_000
NOW = WorkerAwaitOptions(block_ms=0)
ENDED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.TIMED_OUT)


@dataclass
class Run:
    """The model of one run."""

    status: RunStatus = RunStatus.PENDING
    attempt: int = 0
    delayed: bool = False
    holder: tuple[int, int] | None = None  # (owner index, token) while RUNNING
    token: int = 0
    place: int = 0  # its place in the queue while it waits (lower first)
    offered: bool = False  # RUNNING by a hand-off not accepted yet


@dataclass
class Handout:
    run_id: str
    owner: int
    token: int


@dataclass
class Model:
    runs: dict[str, Run] = field(default_factory=dict)
    stale: list[Handout] = field(default_factory=list)  # taken back before they reported
    completed: list[Handout] = field(default_factory=list)  # reported a complete
    places: int = 0  # places in the queue given so far
    offers_expired: int = 0

    def queue(self, run_id: str) -> None:
        """The run waits at a new place: behind every run waiting."""
        self.places += 1
        self.runs[run_id].place = self.places

    def ready(self) -> list[str]:
        """The runs ready to claim, in queue order."""
        waiting = [
            (run.place, run_id)
            for run_id, run in self.runs.items()
            if run.status == RunStatus.PENDING and not run.delayed
        ]
        return [run_id for _, run_id in sorted(waiting)]

    def held(self) -> list[Handout]:
        return [
            Handout(run_id, run.holder[0], run.holder[1])
            for run_id, run in sorted(self.runs.items())
            if run.holder is not None
        ]

    def take_back(self, run_id: str) -> None:
        """The lease is gone without a report: the attempt counts (an offer not accepted:
        it was never made, and the run is back at its place)."""
        run = self.runs[run_id]
        assert run.holder is not None
        self.stale.append(Handout(run_id, *run.holder))
        run.holder = None
        if run.offered:
            run.offered = False
            run.attempt -= 1
            run.status = RunStatus.PENDING
            return
        run.status = RunStatus.PENDING if run.attempt < MAX_ATTEMPTS else RunStatus.FAILED
        if run.status == RunStatus.PENDING:
            self.queue(run_id)


class QueueMachine(ClientMachine):
    keep_inputs = False  # ActionRegisterOptions.keep_inputs of the action

    def __init__(self, redis_url: str) -> None:
        super().__init__(redis_url, "model")
        self.keys = action_keys(self.namespace, ACTION)
        self.model = Model()
        self.owners: list[FloClient | None] = []
        self.inboxes: list[Any] = []  # each owner's hand-off channel, subscribed
        self.parks = 0  # numbers the hand-off polls
        self.last_handed: dict[int, Handout] = {}  # per owner, its poller's last hand-off
        options = ActionRegisterOptions(
            timeout_ms=HOUR_MS, max_retries=MAX_ATTEMPTS, keep_inputs=self.keep_inputs
        )
        self.run(self.client.action.register(ACTION, options=options))
        for _ in range(3):
            self.run(self._new_owner())

    async def close_first(self) -> None:
        for owner in self.owners:
            if owner is not None:
                await owner.close()
        for inbox in self.inboxes:
            if inbox is not None:
                await inbox.aclose()
        await self.client.action.delete(ACTION)

    async def _new_owner(self) -> None:
        owner = FloClient(self.url, namespace=self.namespace)
        await owner.connect()
        self.owners.append(owner)
        await owner.worker.register(self._worker(len(self.owners) - 1), [ACTION])
        channel = handoff_channel(self.keys.tag, owner.owner_id)
        inbox = (await self.node(channel)).pubsub()  # what the scripts' subscriber check counts
        await inbox.ssubscribe(channel)
        await inbox.get_message(timeout=1.0)
        self.inboxes.append(inbox)

    @staticmethod
    def _worker(index: int) -> str:
        return f"w{index}"

    def _owner(self, index: int) -> FloClient:
        owner = self.owners[index]
        assert owner is not None
        return owner

    def _live(self) -> list[int]:
        return [i for i, o in enumerate(self.owners) if o is not None]

    # --- steps ---------------------------------------------------------------------

    @rule(delayed=st.booleans())
    def invoke(self, delayed: bool) -> None:
        opts = ActionInvokeOptions(delay_ms=HOUR_MS) if delayed else None
        run_id = self.run(self.client.action.invoke(ACTION, b"x", opts)).run_id
        assert run_id not in self.model.runs
        self.model.runs[run_id] = Run(delayed=delayed)
        if not delayed:
            self.model.queue(run_id)

    @precondition(lambda self: not self.model.ready())
    @rule(data=st.data())
    def handoff(self, data: st.DataObject) -> None:
        """An owner's poller parks (nothing is ready) and is offered the next run."""
        index = data.draw(st.sampled_from(self._live()))
        owner = self._owner(index)
        last = self.last_handed.get(index)
        received = f"{last.run_id} {last.token}" if last else ""
        self.parks += 1
        poll_id = f"poller{index}#{self.parks}"
        wid = self._worker(index)
        parked = self.run(  # park and offer windows of 60 s, the most: time moves by steps
            claim(owner.session, self.keys, wid, b"", 1, poll_id, MINUTE_MS, received, MINUTE_MS)
        )
        assert parked.runs == ()
        if last is not None:  # its next claim names the run it received: accepted
            run = self.model.runs[last.run_id]
            if run.holder == (last.owner, last.token):
                run.offered = False
        run_id = self.run(self.client.action.invoke(ACTION, b"x")).run_id
        status = self.run(self.client.action.status(run_id))
        assert (status.status, status.worker_id, status.attempt) == (RunStatus.RUNNING, wid, 1)
        assert status.token > max((r.token for r in self.model.runs.values()), default=0)
        self.model.runs[run_id] = Run(
            status=RunStatus.RUNNING,
            attempt=1,
            holder=(index, status.token),
            token=status.token,
            offered=True,
        )
        self.model.places += 1  # a new run offered takes a place, to come back to
        self.model.runs[run_id].place = self.model.places
        self.last_handed[index] = Handout(run_id, index, status.token)

    @precondition(lambda self: any(r.offered for r in self.model.runs.values()))
    @rule(data=st.data())
    def accept(self, data: st.DataObject) -> None:
        offered = [h for h in self.model.held() if self.model.runs[h.run_id].offered]
        h = data.draw(st.sampled_from(offered))
        owner = self._owner(h.owner)
        answers = self.run(
            owner.worker.accept(self._worker(h.owner), ACTION, [(h.run_id, h.token)])
        )
        assert answers == [None]
        self.model.runs[h.run_id].offered = False

    @rule(data=st.data(), n=st.integers(1, 3))
    def claim(self, data: st.DataObject, n: int) -> None:
        index = data.draw(st.sampled_from(self._live()))
        owner = self._owner(index)
        got = self.run(owner.worker.await_tasks(self._worker(index), [ACTION], n, NOW))
        assert [c.run_id for c in got] == self.model.ready()[:n]  # in queue order
        for claimed in got:
            run = self.model.runs[claimed.run_id]
            assert claimed.token > run.token  # every hand-out gets a new, higher token
            run.status, run.attempt, run.token = RunStatus.RUNNING, run.attempt + 1, claimed.token
            run.holder = (index, claimed.token)
            assert claimed.attempt == run.attempt

    @precondition(lambda self: self.model.held())
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        h = data.draw(st.sampled_from(self.model.held()))
        owner = self._owner(h.owner)
        opts = WorkerCompleteOptions(token=h.token)
        self.run(owner.worker.complete(self._worker(h.owner), ACTION, h.run_id, b"ok", opts))
        run = self.model.runs[h.run_id]
        run.status, run.holder, run.offered = RunStatus.COMPLETED, None, False
        self.model.completed.append(h)

    @precondition(lambda self: self.model.held())
    @rule(data=st.data(), retry=st.booleans())
    def fail(self, data: st.DataObject, retry: bool) -> None:
        h = data.draw(st.sampled_from(self.model.held()))
        owner = self._owner(h.owner)
        opts = WorkerFailOptions(retry=retry, token=h.token)
        after = self.run(owner.worker.fail(self._worker(h.owner), ACTION, h.run_id, "e", opts))
        run = self.model.runs[h.run_id]
        run.holder, run.offered = None, False
        run.status = RunStatus.PENDING if retry and run.attempt < MAX_ATTEMPTS else RunStatus.FAILED
        assert after == run.status
        if run.status == RunStatus.PENDING:
            self.model.queue(h.run_id)

    @precondition(lambda self: self.model.held())
    @rule(data=st.data())
    def touch(self, data: st.DataObject) -> None:
        h = data.draw(st.sampled_from(self.model.held()))
        opts = WorkerTouchOptions(extend_ms=HOUR_MS, token=h.token)
        owner = self._owner(h.owner)
        self.run(owner.worker.touch(self._worker(h.owner), ACTION, h.run_id, opts))
        self.model.runs[h.run_id].offered = False  # a touch accepts an offer

    @precondition(lambda self: self.model.held())
    @rule(data=st.data())
    def lease_runs_out(self, data: st.DataObject) -> None:
        h = data.draw(st.sampled_from(self.model.held()))
        self.run(self.raw.zadd(self.keys.leases, {h.run_id: 1}, xx=True))
        self.run(self.client.action.reap(ACTION))
        if self.model.runs[h.run_id].offered:
            self.model.offers_expired += 1
        self.model.take_back(h.run_id)
        if self.model.runs[h.run_id].status == RunStatus.FAILED:
            self.model.runs[h.run_id].status = RunStatus.TIMED_OUT

    @precondition(lambda self: any(r.delayed for r in self.model.runs.values()))
    @rule()
    def delayed_runs_fall_due(self) -> None:
        due = {run_id: 1 for run_id, run in self.model.runs.items() if run.delayed}
        self.run(self.raw.zadd(self.keys.delayed, due, xx=True))
        self.run(self.client.action.reap(ACTION))
        for run_id in sorted(due):  # due at the same time: in the order of their ids
            self.model.runs[run_id].delayed = False
            self.model.queue(run_id)

    @precondition(lambda self: len(self._live()) > 1)
    @rule(data=st.data())
    def owner_dies(self, data: st.DataObject) -> None:
        index = data.draw(st.sampled_from(self._live()))
        owner = self._owner(index)
        self.owners[index] = None
        channel = owner_channel(self.keys.tag, owner.owner_id)
        inbox = self.inboxes[index]
        self.inboxes[index] = None

        async def die_and_reclaim() -> int:
            await owner.close()  # as a killed process loses its connections
            await inbox.aclose()
            node = await self.node(channel)
            await eventually(
                lambda: node.execute_command("PUBSUB", "SHARDNUMSUB", channel),
                lambda counts: int(counts[1]) == 0,
                interval=0.01,
                what="the owner's channel left",
            )
            await self._new_owner()
            result = await reclaim_gone_owners(self.client.session, ACTION, grace_ms=0)
            return result.reclaimed

        reclaimed = self.run(die_and_reclaim())
        held = [h for h in self.model.held() if h.owner == index]
        assert reclaimed == len(held)
        for h in sorted(held, key=lambda h: h.run_id):  # in the order of the owner's index
            self.model.take_back(h.run_id)

    @precondition(
        lambda self: any(
            r.status in (RunStatus.FAILED, RunStatus.TIMED_OUT) for r in self.model.runs.values()
        )
    )
    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        ended = sorted(
            run_id
            for run_id, run in self.model.runs.items()
            if run.status in (RunStatus.FAILED, RunStatus.TIMED_OUT)
        )
        run_id = data.draw(st.sampled_from(ended))
        self.run(self.client.action.requeue(run_id))
        run = self.model.runs[run_id]
        run.status, run.attempt = RunStatus.PENDING, 0
        self.model.queue(run_id)

    @precondition(lambda self: self.model.stale)
    @rule(data=st.data(), kind=st.sampled_from(["complete", "fail", "touch", "accept"]))
    def late_report_is_refused(self, data: st.DataObject, kind: str) -> None:
        h = data.draw(st.sampled_from(self.model.stale))
        worker = self.client.worker  # the owner may be gone; its report arrives anyway
        wid = self._worker(h.owner)
        if kind == "complete":
            call = worker.complete(
                wid, ACTION, h.run_id, b"late", WorkerCompleteOptions(token=h.token)
            )
        elif kind == "fail":
            call = worker.fail(wid, ACTION, h.run_id, "late", WorkerFailOptions(token=h.token))
        elif kind == "accept":
            (refused,) = self.run(worker.accept(wid, ACTION, [(h.run_id, h.token)]))
            assert isinstance(refused, ConflictError), f"a late accept of {h} was accepted"
            return
        else:
            call = worker.touch(wid, ACTION, h.run_id, WorkerTouchOptions(token=h.token))
        try:
            self.run(call)
        except ConflictError:
            pass
        else:
            raise AssertionError(f"a late {kind} of {h} was accepted")

    @precondition(lambda self: self.model.completed)
    @rule(data=st.data())
    def resent_complete_is_answered_and_changes_nothing(self, data: st.DataObject) -> None:
        h = data.draw(st.sampled_from(self.model.completed))
        opts = WorkerCompleteOptions(token=h.token)
        self.run(self.client.worker.complete(self._worker(h.owner), ACTION, h.run_id, b"ok", opts))

    # --- what must hold after every step -------------------------------------------

    @invariant()
    def redis_holds_what_the_model_holds(self) -> None:
        async def read() -> tuple[list[Any], set[bytes], set[bytes]]:
            statuses = [await self.client.action.status(r) for r in sorted(self.model.runs)]
            owned = set(await self.raw.zrange(self.keys.owned, 0, -1))
            return statuses, owned, set(await self.raw.hkeys(self.keys.inputs))

        statuses, owned, inputs = self.run(read())  # NotFoundError here: a run was lost
        for status in statuses:
            want = self.model.runs[status.run_id]
            assert (status.status, status.attempt) == (want.status, want.attempt), status
            if want.status == RunStatus.RUNNING:
                assert want.holder is not None
                assert status.token == want.holder[1]  # one holder: the model's
                owner_id = self._owner(want.holder[0]).owner_id
                assert f"{owner_id}\0{status.run_id}".encode() in owned
        running = sum(1 for r in self.model.runs.values() if r.status == RunStatus.RUNNING)
        assert len(owned) == running  # the owner index holds running runs only
        # Inputs: of every run but the completed ones, unless the action keeps those too.
        assert inputs == {
            r.encode()
            for r, run in self.model.runs.items()
            if self.keep_inputs or run.status != RunStatus.COMPLETED
        }
        stats = self.run(self.client.action.stats(ACTION))
        assert stats.offers_expired == self.model.offers_expired


class KeepingQueueMachine(QueueMachine):
    keep_inputs = True


@pytest.mark.timeout(300)  # its examples: 50 s alone, several times that beside other passes
def test_the_action_queue_follows_its_model(redis_url: str) -> None:
    run_model(lambda: QueueMachine(redis_url))


@pytest.mark.timeout(300)  # its examples: 50 s alone, several times that beside other passes
def test_an_action_that_keeps_inputs_follows_its_model(redis_url: str) -> None:
    run_model(lambda: KeepingQueueMachine(redis_url))


@pytest.mark.cluster
@pytest.mark.timeout(300)  # its examples: 11 s alone, 17-18 s beside other passes
def test_the_action_queue_follows_its_model_on_a_cluster(cluster_url: str) -> None:
    """The same histories on the 3-master cluster: scripts by SHA to the queue's master,
    hand-offs and owner channels sharded there. Two fifths as many histories as on one
    server, where each costs a third as much (25 of them: 7 s alone there, 25 s here, and
    65-110 s here beside other passes): the model's depth is the one-server test's; this
    one proves the cluster's paths."""
    run_model(lambda: QueueMachine(cluster_url), share=0.4)
