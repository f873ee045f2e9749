"""Tracing: a trace carried from ``invoke`` to the handler, in the run itself.

An invoke made while a trace is active stores the trace's context (the W3C
``traceparent``/``tracestate`` headers a propagator writes: 26 bytes for a lone
``traceparent``, else a small msgpack map) in the run's record; every claim hands it back
with the run, and the worker's tracing middleware continues the trace there, one span per
attempt. An invoke with no tracer, or with no active trace, stores nothing.

:class:`OpenTelemetry` is that tracer and middleware, on ``opentelemetry-api`` (the
``otel`` extra: ``pip install 'flo-redis[otel]'``); this module imports without it and
refuses only when one is made. The spans follow OpenTelemetry's messaging conventions: a
``send <action>`` PRODUCER span around each invoke, and a ``process <action>`` CONSUMER
span around each attempt's handler, the child of the producer's span (a run is one
message, processed alone) and linked to it as well (the link is what the conventions
require of a consumer; the parent puts both in one trace). The consumer span is current
while the handler runs, so spans the handler makes are its children.

Any other tracing system plugs in the same way: an object with the :class:`InvokeTracer`
method set on ``client.session.tracer`` (or ``SyncFloClient.tracer``), and a
:class:`~flo_redis.observe.WorkerObserver` reading :attr:`ActionContext.trace_context
<flo_redis.ActionContext.trace_context>`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ._trace_context import (
    MAX_TRACE_CONTEXT_BYTES,
    UNTRACED,
    InvokeSpan,
    InvokeTracer,
    invoke_span,
    pack_context,
    unpack_context,
)
from .action_context import ActionContext
from .errors import MissingExtraError
from .observe import WorkerObserver

if TYPE_CHECKING:
    from .client import FloClient
    from .sync import SyncFloClient


def _require_otel() -> None:
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(
            "flo_redis.tracing.OpenTelemetry needs the 'otel' extra: pip install 'flo-redis[otel]'"
        ) from exc


class OpenTelemetry(WorkerObserver):
    """OpenTelemetry spans for invokes and runs. Set it on a client to trace invokes and
    on a worker to trace runs (one object may do both)::

        tracing = OpenTelemetry()
        tracing.instrument(client)      # a "send <action>" span around each invoke
        worker.observer = tracing       # a "process <action>" span around each attempt

    ``tracer_provider`` defaults to the global one; ``propagator`` to the global text map
    propagator (W3C trace context and baggage unless configured otherwise).
    Combine it with other observers with :class:`~flo_redis.observe.Observers`.
    """

    def __init__(self, tracer_provider: Any = None, propagator: Any = None) -> None:
        _require_otel()
        from opentelemetry import propagate, trace

        from . import __version__

        self._trace = trace
        self._tracer = trace.get_tracer("flo_redis", __version__, tracer_provider)
        self._propagator = propagator or propagate.get_global_textmap()
        self._open: dict[tuple[str, int], tuple[Any, Any]] = {}

    def instrument(self, client: FloClient | SyncFloClient) -> None:
        """Trace ``client``'s invokes (``action.invoke`` and ``action.invoke_many``)."""
        from .client import FloClient

        if isinstance(client, FloClient):
            client.session.tracer = self
        else:
            client.tracer = self

    # --- producer ---------------------------------------------------------------

    @contextlib.contextmanager
    def invoking(self, namespace: str, action: str, count: int) -> Iterator[InvokeSpan]:
        attributes: dict[str, Any] = {
            "messaging.system": "flo_redis",
            "messaging.operation.type": "send",
            "messaging.operation.name": "invoke",
            "messaging.destination.name": action,
            "flo.namespace": namespace,
        }
        if count != 1:
            attributes["messaging.batch.message_count"] = count
        kind = self._trace.SpanKind.PRODUCER
        with self._tracer.start_as_current_span(
            f"send {action}", kind=kind, attributes=attributes
        ) as span:
            carrier: dict[str, str] = {}
            self._propagator.inject(carrier)
            yield _Sent(span, pack_context(carrier))

    # --- consumer ---------------------------------------------------------------

    def before_run(self, ctx: Any) -> None:
        if not isinstance(ctx, ActionContext):
            return  # a stream record: not traced
        from opentelemetry import context as otel_context

        trace = self._trace
        parent = None
        links = []
        if ctx.trace_context:
            parent = self._propagator.extract(ctx.trace_context)
            sent = trace.get_current_span(parent).get_span_context()
            if sent.is_valid:
                links.append(trace.Link(sent))
        worker = ctx._worker
        span = self._tracer.start_span(
            f"process {ctx.action_name}",
            context=parent,
            kind=trace.SpanKind.CONSUMER,
            links=links,
            attributes={
                "messaging.system": "flo_redis",
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
                "messaging.destination.name": ctx.action_name,
                "messaging.message.id": ctx.task_id,
                "messaging.client.id": worker.config.worker_id,
                "flo.namespace": ctx.namespace,
                "flo.run.attempt": ctx.attempt,
            },
        )
        # Current while the handler runs (in this task, and copied into its own).
        token = otel_context.attach(trace.set_span_in_context(span))
        key = (ctx.task_id, ctx.token)
        self._open[key] = (span, token)
        task = asyncio.current_task()
        if task is not None:
            # A run given back or whose lease was lost hears no after_run/on_failure.
            task.add_done_callback(lambda _: self._close(key))

    def after_run(self, ctx: Any, output: bytes) -> None:
        self._end(ctx, None)

    def on_failure(self, ctx: Any, error: BaseException) -> None:
        self._end(ctx, error)

    def _end(self, ctx: Any, error: BaseException | None) -> None:
        if not isinstance(ctx, ActionContext):
            return
        from opentelemetry import context as otel_context

        opened = self._open.pop((ctx.task_id, ctx.token), None)
        if opened is None:
            return
        span, token = opened
        if error is not None:
            span.record_exception(error)
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(error)))
        span.end()
        with contextlib.suppress(Exception):
            otel_context.detach(token)

    def _close(self, key: tuple[str, int]) -> None:
        opened = self._open.pop(key, None)
        if opened is not None:
            opened[0].end()


class _Sent:
    """The producer span of one invoke call."""

    def __init__(self, span: Any, context: bytes) -> None:
        self.span = span
        self.context = context

    def invoked(self, run_ids: Sequence[str]) -> None:
        if len(run_ids) == 1:
            self.span.set_attribute("messaging.message.id", run_ids[0])


__all__ = [
    "MAX_TRACE_CONTEXT_BYTES",
    "UNTRACED",
    "InvokeSpan",
    "InvokeTracer",
    "OpenTelemetry",
    "invoke_span",
    "pack_context",
    "unpack_context",
]
