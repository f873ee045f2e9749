"""Runs that depend on runs: the requests of an invoke with ``depends_on``, the forwarder
that carries the graph's messages between queues, and the reads of a run's graph.

A script never writes another queue's keys (each queue is one hash slot). So a child's
invoke leaves a message in its own queue's outbox asking each parent's queue to register
it, and a parent's end leaves one in the parent's outbox telling its children
(``lua/lib/graph.lua``). :func:`forward` carries them: it takes what is due
(``graph_take``, each message leased), applies it in the other queue (``graph_depend``,
``graph_resolve``: idempotent, by version) and reports it done (``graph_done``). A
forwarder that dies between those steps leaves the message to come due again, so a
crash delays a step and never loses or repeats one. The client forwards its own invoke's
messages at once; every worker forwards its actions' outboxes when a script nudges it and
at each upkeep.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from flo_redis._session.session import Session
from flo_redis._wire import runner
from flo_redis._wire.aside import scope_of, warn_set_aside
from flo_redis._wire.checks import check_count, check_list, check_text
from flo_redis._wire.codec import pack, text, unpack_record
from flo_redis._wire.gateway import (
    GRAPH_DEPEND,
    GRAPH_DONE,
    GRAPH_LIST,
    GRAPH_RESOLVE,
    GRAPH_SUSPEND,
    GRAPH_TAKE,
)
from flo_redis._wire.graph_replies import Listed, Message
from flo_redis._wire.keys import ActionKeys, action_keys, action_of_run
from flo_redis._wire.refusals import raise_run_refusal
from flo_redis._wire.status import Status, refusal
from flo_redis.actions import batches as batches_
from flo_redis.errors import ValidationError
from flo_redis.types import RunStatus
from flo_redis.types.graph import (
    MAX_PARENTS,
    ON_FAILURE,
    Dependency,
    GraphPage,
    OnFailure,
    ParentResult,
    ParentState,
)

log = logging.getLogger("flo_redis.graph")

TAKE_LIMIT = 500  # messages per graph_take
PAGE = 1000  # children told per ended run per take; entries forgotten per step
# Pairs per graph_resolve / graph_depend call: each pair is a few commands and a record
# read or written, so a call of 250 stays a few milliseconds even on a loaded server.
CHUNK = 250
# A message taken is due again after this, should its forwarder die. Short: carrying one
# twice is harmless (idempotent by version), and a killed forwarder's step waits this long.
LEASE_MS = 2_000
ROUNDS = 20  # takes per forward() call at most, so one busy outbox cannot hold a worker
# An invoke's own forward: every registration it made (MAX_PARENTS of them) and then some.
ALL_ROUNDS = 2 * MAX_PARENTS // TAKE_LIMIT + 2
_POLICY: dict[str, str] = {"fail": "f", "ignore": "i", "run": "r"}
_ON_FAILURE: dict[str, OnFailure] = {"f": "fail", "i": "ignore", "r": "run"}
_NOT_ENDED = -2  # graph_depend: the parent has not ended
SWEEPS = 100  # groups' changes per graph_resolve call (its members paged there)
_NO_ITEMS = _NO_SWEEPS = pack([])


def deps_request(depends_on: object, flow_key: str | None) -> bytes:
    """ARGV ``deps`` of ``action_invoke``: the packed parent id, policy of each, checked
    (nothing is sent for a bad one); ``b""`` for none."""
    if depends_on is None or depends_on == ():
        return b""
    items = check_list("depends_on", depends_on)
    if not items:
        return b""
    if flow_key is not None:
        raise ValidationError("depends_on and flow_key cannot be given together; give one")
    if len(items) > MAX_PARENTS:
        raise ValidationError(
            f"depends_on names {len(items)} runs; a run may wait for at most {MAX_PARENTS}"
        )
    flat: list[str] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        dep = item if isinstance(item, Dependency) else Dependency(item)
        if not isinstance(dep.run_id, str):
            raise ValidationError(
                f"depends_on[{i}] must be a run id (str) or a Dependency, got {item!r}"
            )
        if dep.on_failure not in ON_FAILURE:
            raise ValidationError(
                f"depends_on[{i}].on_failure must be one of {', '.join(ON_FAILURE)}"
            )
        action_of_run(dep.run_id)  # a run id's shape, or NotFoundError
        if dep.run_id in seen:
            raise ValidationError(f"depends_on names run {dep.run_id!r} twice")
        seen.add(dep.run_id)
        flat += [dep.run_id, _POLICY[dep.on_failure]]
    return pack(flat)


def runs_per_call(deps: bytes, most: int) -> int:
    """How many runs an ``action_invoke_many`` call may create with the parents ``deps``
    (:func:`deps_request`): at most ``most``, and at most MAX_PARENTS dependencies."""
    if not deps:
        return most
    return max(1, min(most, MAX_PARENTS // (len(msgpack.unpackb(deps)) // 2)))


@dataclass(frozen=True, slots=True)
class Forwarded:
    """What one :func:`forward` call carried, and when the outbox has a message due next
    (seconds from now; None: none is waiting)."""

    messages: int
    due_in_s: float | None


def _keys_of(keys: ActionKeys, run_id: str) -> ActionKeys:
    """The keys of the queue of ``run_id``, a run or a group of runs invoked together
    (``<action>:<first>+<n>``, lua/lib/graph.lua)."""
    head, plus, count = run_id.rpartition("+")
    if plus and count.isdigit():
        run_id = head
    return action_keys(keys.namespace, action_of_run(run_id))


async def _resolve(session: Session, keys: ActionKeys, items: list[Any]) -> None:
    """Tell children (``items``: child, parent, state, version of each) in their queue,
    which may be of any action."""
    by_queue: dict[ActionKeys, list[Any]] = defaultdict(list)
    for i in range(0, len(items), 4):
        by_queue[_keys_of(keys, items[i])] += items[i : i + 4]
    for child_keys, chunk in by_queue.items():
        for at in range(0, len(chunk), 4 * CHUNK):
            # NO_ACTION: the child's action was deleted since; nothing is left to tell.
            part = pack(chunk[at : at + 4 * CHUNK])
            reply = await GRAPH_RESOLVE(session, child_keys, [part, _NO_SWEEPS])
            warn_set_aside(scope_of(child_keys), reply.aside)


async def _sweep(session: Session, keys: ActionKeys, sweeps: list[Message]) -> list[str]:
    """Take groups' changes (messages ``"w"`` of ``keys``' own queue) to their members, a
    page each; where each one's next page begins (``""``: none is left)."""
    cursors: list[str] = []
    for at in range(0, len(sweeps), SWEEPS):
        chunk = sweeps[at : at + SWEEPS]
        items = pack([x for m in chunk for x in (m.run, m.version, int(m.cursor or 0))])
        reply = await GRAPH_RESOLVE(session, keys, [_NO_ITEMS, items])
        warn_set_aside(scope_of(keys), reply.aside)
        # NO_ACTION: the action was deleted since, and its groups with it.
        cursors += reply.cursors if reply.status == Status.OK else [""] * len(chunk)
    return cursors


