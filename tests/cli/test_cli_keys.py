"""``flo-redis keys ACTION``: the busiest flow keys, as a table and as JSON, through the
real command."""

from __future__ import annotations

import json

from cli_command import flo_redis

from flo_redis import (
    ActionInvokeOptions,
    ActionRegisterOptions,
    FloClient,
    FlowControl,
    WorkerAwaitOptions,
)


async def test_keys_shows_the_busiest_keys_with_their_counts(
    client: FloClient, redis_url: str, namespace: str
) -> None:
    flow = FlowControl(concurrency=1)
    await client.action.register("job", options=ActionRegisterOptions(flow=flow))
    await client.worker.register("w1", ["job"])
    for key, n in (("tenant-big", 5), ("tenant-small", 1)):
        for _ in range(n):
            await client.action.invoke("job", b"", ActionInvokeOptions(flow_key=key))
    await client.worker.await_tasks("w1", ["job"], 10, WorkerAwaitOptions(block_ms=0))

    done = flo_redis(redis_url, namespace, "keys", "job", "--json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    first = shown["keys"][0]
    assert (first["key"], first["running"], first["held"]) == ("tenant-big", 1, 4)
    assert [k["key"] for k in shown["keys"]] == ["tenant-big", "tenant-small"]

    table = flo_redis(redis_url, namespace, "keys", "job", env={"COLUMNS": "100"})
    assert table.returncode == 0, table.stderr
    assert "tenant-big" in table.stdout and " held " in table.stdout

    missing = flo_redis(redis_url, namespace, "keys", "nope")
    assert missing.returncode == 1
