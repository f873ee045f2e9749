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
from dataclasses import dataclass
from typing import Any

import msgpack

from flo_redis._session.session import Session
from flo_redis._wire import runner
from flo_redis._wire.aside import scope_of, warn_set_aside
from flo_redis._wire.checks import check_list
from flo_redis._wire.codec import BadRecord, pack, text, unpack_record
from flo_redis._wire.gateway import (
    GRAPH_DEPEND,
    GRAPH_DONE,
    GRAPH_RESOLVE,
    GRAPH_SUSPEND,
    GRAPH_TAKE,
)
from flo_redis._wire.graph_replies import Message
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
    OnFailure,
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
# A group's message ('G') is due this long after a member's end, so a forwarder tells the
# ends of those milliseconds in one step rather than one step per completion call.
GROUP_TELL_MS = 10
# An invoke's own forward: every registration it made (MAX_PARENTS of them) and then some.
ALL_ROUNDS = 2 * MAX_PARENTS // TAKE_LIMIT + 2
_POLICY: dict[str, str] = {"fail": "f", "ignore": "i", "run": "r"}
ON_FAILURE_OF: dict[str, OnFailure] = {"f": "fail", "i": "ignore", "r": "run"}
_NOT_ENDED = -2  # graph_depend: the parent has not ended
_NO_PARENT = -1  # graph_depend: no such parent
_RUNNING = frozenset({int(RunStatus.PENDING), int(RunStatus.RUNNING)})  # not ended
SWEEPS = 100  # groups' changes per graph_resolve call (its members paged there)
_NO_ITEMS = _NO_SWEEPS = _NO_REPORTS = pack([])
# The changes a report of a group that is not there says: more than it could ever count.
GONE = 2**53 - 1


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


# Reads of a record per queue at most while looking for whole groups in a request: each
# finds one group (or rules one id out), so a run waiting for ten batches takes ten.
WHOLE_GROUP_READS = 16


async def whole_groups(session: Session, namespace: str, deps: bytes) -> bytes:
    """``deps`` (:func:`deps_request`) with the runs of each group it names whole (every
    run of one ``invoke_many`` call that waits for parents, each under the same policy)
    named as that group instead: the run then waits for the group as one parent, counted
    as its members (lua/lib/graph.lua, "Groups"), and a member's end is one change of the
    group, not a message of its own. Each group is found by reading the record of its
    first run named here, at most WHOLE_GROUP_READS reads a queue, and then its runs'
    records: a group with a run re-queued after an end, or forgotten, is named run by
    run (its group counts such a run as it last ended, where a run registering on it
    now waits for its next end). A run re-queued between that read and the
    registration, moments later, counts as it last ended (docs/flows.md)."""
    if not deps:
        return deps
    flat = msgpack.unpackb(deps)
    if len(flat) < 4:
        return deps
    policy_of: dict[str, str] = dict(zip(flat[::2], flat[1::2], strict=True))
    numbers: dict[str, set[int]] = defaultdict(set)
    for run_id in policy_of:
        head, _, seq = run_id.rpartition(":")
        numbers[head].add(int(seq))
    groups: dict[str, str] = {}  # member -> its group, for members named whole
    for action, named in numbers.items():
        runs_key = action_keys(namespace, action).runs
        pending = sorted(named)
        for _ in range(WHOLE_GROUP_READS):
            if len(pending) < 2:
                break
            first = pending[0]
            with runner.redis_errors("depends_on"):
                raw = await session.redis.hget(runs_key, f"{action}:{first}")
            try:
                group = text(unpack_record(raw).get("dg")) if isinstance(raw, bytes) else None
            except BadRecord:  # named as itself: its queue sets it aside when it reads it
                group = None
            size = group_size(group or "")
            members = [f"{action}:{first + i}" for i in range(size)]
            if (
                group == f"{action}:{first}+{size}"
                and size >= 2
                and all(policy_of.get(m) == policy_of[members[0]] for m in members)
                and await _as_they_ended(session, runs_key, members)
            ):
                groups.update(dict.fromkeys(members, group))
                pending = [n for n in pending if n >= first + size]
            else:
                pending = pending[1:]
    if not groups:
        return deps
    out: list[str] = []
    for run_id, policy in policy_of.items():
        group = groups.get(run_id)
        if group is None:
            out += [run_id, policy]
        elif run_id == f"{group.rpartition('+')[0]}":
            out += [group, policy]
    return pack(out)


async def _as_they_ended(session: Session, runs_key: str, members: list[str]) -> bool:
    """Whether each of ``members`` stands as it last ended, or has not ended yet: none
    re-queued after an end (a run registering on it now waits for its next end, where
    its group counts the last) and none forgotten (answered not found now)."""
    with runner.redis_errors("depends_on"):
        raws = await session.redis.hmget(runs_key, members)
    for raw in raws:
        if not isinstance(raw, bytes):
            return False
        if b"\xa2gz" not in raw:  # never ended (a record without the key "gz")
            continue
        try:
            if int(unpack_record(raw)["s"]) in _RUNNING:
                return False
        except (BadRecord, KeyError, TypeError, ValueError):
            return False
    return True


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


def keys_of(keys: ActionKeys, run_id: str) -> ActionKeys:
    """The keys of the queue of ``run_id``, a run or a group of runs invoked together
    (``<action>:<first>+<n>``, lua/lib/graph.lua)."""
    head, plus, count = run_id.rpartition("+")
    if plus and count.isdigit():
        run_id = head
    return action_keys(keys.namespace, action_of_run(run_id))


