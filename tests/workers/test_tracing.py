"""Tracing: the invoke's trace context rides in the run record to the handler, where the
OpenTelemetry middleware makes one span per attempt, the child of the producer's span —
in this process and in a worker process of its own. Without a tracer nothing is stored."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from polling import eventually, running
from processes import script_process

from flo_redis import (
    ActionContext,
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    RunStatus,
    StreamAppendOptions,
    StreamContext,
)
from flo_redis._wire.codec import unpack_record
from flo_redis._wire.keys import action_keys
from flo_redis.errors import MissingExtraError
from flo_redis.ops.tracing import OpenTelemetry, pack_context, unpack_context
from flo_redis.sync import SyncFloClient


class Traced:
    """A tracer provider whose finished spans land in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("test")
        self.otel = OpenTelemetry(tracer_provider=self.provider)

    def spans(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name == name]

    async def wait_spans(self, name: str, n: int) -> list[ReadableSpan]:
        return await eventually(lambda: asyncio.sleep(0, self.spans(name)), lambda s: len(s) >= n)


@pytest.fixture
def traced() -> Traced:
    return Traced()


@contextlib.asynccontextmanager
async def traced_worker(
    client: FloClient,
    observer: Any,
    handler: Callable[[ActionContext], Awaitable[Any]],
    options: ActionRegisterOptions | None = None,
) -> AsyncIterator[None]:
    """A worker of action ``job`` observed by ``observer``, running for the block."""
    worker = client.new_action_worker(worker_id="tracer-w", concurrency=4, block_ms=200)
    worker.observer = observer
    worker.register_action("job", handler, options)
    async with running(worker):
        yield


def span_id(span: ReadableSpan) -> int:
    ctx = span.get_span_context()
    assert ctx is not None
    return ctx.span_id


def trace_id(span: ReadableSpan) -> int:
    ctx = span.get_span_context()
    assert ctx is not None
    return ctx.trace_id


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent else None


async def stored_trace(raw: aioredis.Redis, namespace: str, run_id: str) -> Any:
    return unpack_record(await raw.hget(action_keys(namespace, "job").runs, run_id)).get("tr")


async def test_the_handler_span_is_the_child_of_the_invoke_span_with_the_run_attributes(
    client: FloClient, traced: Traced
) -> None:
    traced.otel.instrument(client)
    seen: list[trace.SpanContext] = []

    async def handler(ctx: ActionContext) -> str:
        with traced.tracer.start_as_current_span("resize") as inner:
            seen.append(inner.get_span_context())
        return "done"

    await client.action.register("job")
    async with traced_worker(client, traced.otel, handler):
        with traced.tracer.start_as_current_span("checkout") as request:
            run = await client.action.invoke("job", b"{}")
        status = await client.action.wait(run.run_id, timeout_ms=30_000)
        assert status.status == RunStatus.COMPLETED
        (process,) = await traced.wait_spans("process job", 1)

    (send,) = traced.spans("send job")
    (resize,) = traced.spans("resize")
    assert send.kind == SpanKind.PRODUCER and process.kind == SpanKind.CONSUMER
    request_ctx = request.get_span_context()
    assert parent_id(send) == request_ctx.span_id
    # One trace from the request to the work the handler did.
    assert trace_id(send) == trace_id(process) == trace_id(resize) == request_ctx.trace_id
    assert parent_id(process) == span_id(send)
    assert [link.context.span_id for link in process.links] == [span_id(send)]
    assert parent_id(resize) == span_id(process)
    assert seen[0].span_id == span_id(resize)
    assert send.attributes is not None and process.attributes is not None
    assert send.attributes["messaging.message.id"] == run.run_id
    assert dict(process.attributes) == {
        "messaging.system": "flo_redis",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "job",
        "messaging.message.id": run.run_id,
        "messaging.client.id": "tracer-w",
        "flo.namespace": client.namespace,
        "flo.run.attempt": 1,
    }
    assert process.status.status_code == StatusCode.UNSET


async def test_a_plain_handler_in_the_thread_pool_sees_its_span_as_current(
    client: FloClient, traced: Traced
) -> None:
    def handler(ctx: ActionContext) -> int:
        return trace.get_current_span().get_span_context().span_id

    await client.action.register("job")
    async with traced_worker(client, traced.otel, handler):  # type: ignore[arg-type]
        run = await client.action.invoke("job", b"")
        status = await client.action.wait(run.run_id, timeout_ms=30_000)
        (process,) = await traced.wait_spans("process job", 1)
    assert status.output is not None and json.loads(status.output) == span_id(process)


