"""What exists, from the registries: namespaces, actions, streams, and each stream
group's lag, pending deliveries, consumers and dead letters over its partitions."""

from __future__ import annotations

import pytest

from flo_redis import FloClient, StreamGroupReadOptions, ValidationError
from flo_redis.ops.discovery import action_names, overview, stream_names


async def test_registries_list_what_was_made(client: FloClient) -> None:
    assert client.namespace not in await client.namespaces()
    await client.action.register("resize")
    await client.worker.register("w1", ["resize"])
    await client.stream.create("orders", partitions=2)
    await client.stream.group_join("clicks", "stats", "c1")
    assert client.namespace in await client.namespaces()
    assert await action_names(client) == ("resize",)
    assert await stream_names(client) == ("clicks", "orders")
    assert await client.stream.list() == ("clicks", "orders")
    await client.action.delete("resize")
    assert await action_names(client) == ()


async def test_a_stream_only_appended_to_is_listed(client: FloClient, redis_url: str) -> None:
    await client.stream.append("audit-log", b"x")
    await client.stream.append("audit-log", b"y")  # registered once per client
    async with FloClient(redis_url, namespace=client.namespace) as other:
        assert await other.stream.list() == ("audit-log",)
        assert client.namespace in await other.namespaces()


async def test_group_counts_add_up_over_partitions(client: FloClient) -> None:
    await client.stream.create("orders", partitions=3)
    await client.stream.group_join("orders", "billing", "c1")
    await client.stream.group_join("orders", "audit", "c1")
    for i in range(6):
        await client.stream.append("orders", f"o{i}".encode())
    read = await client.stream.group_read(
        "orders", "billing", "c1", StreamGroupReadOptions(count=2)
    )
    assert len(read.records) == 2
    audit, billing = await client.stream.groups("orders")
    assert (billing.group, billing.partitions, billing.lag, billing.pending) == (
        "billing", 3, 4, 2,
    )  # fmt: skip
    assert (billing.consumers, billing.dead_letters) == (1, 0)
    assert (audit.group, audit.lag, audit.pending) == ("audit", 6, 0)
    await client.stream.group_ack("orders", "billing", [r.id for r in read.records])
    assert (await client.stream.groups("orders"))[1].pending == 0


async def test_a_missing_stream_has_no_groups(client: FloClient) -> None:
    assert await client.stream.groups("nowhere") == ()


async def test_overview_holds_a_namespace_at_a_glance(client: FloClient) -> None:
    await client.action.register("a")
    await client.action.register("b")
    await client.action.invoke_many("b", [b"x"] * 3)
    await client.worker.register("w1", ["a", "b"])
    await client.stream.group_join("s", "g", "c1")
    ov = await overview(client)
    assert [(c.action, c.pending) for c in ov.actions] == [("a", 0), ("b", 3)]
    assert [w.worker_id for w in ov.workers] == ["w1"]
    assert [(g.stream, g.group) for g in ov.groups] == [("s", "g")]
    assert ov.namespace == client.namespace and ov.at_ms > 0


async def test_bad_input_is_refused(client: FloClient) -> None:
    with pytest.raises(ValidationError):
        await client.stream.list(limit=0)
    with pytest.raises(ValidationError):
        await client.stream.groups("bad{name}")
