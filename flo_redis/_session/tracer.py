"""What the core knows of tracing: the tracer a client calls around each invoke and
append, and a run's trace context as stored in its record (packed by the invoke, unpacked for the
handler). :mod:`flo_redis.ops.tracing` describes the mechanism and holds the OpenTelemetry
tracer; the client and workers never import it."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol

import msgpack

# A larger context (a propagator that writes much baggage) keeps only the trace headers.
MAX_TRACE_CONTEXT_BYTES = 1024
_TRACE_HEADERS = ("traceparent", "tracestate")
_TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_TRACEPARENT_BYTES = 26


class ProducerSpan(Protocol):
    """One traced invoke or append, as the client sees it."""

    @property
    def headers(self) -> Mapping[str, str]:
        """The trace headers to carry (empty: carry none)."""
        ...

    @property
    def context(self) -> bytes:
        """The same, packed for a run record (:func:`pack_context`)."""
        ...

    def sent(self, ids: Sequence[str]) -> None:
        """The runs (or the stream record) were created, with these ids."""
        ...


class ProducerTracer(Protocol):
    """What a client calls around each ``action.invoke``, ``action.invoke_many`` and
    ``stream.append`` call; an error raised inside a span is the call's."""

    def invoking(
        self, namespace: str, action: str, count: int
    ) -> AbstractContextManager[ProducerSpan]:
        """A span around creating ``count`` runs of ``action``."""
        ...

    def appending(
        self, namespace: str, stream: str, partition: int
    ) -> AbstractContextManager[ProducerSpan]:
        """A span around appending one record to ``stream`` (its ``partition``)."""
        ...


class _Untraced:
    headers: Mapping[str, str] = {}
    context = b""

    def sent(self, ids: Sequence[str]) -> None:
        pass


UNTRACED: AbstractContextManager[ProducerSpan] = nullcontext(_Untraced())
"""The span of a call with no tracer: carries nothing."""


class _NoTracer:
    def invoking(
        self, namespace: str, action: str, count: int
    ) -> AbstractContextManager[ProducerSpan]:
        return UNTRACED

    def appending(
        self, namespace: str, stream: str, partition: int
    ) -> AbstractContextManager[ProducerSpan]:
        return UNTRACED


_NO_TRACER = _NoTracer()


def traced(tracer: ProducerTracer | None) -> ProducerTracer:
    """``tracer``, or for a client without one a tracer whose spans are :data:`UNTRACED`."""
    return _NO_TRACER if tracer is None else tracer


def with_trace_headers(headers: object, trace: Mapping[str, str]) -> object:
    """A record's headers with the trace headers added (the caller's own win); anything
    but a dict or None is returned as it is, for the caller's check to refuse."""
    if not trace or not (headers is None or isinstance(headers, dict)):
        return headers
    return {**trace, **(headers or {})}


def pack_context(carrier: Mapping[str, str]) -> bytes:
    """A propagator's headers as the run field (empty when there are none). A lone W3C
    ``traceparent`` of version 00, the common case, is stored as its 26 bytes (version,
    trace id, span id, flags); anything else as a msgpack map, which over
    :data:`MAX_TRACE_CONTEXT_BYTES` keeps only ``traceparent`` and ``tracestate``."""
    if not carrier:
        return b""
    parent = carrier.get("traceparent", "")
    if len(carrier) == 1 and _TRACEPARENT.fullmatch(parent):
        return bytes.fromhex(parent.replace("-", ""))
    packed: bytes = msgpack.packb(dict(carrier))
    if len(packed) > MAX_TRACE_CONTEXT_BYTES:
        packed = msgpack.packb({k: v for k, v in carrier.items() if k in _TRACE_HEADERS})
    return packed


def unpack_context(packed: bytes) -> dict[str, str]:
    """The run field back as headers for a propagator's ``extract`` ({} when empty or
    unreadable: a run never fails for its trace)."""
    if not packed:
        return {}
    if len(packed) == _TRACEPARENT_BYTES and packed[0] == 0:
        h = packed.hex()
        return {"traceparent": f"{h[:2]}-{h[2:34]}-{h[34:50]}-{h[50:]}"}
    try:
        value = msgpack.unpackb(packed, raw=False)
    except Exception:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}


__all__ = [
    "MAX_TRACE_CONTEXT_BYTES",
    "UNTRACED",
    "ProducerSpan",
    "ProducerTracer",
    "pack_context",
    "traced",
    "unpack_context",
    "with_trace_headers",
]
