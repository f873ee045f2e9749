"""The replies of the operator's reads and bulk steering (``action_counts``,
``action_history``, ``action_runs``, ``action_find``, ``action_requeue_failed``,
``action_purge``, ``action_flow_keys``): one
frozen dataclass and one parser per reply shape, as in :mod:`flo_redis._wire.replies`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flo_redis._wire.aside import SetAside
from flo_redis._wire.codec import text
from flo_redis._wire.replies import fixed, row_starts, with_aside
from flo_redis._wire.status import Status


@dataclass(frozen=True, slots=True)
class ActionCounts:
    """How many runs an action holds in each state, read atomically at ``at_ms``.

    ``failed`` counts FAILED and CANCELLED runs, ``timed_out`` those that ended TIMED_OUT
    (both are kept until re-queued or purged); ``completed`` counts the completed runs
    still kept (retention). ``completed_per_minute`` / ``failed_per_minute`` count runs
    that ended in each of the last 60 minutes, oldest first, the last being the current
    minute (``failed`` there includes timed out). ``next_due_ms`` is when the earliest
    delayed run becomes ready (None without delayed runs). ``completed_total`` /
    ``failed_total`` count every run that ended so since the action was registered
    (a deleted action starts again from 0). ``quarantined`` counts the records set aside
    in the action's quarantine (runs, schedules, slot holders that did not decode:
    :mod:`flo_redis.quarantine`). ``awaiting_parents`` counts the runs (PENDING) that
    wait for their parents to end (``depends_on``, docs/flows.md): in no other count
    until they are ready."""

    action: str
    namespace: str
    at_ms: int
    pending: int
    delayed: int
    running: int
    completed: int
    failed: int
    timed_out: int
    next_due_ms: int | None
    completed_total: int
    failed_total: int
    completed_per_minute: tuple[int, ...]
    failed_per_minute: tuple[int, ...]
    quarantined: int = 0
    awaiting_parents: int = 0

    @property
    def waiting(self) -> int:
        """Runs not started yet: pending plus delayed."""
        return self.pending + self.delayed

    @property
    def completed_last_hour(self) -> int:
        return sum(self.completed_per_minute)

    @property
    def failed_last_hour(self) -> int:
        return sum(self.failed_per_minute)


@dataclass(frozen=True, slots=True)
class Counts:
    """``action_counts``: the status, and on OK the action's counts."""

    status: int
    counts: ActionCounts | None


MINUTES = 60  # per-minute buckets kept (lib/tally.lua)


def counts(reply: Any, keys: Any) -> Counts:
    """``{status, at_ms, pending, delayed, running, completed, failed, timed_out,
    next_due_ms, completed_total, failed_total, quarantined, awaiting_parents, completed
    * m, failed * m}``: the last 2m values are per-minute tallies, oldest first."""
    n = [int(x) for x in reply]
    if n[0] != Status.OK or len(n) < 13:
        return Counts(n[0], None)
    minutes = n[13:]
    half = len(minutes) // 2
    return Counts(
        Status.OK,
        ActionCounts(
            keys.action, keys.namespace, n[1], n[2], n[3], n[4], n[5], n[6], n[7],
            None if n[8] < 0 else n[8], n[9], n[10],
            tuple(minutes[:half][:MINUTES]), tuple(minutes[half:][:MINUTES]), n[11], n[12],
        ),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class HistorySlots:
    """``action_history``: the server time of the read and the ring's slots, oldest
    minute first (decoded by :mod:`flo_redis.actions.history`)."""

    status: int
    now_ms: int = 0
    slots: bytes = b""


history_slots = fixed(HistorySlots)


@dataclass(frozen=True, slots=True)
class RunRow:
    run_id: str
    score: str
    record: bytes | None


@dataclass(frozen=True, slots=True)
class RunRows:
    """``action_runs``: a page of runs with their scores and records."""

    status: int
    more: bool
    rows: tuple[RunRow, ...]


def _rows(reply: Any, at: int) -> tuple[RunRow, ...]:
    """The ``n`` rows ``(run_id, score, record)`` that follow ``n`` at ``reply[at]``."""
    return tuple(
        RunRow(text(reply[i]) or "", text(reply[i + 1]) or "", reply[i + 2] or None)
        for i in row_starts(reply, at, 3)
    )


def run_rows(reply: Any, _keys: object) -> RunRows:
    if int(reply[0]) != Status.OK:
        return RunRows(int(reply[0]), False, ())
    return RunRows(Status.OK, bool(int(reply[1])), _rows(reply, 2))


@dataclass(frozen=True, slots=True)
class FoundRows:
    """``action_find``: the matches of one bounded step, and where it stopped."""

    status: int
    more: bool = False
    last_score: str = ""
    last_id: str = ""
    examined: int = 0
    rows: tuple[RunRow, ...] = ()


def found_rows(reply: Any, _keys: object) -> FoundRows:
    if int(reply[0]) != Status.OK:
        return FoundRows(int(reply[0]))
    return FoundRows(
        Status.OK, bool(int(reply[1])), text(reply[2]) or "", text(reply[3]) or "",
        int(reply[4]), _rows(reply, 5),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class BulkStep:
    """``action_requeue_failed`` / ``action_purge``: one bounded step."""

    status: int
    count: int = 0
    remaining: int = 0
    upto: str = ""
    aside: tuple[SetAside, ...] = ()


bulk_step = with_aside(BulkStep, 4)


@dataclass(frozen=True, slots=True)
class FlowKey:
    """One flow key of an action (``lua/lib/flow.lua``): ``waiting`` its runs among the
    waiting runs looked at (the head of the queue), ``running`` its runs running,
    ``held`` its runs held back by its concurrency limit, ``started`` its starts in its
    rate window (0 without a per-key rate), ``paused_until_ms`` the end of a
    RateLimited pause (None: not paused)."""

    key: str
    waiting: int
    running: int
    held: int
    started: int
    paused_until_ms: int | None


@dataclass(frozen=True, slots=True)
class FlowKeys:
    """An action's busiest flow keys, busiest first, read atomically at ``at_ms``;
    ``looked_at``: the waiting runs looked at (``waiting`` counts among those)."""

    action: str
    at_ms: int
    looked_at: int
    keys: tuple[FlowKey, ...]


@dataclass(frozen=True, slots=True)
class FlowKeysReply:
    status: Status
    flow_keys: FlowKeys | None


def flow_keys(reply: Any, keys: Any) -> FlowKeysReply:
    """``{status, now_ms, looked, n, (key, waiting, running, held, started,
    paused_until) * n}``."""
    status = Status(int(reply[0]))
    if status != Status.OK:
        return FlowKeysReply(status, None)
    rows = []
    for i in row_starts(reply, 3, 6):
        paused = int(reply[i + 5])
        rows.append(
            FlowKey(
                text(reply[i]) or "", int(reply[i + 1]), int(reply[i + 2]), int(reply[i + 3]),
                int(reply[i + 4]), paused or None,
            )
        )  # fmt: skip
    return FlowKeysReply(status, FlowKeys(keys.action, int(reply[1]), int(reply[2]), tuple(rows)))
