"""Bad input gets one of flo's typed errors before anything is written.

Each refused call is made against a namespace holding a registered action, a worker, a
claimed run and a stream group; the keyspace is DUMPed before and after, and must not
change.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis_server import own_server_url

from flo_redis import (
    ActionListOptions,
    ActionRegisterOptions,
    ActionType,
    FloClient,
    FloError,
    StreamGroupAckOptions,
    StreamGroupNackOptions,
    ValidationError,
    WorkerAwaitOptions,
    WorkerCompleteOptions,
    WorkerListOptions,
    WorkerRegisterOptions,
)
from flo_redis._wire.replies import Claimed
from flo_redis.actions import CompleteItem
from flo_redis.sync import SyncFloClient

redis_url = own_server_url()  # each call is followed by a scan of the keyspace


@dataclass
class World:
    client: FloClient
    raw: aioredis.Redis
    run: Claimed


@pytest.fixture
async def world(client: FloClient, raw: aioredis.Redis) -> AsyncIterator[World]:
    await client.action.register("job", options=ActionRegisterOptions(max_payload_bytes=64))
    await client.worker.register("w1", ["job"])
    await client.action.invoke_many("job", [b"a", b"b"])
    (run,) = await client.worker.await_tasks("w1", ["job"], 1, WorkerAwaitOptions(block_ms=0))
    await client.stream.append("s", b"x")
    await client.stream.group_join("s", "g", "c1")
    yield World(client, raw, run)


async def keyspace(raw: aioredis.Redis, namespace: str) -> dict[bytes, bytes | None]:
    """Every key of the namespace with its DUMP (None for a pub/sub-only name)."""
    keys = sorted([k async for k in raw.scan_iter(match=f"*{namespace}*", count=1000)])
    return {k: await raw.dump(k) for k in keys}


Call = Callable[[World], Awaitable[Any]]


def _calls() -> dict[str, Call]:
    big = b"x" * 65
    return {
        "invoke_many: an oversized input in a later chunk": lambda w: w.client.action.invoke_many(
            "job", [b"ok"] * 1500 + [big]
        ),
        "register: action_type 7": lambda w: w.client.action.register("b", 7),  # type: ignore[arg-type]
        "register: options of the wrong type": lambda w: w.client.action.register(
            "b",
            ActionType.USER,
            {"timeout_ms": 5},  # type: ignore[arg-type]
        ),
        "register: a description msgpack cannot carry": lambda w: w.client.action.register(
            "b",
            options=ActionRegisterOptions(description=object()),  # type: ignore[arg-type]
        ),
        "list: cursor 'a'": lambda w: w.client.action.list(ActionListOptions(cursor="a")),  # type: ignore[arg-type]
        "runs: cursor 'nan'": lambda w: w.client.action.runs("job", cursor=b"nan job:1"),
        "runs: cursor 'inf'": lambda w: w.client.action.runs("job", cursor=b"inf job:1"),
        "runs: cursor '1_0'": lambda w: w.client.action.runs("job", cursor=b"1_0 job:1"),
        "register: max_retries 10**20 set after": lambda w: w.client.action.register(
            "b", options=_changed(ActionRegisterOptions(), max_retries=10**20)
        ),
        "register: timeout_ms 'abc' set after": lambda w: w.client.action.register(
            "b", options=_changed(ActionRegisterOptions(), timeout_ms="abc")
        ),
        "worker list: cursor 'a'": lambda w: w.client.worker.list(WorkerListOptions(cursor="a")),  # type: ignore[arg-type]
        "worker register: a str for the task types": lambda w: w.client.worker.register(
            "w2",
            "act",  # type: ignore[arg-type]
        ),
        "worker register: machine_id msgpack cannot carry": lambda w: w.client.worker.register(
            "w2",
            ["job"],
            WorkerRegisterOptions(machine_id=object()),  # type: ignore[arg-type]
        ),
        "touch: worker_id None": lambda w: w.client.worker.touch(None, "job", w.run.run_id),  # type: ignore[arg-type]
        "touch: worker_id '{'": lambda w: w.client.worker.touch("{", "job", w.run.run_id),
        "complete: worker_id newline": lambda w: w.client.worker.complete(
            "\n", "job", w.run.run_id, b"r"
        ),
        "complete: worker_id ''": lambda w: w.client.worker.complete("", "job", w.run.run_id, b"r"),
        "complete: outcome None": lambda w: w.client.worker.complete(
            "w1",
            "job",
            w.run.run_id,
            b"r",
            WorkerCompleteOptions(outcome=None),  # type: ignore[arg-type]
        ),
        "complete_many: worker_id None": lambda w: w.client.worker.complete_many(
            None,  # type: ignore[arg-type]
            "job",
            [CompleteItem(w.run.run_id, b"r", token=w.run.token)],
        ),
        "fail: worker_id None": lambda w: w.client.worker.fail(None, "job", w.run.run_id, "e"),  # type: ignore[arg-type]
        "fail: message None": lambda w: w.client.worker.fail("w1", "job", w.run.run_id, None),  # type: ignore[arg-type]
        "drain: worker_id '{'": lambda w: w.client.worker.drain("{"),
        "deregister: worker_id None": lambda w: w.client.worker.deregister(None),  # type: ignore[arg-type]
        "tally: worker_id None": lambda w: w.client.worker.tally(None, 1),  # type: ignore[arg-type]
        "tally: load 2**64": lambda w: w.client.worker.tally("w1", load=2**64),
        "tally: load '5'": lambda w: w.client.worker.tally("w1", load="5"),  # type: ignore[arg-type]
        "tally: load 1.5": lambda w: w.client.worker.tally("w1", load=1.5),  # type: ignore[arg-type]
        "tally: load True": lambda w: w.client.worker.tally("w1", load=True),
        "group_ack: consumer '{'": lambda w: w.client.stream.group_ack(
            "s", "g", [_FIRST[0]], StreamGroupAckOptions(consumer="{")
        ),
        "group_ack: consumer 5": lambda w: w.client.stream.group_ack(
            "s",
            "g",
            [_FIRST[0]],
            StreamGroupAckOptions(consumer=5),  # type: ignore[arg-type]
        ),
        "group_nack: consumer '{'": lambda w: w.client.stream.group_nack(
            "s", "g", [_FIRST[0]], StreamGroupNackOptions(consumer="{")
        ),
        "slots reclaim: index '5'": lambda w: w.client.slots.reclaim("job", "5", "o"),  # type: ignore[arg-type]
        "slots reclaim: index 1.5": lambda w: w.client.slots.reclaim("job", 1.5, "o"),  # type: ignore[arg-type]
        "slots reclaim: grace None": lambda w: w.client.slots.reclaim(
            "job",
            1,
            "o",
            grace_ms=None,  # type: ignore[arg-type]
        ),
        "slots reclaim_gone: grace True": lambda w: w.client.slots.reclaim_gone(
            "job", grace_ms=True
        ),
        "action reap / reclaim batch '5'": lambda w: _reclaim(w, batch="5"),
    }


_FIRST: list[Any] = []


def _changed(opts: Any, **fields: Any) -> Any:
    """``opts`` with ``fields`` set after it was made (its constructor never saw them)."""
    for name, value in fields.items():
        setattr(opts, name, value)
    return opts


async def _reclaim(w: World, **kwargs: Any) -> Any:
    from flo_redis._session.reclaim import reclaim_owners

    return await reclaim_owners(w.client.session, "job", ["o"], **kwargs)


CALLS = _calls()


@pytest.mark.parametrize("name", sorted(CALLS))
async def test_a_bad_call_is_refused_typed_and_writes_nothing(
    world: World, namespace: str, name: str
) -> None:
    read = await world.client.stream.read("s")
    _FIRST[:] = [read.records[0].id]
    before = await keyspace(world.raw, namespace)
    with pytest.raises(FloError):
        await CALLS[name](world)
    assert await keyspace(world.raw, namespace) == before


async def test_group_ack_takes_no_consumer_as_none(world: World) -> None:
    read = await world.client.stream.group_read("s", "g", "c1")
    await world.client.stream.group_ack(
        "s",
        "g",
        [read.records[0].id],
        StreamGroupAckOptions(consumer=None),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("kwargs", "what"),
    [
        ({"action_timeout": None}, "action_timeout"),
        ({"action_timeout": "5"}, "action_timeout"),
        ({"action_timeout": float("nan")}, "action_timeout"),
    ],
)
def test_action_worker_settings_are_checked(
    client: FloClient, kwargs: dict[str, Any], what: str
) -> None:
    with pytest.raises(ValidationError, match=what):
        client.new_action_worker(**kwargs)


@pytest.mark.parametrize("bad", [None, "5", 0, -1.0, True])
def test_stream_worker_message_timeout_is_checked(client: FloClient, bad: Any) -> None:
    async def handler(ctx: Any) -> None:
        return None

    with pytest.raises(ValidationError, match="message_timeout"):
        client.new_stream_worker(stream="s", group="g", handler=handler, message_timeout=bad)


@pytest.mark.parametrize("bad", ["a{b", "a}b", "", "line\nbreak", 5])
def test_owner_id_is_checked_when_the_client_is_made(redis_url: str, bad: Any) -> None:
    with pytest.raises(ValidationError, match="owner id"):
        FloClient(redis_url, owner_id=bad)


@pytest.mark.parametrize("bad", [True, 0, -5, 1.5, "10", 16 * 1024 * 1024 + 1, 10**12])
def test_max_payload_bytes_is_checked(redis_url: str, bad: Any) -> None:
    # Both clients take at most the largest value a run keeps (16 MiB).
    with pytest.raises(ValidationError, match="max_payload_bytes"):
        FloClient(redis_url, max_payload_bytes=bad)
    with pytest.raises(ValidationError, match="max_payload_bytes"):
        SyncFloClient(redis_url, max_payload_bytes=bad)


async def test_list_by_prefix_finds_names_above_the_basic_plane(client: FloClient) -> None:
    names = ["p", "p\U0010ffff", "p\U0010ffffz", "p\U0001f600", "pz", "q"]
    for name in names:
        await client.action.register(name)
    listed = await client.action.list(ActionListOptions(prefix="p"))
    assert [a.name for a in listed.actions] == sorted(names[:-1])
    first = await client.action.list(ActionListOptions(prefix="p", limit=2))
    rest = await client.action.list(ActionListOptions(prefix="p", cursor=first.cursor))
    assert [a.name for a in first.actions + rest.actions] == sorted(names[:-1])
