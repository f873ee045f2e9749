"""The worker registry's replies (``worker_poll``, ``worker_list``, ``worker_presence``,
``worker_configure``, and ``action_held``: what each worker holds): one frozen dataclass
and one parser per reply shape, as in :mod:`flo_redis._wire.replies`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flo_redis._wire.replies import fixed, row_starts


@dataclass(frozen=True, slots=True)
class WorkerGate:
    """``worker_poll``: the worker's metadata (its labels) when it may take work."""

    status: int
    metadata: str = ""


worker_gate = fixed(WorkerGate)


@dataclass(frozen=True, slots=True)
class WorkerRow:
    worker_id: str
    record: bytes
    worker_status: int


@dataclass(frozen=True, slots=True)
class WorkerPage:
    """``worker_list``: a page of workers, and the last id if there are more."""

    status: int
    more: bool
    last_id: bytes
    rows: tuple[WorkerRow, ...]


def worker_page(reply: Any, _keys: object) -> WorkerPage:
    rows = tuple(
        WorkerRow(reply[i].decode(), reply[i + 1], int(reply[i + 2]))
        for i in range(3, len(reply), 3)
    )
    return WorkerPage(int(reply[0]), bool(int(reply[1])), bytes(reply[2]), rows)


@dataclass(frozen=True, slots=True)
class Presence:
    """``worker_presence``: the subscriber count of each channel asked about, in order."""

    status: int
    counts: tuple[int, ...]


def presence(reply: Any, _keys: object) -> Presence:
    return Presence(int(reply[0]), tuple(int(c) for c in reply[1:]))


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """``worker_configure``: the namespace's worker health settings in force (OK), or
    those refused (OUT_OF_RANGE: the removal would come before the heartbeat timeout)."""

    status: int
    heartbeat_timeout_ms: int = 0
    remove_after_ms: int = 0


worker_settings = fixed(WorkerSettings)


@dataclass(frozen=True, slots=True)
class HeldRow:
    """A run a worker holds: its fencing token, attempt, start and lease deadline (ms;
    -1: none), and whether it is only offered (handed, not yet accepted)."""

    run_id: str
    token: int
    attempt: int
    started_at_ms: int
    deadline_ms: int
    offered: bool


@dataclass(frozen=True, slots=True)
class Holding:
    """``action_held``, for one holder: how many runs it holds (all of them when
    ``complete``, else at least), and the first of them."""

    held: int
    complete: bool
    runs: tuple[HeldRow, ...]


@dataclass(frozen=True, slots=True)
class Held:
    """``action_held``: one :class:`Holding` per holder asked about, in order."""

    status: int
    holdings: tuple[Holding, ...]


def held(reply: Any, _keys: object) -> Held:
    holdings: list[Holding] = []
    i = 1
    while i < len(reply):
        n = int(reply[i + 2])
        runs = tuple(
            HeldRow(
                reply[j].decode(),
                int(reply[j + 1]),
                int(reply[j + 2]),
                int(reply[j + 3]),
                int(reply[j + 4]),
                bool(int(reply[j + 5])),
            )
            for j in row_starts(reply, i + 2, 6)
        )
        holdings.append(Holding(int(reply[i]), bool(int(reply[i + 1])), runs))
        i += 3 + 6 * n
    return Held(int(reply[0]), tuple(holdings))
