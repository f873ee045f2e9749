"""Reads of a run's graph: its parents, with the runs of a group it waits for as a
whole listed one by one; the runs that wait for it, with those that wait for its group;
and its parents' results, for its handler (lua/graph_list.lua, lua/lib/graph.lua)."""

from __future__ import annotations

from collections.abc import Sequence

from flo_redis._session.session import Session
from flo_redis._wire import runner
from flo_redis._wire.checks import check_count, check_text
from flo_redis._wire.codec import BadRecord, text, unpack_record
from flo_redis._wire.gateway import GRAPH_LIST
from flo_redis._wire.graph_replies import Listed
from flo_redis._wire.keys import ActionKeys
from flo_redis.actions.graph import GONE, ON_FAILURE_OF, group_size, keys_of
from flo_redis.types import RunStatus
from flo_redis.types.graph import GraphPage, ParentResult, ParentState

# A dependents cursor past the run's own: then those that wait for its group, after
# the rest of the cursor.
_WATCHERS = "\0group\0"


def _state(value: str) -> RunStatus | None:
    return None if value in ("w", "", "-1") else RunStatus(int(value))


async def parents(
    session: Session, keys: ActionKeys, run_id: str, after: str | None = None, count: int = 100
) -> GraphPage:
    """A page of ``run_id``'s parents (:class:`ParentState`), in id order; the runs of a
    group it waits for as a whole come together, in the order invoked, in the group's
    place, each as it was told (None while its end is on its way)."""
    count = check_count("count", count, 1, 1000)
    cursor = check_text("after", after, optional=True, limit=1024) or ""
    items: list[ParentState] = []
    if cursor.count("\0") == 3:  # a page that ended within a group: the rest of it first
        group, at, policy, changes = cursor.split("\0")
        left = await _members(session, keys, items, group, int(at), policy, int(changes), count)
        if left:
            return GraphPage(items, left)
        cursor = group
    while len(items) < count:
        reply = await GRAPH_LIST(session, keys, ["parents", run_id, cursor, count - len(items)])
        for pid, policy, state, version in reply.parents:
            if len(items) == count:
                return GraphPage(items, cursor)
            if state == "g":
                left = await _members(session, keys, items, pid, 0, policy, version, count)
                if left:
                    return GraphPage(items, left)
            else:
                on_failure = ON_FAILURE_OF.get(policy, "fail")
                items.append(ParentState(pid, on_failure, _state(state), state != "-1"))
            cursor = pid
        if not reply.after:
            return GraphPage(items, None)
        cursor = reply.after
    return GraphPage(items, cursor)


async def _members(
    session: Session,
    keys: ActionKeys,
    items: list[ParentState],
    group: str,
    start: int,
    policy: str,
    changes: int,
    count: int,
) -> str:
    """Add the members of ``group`` (a parent told ``changes`` of their ends) from number
    ``start`` on to ``items`` while there is room for ``count``: each with the status it
    last ended with, if that end was told; the cursor if room ran out first, else ""."""
    head, _, first = group.rpartition("+")[0].rpartition(":")
    size, base = group_size(group), int(first)
    ids = [f"{head}:{base + i}" for i in range(start, min(size, start + count - len(items)))]
    if not ids:
        return ""
    with runner.redis_errors("parents"):
        raws = await session.redis.hmget(keys_of(keys, group).runs, ids)
    on_failure = ON_FAILURE_OF.get(policy, "fail")
    for run_id, raw in zip(ids, raws, strict=True):
        status = None
        try:
            rec = unpack_record(raw) if isinstance(raw, bytes) else {}
        except BadRecord:
            rec = {}
        if rec.get("gz") is not None and int(rec.get("gs", 0)) <= changes:
            status = RunStatus(int(rec["gz"]))
        items.append(ParentState(run_id, on_failure, status, changes != GONE))
    at = start + len(ids)
    return f"{group}\0{at}\0{policy}\0{changes}" if at < size else ""


async def dependents(
    session: Session, keys: ActionKeys, run_id: str, after: str | None = None, count: int = 100
) -> GraphPage:
    """A page of the ids of the runs that wait for ``run_id``, in id order (the runs of
    a group together, in invoke order: lua/graph_list.lua), then those that wait for its
    group as a whole (the runs of one ``invoke_many``: lua/lib/graph.lua)."""
    count = check_count("count", count, 1, 1000)
    cursor = check_text("after", after, optional=True, limit=1024) or ""
    items: list[str] = []
    if not cursor.startswith(_WATCHERS):
        reply = await _listed(session, keys, "dependents", run_id, cursor, count)
        items = list(reply.dependents)
        if reply.after:
            return GraphPage(items, reply.after)
        cursor = _WATCHERS
    group = await _group_of(session, keys, run_id)
    if group is None:
        return GraphPage(items, None)
    if len(items) == count:
        return GraphPage(items, _WATCHERS)
    reply = await _listed(
        session, keys, "dependents", group, cursor[len(_WATCHERS) :], count - len(items)
    )
    items += reply.dependents
    return GraphPage(items, _WATCHERS + reply.after if reply.after else None)


async def _group_of(session: Session, keys: ActionKeys, run_id: str) -> str | None:
    """The group ``run_id`` is a member of (its record's ``dg``), if any."""
    with runner.redis_errors("dependents"):
        raw = await session.redis.hget(keys.runs, run_id)
    try:
        return text(unpack_record(raw).get("dg")) if isinstance(raw, bytes) else None
    except BadRecord:
        return None


async def _listed(
    session: Session, keys: ActionKeys, which: str, run_id: str, after: str, count: int
) -> Listed:
    """One ``graph_list`` page of ``run_id``'s ``which`` (parents or dependents)."""
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
                pipe.hget(keys_of(keys, p.run_id).runs, p.run_id)
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


__all__ = ["dependents", "parent_results", "parents"]
