"""A real worker process that traces its runs with OpenTelemetry.

    python trace_proc.py URL NAMESPACE ACTION SPANS_FILE

Each finished span is appended to SPANS_FILE as one JSON line (name, trace and span ids,
parent span id, attributes), for the test in the parent process to read.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from flo_redis import ActionContext, FloClient
from flo_redis.ops.tracing import OpenTelemetry


class LinesExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a") as out:
            for span in spans:
                ctx = span.get_span_context()
                assert ctx is not None
                line = {
                    "name": span.name,
                    "trace_id": ctx.trace_id,
                    "span_id": ctx.span_id,
                    "parent_id": span.parent.span_id if span.parent else None,
                    "attributes": dict(span.attributes or {}),
                }
                out.write(json.dumps(line) + "\n")
        return SpanExportResult.SUCCESS


async def main(url: str, namespace: str, action: str, path: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(LinesExporter(path)))

    async def handler(ctx: ActionContext) -> bytes:
        return str(os.getpid()).encode()

    async with FloClient(url, namespace=namespace) as client:
        worker = client.new_action_worker(worker_id=f"traced-{os.getpid()}", block_ms=1000)
        worker.observer = OpenTelemetry(tracer_provider=provider)
        worker.register_action(action, handler)
        await worker.start()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
