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
FAILED_SHOWN = 100  # failed runs listed on an action page
RECENT_FAILURES = 10  # failed runs on the overview
GROUP_ROWS = 100  # pending entries / dead letters listed for a group
REQUEUEABLE = (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.CANCELLED)


@dataclass(frozen=True)
class ActionRow:
    info: ActionInfo
    failed: int  # failed runs kept (at most FAILED_SHOWN are counted)
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
    failed: list[ActionRunStatus]
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
    actions, more = await list_actions(client)
    workers = await list_workers(client)
    failed = await asyncio.gather(
        *(client.action.failed(a.name, limit=FAILED_SHOWN) for a in actions)
    )
    rows = [
        ActionRow(a, len(f), sum(1 for w in workers if a.name in w.task_types))
        for a, f in zip(actions, failed, strict=True)
    ]
    failures = sorted(
        (run for runs in failed for run in runs),
        key=lambda r: r.completed_at_ms or 0,
        reverse=True,
    )[:RECENT_FAILURES]
    return Overview(rows, more, failures, summarize(workers))


async def action_page(client: FloClient, name: str) -> ActionPage:
    """One action's settings, failed runs and liveness counters; NotFoundError if it is
    not registered."""
    stats = await client.action.stats(name)
    failed = await client.action.failed(name, limit=FAILED_SHOWN)
    actions = await client.action.list(ActionListOptions(prefix=name, limit=1))
    info = next((a for a in actions.actions if a.name == name), None)
    workers = [w for w in await list_workers(client) if name in w.task_types]
    failed.sort(key=lambda r: r.completed_at_ms or 0, reverse=True)
    return ActionPage(info, failed, stats, workers)


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
