"""What each dashboard page shows, read through the client's public operations.

Every figure comes from the same scripts and registries the library uses
(:mod:`flo_redis.ops.discovery` for what exists, ``client.action.counts`` / ``runs`` for the
queues, ``client.stream.groups`` for consumer groups); nothing here scans keys. Run
lists are pages, and a group page shows at most :data:`GROUP_ROWS` entries of each kind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

from flo_redis._session.liveness_stats import LivenessStats
from flo_redis.actions.inspect import ActionCounts, FlowKeys, RunPage, RunState
from flo_redis.client import FloClient
from flo_redis.dashboard.history import HistoryCharts, action_charts, overview_charts
from flo_redis.errors import ValidationError
from flo_redis.ops import discovery
from flo_redis.ops.discovery import WorkerNow, WorkerSummary
from flo_redis.quarantine import (
    ActionQuarantine,
    GroupQuarantine,
    Quarantine,
    QueueQuarantine,
    WorkerQuarantine,
)
from flo_redis.streams import DeadLetter, StreamDeadLetterOptions
from flo_redis.streams.inspect import GroupCounts
from flo_redis.types import (
    ActionInfo,
    ActionListOptions,
    ActionRunStatus,
    PendingEntry,
    RunStatus,
    StreamGroupReadOptions,
    StreamInfo,
    StreamInfoOptions,
    WorkerInfo,
)

RUNS_SHOWN = 50  # runs a page of an action's runs lists
RECENT_FAILURES = 10  # failed runs on the overview
FLOW_KEYS_SHOWN = 10  # flow keys an action's page lists: the busiest
GROUP_ROWS = 100  # pending entries / dead letters listed for a group
QUARANTINE_ROWS = 50  # records set aside a quarantine page lists
REQUEUEABLE = (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.CANCELLED)
CANCELLABLE = (RunStatus.PENDING, RunStatus.RUNNING)


@dataclass(frozen=True)
class ActionRow:
    counts: ActionCounts
    workers: int  # live registered workers serving it (their process is not gone)


@dataclass(frozen=True)
class Overview:
    actions: list[ActionRow]
    failures: list[ActionRunStatus]
    workers: WorkerSummary
    groups: tuple[GroupCounts, ...]
    history: HistoryCharts | None = None


@dataclass(frozen=True)
class WorkersPage:
    workers: tuple[WorkerNow, ...]
    summary: WorkerSummary


@dataclass(frozen=True)
class ActionPage:
    info: ActionInfo | None
    counts: ActionCounts
    runs: RunPage
    stats: LivenessStats
    workers: list[WorkerInfo]
    history: HistoryCharts | None = None
    flow_keys: FlowKeys | None = None  # its busiest flow keys (FlowControl)


@dataclass(frozen=True)
class StreamRow:
    name: str
    info: StreamInfo
    groups: tuple[GroupCounts, ...]


@dataclass(frozen=True)
class GroupPage:
    stream: str
    group: str
    info: StreamInfo
    counts: GroupCounts | None  # None: no such group (yet)
    pending: list[PendingEntry]
    dead: list[DeadLetter]
    consumers: dict[str, int] = field(default_factory=dict)  # pending entries per consumer


async def overview(client: FloClient, window: str = "6h") -> Overview:
    """Every action with its counts, the workers, every stream group, the newest failed
    runs, and every action's history over ``window`` (6h, 24h or 72h)."""
    seen = await discovery.overview(client)
    live = [w for w in seen.workers if w.alive is not False]
    rows = [ActionRow(c, sum(1 for w in live if c.action in w.task_types)) for c in seen.actions]
    failing = [c.action for c in seen.actions if c.failed + c.timed_out]
    pages = await asyncio.gather(
        *(client.action.runs(n, RunState.FAILED, limit=RECENT_FAILURES) for n in failing)
    )
    failures = sorted(
        (run for page in pages for run in page.runs),
        key=lambda r: r.completed_at_ms or 0,
        reverse=True,
    )[:RECENT_FAILURES]
    history = await overview_charts(client, [c.action for c in seen.actions], window)
    return Overview(rows, failures, seen.worker_summary, seen.groups, history)


