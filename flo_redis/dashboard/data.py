"""What each dashboard page shows, read through the client's public operations.

Every figure comes from the same scripts and registries the library uses (action and
worker registries, the queues' own sets); nothing here scans keys. Pages are bounded:
at most :data:`MAX_ACTIONS` actions and :data:`MAX_WORKERS` workers are listed, and run
lists are pages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..action_ops import ActionCounts, RunPage, RunState
from ..client import FloClient
from ..reclaim import LivenessStats
from ..streams import DeadLetter, StreamDeadLetterOptions
from ..types import (
    ActionInfo,
    ActionListOptions,
    ActionRunStatus,
    PendingEntry,
    RunStatus,
    StreamGroupReadOptions,
    StreamInfo,
    StreamInfoOptions,
    WorkerInfo,
    WorkerListOptions,
    WorkerStatus,
)

MAX_ACTIONS = 500
MAX_WORKERS = 1000
RUNS_SHOWN = 50  # runs a page of an action's runs lists
RECENT_FAILURES = 10  # failed runs on the overview
GROUP_ROWS = 100  # pending entries / dead letters listed for a group
REQUEUEABLE = (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.CANCELLED)


@dataclass(frozen=True)
class ActionRow:
    info: ActionInfo
    counts: ActionCounts
    workers: int  # registered workers serving it


@dataclass(frozen=True)
class WorkerSummary:
    total: int
    by_status: dict[str, int]
    load: int
    capacity: int


@dataclass(frozen=True)
class Overview:
    actions: list[ActionRow]
    more_actions: bool
    failures: list[ActionRunStatus]
    workers: WorkerSummary


@dataclass(frozen=True)
class ActionPage:
    info: ActionInfo | None
    counts: ActionCounts
    runs: RunPage
    stats: LivenessStats
    workers: list[WorkerInfo]


@dataclass(frozen=True)
class GroupPage:
    stream: str
    group: str
    info: StreamInfo
    pending: list[PendingEntry]
    dead: list[DeadLetter]
    consumers: dict[str, int] = field(default_factory=dict)  # pending entries per consumer


async def list_actions(client: FloClient) -> tuple[list[ActionInfo], bool]:
    """Registered actions in name order, at most MAX_ACTIONS; True if there are more."""
    found: list[ActionInfo] = []
    cursor: bytes | None = None
    while len(found) < MAX_ACTIONS:
        page = await client.action.list(ActionListOptions(limit=100, cursor=cursor))
        found.extend(page.actions)
        cursor = page.cursor
        if cursor is None:
            return found, False
    return found[:MAX_ACTIONS], True


async def list_workers(client: FloClient) -> list[WorkerInfo]:
    """Registered workers in id order, at most MAX_WORKERS."""
    found: list[WorkerInfo] = []
    cursor: bytes | None = None
    while len(found) < MAX_WORKERS:
        page = await client.worker.list(WorkerListOptions(limit=1000, cursor=cursor))
        found.extend(page.workers)
        cursor = page.cursor
        if cursor is None:
            break
    return found[:MAX_WORKERS]


def summarize(workers: Sequence[WorkerInfo]) -> WorkerSummary:
    by_status: dict[str, int] = {}
    for w in workers:
        by_status[w.status.name] = by_status.get(w.status.name, 0) + 1
    return WorkerSummary(
        total=len(workers),
        by_status=by_status,
        load=sum(w.current_load for w in workers),
        capacity=sum(w.max_concurrency for w in workers if w.status == WorkerStatus.ACTIVE),
    )


async def overview(client: FloClient) -> Overview:
    """Every action with its counts, the workers, and the newest failed runs."""
    actions, more = await list_actions(client)
    workers = await list_workers(client)
    counts = await asyncio.gather(*(client.action.counts(a.name) for a in actions))
    rows = [
        ActionRow(a, c, sum(1 for w in workers if a.name in w.task_types))
        for a, c in zip(actions, counts, strict=True)
    ]
    failing = [r.info.name for r in rows if r.counts.failed + r.counts.timed_out]
    pages = await asyncio.gather(
        *(client.action.runs(n, RunState.FAILED, limit=RECENT_FAILURES) for n in failing)
    )
    failures = sorted(
        (run for page in pages for run in page.runs),
        key=lambda r: r.completed_at_ms or 0,
        reverse=True,
    )[:RECENT_FAILURES]
    return Overview(rows, more, failures, summarize(workers))


async def action_page(
    client: FloClient, name: str, state: str | None, cursor: bytes | None
) -> ActionPage:
    """One action: its settings, counts, a page of its runs in ``state`` (by default
    failed ones if there are any, else pending ones), liveness counters and workers.
    NotFoundError if it is not registered."""
    counts = await client.action.counts(name)
    if state is None:
        state = RunState.FAILED if counts.failed + counts.timed_out else RunState.PENDING
    runs = await client.action.runs(name, state, limit=RUNS_SHOWN, cursor=cursor)
    stats = await client.action.stats(name)
    actions = await client.action.list(ActionListOptions(prefix=name, limit=1))
    info = next((a for a in actions.actions if a.name == name), None)
    workers = [w for w in await list_workers(client) if name in w.task_types]
    return ActionPage(info, counts, runs, stats, workers)


async def group_page(client: FloClient, stream: str, group: str) -> GroupPage:
    """A consumer group of a stream: the stream's size, the group's pending entries
    (oldest first) and dead letters (oldest first), at most GROUP_ROWS of each."""
    info = await client.stream.info(stream, StreamInfoOptions())
    pending = await client.stream.group_pending(
        stream, group, options=StreamGroupReadOptions(count=GROUP_ROWS)
    )
    dead = await client.stream.dead_letters(
        stream, group, StreamDeadLetterOptions(count=GROUP_ROWS)
    )
    consumers: dict[str, int] = {}
    for entry in pending:
        consumers[entry.consumer] = consumers.get(entry.consumer, 0) + 1
    return GroupPage(stream, group, info, pending, dead, consumers)
