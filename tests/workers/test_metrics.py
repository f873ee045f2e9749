"""Worker metrics: a known history of claims, completes, fails, retries and refusals,
scraped over HTTP from the Prometheus endpoint, parsed, and compared with what happened.
Also the claim's ready time, which the pickup latency is measured from."""

from __future__ import annotations

import asyncio
import logging
import urllib.request
from collections.abc import Iterator

import pytest
from polling import eventually, running
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from flo_redis import (
    ActionContext,
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    NonRetryableError,
    RunStatus,
    StreamContext,
    ValidationError,
)
from flo_redis.ops.metrics import OTHER_OUTCOME, MetricsServer, PrometheusObserver, serve_metrics
from flo_redis.types import WorkerRegisterOptions
from flo_redis.worker.observe import WorkerObserver

pytestmark = pytest.mark.slow  # workers serving metrics over HTTP

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def endpoint(registry: CollectorRegistry) -> Iterator[MetricsServer]:
    server = serve_metrics(0, registry=registry)
    try:
        yield server
    finally:
        server.close()


async def scrape(server: MetricsServer) -> Samples:
    """GET /metrics over HTTP and parse the exposition text."""

    def get() -> str:
        with urllib.request.urlopen(server.url, timeout=10) as response:
            body: bytes = response.read()
            return body.decode()

    text = await asyncio.to_thread(get)
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_action_metrics_match_a_known_history(
    client: FloClient, registry: CollectorRegistry, endpoint: MetricsServer
) -> None:
    worker = client.new_action_worker(block_ms=500)
    worker.observer = PrometheusObserver(registry)
    once = ActionRegisterOptions(max_retries=2)

    @worker.action("pay", once)
    async def pay(ctx: ActionContext) -> object:
        kind = ctx.input()
        if kind == b"bad":
            raise RuntimeError("card declined")
        if kind == b"final":
            raise NonRetryableError("no such card")
        if kind == b"approve":
            return ctx.result("approved", {"ok": True})
        return b"paid"

    await client.action.register("pay", options=once)
    async with running(worker):
        ids = []
        for payload in [b"ok"] * 5 + [b"approve"] * 2 + [b"bad"] * 3 + [b"final"]:
            ids.append((await client.action.invoke("pay", payload)).run_id)
        for run_id in ids:
            await eventually(
                lambda r=run_id: client.action.status(r),
                lambda s: s.status in (RunStatus.COMPLETED, RunStatus.FAILED),
            )
        # Counters move when the store answered; the last answers may still be landing.
        samples = await eventually(
            lambda: scrape(endpoint),
            lambda s: value(s, "flo_redis_runs_failed_total", action="pay") == 4,
        )

    # 5 + 2 complete at once; each "bad" run is tried twice (retried, then failed);
    # the non-retryable one fails at once: 5 + 2 + 3 * 2 + 1 claims.
    assert value(samples, "flo_redis_runs_claimed_total", action="pay") == 14
    assert value(samples, "flo_redis_runs_completed_total", action="pay", outcome="success") == 5
    assert value(samples, "flo_redis_runs_completed_total", action="pay", outcome="approved") == 2
    assert value(samples, "flo_redis_runs_retried_total", action="pay") == 3
    assert value(samples, "flo_redis_runs_failed_total", action="pay") == 4
    assert value(samples, "flo_redis_runs_released_total", action="pay") == 0
    assert value(samples, "flo_redis_pickup_latency_seconds_count", action="pay") == 14
    assert value(samples, "flo_redis_pickup_latency_seconds_sum", action="pay") >= 0
    handled = "flo_redis_handler_duration_seconds_count"
    assert value(samples, handled, action="pay", result="completed") == 7
    assert value(samples, handled, action="pay", result="failed") == 7
    assert value(samples, "flo_redis_reports_refused_total", report="complete") == 0


