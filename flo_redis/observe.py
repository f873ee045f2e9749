"""Watching workers work: the one interface a worker calls as its runs and records move.

Every method here does nothing, so a worker that nobody watches pays only a call.
:class:`flo_redis.metrics.PrometheusObserver` counts the same events into Prometheus
metrics; any other sink (StatsD, logs, a test's list) subclasses :class:`WorkerObserver`
and overrides what it needs. Set it on a worker before it starts::

    worker.observer = PrometheusObserver()

Hooks are called on the worker's event loop, are not awaited, and must return quickly
and never raise. A hook about the store (completed, failed, released, acked, nacked)
is called once the store accepted that report, exactly once per report: a resend that
the store answers as a duplicate is not counted again.
"""

from __future__ import annotations


class WorkerObserver:
    """What an :class:`~flo_redis.ActionWorker` or :class:`~flo_redis.StreamWorker`
    reports about its work. The base class ignores everything."""

    # --- action runs (ActionWorker) ------------------------------------------------

    def run_claimed(self, action: str, pickup_s: float) -> None:
        """A run was handed to this worker ``pickup_s`` seconds after it became ready
        (server times: claimed minus created, due or retry time)."""

    def run_handled(self, action: str, result: str, duration_s: float) -> None:
        """A handler ended after ``duration_s``: ``result`` is ``completed`` (returned),
        ``failed`` (raised or timed out) or ``lease_lost`` (its run moved on)."""

    def run_completed(self, action: str, outcome: str) -> None:
        """The store accepted a complete with the named ``outcome`` (default
        ``success``)."""

    def run_failed(self, action: str, retried: bool) -> None:
        """The store accepted a fail: the run waits for another attempt (``retried``)
        or ended FAILED."""

    def run_released(self, action: str) -> None:
        """The store took back a run the stopping worker had not finished, without
        spending its attempt."""

    def runs_reclaimed(self, action: str, count: int) -> None:
        """This worker's reaper took back ``count`` runs held by gone worker processes."""

    # --- stream records (StreamWorker) ---------------------------------------------

    def record_delivered(self, stream: str, group: str) -> None:
        """A record was delivered to this consumer of ``group``."""

    def record_handled(self, stream: str, group: str, acked: bool, duration_s: float) -> None:
        """A handler ended after ``duration_s``: it returned (``acked``) or raised or
        timed out (the record is nacked)."""

    def record_settled(self, stream: str, group: str, acked: bool) -> None:
        """The store accepted an ack (``acked``) or a nack of a record."""

    def records_reclaimed(self, stream: str, group: str, count: int) -> None:
        """This worker's reaper gave back ``count`` deliveries of gone consumers."""

    # --- reports (both) ------------------------------------------------------------

    def report_resent(self, report: str) -> None:
        """A report (``complete``, ``fail``, ``release``, ``ack``, ``nack``) is sent
        again after its connection was lost."""

    def report_refused(self, report: str) -> None:
        """The store refused a report (its lease moved on, or the run is gone); it is
        dropped."""


NO_OBSERVER = WorkerObserver()
"""The default: nobody watches."""

__all__ = ["NO_OBSERVER", "WorkerObserver"]