async def _register(session: Session, keys: ActionKeys, messages: list[Message]) -> None:
    """Register children of ``keys``' queue on their parents, and tell each child at once
    of a parent that ended already (or is not there)."""
    by_queue: dict[ActionKeys, list[tuple[str, str]]] = defaultdict(list)
    for m in messages:
        if m.kind == "R":  # one child, a page of its parents
            for parent in m.children:
                by_queue[_keys_of(keys, parent)].append((parent, m.run))
        else:
            by_queue[_keys_of(keys, m.parent)] += [(m.parent, child) for child in m.children]
    told: list[Any] = []
    for parent_keys, pairs in by_queue.items():
        for at in range(0, len(pairs), CHUNK):
            chunk = pairs[at : at + CHUNK]
            reply = await GRAPH_DEPEND(session, parent_keys, [pack([x for p in chunk for x in p])])
            warn_set_aside(scope_of(parent_keys), reply.aside)
            for (parent, child), (state, version) in zip(chunk, reply.states, strict=True):
                if state != _NOT_ENDED:
                    told += [child, parent, state, version]
    if told:
        await _resolve(session, keys, told)


async def forward(session: Session, keys: ActionKeys, *, rounds: int = ROUNDS) -> Forwarded:
    """Carry the messages due in ``keys``' outbox to the queues they are for, up to
    ``rounds`` takes; safe to run anywhere at any time, by any number of forwarders at
    once (module docstring)."""
    carried = 0
    due_in_s: float | None = None
    for _ in range(rounds):
        taken = await GRAPH_TAKE(session, keys, [TAKE_LIMIT, PAGE, LEASE_MS])
        if taken.status != Status.OK:
            raise refusal(taken.status, f"graph_take in action {keys.action!r} refused")
        due_in_s = (
            None if taken.next_due_ms < 0 else max(taken.next_due_ms - taken.now_ms, 0) / 1000
        )
        if not taken.messages:
            break
        registers = [m for m in taken.messages if m.kind in ("r", "q", "R")]
        if registers:
            await _register(session, keys, registers)
        ends: list[Any] = []
        batches: dict[str, list[Any]] = defaultdict(list)
        for m in taken.messages:
            if m.kind == "e":
                for child in m.children:
                    ends += [child, m.run, m.status, m.version]
                if m.batch:
                    batches[m.batch] += [m.run, m.status, m.version]
            elif m.kind == "b":
                batches[m.batch] += [x for run in m.children for x in (run, batches_.ADDED, 0)]
        if ends:
            await _resolve(session, keys, ends)
        for batch, items in batches.items():
            await batches_.note(session, keys.namespace, batch, items)
        sweeps = [m for m in taken.messages if m.kind == "w"]
        swept = await _sweep(session, keys, sweeps)
        left = dict(zip((m.member for m in sweeps), swept, strict=True))
        cursors = [left.get(m.member, m.cursor) for m in taken.messages]
        done = [x for m, c in zip(taken.messages, cursors, strict=True) for x in (m.member, c)]
        await GRAPH_DONE(session, keys, [pack(done)])
        carried += len(taken.messages)
        if len(taken.messages) < TAKE_LIMIT and not any(cursors):
            break
    return Forwarded(carried, due_in_s)


