"""The worker registry's replies (``worker_poll``, ``worker_list``, ``worker_presence``,
``worker_configure``): one frozen dataclass and one parser per reply shape, as in
:mod:`flo_redis._wire.replies`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flo_redis._wire.replies import fixed


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