async def workers(client: FloClient) -> WorkersPage:
    """Every registered worker with the runs it holds now, and their figures (busy
    counts live workers only)."""
    now_ms, found = await asyncio.gather(client.server_time_ms(), discovery.workers_now(client))
    return WorkersPage(found, discovery.summarize([w.info for w in found], now_ms))


async def action_page(
    client: FloClient, name: str, state: str | None, cursor: bytes | None, window: str = "6h"
) -> ActionPage:
    """One action: its settings, counts, a page of its runs in ``state`` (by default
    failed ones if there are any, else pending ones), liveness counters, workers and its
    history over ``window``. NotFoundError if it is not registered."""
    counts = await client.action.counts(name)
    if state is None:
        state = RunState.FAILED if counts.failed + counts.timed_out else RunState.PENDING
    runs = await client.action.runs(name, state, limit=RUNS_SHOWN, cursor=cursor)
    stats = await client.action.stats(name)
    actions = await client.action.list(ActionListOptions(prefix=name, limit=1))
    info = next((a for a in actions.actions if a.name == name), None)
    serving = [w for w in await discovery.all_workers(client) if name in w.task_types]
    history = await action_charts(client, name, window)
    flow_keys = await client.action.flow_keys(name, limit=FLOW_KEYS_SHOWN, sample=200)
    return ActionPage(info, counts, runs, stats, serving, history, flow_keys)


def scope_fields(scope: Quarantine) -> dict[str, str]:
    """The fields that name ``scope`` in a link or a form (read back by
    :func:`quarantine_of`)."""
    if isinstance(scope, ActionQuarantine):
        return {"action": scope.action}
    if isinstance(scope, QueueQuarantine):
        return {"queue": scope.queue}
    if isinstance(scope, GroupQuarantine):
        return {"stream": scope.stream, "group": scope.group, "partition": str(scope.partition)}
    return {"workers": "1"}


def quarantine_of(fields: Mapping[str, str]) -> Quarantine:
    """The quarantine a page or form names: ``action``, ``queue``, ``stream`` with
    ``group`` (and ``partition``), or ``workers``."""
    if fields.get("action"):
        return ActionQuarantine(fields["action"])
    if fields.get("queue"):
        return QueueQuarantine(fields["queue"])
    if fields.get("stream") and fields.get("group"):
        partition = fields.get("partition", "0")
        if not partition.isdigit():
            raise ValidationError(f"partition must be a number, got {partition!r}")
        return GroupQuarantine(fields["stream"], fields["group"], int(partition))
    if fields.get("workers"):
        return WorkerQuarantine()
    raise ValidationError("the page needs ?action=, ?queue=, ?stream=&group= or ?workers=1")


async def streams(client: FloClient) -> list[StreamRow]:
    """Every stream of the namespace with its size and consumer groups."""
    names = await discovery.stream_names(client)
    infos = await asyncio.gather(*(client.stream.info(n, StreamInfoOptions()) for n in names))
    groups = await asyncio.gather(*(client.stream.groups(n) for n in names))
    return [StreamRow(*row) for row in zip(names, infos, groups, strict=True)]


async def group_page(client: FloClient, stream: str, group: str) -> GroupPage:
    """A consumer group of a stream: its lag, pending entries (oldest first) and dead
    letters (oldest first), at most GROUP_ROWS of each."""
    info = await client.stream.info(stream, StreamInfoOptions())
    groups = await client.stream.groups(stream)
    pending = await client.stream.group_pending(
        stream, group, options=StreamGroupReadOptions(count=GROUP_ROWS)
    )
    dead = await client.stream.dead_letters(
        stream, group, StreamDeadLetterOptions(count=GROUP_ROWS)
    )
    consumers: dict[str, int] = {}
    for entry in pending:
        consumers[entry.consumer] = consumers.get(entry.consumer, 0) + 1
    counts = next((g for g in groups if g.group == group), None)
    return GroupPage(stream, group, info, counts, pending, dead, consumers)
