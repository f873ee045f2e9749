"""What exists: the namespaces, actions and streams a Redis holds, from the registries,
and one consistent overview of a namespace for operators (CLI, exporter, dashboard).

The registries are sorted sets written where things are made: the namespace registry
(``keys.namespaces_key``) when an action or worker is registered or a stream is created
or joined, a namespace's action and stream registries (``keys.namespace_keys``) likewise.
The namespace registry has its own hash slot, so on Redis Cluster it cannot be written by
the same script as the thing registered; it is written right after it, like the action
registry. Reading them never scans the key space.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flo_redis._session.registry import registered_namespaces, registry_names, remember
from flo_redis._wire.keys import namespace_keys
from flo_redis.actions.held import DEFAULT_LISTED, WorkerRuns, held_runs
from flo_redis.actions.inspect import ActionCounts, FlowKeys
from flo_redis.errors import NotFoundError, ValidationError
from flo_redis.quarantine import WorkerQuarantine
from flo_redis.streams.inspect import GroupCounts
from flo_redis.types import WorkerInfo, WorkerListOptions, WorkerStatus

if TYPE_CHECKING:
    from flo_redis.client import FloClient

FLOW_SAMPLE = 100  # waiting runs an overview's flow keys look at, per action

log = logging.getLogger("flo_redis.discovery")


async def namespaces(client: FloClient) -> tuple[str, ...]:
    """Every namespace that has registered an action or worker or made a stream, in name
    order."""
    return await registered_namespaces(client.redis)


async def action_names(client: FloClient, namespace: str | None = None) -> tuple[str, ...]:
    """The registered actions of the namespace, in name order."""
    index = namespace_keys(client.get_namespace(namespace)).actions
    return await registry_names(client.redis, index)


async def stream_names(client: FloClient, namespace: str | None = None) -> tuple[str, ...]:
    """The streams of the namespace (created, or joined by a group), in name order."""
    index = namespace_keys(client.get_namespace(namespace)).streams
    return await registry_names(client.redis, index)


async def all_workers(client: FloClient, namespace: str | None = None) -> tuple[WorkerInfo, ...]:
    """Every registered worker of the namespace, in id order."""
    ns = client.get_namespace(namespace)
    workers: list[WorkerInfo] = []
    cursor: bytes | None = None
    while True:
        page = await client.worker.list(WorkerListOptions(namespace=ns, limit=1024, cursor=cursor))
        workers += page.workers
        if page.cursor is None:
            return tuple(workers)
        cursor = page.cursor


@dataclass(frozen=True, slots=True)
class WorkerNow:
    """A registered worker and what it is doing now: ``runs`` (None when it was not
    asked: its process is gone, or its record names no owner)."""

    info: WorkerInfo
    runs: WorkerRuns | None

    @property
    def load(self) -> int:
        """Runs it holds now (as the queues say), else its last reported load."""
        return self.info.current_load if self.runs is None else self.runs.held


async def workers_now(
    client: FloClient, namespace: str | None = None, limit: int = DEFAULT_LISTED
) -> tuple[WorkerNow, ...]:
    """Every registered worker of the namespace, in id order, each with the runs it
    holds now (at most ``limit`` listed per worker; :mod:`flo_redis.actions.held`)."""
    ns = client.get_namespace(namespace)
    found = await all_workers(client, ns)
    held = await held_runs(client.session, found, limit=limit, namespace=ns)
    return tuple(WorkerNow(w, held.get(w.worker_id)) for w in found)


GONE = "GONE"
"""How a worker whose process is gone is shown (its flo status is UNHEALTHY)."""


def health(worker: WorkerInfo) -> str:
    """What an operator is shown of a worker: ``GONE`` when no process holds its
    liveness subscription any more (``WorkerInfo.alive`` False), else its status name
    (``ACTIVE``, ``DRAINING``, ``UNHEALTHY``). The one rule the CLI, the dashboard and
    the exporter share."""
    return GONE if worker.alive is False else worker.status.name


@dataclass(frozen=True, slots=True)
class WorkerSummary:
    """The workers of a namespace in a few figures. Only live workers count towards
    ``busy`` and ``capacity``: a gone process runs nothing, whatever load it last
    reported (its runs were taken back by the reapers)."""

    total: int
    by_health: dict[str, int]
    """Workers by :func:`health`, in the order first met."""
    busy: int
    """Handlers running on workers not gone (their last reported load)."""
    capacity: int
    """Handler slots of the ACTIVE workers not gone."""
    oldest_heartbeat_age_ms: int | None
    """Age of the oldest heartbeat among workers not gone (None: there are none): a
    frozen process keeps its liveness subscription, so only this grows."""

    @property
    def gone(self) -> int:
        return self.by_health.get(GONE, 0)


def summarize(workers: Sequence[WorkerInfo], now_ms: int) -> WorkerSummary:
    """``workers`` at server time ``now_ms`` in a few figures (pure)."""
    by_health: dict[str, int] = {}
    for w in workers:
        by_health[health(w)] = by_health.get(health(w), 0) + 1
    live = [w for w in workers if w.alive is not False]
    return WorkerSummary(
        total=len(workers),
        by_health=by_health,
        busy=sum(w.current_load for w in live),
        capacity=sum(w.max_concurrency for w in live if w.status == WorkerStatus.ACTIVE),
        oldest_heartbeat_age_ms=max(
            (max(0, now_ms - w.last_heartbeat_ms) for w in live), default=None
        ),
    )


@dataclass(frozen=True, slots=True)
class Overview:
    """A namespace at a glance: every action's counts, every worker, every stream group,
    and how many worker records its registry set aside (:mod:`flo_redis.quarantine`)."""

    namespace: str
    at_ms: int  # server time when it was read
    actions: tuple[ActionCounts, ...]
    workers: tuple[WorkerInfo, ...]
    groups: tuple[GroupCounts, ...]
    workers_quarantined: int = 0
    flow_keys: tuple[FlowKeys, ...] = ()  # each action's busiest flow keys, when asked

    @property
    def worker_summary(self) -> WorkerSummary:
        return summarize(self.workers, self.at_ms)


async def overview(client: FloClient, namespace: str | None = None, flow_top: int = 0) -> Overview:
    """Counts of every action, the workers and every stream group of the namespace, and
    with ``flow_top`` each action's busiest flow keys (that many at most, among the keys
    of the first 100 runs waiting: ``action.flow_keys``). An action deleted while this
    reads is left out, and so is (with a WARNING) an action or stream whose name is no
    longer taken (a control character an earlier version let through)."""
    ns = client.get_namespace(namespace)

    async def counts(name: str) -> ActionCounts | None:
        try:
            return await client.action.counts(name, namespace=ns)
        except NotFoundError:
            return None
        except ValidationError as exc:
            log.warning("action left out of the overview: %s", exc)
            return None

    async def stream_groups(name: str) -> tuple[GroupCounts, ...]:
        try:
            return await client.stream.groups(name, namespace=ns)
        except ValidationError as exc:
            log.warning("stream left out of the overview: %s", exc)
            return ()

    at_ms, actions, streams, workers, set_aside = await asyncio.gather(
        client.server_time_ms(),
        action_names(client, ns),
        stream_names(client, ns),
        all_workers(client, ns),
        client.quarantine.count(WorkerQuarantine(ns)),
    )
    found = await asyncio.gather(*(counts(a) for a in actions))
    groups = await asyncio.gather(*(stream_groups(s) for s in streams))

    async def flow_keys(name: str) -> FlowKeys | None:
        try:
            return await client.action.flow_keys(name, flow_top, FLOW_SAMPLE, ns)
        except NotFoundError:
            return None

    flows = []
    if flow_top > 0:
        flows = await asyncio.gather(*(flow_keys(c.action) for c in found if c is not None))
    return Overview(
        namespace=ns,
        at_ms=at_ms,
        actions=tuple(c for c in found if c is not None),
        workers=workers,
        groups=tuple(g for per_stream in groups for g in per_stream),
        workers_quarantined=set_aside,
        flow_keys=tuple(f for f in flows if f is not None and f.keys),
    )


__all__ = [
    "GONE",
    "Overview",
    "WorkerNow",
    "WorkerSummary",
    "action_names",
    "all_workers",
    "health",
    "namespaces",
    "overview",
    "remember",
    "stream_names",
    "summarize",
    "workers_now",
]
