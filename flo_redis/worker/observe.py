"""Watching workers work: the one interface a worker calls as its runs and records move.

Every method here does nothing, so a worker that nobody watches pays only a call.
:class:`flo_redis.ops.metrics.PrometheusObserver` counts the same events into Prometheus
metrics; any other sink (StatsD, logs, a test's list) subclasses :class:`WorkerObserver`
and overrides what it needs. Set it on a worker before it starts::

    worker.observer = PrometheusObserver()

Hooks are called on the worker's event loop, are not awaited, and must return quickly
and never raise — except the middleware hooks around a worker's start and stop and each
run (``on_start``, ``on_stop``, ``before_run``, ``after_run``, ``on_failure``): those may
be plain or ``async def`` and are awaited, so they can do I/O or hold context (a tracing
span) around the handler. Several observers are combined with :class:`Observers`, whose
hooks call each observer's in the order given. A hook about the store (completed,
failed, released, acked, nacked) is called once the store accepted that report, exactly
once per report: a resend that the store answers as a duplicate is not counted again.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable
from typing import Any

log = logging.getLogger("flo_redis.observe")

Hook = Awaitable[None] | None
"""What a middleware hook returns: nothing, or an awaitable the worker awaits."""


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

    # --- handler processes (ActionWorker with a ProcessExecutor) ----------------------

    def handler_process_replaced(self, reason: str) -> None:
        """A handler process ended and another took its place: ``crashed`` (a signal,
        ``os._exit``), ``memory`` (past the memory limit), ``killed`` (it went on after
        a stop), ``worn`` (its ``max_runs_per_child``), ``reloaded``."""

    # --- middleware (both): awaited, plain or async ---------------------------------
    # ``ctx`` is an :class:`~flo_redis.ActionContext` for an action run and a
    # :class:`~flo_redis.StreamContext` for a stream record: the hooks are called once
    # per run attempt, or once per delivery of a record.

    def on_start(self, worker: Any) -> Hook:
        """The worker registered its actions (or joined its group) and is about to
        take work. Raising here stops its ``start()`` with that error."""

    def on_stop(self, worker: Any) -> Hook:
        """The worker took its last work and its handlers finished (errors are logged)."""

    def before_run(self, ctx: Any) -> Hook:
        """A handler is about to run. Raising here fails it as the handler raising
        would: the attempt fails (retried unless the error is non-retryable), or the
        record is nacked."""

    def after_run(self, ctx: Any, output: bytes) -> Hook:
        """The handler returned; ``output`` is its encoded result (``b""`` for a stream
        record: its handler's return value is not kept). Errors here are logged."""

    def on_failure(self, ctx: Any, error: BaseException) -> Hook:
        """The handler (or a ``before_run``) raised ``error``, or it timed out (a
        :class:`TimeoutError`): the attempt failed, or the record is nacked. Errors here
        are logged."""

    def run_ended(self, ctx: Any) -> None:
        """An attempt of an action run is over on this worker, whatever its end: after
        ``after_run`` or ``on_failure``, and also when the run was given back or its
        lease lost, which hear neither (what closes a span ``before_run`` opened)."""


def overrides(observer: WorkerObserver, hook: str) -> bool:
    """Whether ``observer`` has a hook ``hook`` of its own (a worker skips calling one
    that does nothing)."""
    return getattr(type(observer), hook) is not getattr(WorkerObserver, hook)


async def settle(hook: Hook) -> None:
    """Await what a middleware hook returned, if it is awaitable."""
    if inspect.isawaitable(hook):
        await hook


class Observers(WorkerObserver):
    """Several observers as one: every hook is called on each, in the order given (a
    middleware hook is awaited before the next observer's is called)."""

    def __init__(self, *observers: WorkerObserver) -> None:
        self.observers = observers


# The hooks a worker calls and does not await, and the middleware hooks it awaits.
_EVENTS = (
    "run_claimed",
    "run_handled",
    "run_completed",
    "run_failed",
    "run_released",
    "runs_reclaimed",
    "record_delivered",
    "record_handled",
    "record_settled",
    "records_reclaimed",
    "report_resent",
    "report_refused",
    "handler_process_replaced",
    "run_ended",
)
_MIDDLEWARE = ("on_start", "on_stop", "before_run", "after_run", "on_failure")


def _calling_each(hook: str) -> Any:
    """:class:`Observers`' ``hook``: each observer's, in turn."""

    def each(self: Observers, *args: Any) -> None:
        for o in self.observers:
            getattr(o, hook)(*args)

    return each


def _awaiting_each(hook: str) -> Any:
    """:class:`Observers`' middleware ``hook``: each observer's, awaited in turn."""

    async def each(self: Observers, *args: Any) -> None:
        for o in self.observers:
            await settle(getattr(o, hook)(*args))

    return each


for _hook in _EVENTS:
    setattr(Observers, _hook, _calling_each(_hook))
for _hook in _MIDDLEWARE:
    setattr(Observers, _hook, _awaiting_each(_hook))


NO_OBSERVER = WorkerObserver()
"""The default: nobody watches."""

__all__ = ["NO_OBSERVER", "Hook", "Observers", "WorkerObserver", "overrides", "settle"]
