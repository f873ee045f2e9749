"""The replies of the schedule scripts (``lua/schedule_*.lua``), read once into frozen
dataclasses, as :mod:`flo_redis._wire.replies` does for the other families."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flo_redis._wire.replies import fixed


@dataclass(frozen=True, slots=True)
class DueRows:
    """``schedule_due``: the server time and ``(name, due_ms, record)`` in due order."""

    now_ms: int
    rows: tuple[tuple[str, int, bytes], ...]


def due_rows(reply: Any, _keys: object) -> DueRows:
    rows = tuple(
        (bytes(reply[i]).decode(), int(reply[i + 1]), bytes(reply[i + 2]))
        for i in range(2, len(reply), 3)
    )
    return DueRows(int(reply[1]), rows)


@dataclass(frozen=True, slots=True)
class Fired:
    """``schedule_fire``: the run of the occurrence, and whether it existed already."""

    status: int
    run_id: str = ""
    existing: bool = False


fired = fixed(Fired)
