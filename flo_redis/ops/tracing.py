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

A stream record carries the context of its append in its own headers instead (no store
change); on a :class:`~flo_redis.StreamWorker` the same observer makes a ``process
<stream>`` span per delivery of a record.

Any other tracing system plugs in the same way: an object with the :class:`ProducerTracer`
method set on ``client.session.tracer`` (or ``SyncFloClient.tracer``), and a
:class:`~flo_redis.worker.observe.WorkerObserver` reading :attr:`ActionContext.trace_context
<flo_redis.ActionContext.trace_context>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from flo_redis._session import tracer as _trace_context
from flo_redis._session.tracer import *  # noqa: F403  (the tracer interface, re-exported)
from flo_redis._session.tracer import ProducerSpan, pack_context
from flo_redis.errors import MissingExtraError
from flo_redis.worker.context import ActionContext
from flo_redis.worker.observe import WorkerObserver
from flo_redis.worker.stream_context import StreamContext

if TYPE_CHECKING:
    from flo_redis.client import FloClient
    from flo_redis.sync import SyncFloClient


def _require_otel() -> None:
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(
            "flo_redis.ops.tracing.OpenTelemetry needs the 'otel' extra: "
            "pip install 'flo-redis[otel]'"
        ) from exc


class OpenTelemetry(WorkerObserver):
    """OpenTelemetry spans for invokes and runs. Set it on a client to trace invokes and
    on a worker to trace runs (one object may do both)::

        tracing = OpenTelemetry()
        tracing.instrument(client)      # a "send <action>" span around each invoke
        worker.observer = tracing       # a "process <action>" span around each attempt
                                        # (on a StreamWorker: per delivery of a record)

    ``tracer_provider`` defaults to the global one; ``propagator`` to the global text map
    propagator (W3C trace context and baggage unless configured otherwise).
    Combine it with other observers with :class:`~flo_redis.worker.observe.Observers`.
    """

    def __init__(self, tracer_provider: Any = None, propagator: Any = None) -> None:
        _require_otel()
        from opentelemetry import propagate, trace

        self._trace = trace
        self._tracer = trace.get_tracer("flo_redis", _version(), tracer_provider)
        self._propagator = propagator or propagate.get_global_textmap()
        self._open: dict[
            tuple[Any, ...], tuple[Any, Any, Any, Any]
        ] = {}  # span, token, task, closer

    def instrument(self, client: FloClient | SyncFloClient) -> None:
        """Trace ``client``'s invokes (``action.invoke``, ``action.invoke_many``) and
        stream appends (``stream.append``)."""
        from flo_redis.client import FloClient

        if isinstance(client, FloClient):
            client.session.tracer = self
        else:
            client.tracer = self

    # --- producer ---------------------------------------------------------------

    def invoking(
        self, namespace: str, action: str, count: int
    ) -> contextlib.AbstractContextManager[ProducerSpan]:
        attributes: dict[str, Any] = {"messaging.operation.name": "invoke"}
        if count != 1:
            attributes["messaging.batch.message_count"] = count
        return self._send(namespace, action, attributes)

    def appending(
        self, namespace: str, stream: str, partition: int
    ) -> contextlib.AbstractContextManager[ProducerSpan]:
        attributes: dict[str, Any] = {
            "messaging.operation.name": "append",
            "messaging.destination.partition.id": str(partition),
        }
        return self._send(namespace, stream, attributes)

    @contextlib.contextmanager
    def _send(
        self, namespace: str, destination: str, attributes: dict[str, Any]
    ) -> Iterator[ProducerSpan]:
        attributes.update(
            {
                "messaging.system": "flo_redis",
                "messaging.operation.type": "send",
                "messaging.destination.name": destination,
                "flo.namespace": namespace,
            }
        )
        kind = self._trace.SpanKind.PRODUCER
        with self._tracer.start_as_current_span(
            f"send {destination}", kind=kind, attributes=attributes
        ) as span:
            carrier: dict[str, str] = {}
            self._propagator.inject(carrier)
            yield _Sent(span, carrier)

    # --- consumer: one span per run attempt, or per delivery of a stream record ---

    def _creation(self, headers: Mapping[str, str]) -> tuple[Any, list[Any]]:
        """The sender's context as a parent, and a link to its span (none without one)."""
        if not headers:
            return None, []
        parent = self._propagator.extract(headers)
        sent = self._trace.get_current_span(parent).get_span_context()
        return parent, [self._trace.Link(sent)] if sent.is_valid else []

    def before_run(self, ctx: Any) -> None:
        from opentelemetry import context as otel_context

        if isinstance(ctx, ActionContext):
            destination, headers = ctx.action_name, ctx.trace_context
            attributes: dict[str, Any] = {
                "messaging.message.id": ctx.task_id,
                "messaging.client.id": ctx._worker.config.worker_id,
                "flo.run.attempt": ctx.attempt,
            }
        elif isinstance(ctx, StreamContext):
            destination, headers = ctx.stream, ctx.headers
            attributes = {
                "messaging.message.id": ctx.record.id.to_redis(),
                "messaging.consumer.group.name": ctx.group,
                "messaging.client.id": ctx.consumer,
                "messaging.destination.partition.id": str(ctx.record.partition),
                "messaging.message.delivery_count": ctx.delivery_count,
            }
        else:
            return
        attributes.update(
            {
                "messaging.system": "flo_redis",
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
                "messaging.destination.name": destination,
                "flo.namespace": ctx.namespace,
            }
        )
        parent, links = self._creation(headers)
        span = self._tracer.start_span(
            f"process {destination}",
            context=parent,
            kind=self._trace.SpanKind.CONSUMER,
            links=links,
            attributes=attributes,
        )
        # Current while the handler runs (in this task, and copied into its own).
        token = otel_context.attach(self._trace.set_span_in_context(span))
        key = _key(ctx)
        task = asyncio.current_task()
        closer = None
        if isinstance(ctx, ActionContext):
            # A run given back or whose lease was lost hears no after_run/on_failure;
            # the end of its attempt (run_ended) closes the span.
            task = None
        elif task is not None:
            # The same for a record: its task ending closes the span (a task may run
            # many: see _end).
            def closer(_: object) -> None:
                self._close(key)

            task.add_done_callback(closer)
        self._open[key] = (span, token, task, closer)

    def after_run(self, ctx: Any, output: bytes) -> None:
        self._end(ctx, None)

    def run_ended(self, ctx: Any) -> None:
        self._close(_key(ctx))

    def on_failure(self, ctx: Any, error: BaseException) -> None:
        self._end(ctx, error)

    def _end(self, ctx: Any, error: BaseException | None) -> None:
        from opentelemetry import context as otel_context

        opened = self._open.pop(_key(ctx), None)
        if opened is None:
            return
        span, token, task, closer = opened
        if task is not None and closer is not None:
            task.remove_done_callback(closer)
        if error is not None:
            span.record_exception(error)
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(error)))
        span.end()
        with contextlib.suppress(Exception):
            otel_context.detach(token)

    def _close(self, key: tuple[Any, ...]) -> None:
        opened = self._open.pop(key, None)
        if opened is not None:
            opened[0].end()


def _key(ctx: Any) -> tuple[Any, ...]:
    """One attempt of a run, or one delivery of a record."""
    if isinstance(ctx, ActionContext):
        return (ctx.task_id, ctx.token)
    if isinstance(ctx, StreamContext):
        record = ctx.record
        return (ctx.stream, ctx.group, record.partition, record.id.to_redis(), ctx.delivery_count)
    return (id(ctx),)


class _Sent:
    """The producer span of one invoke or append call."""

    def __init__(self, span: Any, headers: dict[str, str]) -> None:
        self.span = span
        self.headers = headers

    @property
    def context(self) -> bytes:
        return pack_context(self.headers)

    def sent(self, ids: Sequence[str]) -> None:
        if len(ids) == 1:
            self.span.set_attribute("messaging.message.id", ids[0])


__all__ = ["OpenTelemetry"]
__all__ += _trace_context.__all__


def _version() -> str:
    """The installed flo-redis version, named on the tracer (its instrumentation scope)."""
    try:
        return importlib.metadata.version("flo-redis")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree not installed
        return "0+unknown"
