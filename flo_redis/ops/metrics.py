"""Prometheus metrics of a worker process: what its workers claimed, ran and reported.

Needs the ``metrics`` extra (``pip install 'flo-redis[metrics]'``); nothing else in
flo_redis imports this module. :class:`PrometheusObserver` is a
:class:`~flo_redis.worker.observe.WorkerObserver` that counts into counters and histograms,
one observer for every worker of the process::

    observer = PrometheusObserver()
    worker.observer = observer
    server = serve_metrics(9400)          # http://127.0.0.1:9400/metrics

Names follow Prometheus conventions (``flo_redis_`` prefix, ``_total`` counters, seconds).
Counters count what the store accepted (a resent report that the store answers as a
duplicate counts once); the queue as a whole (what waits, per-minute throughput) is the
exporter's, read from Redis rather than from one worker.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from flo_redis.ops import needs_extra

with needs_extra("metrics", "flo_redis.ops.metrics"):
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
    from prometheus_client.exposition import start_http_server

from flo_redis.errors import ValidationError
from flo_redis.worker.observe import WorkerObserver

log = logging.getLogger("flo_redis.metrics")

Buckets = tuple[float, ...]

# From a millisecond hand-off up to a backlog of minutes.
PICKUP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# From a millisecond handler up to the default action timeout (300 s).
HANDLER_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


# The counters, by family: flo_redis_<family>_<name>_total{labels}, with their help.
RUN_COUNTERS = {  # labels: action
    "claimed": "Runs handed to this process's workers.",
    "failed": "Runs whose fail ended them FAILED.",
    "retried": "Runs failed with attempts left: they wait for another attempt.",
    "released": "Runs given back unfinished by a stopping worker (attempt not spent).",
    "reclaimed": "Runs of gone worker processes taken back by this process's reaper.",
}
COMPLETED_DOC = "Runs completed (the store accepted the complete), by named outcome."
MAX_OUTCOMES = 20
"""Named outcomes one action's completions are counted under, by default; the rest are
counted as :data:`OTHER_OUTCOME`. An outcome is the handler's choice (a str of up to
255 bytes): one that carries an id would otherwise make a time series of every run."""
OTHER_OUTCOME = "_other"
RECORD_COUNTERS = {  # labels: stream, group
    "delivered": "Stream records delivered to this process's consumers.",
    "acked": "Stream records acked.",
    "nacked": "Stream records nacked (handler raised or timed out).",
    "reclaimed": "Deliveries of gone consumers given back by this process's reaper.",
}
REPORT_COUNTERS = {  # labels: report
    "resent": "Reports sent again after a lost connection, by kind.",
    "refused": "Reports the store refused (lease moved on, run gone), by kind.",
}
PROCESS_COUNTERS = {  # labels: reason
    "replaced": "Handler processes ended and replaced, by reason: crashed, memory, killed "
    "(it went on after a stop), worn (max runs), reloaded.",
}
Counters = dict[str, Counter]


class PrometheusObserver(WorkerObserver):
    """Counts every worker event into metrics of ``registry`` (the process's default
    registry unless given). Create one per registry and share it between workers: the
    metrics are registered once, when it is created.

    Completions are labelled with the first ``max_outcomes`` distinct outcomes of each
    action (:data:`MAX_OUTCOMES`); later new ones are counted as :data:`OTHER_OUTCOME`,
    with one WARNING per action that says so."""

    def __init__(
        self, registry: CollectorRegistry | None = None, *, max_outcomes: int = MAX_OUTCOMES
    ) -> None:
        if isinstance(max_outcomes, bool) or not isinstance(max_outcomes, int) or max_outcomes < 1:
            raise ValidationError(
                f"max_outcomes must be an int of at least 1, got {max_outcomes!r}"
            )
        reg = REGISTRY if registry is None else registry
        self._max_outcomes = max_outcomes
        self._outcomes: dict[str, set[str]] = {}  # action -> outcomes labelled so far
        self._overflowed: set[str] = set()  # actions told of their OTHER_OUTCOME
        self._outcomes_lock = threading.Lock()  # workers may run in threads of their own

        def counters(family: str, labels: tuple[str, ...], docs: dict[str, str]) -> Counters:
            return {
                name: Counter(f"flo_redis_{family}_{name}", doc, labels, registry=reg)
                for name, doc in docs.items()
            }

        def seconds(name: str, doc: str, labels: tuple[str, ...], buckets: Buckets) -> Histogram:
            return Histogram(
                f"flo_redis_{name}_seconds", doc, labels, buckets=buckets, registry=reg
            )

        self._runs = counters("runs", ("action",), RUN_COUNTERS)
        self._runs |= counters("runs", ("action", "outcome"), {"completed": COMPLETED_DOC})
        self._records = counters("stream_records", ("stream", "group"), RECORD_COUNTERS)
        self._reports = counters("reports", ("report",), REPORT_COUNTERS)
        self._processes = counters("handler_processes", ("reason",), PROCESS_COUNTERS)
        self._handler_duration = seconds(
            "handler_duration",
            "Action handler run time, by result: completed, failed, suspended, lease_lost.",
            ("action", "result"),
            HANDLER_BUCKETS,
        )
        self._pickup_latency = seconds(
            "pickup_latency",
            "Time from a run becoming ready (created, due or retried) to its claim.",
            ("action",),
            PICKUP_BUCKETS,
        )
        self._stream_handler_duration = seconds(
            "stream_handler_duration",
            "Stream handler run time, by result: acked, nacked.",
            ("stream", "group", "result"),
            HANDLER_BUCKETS,
        )

    def run_claimed(self, action: str, pickup_s: float) -> None:
        self._runs["claimed"].labels(action).inc()
        self._pickup_latency.labels(action).observe(pickup_s)

    def run_handled(self, action: str, result: str, duration_s: float) -> None:
        self._handler_duration.labels(action, result).observe(duration_s)

    def run_completed(self, action: str, outcome: str) -> None:
        self._runs["completed"].labels(action, self._outcome(action, outcome)).inc()

    def run_failed(self, action: str, retried: bool) -> None:
        self._runs["retried" if retried else "failed"].labels(action).inc()

    def run_released(self, action: str) -> None:
        self._runs["released"].labels(action).inc()

    def runs_reclaimed(self, action: str, count: int) -> None:
        self._runs["reclaimed"].labels(action).inc(count)

    def record_delivered(self, stream: str, group: str) -> None:
        self._records["delivered"].labels(stream, group).inc()

    def record_handled(self, stream: str, group: str, acked: bool, duration_s: float) -> None:
        result = "acked" if acked else "nacked"
        self._stream_handler_duration.labels(stream, group, result).observe(duration_s)

    def record_settled(self, stream: str, group: str, acked: bool) -> None:
        self._records["acked" if acked else "nacked"].labels(stream, group).inc()

    def records_reclaimed(self, stream: str, group: str, count: int) -> None:
        self._records["reclaimed"].labels(stream, group).inc(count)

    def report_resent(self, report: str) -> None:
        self._reports["resent"].labels(report).inc()

    def report_refused(self, report: str) -> None:
        self._reports["refused"].labels(report).inc()

    def handler_process_replaced(self, reason: str) -> None:
        self._processes["replaced"].labels(reason).inc()

    def _outcome(self, action: str, outcome: str) -> str:
        """The label ``outcome`` is counted under: itself, while the action has fewer
        than ``max_outcomes`` labelled (or it is one of them), else OTHER_OUTCOME."""
        known = self._outcomes.get(action)
        if known is not None and outcome in known:
            return outcome  # the common case: no lock
        with self._outcomes_lock:
            known = self._outcomes.setdefault(action, set())
            if outcome in known or len(known) < self._max_outcomes:
                known.add(outcome)
                return outcome
            told = action in self._overflowed
            self._overflowed.add(action)
        if not told:  # said once per action
            log.warning(
                "action %r has completed with more than %d distinct outcomes; %r and any "
                "later new one are counted as outcome=%r (an outcome should name a kind of "
                "result, not carry an id; raise max_outcomes if more kinds are meant)",
                action,
                self._max_outcomes,
                outcome,
                OTHER_OUTCOME,
            )
        return OTHER_OUTCOME


@dataclass
class MetricsServer:
    """A running ``/metrics`` endpoint (a small HTTP server on its own thread, outside
    the event loop: a scrape never waits for the workers, nor they for it)."""

    host: str
    port: int
    _server: WSGIServer
    _thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def serve_metrics(
    port: int, host: str = "127.0.0.1", registry: CollectorRegistry | None = None
) -> MetricsServer:
    """Serve ``registry`` (default: the process's) at ``http://host:port/metrics``.
    Binds ``127.0.0.1`` unless told otherwise; port 0 picks a free port."""
    reg = REGISTRY if registry is None else registry
    server, thread = start_http_server(port, addr=host, registry=reg)
    return MetricsServer(host, int(server.server_address[1]), server, thread)


__all__ = ["MetricsServer", "PrometheusObserver", "serve_metrics"]
