"""Dedup, throttle and debounce by flow key, each against a model: random histories of
invokes of two keys, claims, completes, windows ending and the reaper's upkeep, against
real Redis, each answer checked against a pure Python model of what the key must hold.

- dedup: an invoke of a key whose last run waits or runs returns that run; once it ended,
  a new run.
- throttle: the first invoke of a key opens its window and creates a run; every invoke
  until the window ends returns that run, whatever the run's state.
- debounce: an invoke of a key whose last run still waits for its start returns that
  run, with this input and its start pushed back; the run that starts carries the last
  input given.

Time is advanced as the scripts read it (tests/scripts/test_model_queue.py): a window's
end or a debounced run's start is moved into the past in the queue's own sorted set
(``flow_once`` / ``delayed``), then the reaper runs. ``FLO_MODEL_EXAMPLES`` /
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
    FlowControl,
    RunStatus,
    WorkerAwaitOptions,
    WorkerCompleteOptions,
)
from flo_redis._wire.gateway import ACTION_REAP
from flo_redis._wire.keys import action_keys

pytestmark = pytest.mark.slow  # a Hypothesis model: many steps against Redis

ACTION = "job"
KEYS = ("a", "b")
HOUR_MS = 3_600_000
NOW = WorkerAwaitOptions(block_ms=0)
MODES = {
    "dedup": FlowControl(dedup=True),
    "throttle": FlowControl(throttle_ms=HOUR_MS),
    "debounce": FlowControl(debounce_ms=HOUR_MS),
}


@dataclass
class Key:
    """The model of one flow key: its last run and what an invoke would meet."""

    last: str | None = None
    open: bool = False  # dedup: last waits or runs; throttle: window open; debounce: waits
    input: bytes = b""  # the last input given to its last run


@dataclass
class Model:
    keys: dict[str, Key] = field(default_factory=lambda: {k: Key() for k in KEYS})
    status: dict[str, RunStatus] = field(default_factory=dict)
    inputs: dict[str, bytes] = field(default_factory=dict)  # the input each run will run
    running: list[tuple[str, int]] = field(default_factory=list)  # (run id, token)


class FlowOnceMachine(ClientMachine):
    mode = "dedup"

    def __init__(self, redis_url: str) -> None:
        super().__init__(redis_url, f"once-{self.mode}")
        self.keys = action_keys(self.namespace, ACTION)
        self.model = Model()
        options = ActionRegisterOptions(timeout_ms=HOUR_MS, flow=MODES[self.mode])
        self.run(self.client.action.register(ACTION, options=options))
        self.run(self.client.worker.register("w1", [ACTION]))

    def _reap(self) -> None:
        self.run(ACTION_REAP(self.client.session, self.keys, [100]))

    @rule(key=st.sampled_from(KEYS), value=st.integers(0, 9))
    def invoke(self, key: str, value: int) -> None:
        data = str(value).encode()
        opts = ActionInvokeOptions(flow_key=key)
        run_id = self.run(self.client.action.invoke(ACTION, data, opts)).run_id
        k = self.model.keys[key]
        if k.open:
            assert run_id == k.last, (self.mode, key)
            if self.mode == "debounce":
                self.model.inputs[run_id] = data
        else:
            assert run_id not in self.model.status
            k.last, k.open = run_id, True
            self.model.status[run_id] = RunStatus.PENDING
            self.model.inputs[run_id] = data

    @rule()
    def claim(self) -> None:
        tasks = self.run(self.client.worker.await_tasks("w1", [ACTION], 10, NOW))
        for task in tasks:
            assert self.model.status.get(task.run_id) == RunStatus.PENDING
            # What starts carries the last input given (debounce: the last invoke's).
            assert task.payload == self.model.inputs[task.run_id]
            self.model.status[task.run_id] = RunStatus.RUNNING
            self.model.running.append((task.run_id, task.token))
        if self.mode != "debounce":  # a debounced run waits an hour: none is ready
            ready = [r for r, s in self.model.status.items() if s == RunStatus.PENDING]
            assert ready == [], "runs ready but not claimed"

    @precondition(lambda self: self.model.running)
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        run_id, token = data.draw(st.sampled_from(self.model.running))
        self.model.running.remove((run_id, token))
        opts = WorkerCompleteOptions(token=token)
        self.run(self.client.worker.complete("w1", ACTION, run_id, b"ok", opts))
        self.model.status[run_id] = RunStatus.COMPLETED
        for k in self.model.keys.values():
            if self.mode == "dedup" and k.last == run_id:
                k.open = False

    @rule(key=st.sampled_from(KEYS), reap=st.booleans())
    def time_passes(self, key: str, reap: bool) -> None:
        """The key's window ends (throttle), or its debounced run falls due; the reaper
        may have run since, or not yet."""
        k = self.model.keys[key]
        if self.mode == "throttle" and k.open:
            self.run(self.raw.zadd(self.keys.flow_once, {key: 1}))
            k.open = False
        if self.mode == "debounce" and k.open and k.last is not None:
            self.run(self.raw.zadd(self.keys.delayed, {k.last: 1}))
            self._reap()  # promotes it: ready, no longer waiting
            k.open = False
        if reap:
            self._reap()

    @rule()
    def upkeep(self) -> None:
        self._reap()

    @invariant()
    def runs_are_as_modelled(self) -> None:
        for run_id, status in self.model.status.items():
            assert self.run(self.client.action.status(run_id)).status == status, run_id
        for key, k in self.model.keys.items():
            if k.last is not None and self.mode == "debounce" and k.open:
                due = self.run(self.client.action.status(k.last)).due_at_ms
                assert due is not None, (key, k.last)

    @invariant()
    def an_idle_key_leaves_nothing_after_upkeep(self) -> None:
        if all(not k.open for k in self.model.keys.values()) and not self.model.running:
            ready = [r for r, s in self.model.status.items() if s == RunStatus.PENDING]
            if not ready:
                # The time it looks again comes (a dedup's run is looked at each second).
                members = self.run(self.raw.zrange(self.keys.flow_once, 0, -1))
                if members:
                    self.run(self.raw.zadd(self.keys.flow_once, dict.fromkeys(members, 1)))
                self._reap()
                assert self.run(self.raw.zcard(self.keys.flow_once)) == 0
                assert self.run(self.raw.hlen(self.keys.flows)) == 0


class DedupMachine(FlowOnceMachine):
    mode = "dedup"


class ThrottleMachine(FlowOnceMachine):
    mode = "throttle"


class DebounceMachine(FlowOnceMachine):
    mode = "debounce"


@pytest.mark.parametrize("machine", [DedupMachine, ThrottleMachine, DebounceMachine])
def test_flow_once_against_its_model(redis_url: str, machine: type[FlowOnceMachine]) -> None:
    run_model(lambda: machine(redis_url))
