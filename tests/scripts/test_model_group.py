"""A model that proves it: random histories of a stream consumer group, against real
Redis, each step checked against a pure Python model.

Steps: append, read by one of several consumers, ack, nack, an ack timeout passing,
late acks / nacks from a delivery that was handed out again, and dead letters once an
entry was delivered ``max_deliver`` times. After every step: the group's pending list
(ids, holders and delivery counts) and its dead letters (ids, delivery counts) equal the
model's, and every appended entry is in exactly one place — new, pending, acked or dead:
none lost. Every stale report is refused and changes nothing.

A delivery's ack timeout passes the way the scripts read it, against Redis's clock: its
redelivery time in the group's ``due`` sorted set is moved into the past.
``FLO_MODEL_EXAMPLES`` / ``FLO_MODEL_STEPS`` as in ``tests/support/model_machine.py``.
"""

from __future__ import annotations

from collections.abc import Coroutine
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

from flo_redis import (
    ConflictError,
    StreamDeadLetterOptions,
    StreamGroupAckOptions,
    StreamGroupJoinOptions,
    StreamGroupNackOptions,
    StreamGroupReadOptions,
    StreamID,
)
from flo_redis._wire.keys import stream_keys

pytestmark = pytest.mark.slow  # a Hypothesis model: many steps against Redis

STREAM, GROUP = "s", "g"
CONSUMERS = ("c0", "c1", "c2")
MAX_DELIVER = 3


@dataclass
class Entry:
    """The model of one entry in the group."""

    id: StreamID
    state: str = "new"  # new | pending | acked | dead
    consumer: str = ""
    deliveries: int = 0
    due: bool = False  # pending, and to be delivered again (nacked or timed out)


@dataclass
class Delivery:
    id: StreamID
    consumer: str
    token: int


@dataclass
class Model:
    entries: dict[str, Entry] = field(default_factory=dict)  # by id, as Redis writes it
    stale: list[Delivery] = field(default_factory=list)

    def held(self) -> list[Delivery]:
        return [
            Delivery(e.id, e.consumer, e.deliveries)
            for _, e in sorted(self.entries.items())
            if e.state == "pending" and not e.due
        ]