async def test_each_attempt_is_a_span_and_a_failed_one_records_its_error(
    client: FloClient, traced: Traced
) -> None:
    traced.otel.instrument(client)

    async def handler(ctx: ActionContext) -> str:
        if ctx.attempt == 1:
            raise ValueError("card declined")
        return "ok"

    retry = ActionRegisterOptions(max_retries=2, retry_backoff_ms=10)
    await client.action.register("job", options=retry)
    async with traced_worker(client, traced.otel, handler, retry):
        run = await client.action.invoke("job", b"{}")
        status = await client.action.wait(run.run_id, timeout_ms=30_000)
        assert (status.status, status.attempt) == (RunStatus.COMPLETED, 2)
        spans = await traced.wait_spans("process job", 2)

    (send,) = traced.spans("send job")
    first, second = sorted(spans, key=lambda s: s.attributes["flo.run.attempt"])  # type: ignore[index]
    for span in (first, second):
        assert trace_id(span) == trace_id(send) and parent_id(span) == span_id(send)
    assert first.status.status_code == StatusCode.ERROR
    assert first.status.description == "card declined"
    (event,) = first.events
    assert event.name == "exception" and event.attributes is not None
    assert event.attributes["exception.type"] == "ValueError"
    assert second.status.status_code == StatusCode.UNSET and not second.events


async def test_delayed_and_batched_runs_keep_their_invoke_as_parent(
    client: FloClient, traced: Traced
) -> None:
    traced.otel.instrument(client)

    async def handler(ctx: ActionContext) -> None:
        return None

    await client.action.register("job")
    async with traced_worker(client, traced.otel, handler):
        delayed = await client.action.invoke("job", b"", ActionInvokeOptions(delay_ms=200))
        batch = await client.action.invoke_many("job", [b"a", b"b", b"c"])
        for run in (delayed, *batch):
            await client.action.wait(run.run_id, timeout_ms=30_000)
        spans = await traced.wait_spans("process job", 4)

    sends = traced.spans("send job")
    (one,) = [s for s in sends if "messaging.batch.message_count" not in (s.attributes or {})]
    (many,) = [s for s in sends if s is not one]
    assert many.attributes is not None and many.attributes["messaging.batch.message_count"] == 3
    parents = {str(s.attributes["messaging.message.id"]): parent_id(s) for s in spans}  # type: ignore[index]
    assert parents[delayed.run_id] == span_id(one)
    assert all(parents[r.run_id] == span_id(many) for r in batch)


async def test_the_sync_client_carries_the_trace_too(
    client: FloClient, redis_url: str, traced: Traced
) -> None:
    async def handler(ctx: ActionContext) -> None:
        return None

    await client.action.register("job")
    with SyncFloClient(redis_url, namespace=client.namespace) as flo:
        traced.otel.instrument(flo)
        run = flo.action.invoke("job", b"")
    async with traced_worker(client, traced.otel, handler):
        (process,) = await traced.wait_spans("process job", 1)
    (send,) = traced.spans("send job")
    assert parent_id(process) == span_id(send) and trace_id(process) == trace_id(send)
    assert process.attributes is not None
    assert process.attributes["messaging.message.id"] == run.run_id


async def test_without_a_tracer_or_a_trace_nothing_is_stored(
    client: FloClient, raw: aioredis.Redis, traced: Traced
) -> None:
    await client.action.register("job")
    with traced.tracer.start_as_current_span("request"):
        plain = await client.action.invoke("job", b"")  # no tracer on the client
        (many,) = await client.action.invoke_many("job", [b""])
    OpenTelemetry(tracer_provider=trace.NoOpTracerProvider()).instrument(client)
    unsampled = await client.action.invoke("job", b"")  # a tracer, but no trace
    traced.otel.instrument(client)
    with_trace = await client.action.invoke("job", b"")

    for run in (plain, many, unsampled):
        assert await stored_trace(raw, client.namespace, run.run_id) is None
    stored = await stored_trace(raw, client.namespace, with_trace.run_id)
    (send,) = traced.spans("send job")
    ctx = send.get_span_context()
    assert ctx is not None
    flags = int(ctx.trace_flags)
    parent = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{flags:02x}"
    assert len(stored) == 26 and unpack_context(stored) == {"traceparent": parent}


