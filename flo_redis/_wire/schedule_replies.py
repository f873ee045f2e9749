"""The replies of the schedule scripts (``lua/schedule_*.lua``), read once into frozen
dataclasses, as :mod:`flo_redis._wire.replies` does for the other families."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flo_redis._wire.replies import fixed


@dataclass(frozen=True, slots=True)
class DueRows:
    """``schedule_due``: the server time, the first occurrence after it of any of the
    action's schedules (0: none) and ``(name, due_ms, record)`` in due order."""

    now_ms: int
    next_ms: int
    rows: tuple[tuple[str, int, bytes], ...]


def due_rows(reply: Any, _keys: object) -> DueRows:
    rows = tuple(
        (bytes(reply[i]).decode(), int(reply[i + 1]), bytes(reply[i + 2]))
        for i in range(3, len(reply), 3)
    )
    return DueRows(int(reply[1]), int(reply[2]), rows)


@dataclass(frozen=True, slots=True)
class ListedRow:
    """One schedule as ``schedule_list`` read it: its next (or held) occurrence, whether
    it is paused, its record and the note of what it last did (empty: none)."""

    name: str
    next_ms: int
    paused: bool
    record: bytes
    note: bytes


@dataclass(frozen=True, slots=True)
class Listed:
    """``schedule_list``: the server time and the schedules read."""

    now_ms: int
    rows: tuple[ListedRow, ...]


def listed(reply: Any, _keys: object) -> Listed:
    rows = tuple(
        ListedRow(
            bytes(reply[i]).decode(),
            int(reply[i + 1]),
            bool(int(reply[i + 2])),
            bytes(reply[i + 3]),
            bytes(reply[i + 4]),
        )
        for i in range(2, len(reply), 5)
    )
    return Listed(int(reply[1]), rows)


@dataclass(frozen=True, slots=True)
class Fired:
    """``schedule_fire`` and ``schedule_trigger``: the run created (or the one that
    existed already), or, for TOO_LARGE, the payload limit in ``run_id``."""

    status: int
    run_id: str = ""
    existing: bool = False


fired = fixed(Fired)


@dataclass(frozen=True, slots=True)
class Steered:
    """``schedule_pause`` and ``schedule_resume``: whether it changed, and the
    occurrence the schedule is at (next, or held while paused)."""

    status: int
    changed: bool = False
    next_ms: int = 0


steered = fixed(Steered)


@dataclass(frozen=True, slots=True)
class SetReply:
    """``schedule_set``: whether the schedule changed, and whether it is paused."""

    status: int
    changed: bool = False
    paused: bool = False


set_reply = fixed(SetReply)
