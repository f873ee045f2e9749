"""The replies of the graph scripts (``lua/graph_*.lua``; ``lua/lib/graph.lua``), read
once, as :mod:`flo_redis._wire.replies` reads the others."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from flo_redis._wire.aside import SetAside
from flo_redis._wire.codec import text
from flo_redis._wire.replies import set_aside, with_aside


@dataclass(frozen=True, slots=True)
class Message:
    """One outbox message a forwarder carries: ``kind`` ``"r"`` (``children`` to register
    on ``parent`` under ``policy``; ``"q"`` the same for a group, its one child), ``"R"``
    (the child ``run`` to register on a page of its parents, here ``children``;
    ``cursor`` as for ``"e"``), ``"e"`` (``run`` ended with ``status``, its end number
    ``version``; ``children`` the next page of those depending on it, ``cursor`` where
    the page ends, ``""`` for the last) or ``"w"`` (the group ``run``'s change
    ``version`` to take to its members from number ``cursor`` on) or ``"G"`` (how the
    members of the group ``run`` stand after ``version`` ends: ``ended`` of them ended,
    ``bad`` otherwise than completed, ``parent`` one of those, ending ``status``; for
    ``children``, the next page of the runs that wait for the group as a whole)."""

    member: bytes
    kind: str
    run: str
    parent: str = ""
    policy: str = ""
    version: int = 0
    status: int = 0
    cursor: str = ""
    children: tuple[str, ...] = ()
    batch: str = ""
    ended: int = 0
    bad: int = 0


@dataclass(frozen=True, slots=True)
class Taken:
    """``graph_take``: Redis's time, when the earliest message left is due (-1: none)
    and the messages taken."""

    status: int
    now_ms: int = 0
    next_due_ms: int = -1
    messages: tuple[Message, ...] = ()


def _message(row: Any) -> Message:
    member, kind = bytes(row[0]), text(row[1]) or ""
    if kind == "R":  # one child, a page of its parents: as "r" messages, one per parent
        parents = tuple(text(p) or "" for p in row[4])
        return Message(member, kind, text(row[2]) or "", cursor=text(row[3]) or "",
                       children=parents)  # fmt: skip
    if kind == "q":  # a group, to register on its parent as one child
        group = text(row[2]) or ""
        return Message(member, kind, "", text(row[3]) or "", text(row[4]) or "",
                       children=(group,))  # fmt: skip
    if kind == "w":  # a group's change, for its members
        return Message(member, kind, text(row[2]) or "", version=int(row[3]),
                       cursor=text(row[4]) or "0")  # fmt: skip
    if kind == "G":  # how a group's members stand, for the runs that wait for it
        return Message(member, kind, text(row[2]) or "", text(row[7]) or "",
                       version=int(row[3]), ended=int(row[4]), bad=int(row[5]),
                       status=int(row[6]), cursor=text(row[8]) or "",
                       children=tuple(text(c) or "" for c in row[9]))  # fmt: skip
    if kind in ("r", "b"):  # children of a parent, or members of a batch
        prefix, first, n = text(row[2]) or "", int(row[3]), int(row[4])
        runs = tuple(f"{prefix}{first + i}" for i in range(n))
        if kind == "b":
            return Message(member, kind, "", children=runs, batch=text(row[5]) or "")
        return Message(member, kind, "", text(row[5]) or "", text(row[6]) or "", children=runs)
    return Message(
        member,
        kind,
        text(row[2]) or "",
        version=int(row[3]),
        status=int(row[4]),
        cursor=text(row[5]) or "",
        children=tuple(text(c) or "" for c in row[6]),
        batch=text(row[7]) or "",
    )


def taken(reply: Any, _keys: object) -> Taken:
    if len(reply) < 3:
        return Taken(int(reply[0]))
    return Taken(int(reply[0]), int(reply[1]), int(reply[2]), tuple(map(_message, reply[3:])))


@dataclass(frozen=True, slots=True)
class Depended:
    """``graph_depend``: per pair, the parent's state (-1: no such run, -2: not ended,
    else the status it ended with) and its version; the parents it set aside."""

    status: int
    states: tuple[tuple[int, int], ...] = ()
    aside: tuple[SetAside, ...] = ()


def depended(reply: Any, _keys: object) -> Depended:
    if len(reply) < 2 or not isinstance(reply[1], list):
        return Depended(int(reply[0]))  # a refusal
    values = [int(v) for v in reply[2:]]
    pairs = tuple(zip(values[::2], values[1::2], strict=True))
    return Depended(int(reply[0]), pairs, set_aside(reply[1]))


@dataclass(frozen=True, slots=True)
class Resolved:
    """``graph_resolve``: children made ready, ended by a parent, given attempts again;
    per group change carried (its message ``"w"``), where its next page begins (``""``:
    none is left)."""

    status: int
    ready: int = 0
    ended: int = 0
    revived: int = 0
    cursors: tuple[str, ...] = ()
    aside: tuple[SetAside, ...] = ()


_resolved = with_aside(Resolved, 4)


def resolved(reply: Any, keys: object) -> Resolved:
    if len(reply) < 5:
        return _resolved(reply, keys)
    cursors = tuple(text(c) or "" for c in reply[4])
    return replace(_resolved([*reply[:4], *reply[5:]], keys), cursors=cursors)


@dataclass(frozen=True, slots=True)
class Listed:
    """``graph_list``: a page of a run's parents (id, policy, state, version each) or
    dependents (ids), and the cursor of the next page ("" for none)."""

    status: int
    after: str = ""
    parents: tuple[tuple[str, str, str, int], ...] = ()
    dependents: tuple[str, ...] = ()


def listed(reply: Any, _keys: object) -> Listed:
    status, more, rows = int(reply[0]), text(reply[1]) or "", reply[2:]
    if rows and isinstance(rows[0], list):
        parents = tuple(
            (text(r[0]) or "", text(r[1]) or "", text(r[2]) or "", int(r[3])) for r in rows
        )
        return Listed(status, more, parents=parents)
    return Listed(status, more, dependents=tuple(text(r) or "" for r in rows))


@dataclass(frozen=True, slots=True)
class BatchMessage:
    """One message of a batch's outbox: ``kind`` ``"c"`` (make the callback ``name``: a
    run of ``action`` with ``data``), ``"p"`` (tell the ``parent`` batch this one ended
    with ``status``, its ``version``-th outcome) or ``"a"`` (tell ``parent`` it has this
    batch as a member)."""

    member: bytes
    kind: str
    name: str = ""
    action: str = ""
    data: bytes = b""
    parent: str = ""
    status: int = 0
    version: int = 0


def _batch_message(row: Any) -> BatchMessage:
    member, kind = bytes(row[0]), text(row[1]) or ""
    if kind == "c":
        return BatchMessage(member, kind, text(row[2]) or "", text(row[3]) or "", bytes(row[4]))
    if kind == "p":
        return BatchMessage(member, kind, parent=text(row[2]) or "", status=int(row[3]),
                            version=int(row[4]))  # fmt: skip
    return BatchMessage(member, kind, parent=text(row[2]) or "")


@dataclass(frozen=True, slots=True)
class BatchTaken:
    """``batch_take``: the batch's messages taken."""

    status: int
    messages: tuple[BatchMessage, ...] = ()


def batch_taken(reply: Any, _keys: object) -> BatchTaken:
    return BatchTaken(int(reply[0]), tuple(map(_batch_message, reply[1:])))