def test_a_context_is_stored_compactly_and_read_back_whole() -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert unpack_context(pack_context({"traceparent": parent})) == {"traceparent": parent}
    with_state = {"traceparent": parent, "tracestate": "vendor=abc"}
    assert unpack_context(pack_context(with_state)) == with_state
    future = {"traceparent": "01-" + parent[3:]}  # another version: kept as it is
    assert unpack_context(pack_context(future)) == future
    huge = {**with_state, "baggage": "k=" + "v" * 2000}
    assert unpack_context(pack_context(huge)) == with_state
    assert pack_context({}) == b"" and unpack_context(b"") == {}
    assert unpack_context(b"\xc1 not msgpack") == {}


def test_the_middleware_without_the_otel_extra_names_the_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'flo-redis\[otel\]'"):
        OpenTelemetry()


@pytest.mark.slow
async def test_a_worker_in_another_process_continues_the_trace(
    client: FloClient, redis_url: str, traced: Traced, tmp_path: Path
) -> None:
    traced.otel.instrument(client)
    spans_file = tmp_path / "spans.jsonl"
    await client.action.register("job")
    with script_process("trace_proc.py", redis_url, client.namespace, "job", str(spans_file)):
        with traced.tracer.start_as_current_span("request"):
            run = await client.action.invoke("job", b"")
        status = await client.action.wait(run.run_id, timeout_ms=30_000)
        assert status.status == RunStatus.COMPLETED

        def read() -> list[dict[str, Any]]:
            if not spans_file.exists():
                return []
            return [json.loads(line) for line in spans_file.read_text().splitlines()]

        (process,) = await eventually(lambda: asyncio.sleep(0, read()))
    (send,) = traced.spans("send job")
    assert process["name"] == "process job"
    assert process["trace_id"] == trace_id(send) and process["parent_id"] == span_id(send)
    assert process["attributes"]["messaging.message.id"] == run.run_id
    assert process["attributes"]["messaging.client.id"].startswith("traced-")
    assert status.output is not None and process["attributes"]["flo.run.attempt"] == 1


async def test_a_stream_record_carries_the_trace_to_its_handler_span(
    client: FloClient, traced: Traced
) -> None:
    traced.otel.instrument(client)
    headers: list[dict[str, str]] = []

    async def handle(ctx: StreamContext) -> None:
        headers.append(ctx.headers)
        if ctx.payload == b"bad" and ctx.delivery_count == 1:
            raise ValueError("cannot parse")

    with traced.tracer.start_as_current_span("checkout"):
        options = StreamAppendOptions(headers={"kind": "order"})
        good = await client.stream.append("orders", b"good", options)
        bad = await client.stream.append("orders", b"bad")
    worker = client.new_stream_worker(
        stream="orders", group="billing", handler=handle, block_ms=200
    )
    worker.observer = traced.otel
    task = asyncio.create_task(worker.start())
    try:
        spans = await traced.wait_spans("process orders", 3)
    finally:
        worker.stop()
        await task

    sends = {str(s.attributes["messaging.message.id"]): s for s in traced.spans("send orders")}  # type: ignore[index]
    send_good, send_bad = sends[good.id.to_redis()], sends[bad.id.to_redis()]
    by_record: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        by_record.setdefault(str(span.attributes["messaging.message.id"]), []).append(span)  # type: ignore[index]
    (good_span,) = by_record[good.id.to_redis()]
    failed, retried = sorted(
        by_record[bad.id.to_redis()],
        key=lambda s: s.attributes["messaging.message.delivery_count"],  # type: ignore[index]
    )
    for span, send in ((good_span, send_good), (failed, send_bad), (retried, send_bad)):
        assert trace_id(span) == trace_id(send) and parent_id(span) == span_id(send)
        assert [link.context.span_id for link in span.links] == [span_id(send)]
    assert good_span.attributes is not None
    assert good_span.attributes["messaging.consumer.group.name"] == "billing"
    assert failed.status.status_code == StatusCode.ERROR
    assert retried.status.status_code == StatusCode.UNSET
    # The caller's headers are kept beside the trace's.
    assert headers[0]["kind"] == "order" and "traceparent" in headers[0]


async def test_a_cancelled_running_run_still_ends_its_span(
    client: FloClient, traced: Traced
) -> None:
    started = asyncio.Event()

    async def handler(ctx: ActionContext) -> None:
        started.set()
        await asyncio.sleep(60)

    await client.action.register("job")
    async with traced_worker(client, traced.otel, handler):
        run = await client.action.invoke("job", b"")
        await asyncio.wait_for(started.wait(), 30)
        await client.action.cancel(run.run_id)
        (process,) = await traced.wait_spans("process job", 1)
    assert process.attributes is not None
    assert process.attributes["messaging.message.id"] == run.run_id  # ended, so exported