async def test_outcomes_past_the_limit_are_counted_as_other(
    client: FloClient,
    registry: CollectorRegistry,
    endpoint: MetricsServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker = client.new_action_worker(block_ms=500)
    worker.observer = PrometheusObserver(registry, max_outcomes=3)

    @worker.action("ship")
    async def ship(ctx: ActionContext) -> object:
        return ctx.result(ctx.input().decode())  # an id as the outcome: a misuse

    await client.action.register("ship")
    outcomes = [b"a", b"b", b"a", b"c", b"order-1", b"order-2", b"b", b"order-3"]
    with caplog.at_level(logging.WARNING, logger="flo_redis.metrics"):
        async with running(worker):
            for payload in outcomes:  # one at a time: the order outcomes are first seen in
                run_id = (await client.action.invoke("ship", payload)).run_id
                await eventually(
                    lambda r=run_id: client.action.status(r),
                    lambda s: s.status == RunStatus.COMPLETED,
                )
            counted = "flo_redis_runs_completed_total"
            samples = await eventually(
                lambda: scrape(endpoint),
                lambda s: value(s, counted, action="ship", outcome="b") == 2,
            )
    labelled = {
        dict(labels)["outcome"]: n
        for (name, labels), n in samples.items()
        if name == counted and dict(labels)["action"] == "ship"
    }
    assert labelled == {"a": 2, "b": 2, "c": 1, OTHER_OUTCOME: 3}
    warned = [r for r in caplog.records if r.name == "flo_redis.metrics"]
    assert len(warned) == 1 and "'ship'" in warned[0].getMessage()


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_max_outcomes_out_of_range_is_refused(registry: CollectorRegistry, bad: object) -> None:
    with pytest.raises(ValidationError, match="max_outcomes"):
        PrometheusObserver(registry, max_outcomes=bad)  # type: ignore[arg-type]


async def test_a_refused_complete_is_counted_not_completed(
    client: FloClient, registry: CollectorRegistry, endpoint: MetricsServer
) -> None:
    """A handler outlives its lease: the run is taken back and the late complete is
    refused by the store: a refusal, not a completion."""
    worker = client.new_action_worker(block_ms=500)
    worker.observer = PrometheusObserver(registry)

    @worker.action("slow", ActionRegisterOptions(timeout_ms=200, max_retries=1))
    async def slow(ctx: ActionContext) -> bytes:
        await eventually(
            lambda: client.action.status(ctx.task_id),
            lambda s: s.status != RunStatus.RUNNING,
        )
        return b"too late"

    await client.action.register(
        "slow", options=ActionRegisterOptions(timeout_ms=200, max_retries=1)
    )
    async with running(worker):
        run_id = (await client.action.invoke("slow", b"")).run_id
        samples = await eventually(
            lambda: scrape(endpoint),
            lambda s: value(s, "flo_redis_reports_refused_total", report="complete") == 1,
        )
    assert (await client.action.status(run_id)).status == RunStatus.TIMED_OUT
    assert value(samples, "flo_redis_runs_completed_total", action="slow", outcome="success") == 0
    assert value(samples, "flo_redis_runs_claimed_total", action="slow") == 1


async def test_runs_of_a_gone_process_are_counted_as_reclaimed(
    client: FloClient, redis_url: str, registry: CollectorRegistry, endpoint: MetricsServer
) -> None:
    worker = client.new_action_worker(block_ms=500)
    worker.observer = PrometheusObserver(registry)
    done = asyncio.Event()

    @worker.action("job")
    async def job(ctx: ActionContext) -> bytes:
        done.set()
        return b""

    await client.action.register("job")
    await client.action.invoke("job", b"")
    # Another process claims the run and dies holding it (its connections close).
    other = await FloClient(redis_url, namespace=client.namespace).connect()
    await other.worker.register("doomed", ["job"], WorkerRegisterOptions())
    assert len(await other.worker.await_tasks("doomed", ["job"], 1)) == 1
    await other.close()

    async with running(worker):
        await asyncio.wait_for(done.wait(), 30)
        samples = await eventually(
            lambda: scrape(endpoint),
            lambda s: value(s, "flo_redis_runs_completed_total", action="job", outcome="success"),
        )
    assert value(samples, "flo_redis_runs_reclaimed_total", action="job") == 1
    assert value(samples, "flo_redis_runs_claimed_total", action="job") == 1


async def test_stream_metrics_count_deliveries_acks_and_nacks(
    client: FloClient, registry: CollectorRegistry, endpoint: MetricsServer
) -> None:
    await client.stream.create("events")
    await client.stream.group_join("events", "billing", "setup")
    for payload in [b"ok"] * 4 + [b"flaky"] * 2:
        await client.stream.append("events", payload)

    async def handle(ctx: StreamContext) -> None:
        if ctx.payload == b"flaky" and ctx.delivery_count == 1:
            raise RuntimeError("not yet")

    worker = client.new_stream_worker(
        stream="events", group="billing", handler=handle, block_ms=500
    )
    worker.observer = PrometheusObserver(registry)
    labels = {"stream": "events", "group": "billing"}
    async with running(worker):
        samples = await eventually(
            lambda: scrape(endpoint),
            lambda s: value(s, "flo_redis_stream_records_acked_total", **labels) == 6,
        )
    assert value(samples, "flo_redis_stream_records_nacked_total", **labels) == 2
    assert value(samples, "flo_redis_stream_records_delivered_total", **labels) == 8
    handled = "flo_redis_stream_handler_duration_seconds_count"
    assert value(samples, handled, result="acked", **labels) == 6
    assert value(samples, handled, result="nacked", **labels) == 2


async def test_a_claim_reports_when_each_run_became_ready(client: FloClient) -> None:
    """Pickup latency is claimed minus ready, both server times: ready is the creation
    time of a fresh run, the due time of a delayed one, and the retry time after a fail."""
    await client.action.register("r", options=ActionRegisterOptions(retry_backoff_ms=50))
    await client.worker.register("w", ["r"], WorkerRegisterOptions())
    now_id = (await client.action.invoke("r", b"now")).run_id
    first = await client.worker.await_tasks("w", ["r"], 10)
    assert [c.run_id for c in first] == [now_id]
    assert first[0].ready_at_ms == first[0].created_at_ms
    assert first[0].claimed_at_ms >= first[0].ready_at_ms

    # Invoked only after the first claim, so a slow machine cannot make it due before then.
    later_id = (await client.action.invoke("r", b"later", ActionInvokeOptions(delay_ms=100))).run_id

    later = await eventually(lambda: client.worker.await_tasks("w", ["r"], 10))
    assert [c.run_id for c in later] == [later_id]
    assert later[0].ready_at_ms == later[0].created_at_ms + 100
    assert later[0].claimed_at_ms >= later[0].ready_at_ms

    await client.worker.fail("w", "r", later_id, "again")
    retry = await eventually(lambda: client.worker.await_tasks("w", ["r"], 10))
    assert retry[0].attempt == 2
    assert retry[0].ready_at_ms >= later[0].claimed_at_ms + 50
    assert retry[0].claimed_at_ms >= retry[0].ready_at_ms


async def test_the_default_observer_hears_nothing_and_costs_nothing(client: FloClient) -> None:
    worker = client.new_action_worker()
    assert type(worker.observer) is WorkerObserver
    stream_worker = client.new_stream_worker(
        stream="s", group="g", handler=lambda ctx: asyncio.sleep(0)
    )
    assert type(stream_worker.observer) is WorkerObserver
