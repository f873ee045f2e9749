"""Every public call of the client, with values to try it with: bad values for any
argument (``BAD``), and a namespace holding something of everything with a valid value
per argument name (the ``valid`` fixture; import it into the test module)."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from typing import Any

import pytest

from flo_redis import (
    ActionRegisterOptions,
    FloClient,
    RunState,
    StreamGroupReadOptions,
    StreamReadOptions,
    WorkerAwaitOptions,
)
from flo_redis.actions import CompleteItem

BAD: list[Any] = [
    None,
    True,
    -1,
    1.5,
    float("nan"),
    2**64,
    "",
    "{x}",
    "a\nb",
    "\ud800",
    b"\xff",
    [1],
    {"k": 1},
    object(),
]
#: Internal hooks and flags of the worker's fast path: not arguments a caller passes.
SKIPPED = {
    ("worker", "claim"),
    ("worker", "await_tasks", "on_unregistered"),
    ("worker", "await_tasks", "health_ttl_s"),
    ("worker", "await_tasks", "tally"),
    ("worker", "complete_many", "tally"),
}
GROUPS = ("action", "worker", "stream", "slots")


def public_calls() -> list[tuple[str, str]]:
    """Every public coroutine method of the client's groups, as ``(group, name)``."""
    probe = FloClient("redis://127.0.0.1:1")
    return [
        (group, name)
        for group in GROUPS
        for name, _ in inspect.getmembers(
            getattr(probe, group), predicate=inspect.iscoroutinefunction
        )
        if not name.startswith("_") and (group, name) not in SKIPPED
    ]


@pytest.fixture
async def valid(client: FloClient) -> AsyncIterator[dict[str, Any]]:
    """A namespace with something of everything, and a valid value per argument name."""
    await client.action.register("job", options=ActionRegisterOptions(max_concurrency=2))
    await client.worker.register("w1", ["job"])
    await client.action.invoke_many("job", [b"a", b"b", b"c"])
    (run,) = await client.worker.await_tasks("w1", ["job"], 1, WorkerAwaitOptions(block_ms=0))
    slot = await client.slots.acquire("job")
    entry = (await client.stream.append("s", b"x")).id
    await client.stream.group_join("s", "g", "c1")
    await client.stream.group_read("s", "g", "c1", StreamGroupReadOptions(block_ms=0))
    batch_id = await client.action.open_batch()
    yield {
        "name": "job", "action": "job", "action_name": "job", "run_id": run.run_id,
        "task_id": run.run_id, "input_data": b"x", "payload": b"x", "inputs": [b"x"],
        "options": None, "namespace": None, "limit": 10, "state": RunState.FAILED,
        "batch": 10, "cursor": None, "timeout_ms": 10, "worker_id": "w1",
        "task_types": ["job"], "max_tasks": 1, "result": b"r",
        "items": [CompleteItem(run.run_id, b"r", token=run.token)],
        "handed": [(run.run_id, run.token)],
        "heartbeat_timeout_ms": None, "remove_after_ms": None, "error_message": "e",
        "current_load": 0, "token": run.token, "load": 0, "completed": 0, "failed": 0,
        "stream": "s", "partitions": 1, "group": "g", "ids": [entry], "consumer": "c1",
        "min_idle_ms": 0, "start_id": entry, "count": 10, "partition": 0,
        "grace_ms": 1000, "capacity": 2, "lease_ms": 0, "index": slot.index if slot else 1,
        "expected_owner": "someone", "slot": slot, "action_type": 0,
        "cron_or_interval": "*/5 * * * *", "input": b"x", "timezone": "UTC", "missed": "once",
        "on_progress": None, "durability": None, "idempotency_key": None, "query": "e",
        "scan": 10, "since": "6h", "detail": True, "sample": 10,
        "after": None, "batch_id": batch_id,
    }  # fmt: skip


_BLOCKING_OPTIONS = {
    ("worker", "await_task"): WorkerAwaitOptions(block_ms=0),
    ("worker", "await_tasks"): WorkerAwaitOptions(block_ms=0),
    ("stream", "group_read"): StreamGroupReadOptions(block_ms=0),
    ("stream", "read"): StreamReadOptions(block_ms=0),
}


def valid_call(
    client: FloClient, group: str, name: str, valid: dict[str, Any]
) -> tuple[Any, list[inspect.Parameter], dict[str, Any]]:
    """``client.<group>.<name>``, its parameters (but the SKIPPED) and a valid value for
    each (from the ``valid`` fixture)."""
    method = getattr(getattr(client, group), name)
    params = [
        p
        for p in inspect.signature(method).parameters.values()
        if (group, name, p.name) not in SKIPPED
    ]
    base: dict[str, Any] = {}
    for p in params:
        if p.name == "items" and group == "stream":
            base["items"] = [(valid["ids"][0], None)]
        elif p.name == "options" and (group, name) in _BLOCKING_OPTIONS:
            base["options"] = _BLOCKING_OPTIONS[(group, name)]
        elif p.name in valid:
            base[p.name] = valid[p.name]
        else:
            raise AssertionError(f"no valid value known for {group}.{name}({p.name})")
    return method, params, base