def told_of_end(record: bytes) -> bool:
    """Whether a run record's end is told to others: runs depend on it (msgpack key
    ``gd``) or it is a batch's member (``bt``)."""
    return b"\xa2gd" in record or b"\xa2bt" in record


async def forward_after(session: Session, keys: ActionKeys) -> None:
    """A producer's forward after its own write (an invoke with parents or a batch, a
    cancel): every message due, now. A failure is logged, not raised: the write took
    effect, and the workers' upkeep carries what is left."""
    try:
        await forward(session, keys, rounds=ALL_ROUNDS)
    except Exception as exc:
        log.warning("carrying the graph messages of %r failed (%s); left to the upkeep",
                    keys.action, exc)  # fmt: skip


async def suspend(
    session: Session, keys: ActionKeys, run_id: str, token: int, worker_id: str, deps: bytes
) -> None:
    """End the held run's attempt waiting for ``deps`` (:class:`WaitFor`), then carry its
    registrations; :class:`ConflictError` for a run it waits for already (or itself),
    the refusal of a report no longer current otherwise."""
    reply = await GRAPH_SUSPEND(session, keys, [run_id, token, worker_id, deps])
    if reply.status == Status.CONFLICT:
        raise refusal(
            reply.status,
            f"run {run_id!r} cannot wait for a run it waits for already, nor for itself",
        )
    if reply.status != Status.OK:
        raise_run_refusal(reply.status, keys, run_id)
    await forward_after(session, keys)


def _state(value: str) -> RunStatus | None:
    return None if value in ("w", "", "-1") else RunStatus(int(value))


async def parents(
    session: Session, keys: ActionKeys, run_id: str, after: str | None = None, count: int = 100
) -> GraphPage:
    """A page of ``run_id``'s parents (:class:`ParentState`), in id order."""
    reply = await _listed(session, keys, "parents", run_id, after, count)
    items = [
        ParentState(pid, _ON_FAILURE.get(policy, "fail"), _state(state), state != "-1")
        for pid, policy, state, _version in reply.parents
    ]
    return GraphPage(items, reply.after or None)


async def dependents(
    session: Session, keys: ActionKeys, run_id: str, after: str | None = None, count: int = 100
) -> GraphPage:
    """A page of the ids of the runs that wait for ``run_id``, in id order (the runs of
    a group together, in invoke order: lua/graph_list.lua)."""
    reply = await _listed(session, keys, "dependents", run_id, after, count)
    return GraphPage(list(reply.dependents), reply.after or None)


async def _listed(
    session: Session, keys: ActionKeys, which: str, run_id: str, after: str | None, count: int
) -> Listed:
    """One ``graph_list`` page of ``run_id``'s ``which`` (parents or dependents), its
    paging checked first."""
    count = check_count("count", count, 1, 1000)
    after = check_text("after", after, optional=True, limit=1024)
    return await GRAPH_LIST(session, keys, [which, run_id, after, count])


async def parent_results(
    session: Session, keys: ActionKeys, run_id: str, after: str | None = None, count: int = 100
) -> GraphPage:
    """A page of ``run_id``'s parents' results (:class:`ParentResult`), for its handler:
    each ended parent's status, output and outcome (or error); those of the ``ignore``
    policy that did not complete are left out, as are parents no longer kept."""
    page = await parents(session, keys, run_id, after, count)
    states: Sequence[ParentState] = page.items
    with runner.redis_errors("parents"):
        async with session.redis.pipeline(transaction=False) as pipe:
            for p in states:
                pipe.hget(_keys_of(keys, p.run_id).runs, p.run_id)
            raws = await pipe.execute()
    results: list[ParentResult] = []
    for p, raw in zip(states, raws, strict=True):
        if raw is None:
            continue
        rec = unpack_record(raw)
        status = RunStatus(int(rec["s"]))
        if p.on_failure == "ignore" and status != RunStatus.COMPLETED:
            continue
        out = rec.get("out")
        results.append(
            ParentResult(
                p.run_id,
                status,
                bytes(out) if out is not None else None,
                text(rec.get("oc")),
                text(rec.get("err")),
            )
        )
    return GraphPage(results, page.after)


__all__ = [
    "Forwarded",
    "dependents",
    "deps_request",
    "forward",
    "parent_results",
    "parents",
    "suspend",
]
