"""The queue exporter: ``flo-redis exporter`` scraped over HTTP, parsed with
prometheus_client's parser, its values held against a known history."""

from __future__ import annotations

import asyncio

import pytest
from exporter_scrape import sample as get
from exporter_scrape import scrape, serving
from histories import history, streams_history

from flo_redis import ActionInvokeOptions, ActionRegisterOptions, FloClient, FlowControl
from flo_redis.ops.discovery import overview
from flo_redis.ops.exporter import FLOW_TOP, families

pytestmark = pytest.mark.slow  # the exporter as a process


async def test_a_scrape_reports_the_queue_as_it_is(client: FloClient, redis_url: str) -> None:
    await history(client)
    await streams_history(client)
    ns = client.namespace
    async with serving(redis_url, ns) as url:
        samples = await asyncio.to_thread(scrape, url)
        assert get(samples, "flo_redis_exporter_up") == 1
        runs = {
            state: get(samples, "flo_redis_queue_runs", namespace=ns, action="job", state=state)
            for state in ("pending", "delayed", "running", "completed", "failed", "timed_out")
        }
        assert runs == {
            "pending": 3, "delayed": 2, "running": 1, "completed": 3, "failed": 2, "timed_out": 1,
        }  # fmt: skip
        finished = "flo_redis_queue_runs_finished_total"
        assert get(samples, finished, namespace=ns, action="job", outcome="completed") == 3
        assert get(samples, finished, namespace=ns, action="job", outcome="failed") == 3
        group = {"namespace": ns, "stream": "events", "group": "billing"}
        assert get(samples, "flo_redis_stream_group_lag", **group) == 2
        assert get(samples, "flo_redis_stream_group_pending", **group) == 1
        assert get(samples, "flo_redis_stream_group_consumers", **group) == 1
        assert get(samples, "flo_redis_stream_group_dead_letters", **group) == 1
        assert (
            get(samples, "flo_redis_workers", namespace=ns, status="active")
            + get(samples, "flo_redis_workers", namespace=ns, status="idle")
            == 1
        )
        # w1 takes job's runs; the process that registered it (this one) is alive.
        assert get(samples, "flo_redis_action_workers", namespace=ns, action="job") == 1

        # Each scrape reads Redis afresh: a draining worker takes no more runs.
        await client.action.requeue_failed("job")
        await client.worker.drain("w1")
        samples = await asyncio.to_thread(scrape, url)
        assert get(samples, "flo_redis_action_workers", namespace=ns, action="job") == 0
        assert (
            get(samples, "flo_redis_queue_runs", namespace=ns, action="job", state="pending") == 6
        )
        assert get(samples, "flo_redis_queue_runs", namespace=ns, action="job", state="failed") == 0


async def test_metric_names_follow_prometheus_conventions(client: FloClient) -> None:
    await history(client)
    for family in families([await overview(client)]):
        assert family.name.startswith("flo_redis_")
        if family.type == "counter":
            assert not family.name.endswith("_total")  # the exposition adds it
        for sample in family.samples:
            assert set(sample.labels) >= {"namespace"}


async def test_a_scrape_shows_the_busiest_flow_keys_only(client: FloClient, redis_url: str) -> None:
    flow = FlowControl(concurrency=1)
    await client.action.register("keyed", options=ActionRegisterOptions(flow=flow))
    await client.action.invoke("keyed", b"", ActionInvokeOptions(flow_key="big"))
    await client.action.invoke("keyed", b"", ActionInvokeOptions(flow_key="big"))
    for i in range(FLOW_TOP + 5):  # more keys than get series
        await client.action.invoke("keyed", b"", ActionInvokeOptions(flow_key=f"k{i:02}"))
    ns = client.namespace
    async with serving(redis_url, ns) as url:
        samples = await asyncio.to_thread(scrape, url)
    labels = {"namespace": ns, "action": "keyed", "key": "big"}
    assert get(samples, "flo_redis_flow_key_runs", state="waiting", **labels) == 2
    keys = {dict(labels)["key"] for name, labels in samples if name == "flo_redis_flow_key_runs"}
    assert len(keys) == FLOW_TOP and "big" in keys