async def _resolve(
    session: Session, keys: ActionKeys, items: list[Any], *, reports: bool = False
) -> None:
    """Tell children in their queue, which may be of any action: ``items`` child, parent,
    state, version of each; with ``reports``, runs that wait for groups as a whole how
    the members stand (child, group, changes, ended, bad, status, blamed of each)."""
    width = 7 if reports else 4
    by_queue: dict[ActionKeys, list[Any]] = defaultdict(list)
    for i in range(0, len(items), width):
        by_queue[keys_of(keys, items[i])] += items[i : i + width]
    for child_keys, chunk in by_queue.items():
        for at in range(0, len(chunk), width * CHUNK):
            # NO_ACTION: the child's action was deleted since; nothing is left to tell.
            part = pack(chunk[at : at + width * CHUNK])
            argv = [_NO_ITEMS, _NO_SWEEPS, part] if reports else [part, _NO_SWEEPS, _NO_REPORTS]
            reply = await GRAPH_RESOLVE(session, child_keys, argv)
            warn_set_aside(scope_of(child_keys), reply.aside)


def group_size(run_id: str) -> int:
    """How many runs the group ``run_id`` names (``<action>:<first>+<n>``); 0 for a run."""
    _, plus, count = run_id.rpartition("+")
    return int(count) if plus and count.isdigit() else 0


async def _sweep(session: Session, keys: ActionKeys, sweeps: list[Message]) -> list[str]:
    """Take groups' changes (messages ``"w"`` of ``keys``' own queue) to their members, a
    page each; where each one's next page begins (``""``: none is left)."""
    cursors: list[str] = []
    for at in range(0, len(sweeps), SWEEPS):
        chunk = sweeps[at : at + SWEEPS]
        items = pack([x for m in chunk for x in (m.run, m.version, int(m.cursor or 0))])
        reply = await GRAPH_RESOLVE(session, keys, [_NO_ITEMS, items, _NO_REPORTS])
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
                by_queue[keys_of(keys, parent)].append((parent, m.run))
        else:
            by_queue[keys_of(keys, m.parent)] += [(m.parent, child) for child in m.children]
    told: list[Any] = []
    gone: list[Any] = []  # groups that are not there: every member as a run not found
    for parent_keys, pairs in by_queue.items():
        for at in range(0, len(pairs), CHUNK):
            chunk = pairs[at : at + CHUNK]
            reply = await GRAPH_DEPEND(session, parent_keys, [pack([x for p in chunk for x in p])])
            warn_set_aside(scope_of(parent_keys), reply.aside)
            for (parent, child), (state, version) in zip(chunk, reply.states, strict=True):
                size = group_size(parent)
                if size and state == _NO_PARENT:
                    gone += [child, parent, GONE, size, size, _NO_PARENT, ""]
                elif state != _NOT_ENDED and not size:
                    told += [child, parent, state, version]
    if told:
        await _resolve(session, keys, told)
    if gone:
        await _resolve(session, keys, gone, reports=True)


async def forward(
    session: Session, keys: ActionKeys, *, rounds: int = ROUNDS, ahead_ms: int = 0
) -> Forwarded:
    """Carry the messages due in ``keys``' outbox (or due within ``ahead_ms``) to the
    queues they are for, up to ``rounds`` takes; safe to run anywhere at any time, by any
    number of forwarders at once (module docstring)."""
    carried = 0
    due_in_s: float | None = None
    for _ in range(rounds):
        taken = await GRAPH_TAKE(session, keys, [TAKE_LIMIT, PAGE, LEASE_MS, ahead_ms])
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
        reports: list[Any] = []
        batches: dict[str, list[Any]] = defaultdict(list)
        for m in taken.messages:
            if m.kind == "G":
                for child in m.children:
                    reports += [child, m.run, m.version, m.ended, m.bad, m.status, m.parent]
            elif m.kind == "e":
                for child in m.children:
                    ends += [child, m.run, m.status, m.version]
                if m.batch:
                    batches[m.batch] += [m.run, m.status, m.version]
            elif m.kind == "b":
                batches[m.batch] += [x for run in m.children for x in (run, batches_.ADDED, 0)]
        if ends:
            await _resolve(session, keys, ends)
        if reports:
            await _resolve(session, keys, reports, reports=True)
        for batch, items in batches.items():
            await batches_.note(session, keys.namespace, batch, items)
        sweeps = [m for m in taken.messages if m.kind == "w"]
        swept = await _sweep(session, keys, sweeps)
        left = dict(zip((m.member for m in sweeps), swept, strict=True))
        cursors = [left.get(m.member, m.cursor) for m in taken.messages]
        # A group's message says which of its changes it told (graph_done).
        done = [
            x
            for m, c in zip(taken.messages, cursors, strict=True)
            for x in (m.member, f"{m.version}\0{c}" if m.kind == "G" else c)
        ]
        await GRAPH_DONE(session, keys, [pack(done)])
        carried += len(taken.messages)
        if len(taken.messages) < TAKE_LIMIT and not any(cursors):
            break
    return Forwarded(carried, due_in_s)


def told_of_end(record: bytes) -> bool:
    """Whether a run record's end is told to others: runs depend on it (msgpack key
    ``gd``), it is a batch's member (``bt``) or a group's (``dg``: runs may wait for the
    group as a whole)."""
    return b"\xa2gd" in record or b"\xa2bt" in record or b"\xa2dg" in record


async def forward_after(session: Session, keys: ActionKeys) -> None:
    """A producer's forward after its own write (an invoke with parents or a batch, a
    cancel): every message due, now, a group's tally due within GROUP_TELL_MS with them
    (what it carries does not hang on how many ms passed). A failure is logged, not
    raised: the write took effect, and the workers' upkeep carries what is left."""
    try:
        await forward(session, keys, rounds=ALL_ROUNDS, ahead_ms=GROUP_TELL_MS)
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


__all__ = [
    "Forwarded",
    "deps_request",
    "forward",
    "suspend",
    "whole_groups",
]