class GroupMachine(ClientMachine):
    def __init__(self, redis_url: str) -> None:
        super().__init__(redis_url, "gmodel")
        self.keys = stream_keys(self.namespace, STREAM).group(GROUP)
        self.model = Model()
        join = StreamGroupJoinOptions(ack_timeout_ms=3_600_000, max_deliver=MAX_DELIVER)
        for consumer in CONSUMERS:
            self.run(self.client.stream.group_join(STREAM, GROUP, consumer, join))

    # --- steps ---------------------------------------------------------------------

    @rule(n=st.integers(1, 3))
    def append(self, n: int) -> None:
        for _ in range(n):
            entry_id = self.run(self.client.stream.append(STREAM, b"x")).id
            assert entry_id.to_redis() not in self.model.entries
            self.model.entries[entry_id.to_redis()] = Entry(entry_id)

    @rule(consumer=st.sampled_from(CONSUMERS), count=st.integers(1, 4))
    def read(self, consumer: str, count: int) -> None:
        before_dead = {i for i, e in self.model.entries.items() if e.state == "dead"}
        opts = StreamGroupReadOptions(count=count, block_ms=0)
        got = self.run(self.client.stream.group_read(STREAM, GROUP, consumer, opts)).records
        assert len(got) <= count
        for record in got:
            entry = self.model.entries[record.id.to_redis()]
            if entry.state == "new":
                assert record.delivery_count == 1
            else:  # handed out again: it was due and below max_deliver
                assert entry.state == "pending" and entry.due and entry.deliveries < MAX_DELIVER
                assert record.delivery_count == entry.deliveries + 1
                self.model.stale.append(Delivery(record.id, entry.consumer, entry.deliveries))
            entry.state, entry.consumer, entry.due = "pending", consumer, False
            entry.deliveries = record.delivery_count
        # Due entries delivered max_deliver times may have moved to the dead letters.
        dead_now = {d.original_id.to_redis() for d in self._dead()}
        for entry_id in dead_now - before_dead:
            entry = self.model.entries[entry_id]
            assert entry.state == "pending" and entry.due and entry.deliveries >= MAX_DELIVER
            self.model.stale.append(Delivery(entry.id, entry.consumer, entry.deliveries))
            entry.state, entry.due = "dead", False
        if len(got) < count:  # a short read leaves nothing new behind
            assert not [e for e in self.model.entries.values() if e.state == "new"]

    @precondition(lambda self: self.model.held())
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        d = data.draw(st.sampled_from(self.model.held()))
        opts = StreamGroupAckOptions(consumer=d.consumer, token=d.token)
        self.run(self.client.stream.group_ack(STREAM, GROUP, [d.id], opts))
        self.model.entries[d.id.to_redis()].state = "acked"

    @precondition(lambda self: self.model.held())
    @rule(data=st.data())
    def nack(self, data: st.DataObject) -> None:
        d = data.draw(st.sampled_from(self.model.held()))
        opts = StreamGroupNackOptions(consumer=d.consumer, token=d.token)
        self.run(self.client.stream.group_nack(STREAM, GROUP, [d.id], opts))
        entry = self.model.entries[d.id.to_redis()]
        if entry.deliveries >= MAX_DELIVER:  # given up at once
            entry.state = "dead"
        else:
            entry.due = True

    @precondition(lambda self: self.model.held())
    @rule(data=st.data())
    def ack_timeout_passes(self, data: st.DataObject) -> None:
        d = data.draw(st.sampled_from(self.model.held()))
        self.run(self.raw.zadd(self.keys.due, {d.id.to_redis(): 1}))
        self.model.entries[d.id.to_redis()].due = True

    @precondition(lambda self: self.model.stale)
    @rule(data=st.data(), kind=st.sampled_from(["ack", "nack"]))
    def late_report_is_refused(self, data: st.DataObject, kind: str) -> None:
        d = data.draw(st.sampled_from(self.model.stale))
        entry = self.model.entries[d.id.to_redis()]
        if entry.state == "acked":
            return  # acked by its later holder: an ack of an acked entry is a no-op resend
        stream = self.client.stream
        call: Coroutine[Any, Any, None]
        if kind == "ack":
            ack = StreamGroupAckOptions(consumer=d.consumer, token=d.token)
            call = stream.group_ack(STREAM, GROUP, [d.id], ack)
        else:
            nack = StreamGroupNackOptions(consumer=d.consumer, token=d.token)
            call = stream.group_nack(STREAM, GROUP, [d.id], nack)
        try:
            self.run(call)
        except ConflictError:
            pass
        else:
            assert entry.state == "dead", f"a late {kind} of {d} was accepted"

    # --- what must hold after every step -------------------------------------------

    def _dead(self) -> list[Any]:
        return self.run(
            self.client.stream.dead_letters(STREAM, GROUP, StreamDeadLetterOptions(count=1000))
        )

    @invariant()
    def redis_holds_what_the_model_holds(self) -> None:
        pending = self.run(self.client.stream.group_pending(STREAM, GROUP))
        got = {p.id.to_redis(): (p.consumer, p.delivery_count) for p in pending}
        want = {
            i: (e.consumer, e.deliveries)
            for i, e in self.model.entries.items()
            if e.state == "pending"
        }
        assert got == want
        dead = {d.original_id.to_redis(): d.delivery_count for d in self._dead()}
        assert dead == {i: e.deliveries for i, e in self.model.entries.items() if e.state == "dead"}


def test_a_consumer_group_follows_its_model(redis_url: str) -> None:
    run_model(lambda: GroupMachine(redis_url))
