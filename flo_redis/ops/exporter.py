"""The queue exporter: Prometheus gauges of every action's runs by state and every stream
group's lag, read from Redis at each scrape.

Needs the ``metrics`` extra. Worker processes count what they did themselves
(:mod:`flo_redis.ops.metrics`); this exporter reports the queues as Redis holds them, so one
exporter per Redis (and namespace set) is enough, whatever the number of workers. Each
scrape reads :func:`flo_redis.ops.discovery.overview` of every namespace: a few commands per
action and stream group, never a scan.

Metrics (labels in braces; counts are plain numbers, times in seconds):

- ``flo_redis_queue_runs{namespace, action, state}``: runs by state (pending, delayed,
  running, completed, failed, timed_out, awaiting_parents) — completed counts runs still
  kept (retention); awaiting_parents those waiting for their parents (``depends_on``);
- ``flo_redis_queue_runs_finished_total{namespace, action, outcome}``: runs that ended
  (outcome completed or failed, failed including timed out) since the action was
  registered (a counter; it restarts when the action is deleted);
- ``flo_redis_queue_next_due_timestamp_seconds{namespace, action}``: when the earliest
  delayed run becomes ready (absent without delayed runs);
- ``flo_redis_stream_group_lag``, ``flo_redis_stream_group_pending``,
  ``flo_redis_stream_group_consumers``, ``flo_redis_stream_group_dead_letters``
  ``{namespace, stream, group}``;
- ``flo_redis_workers{namespace, status}``: registered workers by status: active, idle,
  draining, unhealthy, and gone (no process holds the worker's liveness subscription
  any more: killed, or its connection to Redis lost);
- ``flo_redis_action_workers{namespace, action}``: workers that take the action's runs
  now: registered for it, active or idle, their process not gone (0: nobody will
  claim what waits);
- ``flo_redis_worker_handlers_busy{namespace}``, ``flo_redis_worker_handler_slots{namespace}``:
  handlers running on workers not gone, and the handler slots of active workers not
  gone (a gone worker's last reported load is not counted);
- ``flo_redis_worker_oldest_heartbeat_age_seconds{namespace}``: the oldest heartbeat
  among workers not gone (absent without any): a frozen process keeps its liveness
  subscription, so this is what shows it;
- ``flo_redis_quarantined{namespace, action}``, ``flo_redis_stream_group_quarantined``
  ``{namespace, stream, group}`` and ``flo_redis_workers_quarantined{namespace}``:
  records set aside because they do not decode (:mod:`flo_redis.quarantine`);
- ``flo_redis_flow_key_runs{namespace, action, key, state}``: the runs of an action's
  busiest flow keys (``FlowControl``), at most ``FLOW_TOP`` keys per action (never a
  series per key), by state: waiting (among the first 100 runs waiting), running, held
  (back by the key's concurrency limit);
- ``flo_redis_exporter_up``: 1 when the last scrape read Redis, else 0.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence

from flo_redis.ops import needs_extra

with needs_extra("metrics", "flo_redis.ops.exporter"):
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector, CollectorRegistry

from flo_redis.ops.discovery import GONE, Overview, health
from flo_redis.types import WorkerStatus

log = logging.getLogger("flo_redis.exporter")

STATES = ("pending", "delayed", "running", "completed", "failed", "timed_out", "awaiting_parents")
# The health of a worker that claims runs (flo_redis.ops.discovery.health).
TAKING_WORK = frozenset({WorkerStatus.ACTIVE.name, WorkerStatus.IDLE.name})
SCRAPE_TIMEOUT_S = 10.0
FLOW_TOP = 10  # flow keys per action with series of their own: the busiest


def families(overviews: Sequence[Overview]) -> list[Metric]:
    """The metric families of ``overviews`` (pure: no I/O)."""
    runs = GaugeMetricFamily(
        "flo_redis_queue_runs",
        "Runs of an action by state (completed: kept for retention).",
        labels=["namespace", "action", "state"],
    )
    finished = CounterMetricFamily(
        "flo_redis_queue_runs_finished",
        "Runs of an action that ended, by outcome (failed includes timed out).",
        labels=["namespace", "action", "outcome"],
    )
    next_due = GaugeMetricFamily(
        "flo_redis_queue_next_due_timestamp_seconds",
        "When the action's earliest delayed run becomes ready (Unix time).",
        labels=["namespace", "action"],
    )
    group_labels = ["namespace", "stream", "group"]
    lag = GaugeMetricFamily(
        "flo_redis_stream_group_lag",
        "Records the group has not been handed yet.",
        labels=group_labels,
    )
    pending = GaugeMetricFamily(
        "flo_redis_stream_group_pending",
        "Records handed to the group's consumers and not acked yet.",
        labels=group_labels,
    )
    consumers = GaugeMetricFamily(
        "flo_redis_stream_group_consumers", "Consumers of the group.", labels=group_labels
    )
    dead = GaugeMetricFamily(
        "flo_redis_stream_group_dead_letters",
        "Records the group gave up on, kept for replay.",
        labels=group_labels,
    )
    workers = GaugeMetricFamily(
        "flo_redis_workers",
        "Registered workers by status (gone: no process holds its liveness subscription).",
        labels=["namespace", "status"],
    )
    action_workers = GaugeMetricFamily(
        "flo_redis_action_workers",
        "Workers taking the action's runs: registered for it, active or idle, not gone.",
        labels=["namespace", "action"],
    )
    busy = GaugeMetricFamily(
        "flo_redis_worker_handlers_busy",
        "Handlers running on workers whose process is not gone.",
        labels=["namespace"],
    )
    slots = GaugeMetricFamily(
        "flo_redis_worker_handler_slots",
        "Handler slots of active workers whose process is not gone.",
        labels=["namespace"],
    )
    heartbeat_age = GaugeMetricFamily(
        "flo_redis_worker_oldest_heartbeat_age_seconds",
        "The oldest heartbeat among workers whose process is not gone.",
        labels=["namespace"],
    )
    quarantined = GaugeMetricFamily(
        "flo_redis_quarantined",
        "Records of an action set aside because they do not decode (runs, schedules, slots).",
        labels=["namespace", "action"],
    )
    group_quarantined = GaugeMetricFamily(
        "flo_redis_stream_group_quarantined",
        "Records of a group set aside because their headers do not decode.",
        labels=group_labels,
    )
    workers_quarantined = GaugeMetricFamily(
        "flo_redis_workers_quarantined",
        "Worker registry records set aside because they do not decode.",
        labels=["namespace"],
    )
    for ov in overviews:
        ns = ov.namespace
        taking: dict[str, int] = {}
        for w in ov.workers:
            if health(w) in TAKING_WORK:
                for action in set(w.task_types):
                    taking[action] = taking.get(action, 0) + 1
        for a in ov.actions:
            action_workers.add_metric([ns, a.action], taking.get(a.action, 0))
            values = (
                a.pending,
                a.delayed,
                a.running,
                a.completed,
                a.failed,
                a.timed_out,
                a.awaiting_parents,
            )
            for state, value in zip(STATES, values, strict=True):
                runs.add_metric([ns, a.action, state], value)
            finished.add_metric([ns, a.action, "completed"], a.completed_total)
            finished.add_metric([ns, a.action, "failed"], a.failed_total)
            if a.next_due_ms is not None:
                next_due.add_metric([ns, a.action], a.next_due_ms / 1000)
            quarantined.add_metric([ns, a.action], a.quarantined)
        for g in ov.groups:
            labels = [ns, g.stream, g.group]
            if g.lag is not None:
                lag.add_metric(labels, g.lag)
            pending.add_metric(labels, g.pending)
            consumers.add_metric(labels, g.consumers)
            dead.add_metric(labels, g.dead_letters)
            group_quarantined.add_metric(labels, g.quarantined)
        summary = ov.worker_summary
        for status in (*(s.name for s in WorkerStatus), GONE):
            workers.add_metric([ns, status.lower()], summary.by_health.get(status, 0))
        busy.add_metric([ns], summary.busy)
        slots.add_metric([ns], summary.capacity)
        if summary.oldest_heartbeat_age_ms is not None:
            heartbeat_age.add_metric([ns], summary.oldest_heartbeat_age_ms / 1000)
        workers_quarantined.add_metric([ns], ov.workers_quarantined)
    flow = GaugeMetricFamily(
        "flo_redis_flow_key_runs",
        f"Runs of an action's busiest flow keys (at most {FLOW_TOP}), by state.",
        labels=["namespace", "action", "key", "state"],
    )
    for ov in overviews:
        for found in ov.flow_keys:
            for k in found.keys[:FLOW_TOP]:
                for state, n in (("waiting", k.waiting), ("running", k.running), ("held", k.held)):
                    flow.add_metric([ov.namespace, found.action, k.key, state], n)
    return [runs, finished, next_due, lag, pending, consumers, dead, workers, action_workers,
            busy, slots, heartbeat_age, quarantined, group_quarantined,
            workers_quarantined, flow]  # fmt: skip


class QueueCollector(Collector):
    """A collector that reads the overviews on the exporter's event loop at each scrape
    (prometheus-client calls ``collect`` from its HTTP thread)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        read: Callable[[], Awaitable[Sequence[Overview]]],
    ) -> None:
        self._loop = loop
        self._read = read

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("flo_redis_exporter_up", "1 when the last scrape read Redis.")
        try:
            future = asyncio.run_coroutine_threadsafe(self._coro(), self._loop)
            overviews = future.result(timeout=SCRAPE_TIMEOUT_S)
        except Exception:
            log.exception("scrape failed")
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families(overviews)

    async def _coro(self) -> Sequence[Overview]:
        return await self._read()


def queue_registry(
    loop: asyncio.AbstractEventLoop, read: Callable[[], Awaitable[Sequence[Overview]]]
) -> CollectorRegistry:
    """A registry holding only the queue collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(loop, read))
    return registry
